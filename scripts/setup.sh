#!/usr/bin/env bash
# Installs what deltafin needs to build, test and run on Debian 12 (or a close relative), or on
# macOS with Homebrew. Idempotent: packages already present are not touched. Uses sudo when not
# run as root (Debian). Written for bash 3.2 (macOS's /bin/bash) too.
set -euo pipefail

if [ "$(uname -s)" = "Darwin" ]; then
  # macOS: Homebrew's packages (CMake finds them through `brew --prefix`; icu4c is keg-only and
  # found through its pkg-config directory, see CMakeLists.txt). Xcode's command-line tools give
  # clang and the Metal framework headers; the shaders are compiled at run time by the OS.
  if ! command -v brew >/dev/null; then
    echo "setup: Homebrew is needed on macOS (https://brew.sh)" >&2
    exit 1
  fi
  brew_packages="cmake ninja cli11 fmt spdlog simdjson xxhash catch2 highway pcre2 icu4c pkgconf node python numpy gnuplot open-mpi"
  missing=""
  for p in $brew_packages; do
    brew list --versions "$p" >/dev/null 2>&1 || missing="$missing $p"
  done
  if [ -z "$missing" ]; then
    echo "setup: all packages present"
  else
    echo "setup: installing$missing"
    # shellcheck disable=SC2086
    brew install $missing
  fi
  exit 0
fi

packages=(
  build-essential cmake ninja-build pkg-config git
  libcli11-dev libfmt-dev libspdlog-dev libsimdjson-dev libxxhash-dev catch2 libhwy-dev libpcre2-dev
  libicu-dev                        # NFC/NFKC normalizers of tokenizer.json files
  curl                              # the deltafin serve tests
  clang libclang-rt-14-dev          # libFuzzer for scripts/fuzz.sh
  python3 python3-numpy             # tools/ (synthetic models)
  python3-jsonschema                # the structured-output tests' reference validator
  fio gnuplot-nox                   # k3-public-bench/: drive read ceilings, charts
  e2fsprogs util-linux              # scripts/drives.sh: mkfs.ext4, losetup, findmnt
  openmpi-bin libopenmpi-dev        # several hosts: mpirun -n N deltafin run|serve|logits
)

# node + npm run the reference tokenizers of the tests; keep a newer node if one is installed.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then packages+=(nodejs npm); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
