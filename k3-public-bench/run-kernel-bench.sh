#!/usr/bin/env bash
# Decode-time matmul throughput per weight format against the memory-read ceiling measured in
# the same run (see kernel_bench.cpp). Writes results/kernel-throughput.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
out=k3-public-bench/results/kernel-throughput.md
{
  echo "# Matmul throughput against the memory-read ceiling"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), \`$0\`."
  echo
  build/kernel_bench 5
} > "$out"
cat "$out"
