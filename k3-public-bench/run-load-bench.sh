#!/usr/bin/env bash
# Decode speed on a busy machine: the bundled model (models/default) decoding a fixed prompt at
# --threads 1, 2 and the default (0: one per hardware thread), with the drafter off and at its
# default (the bundled draft), first quiet and then under a controlled background load: --load
# bounded busy loops pinned to every core (killed on exit). Within a phase the arms run
# interleaved, --repeat rounds, so the thread counts meet the same machine; the medians go to a
# markdown table with the machine's load average at the start of each phase, and for each
# binary, drafter and phase the default's speed against the best thread count's.
# --bin NAME=PATH (repeatable) compares binaries in the same run (default: build=build/deltafin).
#   k3-public-bench/run-load-bench.sh [--tokens 64] [--repeat 5] [--load 1] [--own-session]
#                                     [--bin NAME=PATH]... [--out FILE]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/portable.sh"
tokens=64 repeat=5 load=1 own_session=0 out=$root/k3-public-bench/results/busy-machine.md
bins=()
while [ $# -gt 0 ]; do
  case $1 in
    --tokens) tokens=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --load) load=$2; shift 2 ;;
    --own-session) own_session=1; shift ;;
    --bin) bins+=("$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "run-load-bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ ${#bins[@]} -gt 0 ] || bins=("build=$root/build/deltafin")
for b in "${bins[@]}"; do
  [ -x "${b#*=}" ] || { echo "run-load-bench.sh: ${b#*=} is not an executable (build first: scripts/build.sh)" >&2; exit 1; }
done
pin=0  # taskset pins each loop to its core where there is one (Linux); elsewhere the OS spreads them
if command -v taskset >/dev/null; then pin=1; fi
# The CPUs this script may use (run it under `taskset -c 0,1` to measure a 2-core machine on a larger one).
cpu_list=$(python3 -c 'import os; print(" ".join(map(str, sorted(os.sched_getaffinity(0)))))' 2>/dev/null ||
  seq 0 $(($(cpu_count) - 1)) | tr '\n' ' ')
cores=$(wc -w <<< "$cpu_list" | tr -d ' ')
work=$(mktemp -d /tmp/deltafin-load-bench.XXXXXX)
loaders=()
stop_load() {
  for pid in "${loaders[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${loaders[@]}"; do wait "$pid" 2>/dev/null || true; done
  loaders=()
}
trap 'stop_load; rm -rf "$work"' EXIT

prompt="Once upon a time, in a small town by the sea, there lived an old clockmaker who"
# name|flags
arms=()
for b in "${bins[@]}"; do
  for draft in off auto; do
    for threads in 1 2 default; do
      flags="--draft $draft"
      [ "$threads" = default ] || flags="$flags --threads $threads"
      arms+=("${b%%=*}|$draft|$threads|${b#*=}|$flags")
    done
  done
done

# run_phase PHASE: every arm, --repeat interleaved rounds; one JSON receipt a run.
run_phase() {
  local phase=$1
  echo "$phase $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '? ? ?')" >> "$work/loadavg"
  for round in $(seq 1 "$repeat"); do
    for i in "${!arms[@]}"; do
      IFS='|' read -r bin_name draft threads bin flags <<< "${arms[$i]}"
      local json="$work/$phase.$bin_name.$draft.$threads.$round.json"
      # shellcheck disable=SC2086
      "$bin" run -m "$root/models/default" -p "$prompt" -n "$tokens" --ignore-eos --temp 0 $flags \
        --stats-json "$json" > /dev/null 2> "$work/stderr" || { cat "$work/stderr" >&2; exit 1; }
    done
    echo "$phase: round $round of $repeat done" >&2
  done
  echo "$phase-end $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '? ? ?')" >> "$work/loadavg"
}

run_phase quiet
# The loops run in this script's session, so that each competes with each of deltafin's threads
# as on a machine that shares CPU time thread by thread (macOS, most servers and containers).
# With --own-session each loop is a session of its own: where Linux groups CPU time by session
# (autogroup, on by default on desktops) the load then competes with deltafin as a whole.
setsid=
[ "$own_session" = 0 ] || setsid='os.setsid()'
busy_loop="import os, time
$setsid
end = time.time() + 1800
while time.time() < end: pass"
for core in $cpu_list; do
  for _ in $(seq 1 "$load"); do
    # A bounded busy loop: it ends by itself after 30 minutes should the trap never run.
    if [ "$pin" = 1 ]; then
      taskset -c "$core" python3 -c "$busy_loop" &
    else
      python3 -c "$busy_loop" &
    fi
    loaders+=($!)
  done
done
sleep 2
run_phase loaded
stop_load

mkdir -p "$(dirname "$out")"
{
  echo "# Decode on a busy machine: thread counts, quiet and under load"
  echo
  echo "$("$root/k3-public-bench/provenance.sh" "${bins[0]#*=}")"
  echo
  session_flag=
  [ "$own_session" = 0 ] || session_flag=' --own-session'
  echo "Command: \`k3-public-bench/run-load-bench.sh --tokens $tokens --repeat $repeat --load $load$session_flag$(printf ' --bin %s' "${bins[@]}" | sed "s|$root/||g") --out ${out#"$root"/}\`"
  echo
  echo "The bundled model (models/default) decodes $tokens tokens (greedy, --ignore-eos) after a fixed prompt;"
  if [ "$own_session" = 1 ]; then
    echo "'loaded' runs $load bounded busy loop(s) pinned to each of the $cores cores beside it, each in a session of"
    echo "its own (where Linux autogroups share CPU time by session, the load competes with deltafin as a whole). Arms interleave"
  else
    echo "'loaded' runs $load bounded busy loop(s) pinned to each of the $cores cores beside it, in deltafin's session"
    echo "(competing with each of its threads, as where CPU time is shared thread by thread). Arms interleave"
  fi
  echo "within a phase, $repeat rounds; decode tok/s is the median (min-max). 'compute CPU' is the CPU time of"
  echo "the compute thread over decode wall time less read waits (the receipt's starvation figure; '-' where"
  echo "the binary does not report it). 'default / best' compares the default thread count with the best"
  echo "median of the same binary, drafter and phase."
  echo
  echo "Load average (1, 5, 15 min) at the start and end of each phase:"
  echo
  sed 's/^/    /' "$work/loadavg"
  echo
  python3 - "$work" "$cores" <<'EOF'
import glob, json, os, statistics, sys
work, cores = sys.argv[1], sys.argv[2]
runs = {}
for path in glob.glob(os.path.join(work, "*.json")):
    phase, binary, draft, threads, _round, _ = os.path.basename(path).split(".")
    r = json.load(open(path))
    rate = r["decode"]["tokens"] / r["decode"]["seconds"]
    o = r["overlap"]
    cpu = o.get("compute_cpu_seconds")
    share = cpu / o["compute_seconds"] if cpu is not None and o["compute_seconds"] > 0 else None
    runs.setdefault((phase, binary, draft, threads), []).append((rate, share, r["ids_xxh3"]))
print("| phase | binary | draft | threads | decode tok/s, median (min-max) | compute CPU / wall | default / best |")
print("|---|---|---|---|---|---|---|")
order = {"quiet": 0, "loaded": 1}
for key in sorted(runs, key=lambda k: (order[k[0]], k[1], k[2], k[3])):
    phase, binary, draft, threads = key
    rates = [r for r, _, _ in runs[key]]
    shares = [s for _, s, _ in runs[key] if s is not None]
    med = statistics.median(rates)
    best = max(statistics.median([r for r, _, _ in v]) for k, v in runs.items() if k[:3] == key[:3])
    ratio = f"{statistics.median(rates) / best:.2f}" if threads == "default" else ""
    share = f"{statistics.median(shares):.0%}" if shares else "-"
    print(f"| {phase} | {binary} | {draft} | {threads} | {med:.1f} ({min(rates):.1f}-{max(rates):.1f}) | {share} | {ratio} |")
# The default is one thread per hardware thread: where that is one of the explicit counts, the two
# arms are one configuration, and their runs pooled give the fairer default / best.
if cores in {k[3] for k in runs}:
    print()
    print(f"The default is {cores} threads here, the same configuration as --threads {cores}; the gap between those two")
    print("rows is the machine's noise. Their runs pooled:")
    print()
    print("| phase | binary | draft | default (pooled) tok/s | best other count | pooled / best |")
    print("|---|---|---|---|---|---|")
    for key in sorted({k[:3] for k in runs}, key=lambda k: (order[k[0]], k[1], k[2])):
        pooled = [r for t in (cores, "default") for r, _, _ in runs.get(key + (t,), [])]
        others = {t: statistics.median([r for r, _, _ in v]) for (p, b, d, t), v in runs.items()
                  if (p, b, d) == key and t not in (cores, "default")}
        if not pooled or not others:
            continue
        best_t = max(others, key=others.get)
        med = statistics.median(pooled)
        print(f"| {key[0]} | {key[1]} | {key[2]} | {med:.1f} | {others[best_t]:.1f} (--threads {best_t}) | "
              f"{med / others[best_t]:.2f} |")
hashes = {h for v in runs.values() for _, _, h in v}
print()
print("Generated ids of every run of every arm: " + ("identical" if len(hashes) == 1 else f"DIFFERENT ({len(hashes)} hashes)"))
EOF
} > "$out"
echo "run-load-bench.sh: wrote $out" >&2
