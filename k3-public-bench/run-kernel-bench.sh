#!/usr/bin/env bash
# Decode-time matmul throughput per weight format against the memory-read ceiling measured in
# the same run (see kernel_bench.cpp), for every SIMD target this CPU runs. Writes
# results/kernel-throughput.md.   k3-public-bench/run-kernel-bench.sh [RUNS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
out=k3-public-bench/results/kernel-throughput.md
{
  echo "# Matmul throughput against the memory-read ceiling"
  echo
  echo "$(k3-public-bench/provenance.sh) \`$0 $*\`."
  echo
  build/kernel_bench "${@:-3}"
} > "$out"
cat "$out"
