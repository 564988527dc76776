#!/usr/bin/env bash
# Routed experts across hosts (issue 35) on one Linux machine: the synthetic K3-shaped bench model
# (tools/make_synthetic_k3.py --preset bench) run by 1, 2 and 4 emulated hosts (scripts/hosts.sh:
# one network namespace per host, links shaped like --link, each host with its own throttled
# drives), one MPI rank per host, the experts placed per host by `deltafin place --hosts N`.
#
#   k3-public-bench/run-hosts-bench.sh [--hosts "1 2 4"] [--link 10gbe|tb5|none]
#       [--drives-per-host 2] [--equal-mbps 150] [--unequal-mbps 150,100,75,50] [--budgets "0 0.5"]
#       [--tokens 12] [--repeat 3] [--net-runs 3] [--fio-secs 5] [--out FILE] [--work DIR]
#       [--rank0-weight F] [--ceilings-only] [--keep]
#
# For each host count H and each drive-rate set (every drive at --equal-mbps; then host h's drives
# at the h-th of --unequal-mbps, for H >= 2): hosts up; the placement; each drive's fio ceiling,
# measured inside its host (fio-ceiling.sh: 1 MiB pieces, 8 in flight); the network's ceiling
# (net-ceiling.sh: MPI ping-pong between rank 0 and each host, and the check that the traffic
# crossed the shaped links); then per --budgets entry (0: the default budget, spine resident;
# 0.5 GB: the spine mostly streamed) --repeat cold runs (page cache dropped) of
#   scripts/hosts.sh mpirun -n H --bind-to none deltafin run -m MODEL --placement MANIFEST ...
# Each run's ids must equal the first arm's (exit status 3 when not). Writes OUT (default
# k3-public-bench/results/hosts-bench.md) with the provenance line, the ceilings, and per arm: tok/s
# (median), its ratio to 1 host at equal rates, the floor (experts + spine bytes per token over the sum of the
# drive ceilings of all hosts) and the ratio to it, the bytes that crossed rank 0's link in a run
# (veth counters: MPI and launch traffic, prefill included), and the receipt's per-host figures
# where the stats JSON has them. Needs Linux, root, Open MPI, iproute2, loop devices and cgroup v1 blkio.
#
# Unequal arms are placed with `--host-weights` from the hosts' measured ceilings; --rank0-weight F
# multiplies rank 0's weight by F in every arm of 2 or more hosts (rank 0's budget also holds the
# spine, so its cache is smaller and its share reads more). Runs of H >= 2
# need a build with MPI: without it they are listed as skipped and only the ceilings and the
# 1-host arms run. --ceilings-only skips
# every deltafin run. On exit, also on failure or Ctrl-C, everything it made is removed: hosts,
# drives, placements and the model it generated (--keep keeps the model). Bounded: each deltafin
# run is killed after RUN_TIMEOUT seconds (default 900).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/scripts/portable.sh"
bin=$root/build/deltafin
hosts_sh=$root/scripts/hosts.sh
host_counts="1 2 4" link=10gbe per_host=2 equal=150 unequal=150,100,75,50 budgets="0 0.5"
tokens=12 repeat=3 net_runs=3 fio_secs=5 out=$root/k3-public-bench/results/hosts-bench.md
work=/var/tmp/deltafin-hosts-bench ceilings_only=0 keep=0 run_timeout=${RUN_TIMEOUT:-900} rank0_weight=1
while [ $# -gt 0 ]; do
  case $1 in
    --hosts) host_counts=$2; shift 2 ;;
    --link) link=$2; shift 2 ;;
    --drives-per-host) per_host=$2; shift 2 ;;
    --equal-mbps) equal=$2; shift 2 ;;
    --unequal-mbps) unequal=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --net-runs) net_runs=$2; shift 2 ;;
    --fio-secs) fio_secs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --rank0-weight) rank0_weight=$2; shift 2 ;;
    --ceilings-only) ceilings_only=1; shift ;;
    --keep) keep=1; shift ;;
    *) echo "run-hosts-bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
die() { echo "run-hosts-bench.sh: $*" >&2; exit 1; }
[ "$(uname -s)" = Linux ] || die "Linux only (network namespaces, loop devices)"
[ "$(id -u)" -eq 0 ] || die "needs root (namespaces, loop devices, blkio cgroup)"
command -v mpirun >/dev/null && command -v mpicc >/dev/null || die "needs Open MPI (mpirun, mpicc): scripts/setup.sh"
[ -x "$bin" ] || [ "$ceilings_only" = 1 ] || die "build first (scripts/build.sh)"
for h in $host_counts; do [[ $h =~ ^[1-9]$ ]] || die "--hosts takes host counts from 1 to 9"; done
n_unequal=$(echo "$unequal" | tr , '\n' | wc -l | tr -d ' ')
[[ $equal =~ ^[1-9][0-9]*$ ]] || die "--equal-mbps takes one whole number of MB/s"
[[ $unequal =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--unequal-mbps takes MB/s per host separated by commas"
[[ $per_host =~ ^[1-9]$ ]] || die "--drives-per-host takes 1 to 9"
[[ $repeat =~ ^[1-9]$ ]] || die "--repeat takes 1 to 9"
[ -e "${DELTAFIN_HOSTS_STATE:-/var/tmp/deltafin-hosts.state}" ] && die "hosts are up already (scripts/hosts.sh down first)"
# The multi-host engine is in this build unless 2 ranks (on loopback) are refused as a build without MPI.
engine=1
if [ "$ceilings_only" = 0 ] && OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo \
   with_timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2 \
   "$bin" run -m "$root/models/default" -p x -n 1 --draft off --threads 1 2>&1 | grep -q "built without MPI"; then
  engine=0
fi

# --- cleanup: from here on, whatever happens, what the run made goes when it ends ---
mkdir -p "$work"
run=$(mktemp -d "$work/run.XXXXXX")
model=$work/k3-bench model_made=0
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  "$hosts_sh" down >/dev/null 2>&1 || "$hosts_sh" down || true  # ends what is left in the namespaces
  rm -rf "$run" "$out.tmp"
  if [ "$model_made" = 1 ] && [ "$keep" = 0 ]; then rm -rf "$model"; fi
  rmdir "$work" 2>/dev/null || true
  if ip netns list | grep -q '^deltafin-host'; then echo "run-hosts-bench.sh: namespaces left behind: $(ip netns list | tr '\n' ' ')" >&2; rc=1; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ "$ceilings_only" = 0 ] && [ ! -f "$model/config.json" ]; then
  echo "== generating the bench model in $model"
  model_made=1
  "$(numpy_python)" "$root/tools/make_synthetic_k3.py" "$model" --preset bench --force >/dev/null
fi
prompt=11,220,3301,47,5000,123,9,77,1024,2048,4000,15

# place H WEIGHTS: the placement of the experts over the H hosts' drives -> $run/place-H.json, each
# host's share on its own drives (manifest version 4: drive_hosts; `place --hosts H` takes the
# drives as H consecutive groups); WEIGHTS (W0,W1,...; empty: equal shares) sizes the shares
place() {
  local h=$1 weights=$2 args=() k d
  for ((k = 0; k < h; k++)); do
    for ((d = 0; d < per_host; d++)); do args+=(--drive "/mnt/deltafin-host$k-drive$d"); done
  done
  [ "$h" -eq 1 ] || args+=(--hosts "$h")
  [ -z "$weights" ] || args+=(--host-weights "$weights")
  "$bin" place -m "$model" "${args[@]}" --out "$run/place-$h.json" >/dev/null
}

# link_bytes: tx + rx bytes so far on rank 0's link (the bridge side of host 0's veth)
link_bytes() {
  ip -s -j link show deltafin-h0 | python3 -c 'import json, sys; s = json.load(sys.stdin)[0]["stats64"]; print(s["tx"]["bytes"] + s["rx"]["bytes"])'
}

# run_arm H BUDGET STATS: one cold run of H ranks, one per host; ids on stdout, the bytes that
# crossed rank 0's link during the run in STATS.link
run_arm() {
  local h=$1 g=$2 stats=$3 flag=() before rc=0
  [ "$g" = 0 ] || flag=(--memory-gb "$g")
  "$root/k3-public-bench/drop-cache.sh" || true
  before=$(link_bytes)
  with_timeout "$run_timeout" "$hosts_sh" mpirun -n "$h" --bind-to none \
    "$bin" run -m "$model" --placement "$run/place-$h.json" --tokens "$prompt" -n "$tokens" --temp 0 --ids \
    --ignore-eos --draft off ${flag[@]+"${flag[@]}"} --stats-json "$stats" 2> "$stats.err" || rc=$?
  echo $(($(link_bytes) - before)) > "$stats.link"
  return "$rc"  # (set -e does not apply inside `ids=$(run_arm ...) || die`)
}

# drive_ceilings H: per drive "HOST GB/s", fio inside the drive's host and cgroup, over a 256 MiB
# probe file written there (the same for every arm, and there before anything is placed)
drive_ceilings() {
  local h=$1 k mnt line
  for ((k = 0; k < h; k++)); do
    for mnt in /mnt/deltafin-host$k-drive*; do
      dd if=/dev/zero of="$mnt/ceiling-probe.bin" bs=1M count=256 oflag=direct status=none
      line=$("$hosts_sh" exec "$k" env DELTAFIN_DRIVES_NAME="deltafin-host$k" \
             "$root/k3-public-bench/fio-ceiling.sh" "$mnt/ceiling-probe.bin" 1048576 8 "$fio_secs" 2>/dev/null) || line="ceiling_gbps=0"
      rm -f "$mnt/ceiling-probe.bin"
      echo "$k $(echo "$line" | sed 's/^ceiling_gbps=\([^ ]*\).*/\1/')"
    done
  done
}

{
  "$root/k3-public-bench/provenance.sh" "$bin" 2>/dev/null || true
  echo
  echo "# Routed experts across emulated hosts (synthetic K3-shaped bench model)"
  echo
  echo "Command: \`k3-public-bench/run-hosts-bench.sh --hosts \"$host_counts\" --link $link --drives-per-host $per_host --equal-mbps $equal --unequal-mbps $unequal --budgets \"$budgets\" --tokens $tokens --repeat $repeat$([ "$rank0_weight" = 1 ] || echo " --rank0-weight $rank0_weight")\`."
  echo "Each run: \`scripts/hosts.sh mpirun -n H --bind-to none deltafin run -m MODEL --placement MANIFEST --tokens $prompt -n $tokens --temp 0 --ids --ignore-eos --draft off [--memory-gb G] --stats-json F\`, page cache dropped before it."
  [ "$engine" = 1 ] || echo "This build has no MPI engine (built without MPI): runs of 2 or more hosts were skipped."
  echo "Load average before: $(cut -d' ' -f1-3 /proc/loadavg)."
} > "$out.tmp"

first_ids=""
for h in $host_counts; do
  rate_sets=$equal
  if [ "$h" -ge 2 ]; then
    [ "$h" -le "$n_unequal" ] || die "--unequal-mbps has $n_unequal rates, $h hosts need as many"
    rate_sets="$equal $(echo "$unequal" | cut -d, -f1-"$h")"
  fi
  for rates in $rate_sets; do
    echo "== $h host(s), drives at $rates MB/s, link $link"
    "$hosts_sh" up "$h" --link "$link" --drives-per-host "$per_host" --read-mbps "$rates" --size-gb 8 >/dev/null
    skip=""
    if [ "$ceilings_only" = 1 ]; then skip="--ceilings-only"
    elif [ "$h" -ge 2 ] && [ "$engine" = 0 ]; then skip="no MPI engine in this build"; fi
    drive_ceilings "$h" > "$run/ceilings.txt"
    # unequal drives: each host's share in proportion to its drives' measured ceilings
    weights=
    [ "$rates" = "$equal" ] || weights=$(awk '{ s[$1] += $2 } END { for (k = 0; k in s; k++) printf "%s%.3f", (k ? "," : ""), s[k] }' "$run/ceilings.txt")
    why="each host's summed drive ceilings"
    if [ "$h" -ge 2 ] && [ "$rank0_weight" != 1 ]; then
      [ -n "$weights" ] || { weights=$(awk -v h="$h" 'BEGIN { for (k = 0; k < h; k++) printf "%s1", (k ? "," : "") }'); why="equal"; }
      weights=$(echo "$weights" | awk -F, -v f="$rank0_weight" 'BEGIN { OFS = "," } { $1 = sprintf("%.3f", $1 * f); print }')
      why="$why, rank 0's times --rank0-weight $rank0_weight"
    fi
    if [ -z "$skip" ]; then place "$h" "$weights" || skip="placement failed (deltafin place --hosts $h)"; fi
    {
      echo
      echo "## $h host(s), $per_host drives each, read caps $rates MB/s (per host), link $link"
      echo
      echo "$("$hosts_sh" status | sed -n 's/^link shaping/Link shaping/p')"
      echo
      if [ -s "$run/ceilings.txt" ]; then
        echo "fio ceilings (1 MiB pieces, 8 in flight, each drive alone), GB/s: $(awk '{ s[$1] = s[$1] (s[$1] == "" ? "" : " + ") $2; t += $2 } END { for (k = 0; k in s; k++) printf "host %s: %s; ", k, s[k]; printf "sum %.3f", t }' "$run/ceilings.txt")."
      fi
      [ -z "$weights" ] || echo "Placed with \`--host-weights $weights\` ($why)."
      if [ "$h" -ge 2 ]; then echo; "$root/k3-public-bench/net-ceiling.sh" "$net_runs"; fi
    } >> "$out.tmp"
    if [ -n "$skip" ]; then
      echo >> "$out.tmp"; echo "deltafin runs skipped: $skip." >> "$out.tmp"
      "$hosts_sh" down >/dev/null
      continue
    fi
    {
      echo
      echo "| --memory-gb | runs | decode tok/s (median) | x 1 host | spine GB/token | experts GB/token | floor tok/s | of floor | rank 0's link MB per run | per host (whole run): expert GB read at GB/s over its busiest drive's busy time; network time (share of the run), rank 0's wait for it, round trips and their mean Run + Result sizes |"
      echo "|---|---|---|---|---|---|---|---|---|---|"
    } >> "$out.tmp"
    for g in $budgets; do
      for ((r = 0; r < repeat; r++)); do
        ids=$(run_arm "$h" "$g" "$run/stats-$g-$r.json") || die "the run of $h host(s) at --memory-gb $g failed: $(tail -3 "$run/stats-$g-$r.json.err")"
        [ -n "$first_ids" ] || first_ids=$ids
        [ "$ids" = "$first_ids" ] || { echo "run-hosts-bench.sh: ids of $h host(s) at --memory-gb $g differ from the first arm's" >&2; exit 3; }
      done
      # the 1-host arm at equal rates is every arm's base for the speedup
      if [ "$h" -eq 1 ] && [ "$rates" = "$equal" ]; then base="--record-base $run/base-$g"; else base="--base $run/base-$g"; fi
      # shellcheck disable=SC2086
      python3 "$root/k3-public-bench/summarize_hosts_bench.py" $base "$g" "$run/ceilings.txt" "$run"/stats-"$g"-*.json >> "$out.tmp"
      rm -f "$run"/stats-"$g"-*
    done
    "$hosts_sh" down >/dev/null
  done
done
mkdir -p "$(dirname "$out")"
mv "$out.tmp" "$out"
cat "$out"
