#!/usr/bin/env bash
# The verify loop's cost model against the best fixed k (issue 39 item 4): build/spec_cost_bench on
# the synthetic K3-shaped model of run-bench.sh with its spine streamed (--memory-gb small) and a
# small expert cache, reading from the model directory (no placement), with scripted drafts of
# acceptance 0.3, 0.6 and 0.9: fixed k in {0, 1, 2, 4, 8} and the adaptive loop (max k 8)
# without a confidence head, with a calibrated one and with a mis-calibrated one. --runs runs of
# every arm (the order rotated per run, the page cache dropped before each run); the summary takes
# medians and checks that every arm generated the plain run's ids.
#   k3-public-bench/run-spec-cost-bench.sh [--tokens 16] [--runs 3] [--memory-gb 0.5] [--cache-gb 0.02]
#                                          [--out FILE] [--work DIR]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/portable.sh"
tokens=16 runs=3 memory=0.5 cache=0.02 work=/var/tmp/deltafin-bench
out=$root/k3-public-bench/results/spec-cost-model.md
while [ $# -gt 0 ]; do
  case $1 in
    --tokens) tokens=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --memory-gb) memory=$2; shift 2 ;;
    --cache-gb) cache=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) echo "run-spec-cost-bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
bench=$root/build/spec_cost_bench
[ -x "$bench" ] || { echo "run-spec-cost-bench.sh: build first (scripts/build.sh)" >&2; exit 1; }
synth=$work/k3-synthetic
[ -f "$synth/model.safetensors.index.json" ] || "$(numpy_python)" "$root/tools/make_synthetic_k3.py" "$synth" --preset bench --force
mkdir -p "$work/spec-cost"
rm -f "$work"/spec-cost/run*.jsonl
command="k3-public-bench/run-spec-cost-bench.sh --tokens $tokens --runs $runs --memory-gb $memory --cache-gb $cache"
echo "== $command"
for ((r = 0; r < runs; r++)); do
  "$root/k3-public-bench/drop-cache.sh" || echo "run-spec-cost-bench.sh: the page cache was not dropped (run $r)" >&2
  "$bench" "$synth" none "$cache" "$tokens" "$memory" "$r" | tee "$work/spec-cost/run$r.jsonl"
done
PROVENANCE=$("$root/k3-public-bench/provenance.sh" "$root/build/deltafin") COMMAND="$command" \
  python3 "$root/k3-public-bench/summarize_spec_cost_bench.py" "$work"/spec-cost/run*.jsonl > "$out"
cat "$out"
