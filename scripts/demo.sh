#!/usr/bin/env bash
# Builds deltafin and runs a prompt on the default model, printing the receipt.
# (Until the bundled trained model lands, the default model is the K2-like golden fixture with a
# tiny Kimi-format tokenizer: its weights are random, so the text it streams is noise.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
model=tests/fixtures/k2_tiny
build/deltafin inspect -m "$model"
echo
echo 'def f(x):' | build/deltafin run -m "$model" -n 32 --ignore-eos --stats
