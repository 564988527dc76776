#!/usr/bin/env bash
# Expert bytes per decoded token on real routing (docs/routing-traces.md): trained routers (the
# bundled model's; MODELS adds others, e.g. the routing-study model of docs/routing-model.md) on
# three texts (Python code, prose, a chat turn), each run recording its routing trace and receipt
# at expert budgets from 5 % to 50 % of all experts. Then
#   1. the engine's receipt: expert bytes per decoded token, cold (a fresh process each run);
#      every run of a text must give the same ids (the policy and budget never change output);
#   2. the simulator (build/cache_sim) on the same traces: equal to each receipt, then every
#      policy it knows at budgets from 1 % to 50 %, with Belady's bound (the oracle);
#   3. speculation: the simulator's verify passes of 2 and 4 positions (every draft accepted).
# Extra traces (TRACES="a.trace b.trace", e.g. from
# tools/make_k3_trace.py) are simulated too. Writes results/routing-policy.md (OUT overrides).
#   [MODELS="models/default DIR..."] k3-public-bench/run-routing-bench.sh [TOKENS]
# (results/routing-policy-experiment.md compares the policies the store no longer has, from the
# commit it names.)
set -euo pipefail
cd "$(dirname "$0")/.."
tokens=${1:-512}
out=${OUT:-k3-public-bench/results/routing-policy.md}
policies="store oracle"
scripts/build.sh >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head -c 3000 tools/train_default_model.py > "$work/code.txt"
head -c 3000 docs/ARCHITECTURE.md > "$work/prose.txt"
fractions="0.05 0.1 0.2 0.3 0.5"
rows="$work/engine.jsonl"
: > "$rows"
traces=""
for model in ${MODELS:-models/default}; do
name=$(basename "$model")
# every expert's slot at once: the budget of a run where all of them fit
build/deltafin run --model "$model" -p x -n 1 --draft off --cache-gb 100 --stats-json "$work/r.json" >/dev/null 2>&1
all_bytes=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["memory"]["budget"])' "$work/r.json")
for text in code prose chat; do
  if [ $text = chat ]; then input=(--chat -p "How do I read a file line by line in Python? Show a short example.")
  else input=(-f "$work/$text.txt"); fi
  for f in $fractions; do
    gb=$(python3 -c "print($f * $all_bytes / 1e9)")
    build/deltafin run --model "$model" "${input[@]}" -n "$tokens" --draft off --cache-gb "$gb" \
      --record-routing "$work/$name-$text-$f.trace" --stats-json "$work/r.json" >/dev/null 2>"$work/err" ||
      { cat "$work/err"; exit 1; }
    budget=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["memory"]["budget"])' "$work/r.json")
    build/cache_sim "$work/$name-$text-$f.trace" --budget-bytes "$budget" --json "$work/s.json" >/dev/null
    python3 - "$name/$text" store "$f" "$work/r.json" "$work/s.json" >> "$rows" <<'PY'
import json, sys
text, policy, f, r, s = sys.argv[1], sys.argv[2], float(sys.argv[3]), json.load(open(sys.argv[4])), json.loads(open(sys.argv[5]).readline())
print(json.dumps({"text": text, "policy": policy, "fraction": f, "budget": r["memory"]["budget"], "ids": r["ids_xxh3"],
                  "decode_tokens": r["decode"]["tokens"], "decode_expert_bytes": r["decode"]["expert_bytes"],
                  "hits": r["experts"]["hits"], "reads": r["experts"]["reads"], "bytes_read": r["experts"]["bytes_read"],
                  "sim": [s["hits"], s["misses"], s["bytes_read"]]}))
PY
  done
  traces="$traces $work/$name-$text-0.5.trace"
done
done
sims="$work/sim.jsonl"
: > "$sims"
for policy in $policies; do
  for w in 0 2 4; do
    build/cache_sim $traces ${TRACES:-} --budget-fraction 0.01,0.02,0.05,0.1,0.2,0.3,0.4,0.5 --policy "$policy" \
      --verify-width $w --json "$work/one.jsonl" >/dev/null
    cat "$work/one.jsonl" >> "$sims"
  done
done
{
  echo "# Expert bytes per decoded token on real routing"
  echo
  echo "$(k3-public-bench/provenance.sh)"
  echo "\`MODELS=\"${MODELS:-models/default}\" $0 $tokens\`: greedy, \`--draft off\`, $tokens tokens a text;"
  echo "budgets as shares of all of a model's experts. Traces are named MODEL-TEXT-0.5.trace."
  echo
  python3 k3-public-bench/summarize_routing_bench.py "$rows" "$sims" || status=$?
} > "$work/out.md"
mv "$work/out.md" "$out"
cat "$out"
exit "${status:-0}"
