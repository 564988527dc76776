#!/usr/bin/env bash
# Builds deltafin and runs the default test suite (slow tests are tagged [slow] and run with
# scripts/test.sh --slow).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
if [ "${1:-}" = "--slow" ]; then
  build/tests/deltafin_tests "[slow]"
else
  ctest --test-dir build --output-on-failure -j "$(nproc)"
fi
