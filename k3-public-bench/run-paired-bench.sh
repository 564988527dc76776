#!/usr/bin/env bash
# Before/after speed of two or more deltafin binaries on one model, paired: the binaries take
# turns within each round (so each meets the same machine), --repeat rounds, each run a fixed
# prompt of --prompt-tokens ids prefilled and --tokens greedy tokens decoded (--ignore-eos, draft
# off). Prints a markdown table of prefill and decode tok/s, median (min-max), with the
# machine's provenance, and checks that every binary generated the same ids.
#   k3-public-bench/run-paired-bench.sh --model DIR --bin NAME=PATH --bin NAME=PATH
#     [--prompt-tokens 128] [--tokens 32] [--repeat 5] [--cache-gb G] [--threads N] [--out FILE]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/portable.sh"
model= prompt_tokens=128 tokens=32 repeat=5 out= extra=()
bins=()
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --bin) bins+=("$2"); shift 2 ;;
    --prompt-tokens) prompt_tokens=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --cache-gb) extra+=(--cache-gb "$2"); shift 2 ;;
    --threads) extra+=(--threads "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "run-paired-bench.sh: unknown argument $1" >&2; exit 1 ;;
  esac
done
[ -n "$model" ] && [ ${#bins[@]} -ge 2 ] || { echo "run-paired-bench.sh: give --model and at least two --bin NAME=PATH" >&2; exit 1; }
work=$(mktemp -d /tmp/deltafin-paired-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
ids=$(csv_range 3 $((prompt_tokens + 2)))
for round in $(seq 1 "$repeat"); do
  for b in "${bins[@]}"; do
    "${b#*=}" run -m "$model" --tokens "$ids" -n "$tokens" --ids --ignore-eos --draft off --temp 0 "${extra[@]}" \
      --stats-json "$work/${b%%=*}.$round.json" > "$work/${b%%=*}.$round.ids"
  done
  echo "round $round of $repeat done" >&2
done
first_bin=${bins[0]#*=}
report=$(
  echo "# Paired runs: $(IFS=,; echo "${bins[*]%%=*}") on $(basename "$model")"
  echo
  "$root/k3-public-bench/provenance.sh" "$first_bin"
  echo
  echo "Command: \`k3-public-bench/run-paired-bench.sh --model $model$(printf ' --bin %s' "${bins[@]}") --prompt-tokens $prompt_tokens --tokens $tokens --repeat $repeat${extra[*]:+ ${extra[*]}}\`"
  echo
  python3 - "$work" "$prompt_tokens" "$tokens" "${bins[@]%%=*}" <<'PY'
import glob, json, os, statistics, sys
work, prompt_tokens, tokens, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
print(f"{prompt_tokens} prompt ids prefilled, {tokens} tokens decoded (greedy, draft off), binaries in turn each round; tok/s median (min-max).")
print()
print("| binary | prefill tok/s | decode tok/s |")
print("|---|---|---|")
ids = set()
for name in names:
    pre, dec = [], []
    for path in sorted(glob.glob(os.path.join(work, f"{name}.*.json"))):
        r = json.load(open(path))
        pre.append(r["prefill"]["tokens"] / r["prefill"]["seconds"])
        dec.append(r["decode"]["tokens"] / r["decode"]["seconds"])
        ids.add(open(path[:-5] + ".ids").read())
    cell = lambda v: f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"
    print(f"| {name} | {cell(pre)} | {cell(dec)} |")
print()
print("Generated ids of every run: " + ("identical" if len(ids) == 1 else f"DIFFERENT ({len(ids)} variants)"))
PY
)
if [ -n "$out" ]; then echo "$report" > "$out"; echo "run-paired-bench.sh: wrote $out" >&2; else echo "$report"; fi
