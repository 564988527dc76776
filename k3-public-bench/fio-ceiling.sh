#!/usr/bin/env bash
# A drive's read ceiling for the engine's access pattern: uncached random reads of PIECE_BYTES
# pieces (4096-aligned, like the placed records) with DEPTH in flight, read-only, over an existing
# FILE (the engine's placed data file on that drive). With fio: its psync engine with DEPTH jobs
# (the engine's pool of pread threads) and io_uring at iodepth DEPTH where available, O_DIRECT
# (F_NOCACHE on macOS). Without fio, or with DELTAFIN_NO_FIO=1: build/read_ceiling_bench, the
# same pattern through the engine's own reader. Prints the best as
#   ceiling_gbps=<GB/s, 1e9 bytes> engine=<psync|io_uring|builtin> file=<FILE>
# and each engine's figure on stderr. With throttled drives, run it inside their cgroup:
#   scripts/drives.sh exec k3-public-bench/fio-ceiling.sh /mnt/deltafin-drive0/experts.bin 1048576 8
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/portable.sh"
file=${1:-} piece=${2:-} depth=${3:-} secs=${4:-10}
[ -n "$depth" ] || { echo "usage: fio-ceiling.sh FILE PIECE_BYTES DEPTH [SECONDS]" >&2; exit 2; }
[[ $piece =~ ^[1-9][0-9]*$ && $depth =~ ^[1-9][0-9]*$ && $((piece % 4096)) -eq 0 ]] ||
  { echo "fio-ceiling.sh: PIECE_BYTES must be a multiple of 4096, DEPTH a positive integer" >&2; exit 2; }
[ -f "$file" ] || { echo "fio-ceiling.sh: no file $file" >&2; exit 1; }
[ "$(file_bytes "$file")" -ge "$piece" ] || { echo "fio-ceiling.sh: $file is smaller than one piece" >&2; exit 1; }
drives_cgroup=${DELTAFIN_DRIVES_NAME:-deltafin}-bench  # scripts/drives.sh's cgroup (one per emulated host)
caps=/sys/fs/cgroup/blkio/$drives_cgroup/blkio.throttle.read_bps_device
if [ -r "$caps" ]; then  # Linux, drives throttled by scripts/drives.sh
  dev=$(python3 -c 'import os, sys; d = os.stat(sys.argv[1]).st_dev; print("%d:%d" % (os.major(d), os.minor(d)))' "$file")
  if grep -q "^$dev " "$caps" && ! grep -q "^[0-9]*:blkio:/$drives_cgroup\$" /proc/self/cgroup; then
    echo "fio-ceiling.sh: warning: $file's drive is throttled but this process is outside its cgroup" >&2
  fi
fi

gbps() { awk -v b="$1" 'BEGIN { printf "%.3f", b / 1e9 }'; }

if [ "${DELTAFIN_NO_FIO:-0}" = 1 ] || ! command -v fio >/dev/null; then
  bench=$root/build/read_ceiling_bench
  [ -x "$bench" ] || { echo "fio-ceiling.sh: neither fio nor $bench (scripts/build.sh)" >&2; exit 1; }
  bw=$("$bench" "$file" "$piece" "$depth" "$secs")
  [ "${bw:-0}" -gt 0 ] || { echo "fio-ceiling.sh: read_ceiling_bench measured nothing on $file" >&2; exit 1; }
  echo "builtin gbps=$(gbps "$bw")" >&2
  echo "ceiling_gbps=$(gbps "$bw") engine=builtin file=$file"
  exit 0
fi

# run ENGINE FIO_ARGS...: prints the read bandwidth in bytes/s, or fails
run() {
  local engine=$1; shift
  fio --name=ceiling --filename="$file" --readonly --direct=1 --rw=randread --bs="$piece" --blockalign=4096 \
      --randrepeat=0 --norandommap --time_based --ramp_time=1 --runtime="$secs" \
      --group_reporting --output-format=json --ioengine="$engine" "$@" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"])' 2>/dev/null
}

best=0 best_engine=
for engine in psync io_uring; do
  if [ $engine = psync ]; then bw=$(run psync --numjobs="$depth") || bw=
  elif fio --enghelp 2>/dev/null | grep -qx '[[:space:]]*io_uring'; then bw=$(run io_uring --iodepth="$depth") || bw=
  else bw=; fi
  if [ -z "$bw" ] || [ "$bw" -eq 0 ]; then echo "fio-ceiling.sh: $engine failed or unsupported" >&2; continue; fi
  echo "$engine gbps=$(gbps "$bw")" >&2
  if [ "$bw" -gt "$best" ]; then best=$bw best_engine=$engine; fi
done
[ -n "$best_engine" ] || { echo "fio-ceiling.sh: no fio engine worked on $file" >&2; exit 1; }
echo "ceiling_gbps=$(gbps "$best") engine=$best_engine file=$file"
