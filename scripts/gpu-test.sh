#!/usr/bin/env bash
# The CUDA checks, run on the GPU machine from the repository root with a bundle made here by
# scripts/gpu-bundle.sh (that machine has CUDA 13 but not the project's libraries, so it runs a
# carried build). Writes REPORT_DIR/gpu-report.md and the logs next to it; exits non-zero when a
# check fails. Steps: the machine; the CUDA-labelled tests and the parity harness on every
# backend; compute-sanitizer memcheck and racecheck on a short run; exactness on CUDA (chunked
# prefill equals token-by-token logits bit for bit, speculative greedy equals plain greedy);
# CUDA against the CPU (greedy ids of every golden fixture).
#   scripts/gpu-test.sh [BUNDLE_DIR] [REPORT_DIR]   (defaults: .gpuhost/bundle, $OUT or gpu-report)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bundle=$(cd "${1:-.gpuhost/bundle}" && pwd)
report=${2:-${OUT:-gpu-report}}
mkdir -p "$report"
report=$(cd "$report" && pwd)
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DELTAFIN_TEXT_REF="$bundle/text-ref"
# The test binary names its fixtures and the CLI by the paths of the build machine's clone:
# point it at this tree.
mkdir -p build-cuda/tests
cp "$bundle/deltafin" "$bundle/kernel_bench" build-cuda/ && cp "$bundle/deltafin_tests" build-cuda/tests/
export DELTAFIN_TEST_FIXTURES="$root/tests/fixtures" DELTAFIN_TEST_BINARY="$root/build-cuda/deltafin"
bin=build-cuda/deltafin
tests=build-cuda/tests/deltafin_tests
md="$report/gpu-report.md"
failed=0
step() {  # step NAME COMMAND...: runs, logs to NAME.log, records pass/fail
  local name=$1; shift
  local start=$SECONDS
  if "$@" > "$report/$name.log" 2>&1; then echo "| $name | pass | $((SECONDS - start)) s |" >> "$md"
  else echo "| $name | **FAIL** (rc $?) | $((SECONDS - start)) s |" >> "$md"; failed=1; fi
}

{
  echo "# GPU report"
  echo
  echo "$(DELTAFIN_COMMIT=$(cat "$bundle/commit") k3-public-bench/provenance.sh "$bin")"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv
  "$bin" --version
  echo '```'
  echo
  echo "| step | result | time |"
  echo "|---|---|---|"
} > "$md"

step cuda-tests "$tests" "[cuda]"
step parity-harness "$tests" "[backend-ops]"
step golden-tests "$tests" "[golden],[golden-k3]"
run_short=("$bin" run --backend cuda -m models/default -p "def fibonacci(n):" -n 8 --ignore-eos --draft off)
if command -v compute-sanitizer > /dev/null; then
  step memcheck compute-sanitizer --tool memcheck --error-exitcode 9 "${run_short[@]}"
  step racecheck compute-sanitizer --tool racecheck --error-exitcode 9 "${run_short[@]}"
else
  echo "| memcheck, racecheck | not run: no compute-sanitizer | |" >> "$md"
fi

# Exactness within CUDA: logits of a prefill in one pass, in chunks of 3 and token by token.
exact_chunks() {
  local ids; ids=$(seq -s, 1 20)
  for model in models/default tests/fixtures/k3_tiny_mxfp4 tests/fixtures/k2_tiny_fp8; do
    for chunk in 64 3 1; do
      "$bin" logits --backend cuda -m "$model" --tokens "$ids" --chunk "$chunk" --out "$report/logits-$chunk.npy" || return 1
    done
    cmp "$report/logits-64.npy" "$report/logits-3.npy" && cmp "$report/logits-64.npy" "$report/logits-1.npy" || return 1
    echo "$model: chunk 64, 3 and 1 bit-identical"
  done
}
step exact-chunks exact_chunks

# Speculative greedy equals plain greedy on CUDA (the bundled model and its draft).
exact_speculation() {
  local plain spec
  plain=$("$bin" run --backend cuda -p "def fibonacci(n):" -n 48 --ids --ignore-eos --draft off) || return 1
  spec=$("$bin" run --backend cuda -p "def fibonacci(n):" -n 48 --ids --ignore-eos --draft model) || return 1
  echo "plain: $plain"; echo "spec:  $spec"
  [ "$plain" = "$spec" ]
}
step exact-speculation exact_speculation

# CUDA against the CPU: the same greedy ids on every golden fixture and the bundled model.
same_ids() {
  local ids; ids=$(seq -s, 3 18)
  for model in models/default tests/fixtures/*/; do
    [ -f "$model/config.json" ] || continue
    local cpu cuda
    cpu=$("$bin" run --backend cpu -m "$model" --tokens "$ids" -n 16 --ids --ignore-eos --draft off) || return 1
    cuda=$("$bin" run --backend cuda -m "$model" --tokens "$ids" -n 16 --ids --ignore-eos --draft off) || return 1
    echo "$model cpu:  $cpu"; echo "$model cuda: $cuda"
    [ "$cpu" = "$cuda" ] || return 1
  done
}
step cpu-cuda-ids same_ids

echo >> "$md"
[ $failed = 0 ] && echo "All steps passed." >> "$md" || echo "Some steps FAILED: see the logs next to this file." >> "$md"
cat "$md"
exit $failed
