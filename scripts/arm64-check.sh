#!/usr/bin/env bash
# ARM64 (the Apple Silicon CPU path) on a Debian 12 x86-64 machine: cross-builds deltafin and its
# tests into build-arm64/ (cmake/aarch64-linux-gnu.cmake, Debian's multiarch :arm64 packages) and
# runs them under qemu-user, once per SIMD target the build has (NEON, SCALAR), each forced with
# DELTAFIN_SIMD: deltafin --version, the [kernels] tests and the K3 MXFP4
# golden. --all-golden adds the other K3 and K2 golden tests. Installs what it needs idempotently
# (sudo when not root). Prints how long each step took.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/portable.sh
[ "$(uname -s)" = Linux ] || { echo "arm64-check: needs Debian (multiarch packages, qemu-user); on a Mac build natively" >&2; exit 1; }

all_golden=0
if [ "${1:-}" = "--all-golden" ]; then all_golden=1; fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
timed() {  # timed LABEL COMMAND...: runs it, then prints LABEL and the seconds it took
  local label=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  echo "arm64-check: $label: $((SECONDS - start)) s"
  return $rc
}

install() {
  local packages=(cmake ninja-build pkg-config g++-aarch64-linux-gnu qemu-user
    libcli11-dev catch2  # header-only and Multi-Arch: foreign, the host's serve arm64 too
    libhwy-dev:arm64 libfmt-dev:arm64 libspdlog-dev:arm64 libsimdjson14:arm64 libxxhash-dev:arm64
    libpcre2-dev:arm64 libicu-dev:arm64)
  local missing=() p
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "arm64-check: installing ${missing[*]}"
    dpkg --print-foreign-architectures | grep -qx arm64 || $sudo dpkg --add-architecture arm64
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -q
    $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  # libsimdjson-dev is not co-installable across architectures (its arm64 package would remove the
  # host's), so its arm64 files are unpacked into build-arm64/deps instead.
  if [ ! -f build-arm64/deps/usr/lib/aarch64-linux-gnu/cmake/simdjson/simdjson-config.cmake ]; then
    rm -rf build-arm64/deps build-arm64/debs && mkdir -p build-arm64/debs
    (cd build-arm64/debs && apt-get download -q libsimdjson-dev:arm64 libsimdjson14:arm64)
    for deb in build-arm64/debs/*.deb; do dpkg-deb -x "$deb" build-arm64/deps; done
  fi
}

build() {
  cmake -S . -B build-arm64 -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DDELTAFIN_MPI=OFF \
    -Dsimdjson_DIR="$PWD/build-arm64/deps/usr/lib/aarch64-linux-gnu/cmake/simdjson" >/dev/null
  cmake --build build-arm64 -j "${JOBS:-$(cpu_count)}" --target deltafin deltafin_tests
}

qemu=(qemu-aarch64)  # not -L /usr/aarch64-linux-gnu: see cmake/aarch64-linux-gnu.cmake
tests=("[kernels]" "Kimi K3 tiny with MXFP4 routed experts (3 shards) matches the release code")
if [ $all_golden -eq 1 ]; then tests[1]="[golden-k3],[golden]"; fi

timed install install
timed build build
"${qemu[@]}" build-arm64/deltafin --version
read -r -a targets <<<"$("${qemu[@]}" build-arm64/deltafin --version | sed -n 's/^simd: .* (available: \(.*\))$/\1/p')"
failed=()
# A build without MPI refuses a launch of several ranks in one line (mpirun's environment).
refusal=$(OMPI_COMM_WORLD_SIZE=3 "${qemu[@]}" build-arm64/deltafin run -p x -n 1 2>&1) && failed+=("mpirun refusal: exit 0")
grep -q "^deltafin: started by mpirun with 3 ranks, but this deltafin was built without MPI" <<< "$refusal" ||
  failed+=("mpirun refusal: $refusal")
for target in "${targets[@]}"; do
  export DELTAFIN_SIMD=$target
  "${qemu[@]}" build-arm64/deltafin --version | grep "^simd: $target "
  for spec in "${tests[@]}"; do
    timed "$target $spec" "${qemu[@]}" build-arm64/tests/deltafin_tests "$spec" || failed+=("$target $spec")
  done
done
if [ ${#failed[@]} -gt 0 ]; then
  printf 'arm64-check: FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "arm64-check: passed on ${targets[*]} in $SECONDS s"
