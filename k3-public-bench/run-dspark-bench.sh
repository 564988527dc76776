#!/usr/bin/env bash
# DSpark's cost at Kimi K3's shapes (issue 39): a synthetic K3-shaped target (real hidden size,
# heads, MLA and dense widths; 2 layers, 16 experts, K3's real 163840-token vocabulary, so the
# shared lm_head and the Markov head are their real size) and a synthetic DSpark drafter at the
# published shapes (5 layers, 4.64 GB of its own weights plus 2 x 84 MB of Markov head), both
# with random weights. Per context length, dspark_bench times one drafter block (k = 1, 2, 4, 8)
# and one target decode pass, medians of RUNS, and the results go to
# k3-public-bench/results/dspark-k3-shapes.md with the machine's provenance.
#   k3-public-bench/run-dspark-bench.sh [WORK_DIR (/var/tmp/deltafin-dspark)] [RUNS (5)] [BACKEND (cpu)] [CONTEXTS ("64 512")]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/var/tmp/deltafin-dspark}
runs=${2:-5}
backend=${3:-cpu}
contexts=${4:-64 512}
py=python3
"$py" -c "import numpy" 2>/dev/null || py=/usr/bin/python3
mkdir -p "$work"
[ -f "$work/target/config.json" ] ||
  "$py" "$root/tools/make_synthetic_k3.py" "$work/target" --preset k3 --layers 2 --experts 16 --top-k 4 --vocab 163840 --force
[ -f "$work/dspark/config.json" ] || "$py" "$root/tools/make_synthetic_dspark.py" "$work/target" "$work/dspark" --preset k3
out=$work/dspark-bench.jsonl
: > "$out"
for ctx in $contexts; do
  "$root/build/dspark_bench" "$work/target" "$work/dspark" "$ctx" "$runs" 20 "$backend" | tee -a "$out"
done
results=$root/k3-public-bench/results/dspark-k3-shapes.md
{
  echo "# DSpark at Kimi K3's shapes"
  echo
  echo "Machine: $("$root/k3-public-bench/provenance.sh")"
  echo
  echo "Command: \`k3-public-bench/run-dspark-bench.sh $work $runs $backend \"$contexts\"\` (medians of $runs)."
  echo
  "$py" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("| context | k | drafter block (ms) | per guess (ms) | target decode pass (ms) | block / target pass |")
print("| --- | --- | --- | --- | --- | --- |")
for r in rows:
    d, t = r["draft_seconds"] * 1e3, r["target_decode_seconds"] * 1e3
    print(f"| {r['context']} | {r['k']} | {d:.1f} | {d / r['k']:.1f} | {t:.1f} | {d / t:.2f} |")
r = rows[0]
print()
print(f"Backend: {r['backend']}. The drafter holds {r['drafter_bytes'] / 1e9:.3f} GB of weights in the budget; "
      f"state per position (target and drafter): {r['state_bytes_per_position'] / 1e3:.1f} KB; "
      f"process peak {r['peak_rss_bytes'] / 1e9:.2f} GB.")
PY
} > "$results"
cat "$results"
