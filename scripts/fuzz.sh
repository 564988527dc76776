#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in build-fuzz/ and runs each for a number of seconds
# (default 60) over a working copy of its seed corpus (tests/fuzz/<target>-corpus-run/, git-
# ignored, kept between runs so coverage accumulates). Exits non-zero when a fuzzer finds a
# crash, leak, sanitizer report or timeout; the reproducer is saved under build-fuzz/artifacts/.
#   scripts/fuzz.sh [seconds] [target] [extra libFuzzer flags...]
#   target: safetensors, config, placement, tokenizer_json, tiktoken_ranks, encode, http_head, request,
#           prefix_entry, state_bytes, json_schema, reply_parser, routing_trace, all
set -euo pipefail

seconds=${1:-60}
which=${2:-all}
shift $(( $# > 1 ? 2 : $# ))
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/portable.sh"
build="$root/build-fuzz"
artifacts="$build/artifacts"

export CC=${CC:-clang} CXX=${CXX:-clang++}
cmake -S "$root" -B "$build" -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDELTAFIN_FUZZ=ON -DDELTAFIN_TESTS=OFF >/dev/null

run_target() {  # name, seed corpus, extra flags...
  local name=$1 seeds=$2
  shift 2
  local corpus="$root/tests/fuzz/$name-corpus-run"
  cmake --build "$build" --target "fuzz_$name" -j "$(cpu_count)"
  mkdir -p "$corpus" "$artifacts"
  for seed in "$seeds"/*; do
    [[ -e "$corpus/${seed##*/}" ]] || cp "$seed" "$corpus/"
  done
  local status=0
  "$build/tests/fuzz/fuzz_$name" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$artifacts/$name-" "$@" "$corpus" || status=$?
  if [[ $status -ne 0 ]]; then
    echo "fuzz.sh: fuzz_$name found a problem (exit $status); reproducers in $artifacts:" >&2
    ls -1 "$artifacts" >&2 || true
    exit "$status"
  fi
  echo "fuzz.sh: fuzz_$name: no findings in ${seconds}s"
}

if [[ $which == all || $which == safetensors ]]; then
  run_target safetensors "$root/tests/fuzz/corpus" -dict="$root/tests/fuzz/safetensors.dict" "$@"
fi
if [[ $which == all || $which == config ]]; then
  run_target config "$root/tests/fuzz/config-corpus" "$@"
fi
if [[ $which == all || $which == placement ]]; then
  run_target placement "$root/tests/fuzz/placement-corpus" "$@"
fi
if [[ $which == all || $which == tokenizer_json ]]; then
  run_target tokenizer_json "$root/tests/fuzz/tokenizer-json-corpus" "$@"
fi
if [[ $which == all || $which == tiktoken_ranks ]]; then
  run_target tiktoken_ranks "$root/tests/fuzz/tiktoken-corpus" "$@"
fi
if [[ $which == all || $which == encode ]]; then
  run_target encode "$root/tests/fuzz/encode-corpus" "$@"
fi
if [[ $which == all || $which == http_head ]]; then
  run_target http_head "$root/tests/fuzz/http-head-corpus" "$@"
fi
if [[ $which == all || $which == request ]]; then
  run_target request "$root/tests/fuzz/request-corpus" "$@"
fi
if [[ $which == all || $which == prefix_entry ]]; then
  run_target prefix_entry "$root/tests/fuzz/prefix-entry-corpus" "$@"
fi
if [[ $which == all || $which == state_bytes ]]; then
  run_target state_bytes "$root/tests/fuzz/state-bytes-corpus" "$@"
fi
if [[ $which == all || $which == json_schema ]]; then
  run_target json_schema "$root/tests/fuzz/json-schema-corpus" "$@"
fi
if [[ $which == all || $which == reply_parser ]]; then
  run_target reply_parser "$root/tests/fuzz/reply-parser-corpus" "$@"
fi
if [[ $which == all || $which == routing_trace ]]; then
  run_target routing_trace "$root/tests/fuzz/routing-trace-corpus" "$@"
fi
