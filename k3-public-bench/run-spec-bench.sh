#!/usr/bin/env bash
# Speculative decoding benchmark: decode speed with and without drafts, on
#   - the bundled model (models/default, in RAM) with its bundled draft and with prompt lookup,
#     on code prompts (where drafts are accepted) and on random-token prompts (where they are not);
#   - the synthetic K3-shaped model of run-bench.sh, storage-bound on one drive throttled to
#     --read-mbps, with prompt lookup on a repetitive and a random prompt (its random weights
#     never repeat themselves, so lookup never fires), and with scripted drafts of controlled
#     acceptance (1.0, 0.7, 0.0; k = 1, 2, 4 and adaptive: build/spec_storage_bench).
# Every arm generates the same ids as the plain arm (checked). Median of --repeat interleaved runs.
#   k3-public-bench/run-spec-bench.sh [--tokens 256] [--storage-tokens 32] [--repeat 5] [--read-mbps 150]
#                                     [--no-storage] [--out DIR]
# (the storage arms run min(--repeat, 3) times: each takes about half a minute)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/portable.sh"
bin=$root/build/deltafin
tokens=256 storage_tokens=32 repeat=5 mbps=150 storage=1 work=/var/tmp/deltafin-bench
out=$root/k3-public-bench/results/speculative
while [ $# -gt 0 ]; do
  case $1 in
    --tokens) tokens=$2; shift 2 ;;
    --storage-tokens) storage_tokens=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --read-mbps) mbps=$2; shift 2 ;;
    --no-storage) storage=0; shift ;;
    --out) out=$2; shift 2 ;;
    *) echo "run-spec-bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "run-spec-bench.sh: build first (scripts/build.sh)" >&2; exit 1; }
mkdir -p "$out" "$work/spec"
rm -f "$work"/spec/*.json

# name|model|prompt file|run flags|exec prefix
arms=()
code_prompts=("def parse_args(argv):" "class Parser:\n    def __init__(self" "import os\nimport sys\n\n\ndef main(" \
              "    for i in range(len(items)):" "        if not isinstance(value, str):\n            raise")
for i in "${!code_prompts[@]}"; do
  printf '%b' "${code_prompts[$i]}" > "$work/spec/code$i.txt"
  python3 -c "import random; random.seed($i); print(','.join(str(random.randrange(4, 4096)) for _ in range(24)))" > "$work/spec/random$i.ids"
done
for i in "${!code_prompts[@]}"; do
  for mode in "off|--draft off" "draft|--draft model --draft-model $root/models/default-draft" "draft-k4|--draft model --draft-model $root/models/default-draft --no-adaptive --draft-k 4" "ngram|--draft ngram --draft-k 8"; do
    arms+=("bundled-code$i-${mode%%|*}|$root/models/default|-f $work/spec/code$i.txt|${mode#*|}|")
    arms+=("bundled-random$i-${mode%%|*}|$root/models/default|--tokens $(cat "$work/spec/random$i.ids")|${mode#*|}|")
  done
done

if [ "$storage" = 1 ]; then
  [ "$(uname -s)" = Linux ] || { echo "run-spec-bench.sh: the storage arms need Linux (scripts/drives.sh; --no-storage skips them)" >&2; exit 1; }
  [ "$(id -u)" -eq 0 ] || { echo "run-spec-bench.sh: the storage arms need root (--no-storage skips them)" >&2; exit 1; }
  synth=$work/k3-synthetic
  [ -f "$synth/model.safetensors.index.json" ] || "$(numpy_python)" "$root/tools/make_synthetic_k3.py" "$synth" --preset bench --force
  "$root/scripts/drives.sh" down >/dev/null 2>&1 || true
  "$root/scripts/drives.sh" up 1 --size-gb 4 --read-mbps "$mbps"
  trap '"$root/scripts/drives.sh" down >/dev/null 2>&1 || true' EXIT
  "$bin" place -m "$synth" --drive /mnt/deltafin-drive0 --out "$work/spec/drive1.json"
  repeated=$(python3 -c "print(','.join(str(x) for x in list(range(100, 112)) * 3))")
  random=$(python3 -c "import random; random.seed(9); print(','.join(str(random.randrange(4, 16000)) for _ in range(36)))")
  for mode in "off|--draft off" "ngram|--draft ngram --draft-k 8"; do
    arms+=("k3synth-repeat-${mode%%|*}|$synth|--tokens $repeated|${mode#*|} --placement $work/spec/drive1.json --cache-gb 0.5|$root/scripts/drives.sh exec")
    arms+=("k3synth-random-${mode%%|*}|$synth|--tokens $random|${mode#*|} --placement $work/spec/drive1.json --cache-gb 0.5|$root/scripts/drives.sh exec")
  done
fi

echo "== ${#arms[@]} arms x $repeat runs, $tokens tokens each (greedy)"
for ((r = 0; r < repeat; r++)); do
  for ((i = 0; i < ${#arms[@]}; i++)); do
    IFS='|' read -r name model prompt flags prefix <<< "${arms[$(((i + r) % ${#arms[@]}))]}"
    n=$tokens
    if [[ $name == k3synth* ]]; then
      [ "$r" -ge 3 ] && continue
      n=$storage_tokens
      "$root/k3-public-bench/drop-cache.sh"
    fi
    # shellcheck disable=SC2086  # prompt and flags hold several words
    $prefix "$bin" run -m "$model" $prompt -n "$n" --ignore-eos --ids $flags --stats-json "$work/spec/$name.$r.json" > /dev/null
  done
  echo "  round $r done"
done
if [ "$storage" = 1 ]; then
  echo "== scripted drafts on the storage-bound model"
  "$root/scripts/drives.sh" exec "$root/build/spec_storage_bench" "$synth" "$work/spec/drive1.json" 0.5 "$storage_tokens" \
    | tee "$work/spec/scripted.jsonl"
fi
PROVENANCE=$("$root/k3-public-bench/provenance.sh" "$bin") python3 "$root/k3-public-bench/summarize_spec_bench.py" "$work/spec" "$out" "$tokens (k3synth: $storage_tokens)"
