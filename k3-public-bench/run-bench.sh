#!/usr/bin/env bash
# The streaming benchmark users run: decode speed of a synthetic Kimi K3-shaped model whose
# routed experts (MXFP4, 2.57 GB) are five times the expert budget, placed on 1 to 4 drives.
#
#   k3-public-bench/run-bench.sh [--drive DIR ...] [--drives "1 2 4"] [--read-mbps 150] [--tokens 48]
#                                [--repeat 3] [--cache-gb 0.5] [--out DIR] [--work DIR]
#                                [--no-throttled] [--no-disk] [--no-fio]
#
# Steps: generate (or reuse) the model under --work; turn this machine into 4 drives throttled at
# --read-mbps (scripts/drives.sh: loop devices + blkio cgroup; Linux, root); place the experts
# striped on 1, 2 and 4 of them and mirrored on 4; measure each drive's ceiling at the engine's
# read shape (1 MiB pieces, 8 in flight; fio-ceiling.sh: fio, or without it or with --no-fio the
# engine's own reader); run every arm cold (page cache dropped by drop-cache.sh, bypass on),
# --repeat times, interleaved; check that every arm generated the same ids; also one arm on this
# machine's own disk (under --work), unthrottled, with its own ceiling. Writes DIR/results.csv,
# results.md and charts.
#
# Real drives (Linux or macOS): --drive DIR, once per drive, a directory on each SSD, replaces the
# throttled drives: the experts are placed under DIR/deltafin-bench/ (up to 2.6 GB per arm on the
# first drive, about 8 GB there for the default arms; delete the directory afterwards), striped on
# the first 1, 2 .. N of the N drives (or the counts of --drives) and mirrored on all N when N >= 2;
# results go to results/streaming-drives/ unless --out. Root is not required: without it the page
# cache cannot be dropped (sudo -n is tried), and the results say which runs were not cold.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/portable.sh"
bin=$root/build/deltafin
drives= mbps=150 tokens=48 repeat=3 cache=0.5 out= work=/var/tmp/deltafin-bench
throttled=1 disk=1
real=()  # --drive directories
while [ $# -gt 0 ]; do
  case $1 in
    --drive) real+=("$2"); shift 2 ;;
    --drives) drives=$2; shift 2 ;;
    --read-mbps) mbps=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --cache-gb) cache=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --no-throttled) throttled=0; shift ;;
    --no-disk) disk=0; shift ;;
    --no-fio) export DELTAFIN_NO_FIO=1; shift ;;
    *) echo "run-bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "run-bench.sh: build first (scripts/build.sh)" >&2; exit 1; }
n_real=${#real[@]}
dirs=()       # the drives' directories, the first ones used by the narrower stripes
if [ "$n_real" -gt 0 ]; then
  throttled=0
  for d in "${real[@]}"; do
    [ -d "$d" ] && [ -w "$d" ] || { echo "run-bench.sh: --drive $d is not a writable directory" >&2; exit 1; }
    mkdir -p "$d/deltafin-bench"
    dirs+=("$(cd "$d/deltafin-bench" && pwd)")
  done
  drives=${drives:-$(csv_range 1 "$n_real" | tr , ' ')}
  out=${out:-$root/k3-public-bench/results/streaming-drives}
elif [ "$throttled" = 1 ]; then
  [ "$(uname -s)" = Linux ] || { echo "run-bench.sh: throttled drives need Linux; on this machine use --drive DIR" >&2; exit 1; }
  [ "$(id -u)" -eq 0 ] || { echo "run-bench.sh: needs root (loop devices, dropping the page cache)" >&2; exit 1; }
  dirs=(/mnt/deltafin-drive0 /mnt/deltafin-drive1 /mnt/deltafin-drive2 /mnt/deltafin-drive3)
fi
drives=${drives:-1 2 4}
out=${out:-$root/k3-public-bench/results/streaming}
max_drives=0
for n in $drives; do
  [ "$n" -le "${#dirs[@]}" ] || [ "${#dirs[@]}" -eq 0 ] ||
    { echo "run-bench.sh: --drives $drives asks for more than the ${#dirs[@]} drive(s)" >&2; exit 2; }
  if [ "$n" -gt "$max_drives" ]; then max_drives=$n; fi
done
mkdir -p "$out" "$work/runs"
rm -f "$work"/runs/*.json "$work/runs/cold.txt"

model=$work/k3-synthetic
if [ ! -f "$model/model.safetensors.index.json" ]; then
  echo "== generating the synthetic K3-shaped model in $model"
  "$(numpy_python)" "$root/tools/make_synthetic_k3.py" "$model" --preset bench --force
fi
prompt=$(csv_range 1 16)

arms=()       # name|placement|exec-prefix|drives|replicate|extra run flags
if [ "$throttled" = 1 ]; then
  "$root/scripts/drives.sh" down >/dev/null 2>&1 || true
  "$root/scripts/drives.sh" up 4 --size-gb 8 --read-mbps "$mbps"
  trap '"$root/scripts/drives.sh" down >/dev/null 2>&1 || true' EXIT
  prefix="$root/scripts/drives.sh exec"
else
  prefix=
fi
if [ "${#dirs[@]}" -gt 0 ]; then
  for n in $drives; do
    args=()
    for ((d = 0; d < n; d++)); do args+=(--drive "${dirs[$d]}"); done
    "$bin" place -m "$model" "${args[@]}" --out "$work/stripe$n.json"
    arms+=("stripe$n|$work/stripe$n.json|$prefix|$n|0|")
  done
  # Router lookahead on the widest stripe: does guessing the next layer's experts pay here?
  arms+=("stripe$max_drives-lookahead|$work/stripe$max_drives.json|$prefix|$max_drives|0|--lookahead")
  if [ "$max_drives" -ge 2 ]; then
    args=()
    for ((d = 0; d < max_drives; d++)); do args+=(--drive "${dirs[$d]}"); done
    "$bin" place -m "$model" "${args[@]}" --replicate 1 --out "$work/mirror$max_drives.json"
    arms+=("mirror$max_drives|$work/mirror$max_drives.json|$prefix|$max_drives|1|")
  fi
fi
if [ "$disk" = 1 ]; then
  mkdir -p "$work/disk0"
  "$bin" place -m "$model" --drive "$work/disk0" --out "$work/disk1.json"
  arms+=("disk1|$work/disk1.json||1|0|")
  arms+=("disk1-lookahead|$work/disk1.json||1|0|--lookahead")
fi
[ "${#arms[@]}" -gt 0 ] || { echo "run-bench.sh: no arms (--drive DIR, or leave out --no-throttled / --no-disk)" >&2; exit 2; }

echo "== drive ceilings (1 MiB pieces, 8 in flight, each drive alone)"
: > "$work/ceilings.txt"
for arm in "${arms[@]}"; do
  IFS='|' read -r name manifest prefix n rep extra <<< "$arm"
  python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["drives"]))' "$manifest" |
    while read -r file; do
      grep -q "^$file " "$work/ceilings.txt" && continue
      dir=$(dirname "$file")
      measured=$( (grep "^$dir/" "$work/ceilings.txt" || true) | head -1 | cut -d' ' -f2-)  # one run per drive
      if [ -z "$measured" ]; then
        line=$($prefix "$root/k3-public-bench/fio-ceiling.sh" "$file" 1048576 8 10 2>/dev/null)
        measured=$(echo "$line" | sed 's/^ceiling_gbps=\([^ ]*\) engine=\([^ ]*\).*/\1 \2/')
        echo "  $dir: $line"
      fi
      echo "$file $measured" >> "$work/ceilings.txt"
    done
done

if "$root/k3-public-bench/drop-cache.sh" 2> "$work/drop-cache.txt"; then cold=1; else
  cold=0
  echo "run-bench.sh: warning: $(cat "$work/drop-cache.txt"); the runs are not cold (expert reads still bypass the cache)" >&2
fi
# cold_run NAME COMMAND...: drops the page cache (records in runs/cold.txt whether it could), runs
cold_run() {
  local name=$1 dropped=0
  shift
  if [ "$cold" = 1 ] && "$root/k3-public-bench/drop-cache.sh" 2>/dev/null; then dropped=1; fi
  echo "$name $dropped" >> "$work/runs/cold.txt"
  "$@" > /dev/null
}

echo "== arms: ${#arms[@]} x $repeat runs, $tokens tokens each, --cache-gb $cache"
for ((r = 0; r < repeat; r++)); do
  for ((i = 0; i < ${#arms[@]}; i++)); do
    IFS='|' read -r name manifest prefix n rep extra <<< "${arms[$(((i + r) % ${#arms[@]}))]}"
    # shellcheck disable=SC2086  # $prefix and $extra hold zero or more words
    cold_run "$name.$r" $prefix "$bin" run -m "$model" --placement "$manifest" --tokens "$prompt" -n "$tokens" \
      --ignore-eos --ids --cache-gb "$cache" --stats-json "$work/runs/$name.$r.json" $extra
    echo "  $name run $r: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["decode"]; print("%.2f tok/s" % (d["tokens"]/d["seconds"]))' "$work/runs/$name.$r.json")"
  done
done

echo "== prefill of a 256-token prompt (chunk 64) on the first arm"
IFS='|' read -r name manifest prefix n rep extra <<< "${arms[0]}"
# shellcheck disable=SC2086
cold_run prefill256 $prefix "$bin" run -m "$model" --placement "$manifest" --tokens "$(csv_range 1 256)" -n 1 --ids \
  --cache-gb "$cache" --stats-json "$work/runs/prefill256.json"

arm_list=$(printf '%s\n' "${arms[@]}")
drive_list=
if [ "$n_real" -gt 0 ]; then  # each directory with the device it is on
  drive_list=$(for d in "${dirs[@]}"; do echo "$d (on $(df -P "$d" | awk 'NR == 2 { print $1 }'))"; done)
fi
PROVENANCE=$("$root/k3-public-bench/provenance.sh" "$bin") REAL_DRIVES=$drive_list \
  python3 "$root/k3-public-bench/summarize_bench.py" "$work" "$out" "$mbps" "$cache" "$tokens" <<< "$arm_list"
"$root/k3-public-bench/plot.sh" "$out/results.csv" "$out"
echo "== results in $out (results.md, results.csv, *.png)"
