#!/usr/bin/env bash
# The streaming benchmark users run: decode speed of a synthetic Kimi K3-shaped model whose
# routed experts (MXFP4, 2.57 GB) are five times the expert budget, placed on 1 to 4 drives.
#
#   k3-public-bench/run-bench.sh [--drives "1 2 4"] [--read-mbps 150] [--tokens 48] [--repeat 3]
#                                [--cache-gb 0.5] [--out DIR] [--work DIR] [--no-throttled] [--no-disk]
#
# Steps: generate (or reuse) the model under --work; turn this machine into 4 drives throttled at
# --read-mbps (scripts/drives.sh: loop devices + blkio cgroup); place the experts striped on 1, 2
# and 4 of them and mirrored on 4; measure each drive's ceiling with fio at the engine's read shape
# (1 MiB pieces, 8 in flight); run every arm cold (page cache dropped, bypass on), --repeat times,
# interleaved; check that every arm generated the same ids; also one arm on this machine's own
# disk, unthrottled, with its own fio ceiling. Writes DIR/results.csv, results.md and charts.
#
# Real drives: skip the loop devices (--no-throttled) and place yourself, e.g.
#   deltafin place -m MODEL --drive /Volumes/ssd1 --drive /Volumes/ssd2 --out p.json
#   deltafin run -m MODEL --placement p.json --tokens 1,2,3 -n 48 --ids --stats
# Needs root for the loop devices and for dropping the page cache.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$root/build/deltafin
drives="1 2 4" mbps=150 tokens=48 repeat=3 cache=0.5
out=$root/k3-public-bench/results/streaming work=/var/tmp/deltafin-bench
throttled=1 disk=1
while [ $# -gt 0 ]; do
  case $1 in
    --drives) drives=$2; shift 2 ;;
    --read-mbps) mbps=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --cache-gb) cache=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --no-throttled) throttled=0; shift ;;
    --no-disk) disk=0; shift ;;
    *) echo "run-bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "run-bench.sh: build first (scripts/build.sh)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "run-bench.sh: needs root (loop devices, dropping the page cache)" >&2; exit 1; }
mkdir -p "$out" "$work/runs"
rm -f "$work"/runs/*.json

model=$work/k3-synthetic
if [ ! -f "$model/model.safetensors.index.json" ]; then
  echo "== generating the synthetic K3-shaped model in $model"
  /usr/bin/python3 "$root/tools/make_synthetic_k3.py" "$model" --preset bench --force
fi
prompt=$(seq -s, 1 16)
max_drives=0
for n in $drives; do [ "$n" -gt "$max_drives" ] && max_drives=$n; done

arms=()       # name|placement|exec-prefix|drives|replicate|extra run flags
if [ "$throttled" = 1 ]; then
  "$root/scripts/drives.sh" down >/dev/null 2>&1 || true
  "$root/scripts/drives.sh" up 4 --size-gb 8 --read-mbps "$mbps"
  trap '"$root/scripts/drives.sh" down >/dev/null 2>&1 || true' EXIT
  mirror_args=()
  for ((d = 0; d < 4; d++)); do mirror_args+=(--drive "/mnt/deltafin-drive$d"); done
  for n in $drives; do
    args=()
    for ((d = 0; d < n; d++)); do args+=(--drive "/mnt/deltafin-drive$d"); done
    "$bin" place -m "$model" "${args[@]}" --out "$work/stripe$n.json"
    arms+=("stripe$n|$work/stripe$n.json|$root/scripts/drives.sh exec|$n|0|")
  done
  # Router lookahead on the widest stripe: does guessing the next layer's experts pay here?
  arms+=("stripe$max_drives-lookahead|$work/stripe$max_drives.json|$root/scripts/drives.sh exec|$max_drives|0|--lookahead")
  if [ "$max_drives" -ge 2 ]; then
    "$bin" place -m "$model" "${mirror_args[@]:0:$((2 * max_drives))}" --replicate 1 --out "$work/mirror$max_drives.json"
    arms+=("mirror$max_drives|$work/mirror$max_drives.json|$root/scripts/drives.sh exec|$max_drives|1|")
  fi
fi
if [ "$disk" = 1 ]; then
  mkdir -p "$work/disk0"
  "$bin" place -m "$model" --drive "$work/disk0" --out "$work/disk1.json"
  arms+=("disk1|$work/disk1.json||1|0|")
  arms+=("disk1-lookahead|$work/disk1.json||1|0|--lookahead")
fi

echo "== drive ceilings (fio, 1 MiB pieces, 8 in flight, each drive alone)"
: > "$work/ceilings.txt"
for arm in "${arms[@]}"; do
  IFS='|' read -r name manifest prefix n rep extra <<< "$arm"
  python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["drives"]))' "$manifest" |
    while read -r file; do
      grep -q "^$file " "$work/ceilings.txt" && continue
      dir=$(dirname "$file")
      measured=$( (grep "^$dir/" "$work/ceilings.txt" || true) | head -1 | cut -d' ' -f2)  # one fio run per drive
      if [ -z "$measured" ]; then
        line=$($prefix "$root/k3-public-bench/fio-ceiling.sh" "$file" 1048576 8 10 2>/dev/null)
        measured=$(echo "${line#ceiling_gbps=}" | cut -d' ' -f1)
        echo "  $dir: $line"
      fi
      echo "$file $measured" >> "$work/ceilings.txt"
    done
done

echo "== arms: ${#arms[@]} x $repeat cold runs, $tokens tokens each, --cache-gb $cache"
for ((r = 0; r < repeat; r++)); do
  for ((i = 0; i < ${#arms[@]}; i++)); do
    IFS='|' read -r name manifest prefix n rep extra <<< "${arms[$(((i + r) % ${#arms[@]}))]}"
    sync; echo 3 > /proc/sys/vm/drop_caches
    # shellcheck disable=SC2086  # $extra holds zero or more flags
    $prefix "$bin" run -m "$model" --placement "$manifest" --tokens "$prompt" -n "$tokens" --ignore-eos --ids \
      --cache-gb "$cache" --stats-json "$work/runs/$name.$r.json" $extra > /dev/null
    echo "  $name run $r: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["decode"]; print("%.2f tok/s" % (d["tokens"]/d["seconds"]))' "$work/runs/$name.$r.json")"
  done
done

echo "== prefill of a 256-token prompt (chunk 64) on the first arm"
IFS='|' read -r name manifest prefix n rep extra <<< "${arms[0]}"
sync; echo 3 > /proc/sys/vm/drop_caches
$prefix "$bin" run -m "$model" --placement "$manifest" --tokens "$(seq -s, 1 256)" -n 1 --ids --cache-gb "$cache" \
  --stats-json "$work/runs/prefill256.json" > /dev/null

arm_list=$(printf '%s\n' "${arms[@]}")
PROVENANCE=$("$root/k3-public-bench/provenance.sh" "$bin") python3 "$root/k3-public-bench/summarize_bench.py" "$work" "$out" "$mbps" "$cache" "$tokens" <<< "$arm_list"
"$root/k3-public-bench/plot.sh" "$out/results.csv" "$out"
echo "== results in $out (results.md, results.csv, *.png)"
