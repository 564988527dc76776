#!/usr/bin/env bash
# `deltafin serve` refusals, with curl: API key (401, /metrics included), malformed JSON and wrong
# types (400 naming the field), every integer field near and past INT64_MAX, negative or not an
# integer (400 naming it: a max_tokens that overflowed prompt + max_tokens was admitted and ran
# past the context), n != 1, log probabilities, unknown model (404), a known endpoint asked with
# the wrong method (405 + Allow), body too large (413), chunked bodies (411), context overflow
# (400), a full line (503 + Retry-After), a client that disconnects (its generation cancelled),
# SIGTERM during a generation (answered with an error, exit 0), and a second server on a port in
# use (exit 1 naming the port); malformed tools, tool_choice, tool messages and response_format
# (400 naming the field).
# Usage: bad_requests.sh DELTAFIN_BINARY MODEL_DIR
set -euo pipefail
bin=$1 model=$2
work=$(mktemp -d)
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# Starts the server with extra flags; sets url and server_pid.
start_server() {
  "$bin" serve -m "$model" --port 0 --draft off "$@" 2> "$work/server.log" &
  server_pid=$!
  for _ in $(seq 1 600); do  # 30 s: a loaded CI machine
    url=$(grep -so 'http://[0-9.]*:[0-9]*' "$work/server.log" || true)
    [ -n "$url" ] && return 0
    sleep 0.05
  done
  cat "$work/server.log" >&2
  echo "server did not start" >&2
  exit 1
}

# request NAME EXPECTED_STATUS METHOD PATH [BODY] [curl args...]: the body lands in $work/NAME.json.
request() {
  local name=$1 expected=$2 method=$3 path=$4 body=${5:-}
  shift 5 || shift $#
  local status
  status=$(curl -s --max-time 60 -o "$work/$name.json" -w '%{http_code}' -X "$method" -H 'Authorization: Bearer sekret' \
             -H 'Content-Type: application/json' ${body:+--data-binary "$body"} "$@" "$url$path")
  [ "$status" = "$expected" ] || fail "$name: status $status, expected $expected: $(cat "$work/$name.json")"
}

# json_is NAME PYTHON_EXPRESSION: the expression over the parsed body j must be true.
json_is() {
  /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$work/$1.json" \
    || fail "$1: not ($2): $(cat "$work/$1.json")"
}

# until_metric LINE: waits (10 s at most) until /metrics has the line LINE.
until_metric() {
  for _ in $(seq 1 200); do
    curl -s -H 'Authorization: Bearer sekret' "$url/metrics" | grep -qx "$1" && return 0
    sleep 0.05
  done
  fail "/metrics never showed '$1'"
}

# The error object names the field at fault.
error_names() { json_is "$1" "j['error']['param'] == $2 and j['error']['type'] and j['error']['message']"; }

# refused NAME STATUS PATH BODY PARAM: a POST answered with STATUS and an error naming PARAM.
refused() { request "$1" "$2" POST "$3" "$4"; error_names "$1" "$5"; }

start_server --api-key sekret --queue 0 --max-body-mb 0.01 --ctx-size 4096
chat='"model": "default", "messages": [{"role": "user", "content": "def f():"}]'

status=$(curl -s -o "$work/nokey.json" -w '%{http_code}' "$url/v1/models")
[ "$status" = 401 ] || fail "no key: status $status"
json_is nokey "j['error']['type'] == 'authentication_error'"
status=$(curl -s -o "$work/badkey.json" -w '%{http_code}' -H 'Authorization: Bearer nope' "$url/v1/models")
[ "$status" = 401 ] || fail "wrong key: status $status"
request health 200 GET /health
json_is health "j['status'] == 'ok'"
request models 200 GET /v1/models
json_is models "j['data'][0]['id'] == 'default'"

request malformed 400 POST /v1/chat/completions '{"messages": [}'
json_is malformed "'not valid JSON' in j['error']['message'] and j['error']['param'] is None"
request not_object 400 POST /v1/chat/completions '[1, 2]'
refused no_messages 400 /v1/chat/completions '{"model": "default"}' "'messages'"
refused messages_type 400 /v1/chat/completions '{"messages": "hi"}' "'messages'"
refused role 400 /v1/chat/completions '{"messages": [{"role": "wizard", "content": "hi"}]}' "'messages[0].role'"
refused content_type 400 /v1/chat/completions '{"messages": [{"role": "user", "content": 7}]}' "'messages[0].content'"
refused temperature 400 /v1/chat/completions "{$chat, \"temperature\": \"hot\"}" "'temperature'"
refused top_p 400 /v1/chat/completions "{$chat, \"top_p\": 1.5}" "'top_p'"
refused max_tokens 400 /v1/chat/completions "{$chat, \"max_tokens\": -1}" "'max_tokens'"
refused max_tokens_float 400 /v1/chat/completions "{$chat, \"max_tokens\": 2.5}" "'max_tokens'"
refused stream_type 400 /v1/chat/completions "{$chat, \"stream\": \"yes\"}" "'stream'"
refused stop_type 400 /v1/chat/completions "{$chat, \"stop\": [1]}" "'stop'"
refused n 400 /v1/chat/completions "{$chat, \"n\": 2}" "'n'"
refused prompt 400 /v1/completions '{"prompt": ["a", "b"]}' "'prompt'"
# Tools, tool messages and structured output (docs/serving.md): each malformed field named.
tool='{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}'
refused tools_not_list 400 /v1/chat/completions "{$chat, \"tools\": {}}" "'tools'"
refused tool_no_name 400 /v1/chat/completions "{$chat, \"tools\": [{\"type\": \"function\", \"function\": {}}]}" "'tools[0].function.name'"
refused tool_bad_name 400 /v1/chat/completions "{$chat, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]}" "'tools[0].function.name'"
refused tool_type 400 /v1/chat/completions "{$chat, \"tools\": [{\"type\": \"retrieval\", \"function\": {\"name\": \"f\"}}]}" "'tools[0].type'"
refused tool_parameters 400 /v1/chat/completions "{$chat, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": [1]}}]}" "'tools[0].function.parameters'"
refused tool_parameters_type 400 /v1/chat/completions "{$chat, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"string\"}}}]}" "'tools[0].function.parameters.type'"
refused tool_duplicate 400 /v1/chat/completions "{$chat, \"tools\": [$tool, $tool]}" "'tools[1].function.name'"
refused tool_choice_word 400 /v1/chat/completions "{$chat, \"tools\": [$tool], \"tool_choice\": \"always\"}" "'tool_choice'"
refused tool_choice_unknown 400 /v1/chat/completions "{$chat, \"tools\": [$tool], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"get_time\"}}}" "'tool_choice.function.name'"
refused tool_choice_no_tools 400 /v1/chat/completions "{$chat, \"tool_choice\": \"required\"}" "'tool_choice'"
refused tool_call_id 400 /v1/chat/completions '{"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "call_9", "content": "21 C"}]}' "'messages[1].tool_call_id'"
refused tool_calls_args 400 /v1/chat/completions '{"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}]}]}' "'messages[0].tool_calls[0].function.arguments'"
refused tools_plain 400 /v1/chat/completions "{$chat, \"tools\": [$tool]}" "'tools'"
refused format_type 400 /v1/chat/completions "{$chat, \"response_format\": {\"type\": \"xml\"}}" "'response_format.type'"
refused format_no_schema 400 /v1/chat/completions "{$chat, \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\"}}}" "'response_format.json_schema.schema'"
refused format_keyword 400 /v1/chat/completions "{$chat, \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", \"schema\": {\"type\": \"object\", \"properties\": {\"age\": {\"type\": \"integer\", \"multipleOf\": 3}}}}}}" "'response_format.json_schema.schema.properties.age.multipleOf'"
refused reasoning_format 400 /v1/chat/completions "{$chat, \"reasoning_format\": \"hidden\"}" "'reasoning_format'"
# Every integer field: near and past INT64_MAX, negative, not an integer. (A max_tokens of
# INT64_MAX overflowed prompt + max_tokens and was admitted; curl's --max-time ends a hang.)
for field in max_tokens max_completion_tokens; do
  refused "${field}_int64_max" 400 /v1/chat/completions "{$chat, \"$field\": 9223372036854775807}" "'$field'"
  json_is "${field}_int64_max" "'context of 4096' in j['error']['message']"
  refused "${field}_past_int64" 400 /v1/chat/completions "{$chat, \"$field\": 9223372036854775808}" "'$field'"
  refused "${field}_uint64_max" 400 /v1/chat/completions "{$chat, \"$field\": 18446744073709551615}" "'$field'"
  refused "${field}_negative" 400 /v1/chat/completions "{$chat, \"$field\": -9223372036854775808}" "'$field'"
  refused "${field}_string" 400 /v1/chat/completions "{$chat, \"$field\": \"4\"}" "'$field'"
done
refused completion_max_tokens_int64_max 400 /v1/completions '{"prompt": "x", "max_tokens": 9223372036854775807}' "'max_tokens'"
refused completion_max_tokens_near 400 /v1/completions '{"prompt": "x", "max_tokens": 9223372036854775806}' "'max_tokens'"
for field in seed top_k; do
  refused "${field}_past_int64" 400 /v1/chat/completions "{$chat, \"$field\": 9223372036854775808}" "'$field'"
  refused "${field}_negative" 400 /v1/chat/completions "{$chat, \"$field\": -1}" "'$field'"
  refused "${field}_float" 400 /v1/chat/completions "{$chat, \"$field\": 1.5}" "'$field'"
done
refused n_int64_max 400 /v1/chat/completions "{$chat, \"n\": 9223372036854775807}" "'n'"
refused n_past_int64 400 /v1/completions '{"prompt": "x", "n": 18446744073709551615}' "'n'"
refused chat_logprobs 400 /v1/chat/completions "{$chat, \"logprobs\": true}" "'logprobs'"
refused chat_top_logprobs 400 /v1/chat/completions "{$chat, \"top_logprobs\": 9223372036854775807}" "'top_logprobs'"
refused completion_logprobs 400 /v1/completions '{"prompt": "x", "logprobs": 9223372036854775808}' "'logprobs'"
stops=$(/usr/bin/python3 -c 'print(",".join(["\"s\""] * 1000))')
refused stop_many 400 /v1/chat/completions "{$chat, \"stop\": [$stops]}" "'stop'"
request seed_top_k_ok 200 POST /v1/completions '{"prompt": "x", "max_tokens": 2, "seed": 9223372036854775807, "top_k": 9223372036854775807, "logprobs": 0}'
refused model 404 /v1/chat/completions '{"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]}' "'model'"
refused overflow 400 /v1/chat/completions "{$chat, \"max_completion_tokens\": 100000}" "'max_completion_tokens'"
json_is overflow "'context of 4096' in j['error']['message']"
big=$(head -c 20000 /dev/zero | tr '\0' 'a')
request too_large 413 POST /v1/completions "{\"prompt\": \"$big\"}"
json_is too_large "j['error']['message'] == 'the request body is too large'"
request no_endpoint 404 GET /v1/nothing
request get_on_post 405 GET /v1/chat/completions "" -D "$work/get_on_post.headers"
grep -qi '^Allow: POST' "$work/get_on_post.headers" || fail "GET on a POST endpoint: no 'Allow: POST'"
request post_on_get 405 POST /health '{}' -D "$work/post_on_get.headers"
grep -qi '^Allow: GET' "$work/post_on_get.headers" || fail "POST on a GET endpoint: no 'Allow: GET'"
status=$(curl -s -o "$work/metrics_nokey.json" -w '%{http_code}' "$url/metrics")
[ "$status" = 401 ] || fail "/metrics without the key: status $status"
status=$(curl -s -o /dev/null -w '%{http_code}' "$url/health")
[ "$status" = 200 ] || fail "/health without the key: status $status (it stays open for probes)"
status=$(curl -s -o "$work/chunked.json" -w '%{http_code}' -H 'Authorization: Bearer sekret' -H 'Transfer-Encoding: chunked' \
           --data-binary '{"prompt": "x"}' "$url/v1/completions")
[ "$status" = 411 ] || fail "a chunked body: status $status, expected 411"
status=$(curl -s -o "$work/huge_length.json" -w '%{http_code}' -H 'Authorization: Bearer sekret' \
           -H 'Content-Length: 99999999999999999999' --data-binary '{}' "$url/v1/completions")
[ "$status" = 400 ] || fail "a Content-Length past 64 bits: status $status, expected 400"
request ok 200 POST /v1/completions '{"prompt": "import os", "max_tokens": 4, "temperature": 0}' -D "$work/ok.headers"
json_is ok "j['usage']['completion_tokens'] == 4 and j['system_fingerprint'].startswith('xxh3:')"
hash=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['system_fingerprint'])" "$work/ok.json")
grep -qi "^X-Deltafin-Ids-Hash: $hash" "$work/ok.headers" || fail "ok: no X-Deltafin-Ids-Hash header with $hash"

# A full line (one generation runs, none may wait: --queue 0), then its client disconnects: the
# generation stops at the next token.
curl -s -N -o /dev/null -H 'Authorization: Bearer sekret' \
  --data-binary '{"prompt": "import os", "max_tokens": 4000, "temperature": 0, "stream": true}' "$url/v1/completions" &
long_pid=$!
until_metric 'deltafin_generation_running 1'
status=$(curl -s -D "$work/busy.headers" -o "$work/busy.json" -w '%{http_code}' -H 'Authorization: Bearer sekret' \
           --data-binary '{"prompt": "import os", "max_tokens": 4}' "$url/v1/completions")
[ "$status" = 503 ] || fail "full line: status $status, expected 503"
grep -qi '^Retry-After: 1' "$work/busy.headers" || fail "full line: no Retry-After header"
error_names busy "None"
kill "$long_pid" 2>/dev/null || true
wait "$long_pid" || true
until_metric 'deltafin_generations_cancelled_total 1'
until_metric 'deltafin_generation_running 0'
request metrics 200 GET /metrics
grep -q '^deltafin_generations_cancelled_total 1$' "$work/metrics.json" || fail "disconnect: no cancelled generation in /metrics"
tokens=$(sed -n 's/^deltafin_completion_tokens_total //p' "$work/metrics.json")
[ "$tokens" -lt 3000 ] || fail "disconnect: $tokens tokens generated, the generation went on"
grep -q 'deltafin_requests_total{endpoint="/v1/chat/completions",status="400"}' "$work/metrics.json" || fail "metrics: no 400s counted"
request health_after 200 GET /health

# SIGTERM mid-generation: the request gets an error, the server exits 0.
curl -s -o "$work/interrupted.json" -w '%{http_code}' -H 'Authorization: Bearer sekret' \
  --data-binary '{"prompt": "import os", "max_tokens": 4000, "temperature": 0}' "$url/v1/completions" > "$work/interrupted.status" &
curl_pid=$!
until_metric 'deltafin_generation_running 1'
kill -TERM "$server_pid"
wait "$curl_pid" || true
[ "$(cat "$work/interrupted.status")" = 503 ] || fail "SIGTERM: in-flight status $(cat "$work/interrupted.status"), expected 503"
json_is interrupted "'shutting down' in j['error']['message']"
code=0
wait "$server_pid" || code=$?
server_pid=""
[ "$code" = 0 ] || fail "SIGTERM: exit code $code, expected 0"
grep -q 'server stopped' "$work/server.log" || fail "SIGTERM: no 'server stopped' line"

# A second server on a port in use: exit 1, one line naming the port (SO_REUSEPORT let both
# listen and split the requests between them).
"$bin" serve -m "$model" --port 0 --draft off 2> "$work/first.log" &
first_pid=$!
for _ in $(seq 1 600); do grep -qs 'http://' "$work/first.log" && break; sleep 0.05; done
port=$(grep -so 'http://[0-9.]*:[0-9]*' "$work/first.log" | sed 's/.*://')
code=0
"$bin" serve -m "$model" --port "$port" --draft off 2> "$work/second.log" || code=$?
[ "$code" = 1 ] || fail "a second server on port $port: exit $code, expected 1"
grep -q "^deltafin: --port $port: the port is in use" "$work/second.log" || fail "a second server on port $port: $(cat "$work/second.log")"
[ "$(grep -c . "$work/second.log")" = 1 ] || fail "a second server on port $port: more than one line: $(cat "$work/second.log")"
kill -TERM "$first_pid"; wait "$first_pid" || fail "the first server: nonzero exit after SIGTERM"

# Another address than loopback without a key: a warning.
"$bin" serve -m "$model" --host 0.0.0.0 --port 0 --draft off 2> "$work/open.log" &
open_pid=$!
for _ in $(seq 1 600); do grep -qs 'http://' "$work/open.log" && break; sleep 0.05; done
kill -INT "$open_pid"; wait "$open_pid" || fail "SIGINT: nonzero exit"
grep -q 'warning: --host 0.0.0.0: serving beyond this machine with no --api-key' "$work/open.log" || fail "no warning for 0.0.0.0"
"$bin" serve -m "$model" --port 70000 2> "$work/port.log" && fail "--port 70000 accepted"
grep -q '^deltafin: --port must be 0..65535' "$work/port.log" || fail "--port 70000: $(cat "$work/port.log")"
for flag in --max-connections --max-connections-per-address --request-timeout; do
  "$bin" serve -m "$model" --port 0 "$flag" 0 2> "$work/flag.log" && fail "$flag 0 accepted"
  grep -q "^deltafin: $flag must be" "$work/flag.log" || fail "$flag 0: $(cat "$work/flag.log")"
done
"$bin" serve -m "$model" --port 0 --queue 9223372036854775807 2> "$work/queue.log" && fail "--queue past int accepted"
[ "$(grep -c . "$work/queue.log")" = 1 ] || fail "--queue past int: $(cat "$work/queue.log")"

if [ "$failures" -gt 0 ]; then echo "$failures failures" >&2; exit 1; fi
echo "all bad-request cases passed"
