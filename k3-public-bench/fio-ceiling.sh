#!/usr/bin/env bash
# A drive's read ceiling for the engine's access pattern: O_DIRECT random reads of PIECE_BYTES
# pieces (4096-aligned, like the placed records) with DEPTH in flight, read-only, over an existing
# FILE (the engine's placed data file on that drive). Tries fio's psync engine with DEPTH jobs (the
# engine's pool of pread threads) and io_uring at iodepth DEPTH where available; prints the best as
#   ceiling_gbps=<GB/s, 1e9 bytes> engine=<psync|io_uring> file=<FILE>
# and each engine's figure on stderr. With throttled drives, run it inside their cgroup:
#   scripts/drives.sh exec k3-public-bench/fio-ceiling.sh /mnt/deltafin-drive0/experts.bin 1048576 8
set -euo pipefail

file=${1:-} piece=${2:-} depth=${3:-} secs=${4:-10}
[ -n "$depth" ] || { echo "usage: fio-ceiling.sh FILE PIECE_BYTES DEPTH [SECONDS]" >&2; exit 2; }
[[ $piece =~ ^[1-9][0-9]*$ && $depth =~ ^[1-9][0-9]*$ && $((piece % 4096)) -eq 0 ]] ||
  { echo "fio-ceiling.sh: PIECE_BYTES must be a multiple of 4096, DEPTH a positive integer" >&2; exit 2; }
[ -f "$file" ] || { echo "fio-ceiling.sh: no file $file" >&2; exit 1; }
[ "$(stat -c %s "$file")" -ge "$piece" ] || { echo "fio-ceiling.sh: $file is smaller than one piece" >&2; exit 1; }
command -v fio >/dev/null || { echo "fio-ceiling.sh: fio not installed (scripts/setup.sh)" >&2; exit 1; }
caps=/sys/fs/cgroup/blkio/deltafin-bench/blkio.throttle.read_bps_device
if [ -r "$caps" ] && grep -q "^$(stat -c %Hd:%Ld "$file") " "$caps" &&
   ! grep -q '^[0-9]*:blkio:/deltafin-bench$' /proc/self/cgroup; then
  echo "fio-ceiling.sh: warning: $file's drive is throttled but this process is outside its cgroup" >&2
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
  echo "$engine gbps=$(awk -v b="$bw" 'BEGIN { printf "%.3f", b / 1e9 }')" >&2
  if [ "$bw" -gt "$best" ]; then best=$bw best_engine=$engine; fi
done
[ -n "$best_engine" ] || { echo "fio-ceiling.sh: no fio engine worked on $file" >&2; exit 1; }
awk -v b="$best" -v e="$best_engine" -v f="$file" 'BEGIN { printf "ceiling_gbps=%.3f engine=%s file=%s\n", b / 1e9, e, f }'
