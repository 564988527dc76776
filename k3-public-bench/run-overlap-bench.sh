#!/usr/bin/env bash
# Compute/read overlap of decoding (issue 16 item 7): for each arm, the fraction of the perfect-
# overlap bound max(compute, I/O) a decode reaches (the receipt's overlap line; for binaries
# older than it the same figures from their --stats-json: decode seconds, decode I/O wait, each
# drive's decode busy time), and its tokens per second.
#
#   k3-public-bench/run-overlap-bench.sh --model DIR [--bin LABEL=PATH ...] [--flags LABEL="FLAGS" ...]
#       [--repeat 3] [--tokens 32] [--cache-gb 0.5] [--disk DIR] [--throttled N:MBPS [--replicate F]]
#       [--out FILE]
#
# Arms: `disk` places the experts on DIR (this machine's own disk; default /var/tmp/deltafin-overlap)
# and runs cold (page cache dropped before each run, expert reads bypass it) and warm (the records
# in the page cache from the run before, --no-bypass); `--throttled N:MBPS` also places them striped
# on N loop-device drives capped at MBPS MB/s (scripts/drives.sh; root; refused while drives
# are up) and runs cold; `--replicate F` adds an arm on the same drives placed with
# `place --replicate F` (1: every record on every drive, so each read goes to the drive
# expected to finish it first). Every binary
# (--bin, default this build) runs with every flag set (--flags, default none), interleaved,
# --repeat times. Prints one line per run and the medians per arm, and writes them to --out
# (default WORK/overlap.txt). Needs python3 (stdlib) and, for cold runs, root.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/portable.sh"
model= repeat=3 tokens=32 cache=0.5 disk=/var/tmp/deltafin-overlap throttled= replicate= out=
bins=() flags=()
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --bin) bins+=("$2"); shift 2 ;;
    --flags) flags+=("$2"); shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --cache-gb) cache=$2; shift 2 ;;
    --disk) disk=$2; shift 2 ;;
    --throttled) throttled=$2; shift 2 ;;
    --replicate) replicate=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "run-overlap-bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -z "$replicate" ] || [ -n "$throttled" ] || { echo "run-overlap-bench.sh: --replicate needs --throttled N:MBPS" >&2; exit 2; }
[ -n "$model" ] && [ -f "$model/config.json" ] || { echo "run-overlap-bench.sh: --model DIR (tools/make_synthetic_k3.py --preset bench)" >&2; exit 2; }
[ "${#bins[@]}" -gt 0 ] || bins=("this=$root/build/deltafin")
[ "${#flags[@]}" -gt 0 ] || flags=("default=")
work=$disk/work
mkdir -p "$disk/drive" "$work/runs"
rm -f "$work"/runs/*.json
out=${out:-$work/overlap.txt}
placer=${bins[0]#*=}
prompt=$(csv_range 1 16)

arms=()  # name|manifest|exec prefix|cold (1) or warm (0)
"$placer" place -m "$model" --drive "$disk/drive" --out "$work/disk.json" > /dev/null
arms+=("disk-cold|$work/disk.json||1" "disk-warm|$work/disk.json||0")
if [ -n "$throttled" ]; then
  n=${throttled%%:*} mbps=${throttled#*:}
  "$root/scripts/drives.sh" up "$n" --size-gb 8 --read-mbps "$mbps" > /dev/null
  trap '"$root/scripts/drives.sh" down >/dev/null 2>&1 || true' EXIT
  args=()
  for ((d = 0; d < n; d++)); do args+=(--drive "/mnt/deltafin-drive$d"); done
  "$placer" place -m "$model" "${args[@]}" --out "$work/throttled.json" > /dev/null
  arms+=("throttled${n}x${mbps}-cold|$work/throttled.json|$root/scripts/drives.sh exec|1")
  if [ -n "$replicate" ]; then
    "$placer" place -m "$model" "${args[@]}" --replicate "$replicate" --out "$work/replicated.json" > /dev/null
    arms+=("throttled${n}x${mbps}-replicated-cold|$work/replicated.json|$root/scripts/drives.sh exec|1")
  fi
fi

: > "$out"
for ((r = 0; r < repeat; r++)); do
  for arm in "${arms[@]}"; do
    IFS='|' read -r name manifest prefix cold <<< "$arm"
    for bin in "${bins[@]}"; do
      for flag in "${flags[@]}"; do
        label=${bin%%=*}/${flag%%=*} extra=${flag#*=}
        json=$work/runs/$name.${bin%%=*}.${flag%%=*}.$r.json
        if [ "$cold" = 1 ]; then
          "$root/k3-public-bench/drop-cache.sh" || echo "run-overlap-bench.sh: warning: page cache not dropped" >&2
          bypass=
        else  # warm: read once through the page cache, then measure
          bypass=--no-bypass
          # shellcheck disable=SC2086  # $prefix and $extra hold zero or more words
          $prefix "${bin#*=}" run -m "$model" --placement "$manifest" --tokens "$prompt" -n "$tokens" --ignore-eos --ids \
            --cache-gb "$cache" $bypass $extra > /dev/null
        fi
        # shellcheck disable=SC2086
        $prefix "${bin#*=}" run -m "$model" --placement "$manifest" --tokens "$prompt" -n "$tokens" --ignore-eos --ids \
          --cache-gb "$cache" $bypass $extra --stats-json "$json" > /dev/null
        line=$(python3 - "$json" "$name" "$label" "$r" "$(uptime | sed 's/.*load average: //')" <<'PY'
import json, sys
path, arm, label, run, load = sys.argv[1:6]
s = json.load(open(path))
d = s["decode"]
wall = d["seconds"]
o = s.get("overlap")
if o is None:  # a binary without the overlap line: the same figures from the counters it has
    wait = s["experts"]["decode_io_wait_seconds"]
    io = max([x["decode_busy_seconds"] for x in s["drives"]] + [0.0])
    compute = max(0.0, wall - wait)
    o = {"compute_seconds": compute, "io_seconds": io, "read_wait_seconds": wait,
         "fraction": min(1.0, max(compute, io) / wall)}
print("%s %s run=%s tok/s=%.3f fraction=%.3f compute=%.3f io=%.3f wait=%.3f wall=%.3f ids=%s load=%s" % (
    arm, label, run, d["tokens"] / wall, o["fraction"], o["compute_seconds"], o["io_seconds"],
    o["read_wait_seconds"], wall, s["ids_xxh3"], load.split(",")[0]))
PY
)
        echo "$line" | tee -a "$out"
      done
    done
  done
done

echo "== medians ($repeat runs, $tokens tokens, --cache-gb $cache)" | tee -a "$out"
python3 - "$out" <<'PY' | tee -a "$out"
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 3 or "=" not in f[2]:
        continue
    kv = dict(x.split("=", 1) for x in f[2:])
    rows.setdefault((f[0], f[1]), []).append(kv)
for (arm, label), rs in sorted(rows.items()):
    med = lambda k: statistics.median(float(r[k]) for r in rs)
    ids = sorted(set(r["ids"] for r in rs))
    print("%-22s %-24s tok/s %.3f  fraction %.3f  compute %.3f  io %.3f  wait %.3f  wall %.3f  ids %s" % (
        arm, label, med("tok/s"), med("fraction"), med("compute"), med("io"), med("wait"), med("wall"), ",".join(ids)))
PY
