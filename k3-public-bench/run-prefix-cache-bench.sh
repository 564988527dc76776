#!/usr/bin/env bash
# Time to first token with the persistent prefix cache (issue 36 item 3): a prompt of --tokens
# ids run three ways, interleaved, --repeat times: `none` (no --prefix-cache), `miss` (an empty
# cache directory: the prefill runs whole, the state is saved after it and after the answer) and
# `hit` (the same prompt again on the directory `miss` left: all but the prompt's last position
# is loaded; on K3 the miss arm prefills to that position, saves, then runs the last one alone).
# Prints one line per run and the medians per arm (first_token_seconds and prefill tokens of
# --stats-json; bytes the cache wrote), and writes them to --out.
#
#   k3-public-bench/run-prefix-cache-bench.sh [--model DIR] [--tokens 2000] [--repeat 5] [--new 1]
#       [--work DIR] [--out FILE] [-- extra run flags]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
model=$root/models/default tokens=2000 repeat=5 new=1 work=/var/tmp/deltafin-prefix-bench out=
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --new) new=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "run-prefix-cache-bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -f "$model/config.json" ] || { echo "run-prefix-cache-bench.sh: --model DIR (no config.json there)" >&2; exit 2; }
bin=$root/build/deltafin
out=${out:-$work/prefix-cache.txt}
mkdir -p "$work"
# Ids spread over the vocabulary (deterministic), so the prompt routes like text would.
prompt=$(python3 - "$model/config.json" "$tokens" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
vocab = c.get("vocab_size") or c["text_config"]["vocab_size"]
print(",".join(str(5 + (i * 7919) % (vocab - 10)) for i in range(int(sys.argv[2]))))
PY
)
run() {  # cache dir or "", json, extra flags
  local cache=() json=$2
  [ -z "$1" ] || cache=(--prefix-cache "$1")
  shift 2
  "$bin" run -m "$model" --tokens "$prompt" -n "$new" --temp 0 --ids --ignore-eos --draft off ${cache[@]+"${cache[@]}"} \
    --stats-json "$json" "$@" > /dev/null
}
: > "$work/runs.txt"
for r in $(seq 1 "$repeat"); do
  rm -rf "$work/cache"
  for arm in none miss hit; do
    dir=$work/cache
    [ "$arm" = none ] && dir=
    run "$dir" "$work/$arm-$r.json" "$@"
    python3 - "$arm" "$work/$arm-$r.json" <<'PY' | tee -a "$work/runs.txt"
import json, sys
j = json.load(open(sys.argv[2]))
p = j.get("prefix_cache", {})
print(f"{sys.argv[1]} ttft {j['decode']['first_token_seconds']:.4f} s prefill_tokens {j['prefill']['tokens']} "
      f"hit_positions {p.get('hit_positions', 0)} bytes_written {p.get('bytes_written', 0)}")
PY
  done
done
{
  echo "# $("$root/k3-public-bench/provenance.sh" "$bin")"
  echo "# $0 --model $model --tokens $tokens --repeat $repeat --new $new $*"
  python3 - "$work/runs.txt" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    runs.setdefault(f[0], []).append((float(f[2]), int(f[5]), int(f[7]), int(f[9])))
for arm, rs in runs.items():
    print(f"{arm:5s} median ttft {statistics.median(r[0] for r in rs):.4f} s over {len(rs)} runs "
          f"(all: {', '.join(f'{r[0]:.4f}' for r in rs)}); prefill {rs[0][1]} tokens, hit {rs[0][2]} positions, "
          f"cache wrote {rs[0][3]} bytes")
PY
} | tee "$out"
