#!/usr/bin/env bash
# Builds deltafin and runs a prompt on the default model, printing the receipt.
# (Until the bundled trained model lands, the default model is the K2-like golden fixture,
# whose random weights produce ids, not text.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
model=tests/fixtures/k2_tiny
prompt=$(python3 -c "import json;print(','.join(map(str,json.load(open('$model/golden.json'))['prompt'])))")
build/deltafin inspect -m "$model"
echo "generated ids:"
build/deltafin run -m "$model" --tokens "$prompt" -n 24 --temp 0 --ids --ignore-eos --stats
