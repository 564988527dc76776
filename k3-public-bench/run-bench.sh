#!/usr/bin/env bash
# The streaming benchmark users run: decode speed of a synthetic Kimi K3-shaped model whose
# routed experts (MXFP4, 2.57 GB) are five times the expert budget, placed on 1 to 4 drives.
#
#   k3-public-bench/run-bench.sh [--drive DIR ...] [--drives "1 2 4"] [--read-mbps 150] [--tokens 48]
#                                [--repeat 3] [--cache-gb 0.5] [--out DIR] [--work DIR] [--keep]
#                                [--smoke] [--no-throttled] [--no-disk] [--no-fio]
#
# Steps: check that the disks have the space the run needs (the model, each arm's placement, per
# drive; k3-public-bench/bench_space.py) and stop in one line naming what is missing where; generate
# the model under --work (default /var/tmp/deltafin-bench); turn this machine into drives throttled
# at --read-mbps (scripts/drives.sh: loop devices + blkio cgroup; Linux, root), each sized for
# what the arms place on it, their images under the work directory; place the experts striped on
# 1, 2 and 4 of them and mirrored on 4; measure each drive's ceiling at the engine's read shape
# (1 MiB pieces, 8 in flight; fio-ceiling.sh: fio, or without it or with --no-fio the engine's
# own reader); run every arm cold (page cache dropped by drop-cache.sh, bypass on), --repeat
# times, interleaved; check that every arm generated the same ids (exit status 3 when not); also
# one arm on this machine's own disk (under --work), unthrottled, with its own ceiling (unthrottled
# drives are measured before and after the arms, and keep the higher: a shared disk varies 2x
# within minutes). Writes OUT/results.csv, results.md
# and charts; OUT is a new folder k3-public-bench/results/runs/<UTC time>-<host>/ (git-ignored)
# unless --out names one. When it ends, also on failure or Ctrl-C, it removes what it made: the
# drives, the placements, the run's files and the model it generated; --keep keeps them (and the
# drives up: scripts/drives.sh down) and says where they are and how large. A model already in
# the work directory (from a --keep run) is reused and left there.
#
# --smoke: the smallest complete run, for CI (about a minute): the small preset (3.3 MB of
# experts), drives "1 2" (stripes, lookahead, mirror) and the disk arm, --cache-gb 0.001 (a third
# of the experts), 8 tokens, 1 run, 2-second ceilings. Options after it override its values.
#
# Real drives (Linux or macOS): --drive DIR, once per drive, a directory on each SSD, replaces the
# throttled drives: the experts are placed under DIR/deltafin-bench/ (the space each drive needs is
# checked first; about 9.2 GB on the first drive for the default arms), striped on the first 1, 2
# .. N of the N drives (or the counts of --drives) and mirrored on all N when N >= 2. Root is not
# required: without it the page cache cannot be dropped (sudo -n is tried), and the results say
# which runs were not cold.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/portable.sh"
bin=$root/build/deltafin
drives= mbps=150 tokens=48 repeat=3 cache=0.5 out= work=/var/tmp/deltafin-bench preset=bench fio_secs=10
throttled=1 disk=1 keep=0
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
    --keep) keep=1; shift ;;
    --smoke) preset=small drives="1 2" tokens=8 repeat=1 cache=0.001 fio_secs=2; shift ;;
    --no-throttled) throttled=0; shift ;;
    --no-disk) disk=0; shift ;;
    --no-fio) export DELTAFIN_NO_FIO=1; shift ;;
    *) echo "run-bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "run-bench.sh: build first (scripts/build.sh)" >&2; exit 1; }
for v in "$tokens" "$repeat" "$mbps"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "run-bench.sh: --tokens, --repeat and --read-mbps take positive whole numbers (got $v)" >&2; exit 2; }
done
n_real=${#real[@]}
dirs=()       # the drives' directories, the first ones used by the narrower stripes
if [ "$n_real" -gt 0 ]; then
  throttled=0
  for d in "${real[@]}"; do
    [ -d "$d" ] && [ -w "$d" ] || { echo "run-bench.sh: --drive $d is not a writable directory" >&2; exit 1; }
    dirs+=("$(cd "$d" && pwd)/deltafin-bench")
  done
  drives=${drives:-$(csv_range 1 "$n_real" | tr , ' ')}
elif [ "$throttled" = 1 ]; then
  [ "$(uname -s)" = Linux ] || { echo "run-bench.sh: throttled drives need Linux; on this machine use --drive DIR" >&2; exit 1; }
  [ "$(id -u)" -eq 0 ] || { echo "run-bench.sh: needs root (loop devices, dropping the page cache)" >&2; exit 1; }
  state=${DELTAFIN_DRIVES_STATE:-/var/tmp/deltafin-drives.state}
  [ ! -e "$state" ] || { echo "run-bench.sh: drives are already up ($state): another benchmark running? If not, scripts/drives.sh down" >&2; exit 1; }
fi
drives=${drives:-1 2 4}
max_drives=0
for n in $drives; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "run-bench.sh: --drives takes drive counts, e.g. \"1 2 4\" (got $n)" >&2; exit 2; }
  [ "$n_real" -eq 0 ] || [ "$n" -le "$n_real" ] ||
    { echo "run-bench.sh: --drives $drives asks for more than the $n_real drive(s)" >&2; exit 2; }
  if [ "$n" -gt "$max_drives" ]; then max_drives=$n; fi
done
stripes=$drives mirror=0
if [ "$throttled" = 0 ] && [ "$n_real" -eq 0 ]; then stripes= max_drives=0; fi
if [ "$max_drives" -ge 2 ]; then mirror=$max_drives; fi
if [ "$throttled" = 1 ]; then
  dirs=()
  for ((d = 0; d < max_drives; d++)); do dirs+=("/mnt/deltafin-drive$d"); done
fi
[ -n "$stripes" ] || [ "$disk" = 1 ] || { echo "run-bench.sh: no arms (--drive DIR, or leave out --no-throttled / --no-disk)" >&2; exit 2; }
host=$(uname -n | cut -d. -f1)
out=${out:-$root/k3-public-bench/results/runs/$(date -u +%Y%m%dT%H%M%SZ)-$host}
model=$work/k3-synthetic-$preset
run=$work/run-$$  # this run's placements, drive images, stats; removed at the end unless --keep

# --- space: what each filesystem must hold, checked before anything is written ---------------
existing() { local d=$1; while [ ! -d "$d" ]; do d=$(dirname "$d"); done; echo "$d"; }
mount_of() { df -Pk "$(existing "$1")" | awk 'NR == 2 { sub(/^([^ ]+ +){5}/, ""); print }'; }
free_of() { df -Pk "$(existing "$1")" | awk 'NR == 2 { printf "%.0f", $4 * 1024 }'; }
sizes=$("$(numpy_python)" "$root/tools/make_synthetic_k3.py" --list-tensors --preset "$preset" |
  python3 "$root/k3-public-bench/bench_space.py" --stripes "$stripes" --mirror "$mirror")
size_of() { echo "$sizes" | awk -v k="$1" -v i="${2:-}" '$1 == k && (i == "" || $2 == i) { print $NF }'; }
model_made=0
[ -f "$model/model.safetensors.index.json" ] || model_made=1
needs=()  # "DIR|BYTES|WHAT"
if [ "$model_made" = 1 ]; then needs+=("$work|$(size_of model)|the model"); fi
if [ "$disk" = 1 ]; then needs+=("$work|$(size_of placement)|the disk arm's placement"); fi
image_gib=0
if [ "$throttled" = 1 ]; then
  # Each image a whole number of GiB: the largest drive's bytes + 4% and 0.5 GiB for ext4 (inode
  # tables, journal). The images are sparse: the filesystem holds what is placed + that overhead.
  largest=$(echo "$sizes" | awk '$1 == "drive" && $3 > m { m = $3 } END { print m + 0 }')
  image_gib=$(awk -v b="$largest" 'BEGIN { g = b * 1.04 / 2^30 + 0.5; printf "%d", (g == int(g)) ? g : int(g) + 1 }')
  for ((d = 0; d < max_drives; d++)); do
    needs+=("$run|$(awk -v b="$(size_of drive "$d")" -v g="$image_gib" 'BEGIN { printf "%.0f", b + g * 2^30 * 0.04 + 2^27 }')|drive $d's image")
  done
elif [ "$n_real" -gt 0 ]; then
  for ((d = 0; d < max_drives; d++)); do needs+=("${dirs[$d]}|$(size_of drive "$d")|--drive ${real[$d]}"); done
fi
short=$(for n in ${needs[@]+"${needs[@]}"}; do
    IFS='|' read -r dir bytes what <<< "$n"
    echo "$(mount_of "$dir")|$(free_of "$dir")|$bytes|$dir|$what"
  done | awk -F'|' '{ need[$1] += $3 * 1.02; free[$1] = $2; what[$1] = what[$1] (what[$1] ? ", " : "") $5 " " sprintf("%.1f", $3 / 1e9)
                     if (!($1 in dir)) dir[$1] = $4 }
    END { for (m in need) if (need[m] > free[m])
            printf "%s%s (filesystem %s) needs %.1f GB (%s GB), %.1f GB free", (n++ ? "; " : ""), dir[m], m, need[m] / 1e9, what[m], free[m] / 1e9 }')
if [ -n "$short" ]; then
  echo "run-bench.sh: not enough disk space: $short (fewer arms: --drives, --no-disk; another place: --work DIR)" >&2
  exit 1
fi

# --- cleanup: whatever happens from here on, the run's data goes when it ends (unless --keep) ---
drives_up=0 placed_real=0
kb_of() { du -sk "$@" 2>/dev/null | awk '{ s += $1 } END { printf "%.2f GB", s * 1024 / 1e9 }'; }
cleanup() {
  local rc=$? d
  trap - EXIT INT TERM
  set +e
  rmdir "$out" 2>/dev/null  # nothing written there (a failure before the tables)
  if [ "$keep" = 1 ]; then
    echo "== kept (--keep): model $model ($(kb_of "$model")); run data $run ($(kb_of "$run"))"
    if [ "$drives_up" = 1 ]; then echo "   drives still up: $(scripts_drives_list); scripts/drives.sh down removes them"; fi
    if [ "$placed_real" = 1 ]; then echo "   placements: ${dirs[*]} ($(kb_of "${dirs[@]}"))"; fi
  else
    if [ "$drives_up" = 1 ]; then
      "$root/scripts/drives.sh" down >/dev/null || echo "run-bench.sh: warning: scripts/drives.sh down failed; run it again" >&2
    fi
    if [ "$placed_real" = 1 ]; then
      for d in "${dirs[@]}"; do
        rm -f "$d"/deltafin-experts-*.bin "$d"/deltafin-experts-*.bin.partial
        rmdir "$d" 2>/dev/null || echo "run-bench.sh: $d holds other files; left there" >&2
      done
    fi
    rm -rf "$run"
    if [ "$model_made" = 1 ]; then rm -rf "$model"; fi
    rmdir "$work" 2>/dev/null || true
    if [ -d "$model" ]; then echo "== reused model left in place: $model ($(kb_of "$model"))"; fi
    echo "== working data removed (--keep keeps it)"
  fi
  exit "$rc"
}
scripts_drives_list() { printf '%s ' "${dirs[@]}"; echo "(images in $run/drive-images)"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$out" "$run/runs"
echo "== results will go to $out"

if [ "$model_made" = 1 ]; then
  echo "== generating the synthetic K3-shaped model (--preset $preset) in $model"
  "$(numpy_python)" "$root/tools/make_synthetic_k3.py" "$model" --preset "$preset" --force
fi
prompt=$(csv_range 1 16)

arms=()       # name|placement|exec-prefix|drives|replicate|extra run flags
prefix=
if [ "$throttled" = 1 ] && [ "$max_drives" -gt 0 ]; then
  drives_up=1
  "$root/scripts/drives.sh" up "$max_drives" --size-gb "$image_gib" --read-mbps "$mbps" --root "$run/drive-images"
  prefix="$root/scripts/drives.sh exec"
fi
if [ "$n_real" -gt 0 ]; then
  placed_real=1
  for d in "${dirs[@]}"; do mkdir -p "$d"; done
fi
if [ "$max_drives" -gt 0 ]; then
  for n in $stripes; do
    args=()
    for ((d = 0; d < n; d++)); do args+=(--drive "${dirs[$d]}"); done
    "$bin" place -m "$model" "${args[@]}" --out "$run/stripe$n.json"
    arms+=("stripe$n|$run/stripe$n.json|$prefix|$n|0|")
  done
  # Router lookahead on the widest stripe: does guessing the next layer's experts pay here?
  arms+=("stripe$max_drives-lookahead|$run/stripe$max_drives.json|$prefix|$max_drives|0|--lookahead")
  if [ "$mirror" -ge 2 ]; then
    args=()
    for ((d = 0; d < mirror; d++)); do args+=(--drive "${dirs[$d]}"); done
    "$bin" place -m "$model" "${args[@]}" --replicate 1 --out "$run/mirror$mirror.json"
    arms+=("mirror$mirror|$run/mirror$mirror.json|$prefix|$mirror|1|")
  fi
fi
if [ "$disk" = 1 ]; then
  mkdir -p "$run/disk0"
  "$bin" place -m "$model" --drive "$run/disk0" --out "$run/disk1.json"
  arms+=("disk1|$run/disk1.json||1|0|")
  arms+=("disk1-lookahead|$run/disk1.json||1|0|--lookahead")
fi

# measure_ceilings OUT [unthrottled]: each drive's ceiling once (the first data file of each drive
# directory), as tab-separated lines "data-file GB/s engine" (paths may hold spaces), for every
# arm's drives or only the unthrottled ones
measure_ceilings() {
  local arm name manifest prefix n rep extra file dir measured line
  : > "$1"
  for arm in "${arms[@]}"; do
    IFS='|' read -r name manifest prefix n rep extra <<< "$arm"
    if [ -n "${2:-}" ] && [ -n "$prefix" ]; then continue; fi
    python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["drives"]))' "$manifest" |
      while read -r file; do
        if awk -F'\t' -v f="$file" '$1 == f { found = 1 } END { exit !found }' "$1"; then continue; fi
        dir=$(dirname "$file")
        measured=$(awk -F'\t' -v d="$dir/" 'index($1, d) == 1 { print $2 "\t" $3; exit }' "$1")  # one run per drive
        if [ -z "$measured" ]; then
          # shellcheck disable=SC2086  # $prefix holds zero or more words
          line=$($prefix "$root/k3-public-bench/fio-ceiling.sh" "$file" 1048576 8 "$fio_secs" 2>/dev/null) ||
            { echo "run-bench.sh: fio-ceiling.sh failed on $file" >&2; exit 1; }
          measured=$(echo "$line" | awk '{ sub(/^ceiling_gbps=/, "", $1); sub(/^engine=/, "", $2); print $1 "\t" $2 }')
          echo "  $dir: $line"
        fi
        printf '%s\t%s\n' "$file" "$measured" >> "$1"
      done
  done
}
echo "== drive ceilings (1 MiB pieces, 8 in flight, each drive alone, ${fio_secs} s)"
measure_ceilings "$run/ceilings.txt"

if "$root/k3-public-bench/drop-cache.sh" 2> "$run/drop-cache.txt"; then cold=1; else
  cold=0
  echo "run-bench.sh: warning: $(cat "$run/drop-cache.txt"); the runs are not cold (expert reads still bypass the cache)" >&2
fi
# cold_run NAME COMMAND...: drops the page cache (records in runs/cold.txt whether it could), runs
cold_run() {
  local name=$1 dropped=0
  shift
  if [ "$cold" = 1 ] && "$root/k3-public-bench/drop-cache.sh" 2>/dev/null; then dropped=1; fi
  echo "$name $dropped" >> "$run/runs/cold.txt"
  "$@" > /dev/null
}

echo "== arms: ${#arms[@]} x $repeat runs, $tokens tokens each, --cache-gb $cache"
for ((r = 0; r < repeat; r++)); do
  for ((i = 0; i < ${#arms[@]}; i++)); do
    IFS='|' read -r name manifest prefix n rep extra <<< "${arms[$(((i + r) % ${#arms[@]}))]}"
    # shellcheck disable=SC2086  # $prefix and $extra hold zero or more words
    cold_run "$name.$r" $prefix "$bin" run -m "$model" --placement "$manifest" --tokens "$prompt" -n "$tokens" \
      --ignore-eos --ids --cache-gb "$cache" --stats-json "$run/runs/$name.$r.json" $extra
    echo "  $name run $r: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["decode"]; print("%.2f tok/s" % (d["tokens"]/d["seconds"]))' "$run/runs/$name.$r.json")"
  done
done

echo "== prefill of a 256-token prompt (chunk 64) on the first arm"
IFS='|' read -r name manifest prefix n rep extra <<< "${arms[0]}"
# shellcheck disable=SC2086
cold_run prefill256 $prefix "$bin" run -m "$model" --placement "$manifest" --tokens "$(csv_range 1 256)" -n 1 --ids \
  --cache-gb "$cache" --stats-json "$run/runs/prefill256.json"

# An unthrottled disk's rate varies between runs (a shared or virtual disk: 1.1 to 2.2 GB/s
# within minutes on the 2-core VM), so one sample before the arms can under-read what the arms
# then get: those drives are measured again after the arms, and each keeps its best sample (both
# go into the results).
if [ "$disk" = 1 ] || [ "$n_real" -gt 0 ]; then
  echo "== unthrottled drives' ceilings again, after the arms"
  measure_ceilings "$run/ceilings-after.txt" unthrottled
  awk -F'\t' -v OFS='\t' 'NR == FNR { after[$1] = $2 " " $3; next }
       { split(after[$1], a, " ") } a[1] > $2 { print $1, a[1], a[2], $2 "," a[1]; next }
       { print $1, $2, $3, $2 (a[1] == "" ? "" : "," a[1]) }' "$run/ceilings-after.txt" "$run/ceilings.txt" > "$run/ceilings.best"
  mv "$run/ceilings.best" "$run/ceilings.txt"
fi

arm_list=$(printf '%s\n' "${arms[@]}")
drive_list=
if [ "$n_real" -gt 0 ]; then  # each directory with the device it is on
  drive_list=$(for d in "${dirs[@]}"; do echo "$d (on $(df -P "$d" | awk 'NR == 2 { print $1 }'))"; done)
fi
PROVENANCE=$("$root/k3-public-bench/provenance.sh" "$bin") REAL_DRIVES=$drive_list MODEL_DIR=$model \
  python3 "$root/k3-public-bench/summarize_bench.py" "$run" "$out" "$mbps" "$cache" "$tokens" <<< "$arm_list"
"$root/k3-public-bench/plot.sh" "$out/results.csv" "$out"
echo "== results in $out (results.md, results.csv, *.png)"
