#!/usr/bin/env bash
# The real Kimi K3's expert bytes per decoded token under the store's cache policy, projected: a
# MODEL of K3's routing (tools/make_k3_trace.py, fitted to the published figures: ~30 % of a
# token's experts shared with the previous token's, 65 distinct experts a layer over a 1-token
# prompt and 8 generated tokens; docs/routing-traces.md) replayed by the cache simulator at the
# expert budgets `deltafin inspect` plans for 128 GB on one host and on 4 hosts (each pass shared
# out as rank 0 does without a host placement; rank 0 also holds the spine). Three routing models: the fit at the fastest turnover the
# figures allow (the default), the fit at the slowest (drift 0.005), and independent uniform
# routing (what docs/hosts-projection.md assumes). Never a measurement. Writes
# results/k3-routing-projection.md.
#   k3-public-bench/run-k3-routing-projection.sh [TOKENS]
set -euo pipefail
cd "$(dirname "$0")/.."
tokens=${1:-512}
out=k3-public-bench/results/k3-routing-projection.md
scripts/build.sh >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
config=tests/fixtures/k3_real_config
one=$(build/deltafin inspect -m $config --memory-gb 128 --drive-gbps 7,7,7,7 | sed -n 's/^budget .* experts \([0-9.]*\) GB.*/\1/p')
caches=$(build/deltafin inspect -m $config --memory-gb 128 --drive-gbps 7,7,7,7 --hosts 4 --link 10gbe |
  sed -n 's/^expert cache *rank 0 \([0-9.]*\) GB of .*, others \([0-9.]*\) GB of .*/\1 \2/p')
read -r rank0 others <<< "$caches"
[ -n "$one" ] && [ -n "$rank0" ] && [ -n "$others" ] || { echo "run-k3-routing-projection: inspect's output changed" >&2; exit 1; }
bytes() { python3 -c "print(int(round($1 * 1e9)))"; }
model_flags() {  # the generator's flags for each routing model
  case $1 in
    fit-fast) echo "--seed 1" ;;
    fit-slow) echo "--seed 1 --drift 0.005 --working-set 75 --stickiness 0.135" ;;
    uniform) echo "--seed 1 --skew 0 --drift 0 --working-set 896 --stickiness 0" ;;
  esac
}
rows="$work/rows.jsonl"
: > "$rows"
for name in fit-fast fit-slow uniform; do
  # shellcheck disable=SC2086
  python3 tools/make_k3_trace.py --tokens "$tokens" --prompt 1 $(model_flags $name) --out "$work/$name.trace"
  python3 tools/routing_stats.py "$work/$name.trace" --json "$work/$name-stats.json" >/dev/null
  for policy in store oracle; do
    build/cache_sim "$work/$name.trace" --budget-bytes "$(bytes "$one")" --policy $policy --json "$work/r.json" >/dev/null
    sed "s/^{/{\"model\": \"$name\", \"setup\": \"1 host\", /" "$work/r.json" >> "$rows"
    for host in 0 1 2 3; do
      budget=$([ $host = 0 ] && echo "$rank0" || echo "$others")
      build/cache_sim "$work/$name.trace" --hosts 4 --host $host --budget-bytes "$(bytes "$budget")" --policy $policy \
        --json "$work/r.json" >/dev/null
      sed "s/^{/{\"model\": \"$name\", \"setup\": \"4 hosts\", /" "$work/r.json" >> "$rows"
    done
  done
done
{
  echo "# Kimi K3's expert bytes per token, projected on a model of its routing"
  echo
  echo "$(k3-public-bench/provenance.sh)"
  echo "\`$0 $tokens\`: **a projection on synthetic routing, not a measurement.** $tokens decoded tokens after a"
  echo "1-token prompt; expert budgets from \`deltafin inspect -m $config --memory-gb 128 --drive-gbps 7,7,7,7 [--hosts 4]\`:"
  echo "one host ${one} GB; 4 hosts: rank 0 ${rank0} GB (the spine takes the rest), ranks 1-3 ${others} GB each."
  echo
  python3 k3-public-bench/summarize_k3_projection.py "$rows" "$work"
} > "$work/out.md"
mv "$work/out.md" "$out"
cat "$out"
