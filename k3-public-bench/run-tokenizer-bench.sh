#!/usr/bin/env bash
# Tokenizer encoding throughput on ~20 MB of English prose (the licence texts Debian ships,
# repeated; where there are none, as on macOS, this repository's Markdown and licence, so the
# figures are not comparable across the two), median of 5 runs per tokenizer, one thread. Writes
# results/tokenizer-throughput.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/portable.sh
scripts/build.sh >/dev/null
(cd tests/text && npm install --no-audit --no-fund --no-package-lock --loglevel=error >/dev/null)
node tests/text/reference_tiktoken.mjs build/text-ref >/dev/null
node tests/text/reference_hf.mjs build/text-ref >/dev/null
prose=build/bench-prose.txt
licences=/usr/share/common-licenses
if [ -f $licences/GPL-3 ]; then
  sources=$(echo $licences/{GPL-3,LGPL-3,Apache-2.0,Artistic,MPL-2.0,GFDL-1.3}) source_name="Debian's licence texts"
else
  sources=$(echo LICENSE CREDITS.md README.md docs/*.md) source_name="this repository's licence and Markdown"
fi
: > "$prose"
while [ "$(file_bytes "$prose")" -lt 20000000 ]; do
  # shellcheck disable=SC2086  # a list of paths without spaces
  cat $sources >> "$prose"
done
out=k3-public-bench/results/tokenizer-throughput.md
{
  echo "# Tokenizer encoding throughput"
  echo
  echo "$(k3-public-bench/provenance.sh)"
  echo "One thread, \`$0\`: $(file_bytes "$prose") bytes of English prose ($source_name repeated)."
  echo
  build/tokenizer_bench "$prose" 5 \
    tiktoken:build/text-ref/o200k_base.tiktoken:o200k \
    tiktoken:build/text-ref/o200k_base.tiktoken:kimi \
    hf:build/text-ref/deepseek_v3/tokenizer.json \
    hf:build/text-ref/qwen3/tokenizer.json
} > "$out"
cat "$out"
