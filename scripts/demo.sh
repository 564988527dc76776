#!/usr/bin/env bash
# Builds deltafin and runs a prompt on the bundled default model (models/default: a small Kimi
# K2-family MoE trained on the Python standard library), printing the receipt.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
build/deltafin inspect
echo
echo 'def parse_args(argv):' | build/deltafin run -n 64 --stats
