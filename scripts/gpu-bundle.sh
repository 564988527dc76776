#!/usr/bin/env bash
# Builds the CUDA configuration here (nvcc 13, sm_90 + PTX, with MPI) into build-cuda/ and packs
# what the GPU machine needs to run it into one directory: the binaries, the shared libraries it
# lacks (Ubuntu 24.04 with the CUDA driver, but no Highway, fmt, spdlog, simdjson, xxHash, PCRE2,
# ICU or Open MPI), Open MPI itself (mpi/: scripts/mpi-runtime.sh), the tokenizer references the
# tests read, and the commit. Carry the directory with the working tree and run
# scripts/gpu-test.sh BUNDLE or k3-public-bench/run-gpu-hosts-bench.sh BUNDLE there.
#   scripts/gpu-bundle.sh [OUT_DIR]   (default: .gpuhost/bundle)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(uname -s)" = Linux ] || { echo "gpu-bundle.sh: Linux only (nvcc, ldd)" >&2; exit 1; }
command -v mpicxx >/dev/null || { echo "gpu-bundle.sh: Open MPI is missing here (scripts/setup.sh installs it)" >&2; exit 1; }
out=${1:-.gpuhost/bundle}
nvcc=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DDELTAFIN_CUDA=ON -DDELTAFIN_MPI=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
  ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER="$CMAKE_CXX_COMPILER_LAUNCHER"} >/dev/null
cmake --build build-cuda --target deltafin deltafin_tests kernel_bench cuda_expert_bench dspark_bench
[ -d build/text-ref ] || { echo "build/text-ref is missing: run scripts/test.sh once first" >&2; exit 1; }
rm -rf "$out" && mkdir -p "$out/lib"
cp build-cuda/deltafin build-cuda/kernel_bench build-cuda/cuda_expert_bench build-cuda/dspark_bench build-cuda/tests/deltafin_tests "$out/"
cp -r build/text-ref "$out/"
# Every shared library of these packages the binaries load (the GPU machine has libc, libstdc++,
# libgcc, OpenSSL, zlib and the CUDA driver).
for bin in "$out"/deltafin "$out"/deltafin_tests; do ldd "$bin"; done | awk '/=> \// {print $3}' | sort -u |
  grep -E 'lib(hwy|fmt|spdlog|simdjson|xxhash|pcre2-8|icuuc|icudata|icui18n)\.so' | while read -r lib; do cp -L "$lib" "$out/lib/"; done
scripts/mpi-runtime.sh "$out/mpi"
git describe --always --dirty --abbrev=12 > "$out/commit"
du -sh "$out"
