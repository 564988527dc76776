#!/usr/bin/env bash
# Time to first token of long prompts (issue 36): the synthetic K3-shaped bench model
# (tools/make_synthetic_k3.py --preset bench: 8 MoE layers of 256 experts, top-16, 1.25 MB a
# record) under a memory budget below its routed experts, prompts of PROMPTS tokens, prefilled in
# passes the memory plan sizes ("plan") against passes of 64 positions ("--chunk 64"), on N
# loop-device drives throttled by scripts/drives.sh (the placement holds every expert and spine
# record on every drive) and on the local disk (the shards, page cache bypassed). Each run:
# the page cache dropped, `deltafin run ... -n 1 --stats-json F`; a cell is the median of RUNS
# cold runs: time to first token (from the prefill's start), the prefill's expert bytes read,
# the bytes of the union of experts the prompt routed to, and their ratio (1.00: each routed
# expert read once). Needs Linux, root, loop devices and cgroup v1 blkio for the throttled drives
# (DISKS=local skips them).
# Usage: k3-public-bench/run-ttft-bench.sh [WORK_DIR] [OUT_MD]
#   env: PROMPTS="64 512 2048 8192" RUNS=3 MEMORY_GB=2.5 RATES=200,200,200,200 DISKS="throttled local"
#        SKIP_CHUNK64_ABOVE=N (the --chunk 64 arm only for prompts <= N; default: every prompt)
#        MAKE_ARGS="--hidden 1024" (the model's make_synthetic_k3.py arguments beside --preset bench;
#        it is made under WORK_DIR/k3-bench or, with MAKE_ARGS, WORK_DIR/k3-bench-custom)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/var/tmp/deltafin-ttft}
out=${2:-$root/k3-public-bench/results/ttft-bench.md}
prompts=${PROMPTS:-"64 512 2048 8192"}
runs=${RUNS:-3}
memory_gb=${MEMORY_GB:-2.5}
rates=${RATES:-200,200,200,200}
disks=${DISKS:-"throttled local"}
skip_above=${SKIP_CHUNK64_ABOVE:-0}
bin=$root/build/deltafin
drives=$root/scripts/drives.sh
export DELTAFIN_DRIVES_NAME=${DELTAFIN_DRIVES_NAME:-ttft}
py=python3
"$py" -c "import numpy" 2>/dev/null || py=/usr/bin/python3
[ -x "$bin" ] || { echo "run-ttft-bench.sh: build first (scripts/build.sh)" >&2; exit 1; }
make_args=${MAKE_ARGS:-}
model=$work/k3-bench${make_args:+-custom}
if [ -f "$model/config.json" ] && [ "$(cat "$model/make-args" 2>/dev/null)" != "$make_args" ]; then rm -rf "$model"; fi
if [ ! -f "$model/config.json" ]; then
  mkdir -p "$work"
  # shellcheck disable=SC2086  # MAKE_ARGS is a list of arguments
  nice "$py" "$root/tools/make_synthetic_k3.py" "$model" --preset bench $make_args > "$model.make.log"
  echo "$make_args" > "$model/make-args"
fi
ids() { "$py" -c 'import sys; n = int(sys.argv[1]); print(",".join(str((i * 7919 + 13) % 16000 + 100) for i in range(n)))' "$1"; }

{
  "$root/k3-public-bench/provenance.sh" "$bin" 2>/dev/null || true
  echo
  echo "# Time to first token of long prompts (synthetic K3-shaped bench model)"
  echo
  echo "Command: \`k3-public-bench/run-ttft-bench.sh\` (PROMPTS=\"$prompts\", RUNS=$runs, MEMORY_GB=$memory_gb, RATES=$rates, DISKS=\"$disks\"$([ "$skip_above" = 0 ] || echo ", SKIP_CHUNK64_ABOVE=$skip_above")$([ -z "$make_args" ] || echo ", MAKE_ARGS=\"$make_args\""))."
  echo "Model: \`tools/make_synthetic_k3.py --preset bench $make_args\`: $(tail -1 "$model.make.log" 2>/dev/null || true)"
  echo "Each run: page cache dropped, then \`deltafin run -m MODEL [--placement MIRROR] --tokens IDS -n 1 --temp 0 --ids --ignore-eos --draft off --memory-gb $memory_gb [--chunk 64] --stats-json F\`"
  echo "(throttled: inside \`drives.sh exec\`). A cell is the median of $runs cold runs; TTFT counts from the prefill's start (the engine's"
  echo "open, which reads the resident spine, is not in it). read / union = the prefill's expert bytes over the bytes of the distinct"
  echo "(layer, expert) records its positions routed to."
  echo
  "$bin" inspect -m "$model" --memory-gb "$memory_gb" --positions 8192 2>/dev/null | sed -n 's/^\(budget\|prefill pass\)/    &/p'
} > "$out.tmp"

# One cell: the medians of $runs runs of `deltafin run` through ${run_with[@]} with ${place[@]} and the
# arguments given.
cell() {
  local disk=$1 n=$2 arm=$3; shift 3
  local prompt
  prompt=$(ids "$n")
  : > "$work/cell.jsonl"
  for ((r = 0; r < runs; r++)); do
    "$root/k3-public-bench/drop-cache.sh" 2>/dev/null || echo "drop-cache failed: run $r not cold" >&2
    rm -f "$work/r.json"
    if ! "${run_with[@]}" run -m "$model" "${place[@]}" --tokens "$prompt" -n 1 --temp 0 --ids --ignore-eos --draft off \
      --memory-gb "$memory_gb" --stats-json "$work/r.json" "$@" > "$work/ids.txt" 2>/dev/null; then
      echo "run-ttft-bench.sh: $disk $n $arm: run $r failed; left out of the median" >&2
      continue
    fi
    "$py" -c 'import json,sys; r = json.load(open(sys.argv[1])); r["first_id"] = open(sys.argv[2]).read().strip(); print(json.dumps(r))' \
      "$work/r.json" "$work/ids.txt" >> "$work/cell.jsonl"
  done
  "$py" - "$work/cell.jsonl" "$disk" "$n" "$arm" >> "$out.tmp" <<'EOF'
import json, statistics, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
disk, n, arm = sys.argv[2], int(sys.argv[3]), sys.argv[4]
med = lambda f: statistics.median(f(r) for r in rs)
p = rs[0]["prefill"]
ttft = med(lambda r: r["decode"]["first_token_seconds"])
read = med(lambda r: r["prefill"]["expert_bytes"])
union = med(lambda r: r["prefill"]["union_expert_bytes"])
ratio = med(lambda r: r["prefill"]["read_over_union"])
same = "same" if len({r["first_id"] for r in rs}) == 1 else "DIFFERENT"
spread = "%.2f-%.2f" % (min(r["decode"]["first_token_seconds"] for r in rs), max(r["decode"]["first_token_seconds"] for r in rs))
print(f"| {disk} | {n} | {arm} | {p['passes']} x {p['pass_positions']} | {ttft:.2f} | {spread} | {n / ttft:.1f} | "
      f"{read / 1e9:.2f} | {union / 1e9:.2f} | {ratio:.2f} | {p['activation_peak_bytes'] / 1e6:.0f} | {rs[0]['first_id']} ({same}) |")
EOF
}

header() {
  {
    echo
    echo "## $1"
    echo
    echo "| disk | prompt | arm | passes x positions | TTFT s (median) | TTFT range s | prompt tok/s | expert GB read | union GB | read / union | activations peak MB | first id |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  } >> "$out.tmp"
}

for disk in $disks; do
  case $disk in
    throttled)
      [ "$(id -u)" -eq 0 ] || { echo "run-ttft-bench.sh: throttled drives need root" >&2; exit 1; }
      n=$(echo "$rates" | tr , '\n' | wc -l)
      trap '"$drives" down >/dev/null 2>&1 || true' EXIT
      "$drives" down >/dev/null 2>&1 || true
      "$drives" up "$n" --size-gb 8 --read-mbps "$rates" >/dev/null
      args=()
      for ((d = 0; d < n; d++)); do args+=(--drive "/mnt/$DELTAFIN_DRIVES_NAME-drive$d"); done
      "$bin" place -m "$model" "${args[@]}" --replicate 1 --out "$work/mirror.json" >/dev/null
      header "$n drives capped at $rates MB/s (every record on every drive)"
      run_with=("$drives" exec "$bin")
      place=(--placement "$work/mirror.json") ;;
    local)
      header "Local disk (the shards, O_DIRECT)"
      run_with=("$bin")
      place=(--placement none) ;;
    *) echo "run-ttft-bench.sh: DISKS: throttled or local (got $disk)" >&2; exit 1 ;;
  esac
  for n in $prompts; do
    cell "$disk" "$n" plan
    if [ "$skip_above" = 0 ] || [ "$n" -le "$skip_above" ]; then
      cell "$disk" "$n" "--chunk 64" --chunk 64
    fi
  done
  [ "$disk" != throttled ] || "$drives" down >/dev/null
done
mv "$out.tmp" "$out"
cat "$out"
