#!/usr/bin/env bash
# What checking every read of a placed record costs (issue 33, item 5): record_check_bench's
# XXH3 and NaN/Inf-scan rates on one thread (GB per CPU-second), against the memory-read rate
# measured in the same run, and each drive's read ceiling (fio-ceiling.sh: 1 MiB pieces, 8 in
# flight, as the reader reads), so that the share of one core the checks take while that drive
# reads at its ceiling = drive GB/s / check GB per CPU-second.
# FILE: a large file on each drive (a placed data file); without one, a 2 GB scratch file in
# build/ (the build directory's drive). Writes results/record-checks.md.
#   k3-public-bench/run-record-check-bench.sh [FILE ...]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/portable.sh
scripts/build.sh >/dev/null
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  scratch=build/record-check-drive.bin
  if [ ! -f "$scratch" ] || [ "$(file_bytes "$scratch")" -lt 2000000000 ]; then
    head -c 2000000000 /dev/urandom > "$scratch"
  fi
  files=("$scratch")
fi
table=$(build/record_check_bench 5)
# The reader's check of an MXFP4 record (XXH3 + scan), GB/s: the K3 format's row, 7th column.
check=$(echo "$table" | awk -F'|' '$2 ~ /^ MXFP4 $/ { gsub(/ /, "", $8); print $8 }')
out=k3-public-bench/results/record-checks.md
{
  echo "# Checking every read of a placed record"
  echo
  k3-public-bench/provenance.sh
  echo "Command: \`k3-public-bench/run-record-check-bench.sh $*\` (\`build/record_check_bench 5\`, then"
  echo "\`k3-public-bench/fio-ceiling.sh FILE 1048576 8\` on each drive's file)."
  echo
  echo "$table"
  echo
  echo "| drive file | read ceiling GB/s (1 MiB pieces, 8 in flight, page cache bypassed) | ceiling tool | share of one core checking MXFP4 records at that rate |"
  echo "|---|---|---|---|"
  for f in "${files[@]}"; do
    line=$(k3-public-bench/fio-ceiling.sh "$f" 1048576 8 10 2>/dev/null)
    gbps=$(echo "$line" | sed -n 's/.*ceiling_gbps=\([0-9.]*\).*/\1/p')
    engine=$(echo "$line" | sed -n 's/.*engine=\([a-z_]*\).*/\1/p')
    share=$(awk -v d="$gbps" -v c="$check" 'BEGIN { printf "%.1f %%", 100 * d / c }')
    echo "| $f | $gbps | $engine | $share |"
  done
  echo
  echo "Every read of a placed record is checked on the drive I/O thread that completed it: XXH3 over the"
  echo "record, then, for an expert, the NaN/Inf scan (the scales of MXFP4 and INT4, every value of FP8"
  echo "and BF16). The record arrives by DMA around the page cache, so the check reads it from DRAM and"
  echo "runs near one core's memory-read rate (the table). The last column is the CPU time the checks take"
  echo "per second of that drive reading at its ceiling; n such drives take n times as much, spread over"
  echo "their I/O threads (8 a drive)."
} > "$out"
cat "$out"
