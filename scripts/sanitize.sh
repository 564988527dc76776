#!/usr/bin/env bash
# The test suite under sanitizers (CI runs both; neither is the default build):
#   scripts/sanitize.sh thread    TSan build in build-tsan/: the threaded parts (expert reads and
#                                 drive queues, placement, overlap, the memory budget, staged
#                                 experts, the spine streamed through device memory, the server)
#                                 and the server's own test scripts (but serve_sessions)
#   scripts/sanitize.sh address   ASan + UBSan build in build-asan/: every other default test
# Any sanitizer report fails the run (halt_on_error), naming the test that found it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/portable.sh"
kind=${1:-}
threaded="[placement],[overlap],[memory-budget],[staged],[device-memory],[serve]"
case $kind in
  thread) build="$root/build-tsan" ;;
  address) build="$root/build-asan" ;;
  *) echo "usage: scripts/sanitize.sh thread|address" >&2; exit 2 ;;
esac
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDELTAFIN_SANITIZE="$kind" \
  ${launcher[@]+"${launcher[@]}"} >/dev/null
cmake --build "$build" --target deltafin deltafin_tests
export DELTAFIN_TEXT_REF="$root/build/text-ref"  # the reference tokenizers' outputs (scripts/test.sh makes them)
export DELTAFIN_SANITIZER=$kind  # tests that bound resident memory skip that bound (the runtime's own memory grows)
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/scripts/tsan.supp"
export ASAN_OPTIONS="halt_on_error=1 detect_leaks=1"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1"
if [ "$kind" = thread ]; then
  "$build/tests/deltafin_tests" "$threaded" --warn NoTests
  # serve_sessions (five servers a model, prompts of thousands of tokens) does not fit its time
  # limit under TSan; its threads (the prefix cache written beside the next request) run here in
  # the [serve] case "a dropped session is saved to the prefix cache and restored from it".
  ctest --test-dir "$build" -L serve -E serve_sessions --output-on-failure
else
  # Every default test case but the threaded ones (TSan's), the CUDA ones (no device here) and
  # those under an address-space limit ([rlimit]: ASan reserves terabytes of shadow address space).
  "$build/tests/deltafin_tests" "~[slow]~[cuda]~[rlimit]~[placement]~[overlap]~[memory-budget]~[staged]~[device-memory]~[serve]" --warn NoTests
fi
echo "sanitize.sh: $kind: no findings"
