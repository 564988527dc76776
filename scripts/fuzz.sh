#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in build-fuzz/ and runs fuzz_safetensors for a number
# of seconds (default 60) over a working copy of the seed corpus (tests/fuzz/corpus-run/, git-
# ignored, kept between runs so coverage accumulates). Exits non-zero when the fuzzer finds a
# crash, leak, sanitizer report or timeout; the reproducer is saved under build-fuzz/artifacts/.
#   scripts/fuzz.sh [seconds] [extra libFuzzer flags...]     e.g. scripts/fuzz.sh 300 -jobs=4
set -euo pipefail

seconds=${1:-60}
shift $(( $# > 0 ? 1 : 0 ))
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$root/build-fuzz"
corpus="$root/tests/fuzz/corpus-run"
artifacts="$build/artifacts"

export CC=${CC:-clang} CXX=${CXX:-clang++}
cmake -S "$root" -B "$build" -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDELTAFIN_FUZZ=ON -DDELTAFIN_TESTS=OFF >/dev/null
cmake --build "$build" --target fuzz_safetensors -j "$(nproc)"

mkdir -p "$corpus" "$artifacts"
for seed in "$root"/tests/fuzz/corpus/*; do
  [[ -e "$corpus/${seed##*/}" ]] || cp "$seed" "$corpus/"
done

status=0
"$build/tests/fuzz/fuzz_safetensors" -max_total_time="$seconds" -print_final_stats=1 \
  -dict="$root/tests/fuzz/safetensors.dict" -artifact_prefix="$artifacts/" "$@" "$corpus" \
  || status=$?
if [[ $status -ne 0 ]]; then
  echo "fuzz.sh: fuzz_safetensors found a problem (exit $status); reproducers in $artifacts:" >&2
  ls -1 "$artifacts" >&2 || true
  exit "$status"
fi
echo "fuzz.sh: no findings in ${seconds}s"
