#!/usr/bin/env bash
# Tokens per second and bytes per token against the one memory budget (issue 16): the synthetic
# K3-shaped bench model (tools/make_synthetic_k3.py --preset bench: 0.75 GB spine, 2.57 GB of
# experts) from fully resident to mostly streamed, on the local disk (shards, page cache
# bypassed), greedy ids checked identical across budgets. For each budget: the plan
# (`deltafin inspect --memory-gb`), measured decode tok/s, spine and expert bytes per decode token,
# peak RSS, and the I/O floor (seconds of reads per token at the drive's measured busy rate).
# Then the speculation arms with streamed spine (build/spec_storage_bench with MEMORY_GB).
# Usage: k3-public-bench/run-memory-bench.sh [WORK_DIR] [OUT_MD]   (env: TOKENS, BUDGETS, SPEC=0 to skip)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-${TMPDIR:-/tmp}/deltafin-memory-bench}
out=${2:-$root/k3-public-bench/results/memory-budget.md}
tokens=${TOKENS:-12}
budgets=${BUDGETS:-"0 1.2 0.9 0.7 0.5 0.4"}
py=python3
"$py" -c "import numpy" 2>/dev/null || py=/usr/bin/python3
bin=$root/build/deltafin
model=$work/k3-bench
[ -f "$model/config.json" ] || { mkdir -p "$work"; nice "$py" "$root/tools/make_synthetic_k3.py" "$model" --preset bench >/dev/null; }
prompt=11,220,3301,47,5000,123,9,77,1024,2048,4000,15
{
  "$root/k3-public-bench/provenance.sh" 2>/dev/null || true
  echo
  echo "# Memory budget: resident -> streamed spine (synthetic K3-shaped bench model, local disk)"
  echo
  echo "Command: \`k3-public-bench/run-memory-bench.sh\` (TOKENS=$tokens, budgets: $budgets; 0 = the default budget)."
  echo "Each run: \`deltafin run -m MODEL --tokens $prompt -n $tokens --temp 0 --ids --ignore-eos --draft off --placement none --memory-gb G --stats-json\`."
  echo
  echo "| --memory-gb | spine resident / streamed GB | experts GB | decode tok/s | spine GB/token | experts GB/token | drive GB/s busy | I/O floor s/token | peak RSS GB | ids |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
} > "$out.tmp"
first_ids=""
for g in $budgets; do
  flag=()
  [ "$g" = 0 ] || flag=(--memory-gb "$g")
  ids=$("$bin" run -m "$model" --tokens "$prompt" -n "$tokens" --temp 0 --ids --ignore-eos --draft off --placement none \
        "${flag[@]}" --stats-json "$work/r-$g.json" 2>/dev/null)
  [ -n "$first_ids" ] || first_ids=$ids
  same=$([ "$ids" = "$first_ids" ] && echo same || echo DIFFERENT)
  "$py" - "$work/r-$g.json" "$g" "$same" >> "$out.tmp" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); g = sys.argv[2]; same = sys.argv[3]
m, d = r["memory"], r["decode"]
t = max(d["tokens"], 1)
spine = r["spine"]["decode_bytes_read"] / t
experts = d["expert_bytes"] / t
busy = sum(x["decode_busy_seconds"] for x in r["drives"]); moved = sum(x["decode_bytes"] for x in r["drives"])
rate = moved / busy if busy else 0
floor = (spine + experts) / rate if rate else 0
print(f"| {g if g != '0' else 'default'} | {m['spine_resident']/1e9:.3f} / {m['spine_streamed']/1e9:.3f} | {m['budget']/1e9:.3f} | "
      f"{t / d['seconds']:.3f} | {spine/1e9:.4f} | {experts/1e9:.4f} | {rate/1e9:.3f} | {floor:.3f} | {m['peak_rss']/1e9:.3f} | {same} |")
EOF
done
if [ "${SPEC:-1}" != 0 ] && [ -x "$root/build/spec_storage_bench" ]; then
  {
    echo
    echo "## Speculation with a streamed spine (--memory-gb 0.5)"
    echo
    echo "Command: \`build/spec_storage_bench MODEL none 0.02 $tokens 0.5\` (scripted drafts of controlled acceptance;"
    echo "a verify pass over k + 1 positions reads the streamed spine once)."
    echo
    echo "| arm | accept | k | tok/s | plain tok/s | spine GB per committed token | expert GB per committed token | same ids |"
    echo "|---|---|---|---|---|---|---|---|"
  } >> "$out.tmp"
  "$root/build/spec_storage_bench" "$model" none 0.02 "$tokens" 0.5 | "$py" -c '
import json, sys
for line in sys.stdin:
    a = json.loads(line)
    row = [a["arm"], "%.2f" % a["accept"], str(a["k"]), "%.3f" % a["tok_s"], "%.3f" % a["plain_tok_s"],
           "%.4f" % (a["spine_bytes_per_token"] / 1e9), "%.4f" % (a["bytes_per_token"] / 1e9), str(a["same_ids"]).lower()]
    print("| " + " | ".join(row) + " |")' >> "$out.tmp"
fi
mv "$out.tmp" "$out"
cat "$out"
