#!/usr/bin/env bash
# The one memory budget on throttled drives (issue 16): the synthetic K3-shaped bench model
# (tools/make_synthetic_k3.py --preset bench) placed with `deltafin place --replicate 1` (every
# expert record and every spine record on every drive) on N loop-device drives whose reads are
# capped by scripts/drives.sh, for each rate set (uniform, then heterogeneous). Per drive: its fio
# ceiling for the engine's read shape. Per budget (spine resident -> mostly streamed): decode tok/s,
# spine and expert bytes per token, the floor (bytes per token / the sum of the ceilings), and the
# spread: the bytes all drives moved over the busiest drive's busy time, as a share of the sum
# of the ceilings (reads sent to the holder expected to finish first keep every drive equally
# busy). Then speculation with scripted drafts of controlled acceptance at the smallest budget.
# Needs Linux, root, loop devices and cgroup v1 blkio.
# Usage: k3-public-bench/run-budget-drives-bench.sh [WORK_DIR] [OUT_MD]
#   env: RATES="100,100,100,100 150,100,75,50" BUDGETS="0 0.5" TOKENS=12 SPEC=1 (0: no speculation arms)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/var/tmp/deltafin-budget-drives}
out=${2:-$root/k3-public-bench/results/memory-budget-drives.md}
rates_sets=${RATES:-"100,100,100,100 150,100,75,50"}
budgets=${BUDGETS:-"0 0.5"}
tokens=${TOKENS:-12}
bin=$root/build/deltafin
spec=$root/build/spec_storage_bench
drives=$root/scripts/drives.sh
py=python3
"$py" -c "import numpy" 2>/dev/null || py=/usr/bin/python3
[ "$(id -u)" -eq 0 ] || { echo "run-budget-drives-bench.sh: needs root (loop devices, blkio cgroup)" >&2; exit 1; }
[ -x "$bin" ] || { echo "run-budget-drives-bench.sh: build first (scripts/build.sh)" >&2; exit 1; }
model=$work/k3-bench
[ -f "$model/config.json" ] || { mkdir -p "$work"; nice "$py" "$root/tools/make_synthetic_k3.py" "$model" --preset bench >/dev/null; }
prompt=11,220,3301,47,5000,123,9,77,1024,2048,4000,15
smallest=$(printf '%s\n' $budgets | grep -v '^0$' | sort -g | head -1)

{
  "$root/k3-public-bench/provenance.sh" "$bin" 2>/dev/null || true
  echo
  echo "# Memory budget on throttled drives (synthetic K3-shaped bench model)"
  echo
  echo "Command: \`k3-public-bench/run-budget-drives-bench.sh\` (RATES=\"$rates_sets\", BUDGETS=\"$budgets\", TOKENS=$tokens; 0 = the default budget)."
  echo "Each run: \`drives.sh exec deltafin run -m MODEL --placement MIRROR --tokens $prompt -n $tokens --temp 0 --ids --ignore-eos --draft off --memory-gb G --stats-json F\`,"
  echo "page cache dropped before it; the placement holds every expert and spine record on every drive."
} > "$out.tmp"

trap '"$drives" down >/dev/null 2>&1 || true' EXIT
for rates in $rates_sets; do
  n=$(echo "$rates" | tr , '\n' | wc -l)
  "$drives" down >/dev/null 2>&1 || true
  "$drives" up "$n" --size-gb 8 --read-mbps "$rates" >/dev/null
  args=()
  for ((d = 0; d < n; d++)); do args+=(--drive "/mnt/deltafin-drive$d"); done
  "$bin" place -m "$model" "${args[@]}" --replicate 1 --out "$work/mirror.json" >/dev/null
  : > "$work/ceilings.txt"
  "$py" -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["drives"]))' "$work/mirror.json" | while read -r file; do
    line=$("$drives" exec "$root/k3-public-bench/fio-ceiling.sh" "$file" 1048576 8 10 2>/dev/null)
    echo "$file $(echo "$line" | sed 's/^ceiling_gbps=\([^ ]*\) .*/\1/')" >> "$work/ceilings.txt"
  done
  {
    echo
    echo "## $n drives capped at $rates MB/s"
    echo
    echo "fio ceilings (1 MiB pieces, 8 in flight, each drive alone): $(awk '{ printf "%s%.3f", (NR > 1 ? ", " : ""), $2 }' "$work/ceilings.txt") GB/s;"
    echo "sum $(awk '{ s += $2 } END { printf "%.3f", s }' "$work/ceilings.txt") GB/s."
    echo
    echo "| --memory-gb | spine resident / streamed GB | decode tok/s | spine GB/token | experts GB/token | floor s/token | of floor | spread: GB/s over the busiest drive's busy time | of summed ceilings | per-drive GB read | ids |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
  } >> "$out.tmp"
  first_ids=""
  for g in $budgets; do
    flag=()
    [ "$g" = 0 ] || flag=(--memory-gb "$g")
    "$root/k3-public-bench/drop-cache.sh" 2>/dev/null || true
    ids=$("$drives" exec "$bin" run -m "$model" --placement "$work/mirror.json" --tokens "$prompt" -n "$tokens" --temp 0 --ids \
          --ignore-eos --draft off "${flag[@]}" --stats-json "$work/r.json" 2>/dev/null)
    [ -n "$first_ids" ] || first_ids=$ids
    same=$([ "$ids" = "$first_ids" ] && echo same || echo DIFFERENT)
    "$py" - "$work/r.json" "$work/ceilings.txt" "$g" "$same" >> "$out.tmp" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); g = sys.argv[3]; same = sys.argv[4]
ceil = sum(float(l.split()[1]) for l in open(sys.argv[2]) if l.strip()) * 1e9
m, d = r["memory"], r["decode"]
t = max(d["tokens"], 1)
spine = r["spine"]["decode_bytes_read"] / t
experts = d["expert_bytes"] / t
floor = (spine + experts) / ceil
per_token = d["seconds"] / t
moved = sum(x["decode_bytes"] for x in r["drives"])
busiest = max(x["decode_busy_seconds"] for x in r["drives"])
spread = moved / busiest if busiest else 0
per_drive = ", ".join("%.2f" % (x["decode_bytes"] / 1e9) for x in r["drives"])
print(f"| {g if g != '0' else 'default'} | {m['spine_resident']/1e9:.3f} / {m['spine_streamed']/1e9:.3f} | {1 / per_token:.3f} | "
      f"{spine/1e9:.4f} | {experts/1e9:.4f} | {floor:.3f} | {100 * floor / per_token:.0f} % | {spread/1e9:.3f} | "
      f"{100 * spread / ceil:.0f} % | {per_drive} | {same} |")
EOF
  done
  if [ "${SPEC:-1}" != 0 ] && [ -x "$spec" ] && [ -n "$smallest" ]; then
    {
      echo
      echo "Speculation at --memory-gb $smallest: \`drives.sh exec build/spec_storage_bench MODEL MIRROR 0.02 $tokens $smallest\`"
      echo "(scripted drafts: the target's own greedy continuation, each guess wrong with probability 1 - accept)."
      echo
      echo "| arm | accept | k | tok/s | plain tok/s | spine GB per committed token | expert GB per committed token | same ids |"
      echo "|---|---|---|---|---|---|---|---|"
    } >> "$out.tmp"
    "$drives" exec "$spec" "$model" "$work/mirror.json" 0.02 "$tokens" "$smallest" | "$py" -c '
import json, sys
for line in sys.stdin:
    a = json.loads(line)
    row = [a["arm"], "%.2f" % a["accept"], str(a["k"]), "%.3f" % a["tok_s"], "%.3f" % a["plain_tok_s"],
           "%.4f" % (a["spine_bytes_per_token"] / 1e9), "%.4f" % (a["bytes_per_token"] / 1e9), str(a["same_ids"]).lower()]
    print("| " + " | ".join(row) + " |")' >> "$out.tmp"
  fi
  "$drives" down >/dev/null
done
mv "$out.tmp" "$out"
cat "$out"
