#!/usr/bin/env bash
# Prints the provenance line every results file of k3-public-bench/ carries: date, machine (CPU
# model, cores, memory), the SIMD target the kernels ran on (deltafin --version, which honours
# DELTAFIN_SIMD) and the commit (with -dirty when the tree had changes; DELTAFIN_COMMIT overrides,
# for a copy run outside its clone). Linux reads /proc; macOS asks sysctl.
#   k3-public-bench/provenance.sh [DELTAFIN_BINARY]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/portable.sh"
bin=${1:-$root/build/deltafin}
if [ -r /proc/cpuinfo ]; then
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs || true)
  family=$(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | xargs || true)
  model=$(grep -m1 -E '^model[[:space:]]+:' /proc/cpuinfo | cut -d: -f2 | xargs || true)
  [ -z "$family" ] || cpu="$cpu (family $family, model $model)"
  mem_gib=$(awk '/MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)
else
  cpu=$(sysctl -n machdep.cpu.brand_string 2>/dev/null || true)
  mem_gib=$(sysctl -n hw.memsize 2>/dev/null | awk '{printf "%.0f", $1 / 1073741824}')
fi
[ -n "$cpu" ] || cpu=$(uname -m)
simd=$("$bin" --version 2>/dev/null | sed -n 's/^simd: //p')
commit=${DELTAFIN_COMMIT:-$(git -C "$root" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)}
echo "$(date -u +%Y-%m-%d), $(uname -s) $(uname -m), CPU: $cpu, $(cpu_count) cores, ${mem_gib:-?} GiB; SIMD: ${simd:-unknown}; commit $commit."
