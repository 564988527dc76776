#!/usr/bin/env bash
# The network's ceiling between emulated hosts, as fio-ceiling.sh is a drive's: RUNS runs of
# tools/mpi_pingpong.c (built here with mpicc into build/mpi_pingpong) over the hosts that
# scripts/hosts.sh brought up, one rank per host, rank 0 against each other rank. Prints a
# markdown table, per (rank, message size): the round trip (median of the runs' medians, and the
# smallest seen), the ping-pong bandwidth of the median round trip, the one-way streaming
# bandwidth (median of the runs), and the check that the traffic crossed the shaped links: the
# bytes counted on rank 0's veth over the bytes the program sent (>= 1 when every message went
# over it; headers make it slightly more). Needs root and Open MPI (mpicc, mpirun).
#   k3-public-bench/net-ceiling.sh [RUNS] [SECONDS_PER_TEST] [SIZES]
#     defaults: 3 runs, 0.5 s, sizes 8,28676,229408,1835264 (a latency probe, then 1, 8 and 64
#     K3 result rows of 7168 fp32 + 4 B: docs/ARCHITECTURE.md's messages)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${1:-3} secs=${2:-0.5} sizes=${3:-8,28676,229408,1835264}
[[ $runs =~ ^[1-9][0-9]?$ ]] || { echo "net-ceiling.sh: RUNS from 1 to 99" >&2; exit 2; }
state=${DELTAFIN_HOSTS_STATE:-/var/tmp/deltafin-hosts.state}
[ -e "$state" ] || { echo "net-ceiling.sh: no hosts up (scripts/hosts.sh up N)" >&2; exit 1; }
n=$(grep -c '^host ' "$state" || true)
[ "$n" -ge 2 ] || { echo "net-ceiling.sh: needs at least 2 hosts up" >&2; exit 1; }
command -v mpicc >/dev/null || { echo "net-ceiling.sh: needs Open MPI's mpicc (scripts/setup.sh)" >&2; exit 1; }
src=$root/k3-public-bench/tools/mpi_pingpong.c
bin=$root/build/mpi_pingpong
if [ ! -x "$bin" ] || [ "$src" -nt "$bin" ]; then mkdir -p "$root/build"; mpicc -O2 -o "$bin" "$src"; fi

# link_bytes: tx + rx bytes of rank 0's link (the bridge side of host 0's veth)
link_bytes() {
  ip -s -j link show deltafin-h0 | python3 -c 'import json, sys; s = json.load(sys.stdin)[0]["stats64"]; print(s["tx"]["bytes"] + s["rx"]["bytes"])'
}

raw=$(mktemp "${TMPDIR:-/tmp}/net-ceiling.XXXXXX")
trap 'rm -f "$raw"' EXIT
for ((r = 0; r < runs; r++)); do
  before=$(link_bytes)
  "$root/scripts/hosts.sh" mpirun -n "$n" --bind-to none "$bin" --seconds "$secs" --sizes "$sizes" > "$raw.run"
  echo "run=$r link_bytes=$(($(link_bytes) - before))" >> "$raw"
  cat "$raw.run" >> "$raw"
  rm -f "$raw.run"
done
python3 - "$raw" <<'EOF'
import statistics, sys
runs, rows, link, payload = [], {}, {}, {}
run = None
for line in open(sys.argv[1]):
    kv = dict(f.split("=", 1) for f in line.split() if "=" in f)
    if "run" in kv:
        run = kv["run"]; link[run] = int(kv["link_bytes"]); payload[run] = 0
    elif "peer" in kv:
        key = (int(kv["peer"]), kv["host"], int(kv["bytes"]))
        rows.setdefault(key, []).append(kv)
        b = int(kv["bytes"])
        payload[run] += b * (2 * (int(kv["iters"]) + 4) + int(kv["window"])) + 1
print("| rank | host | message bytes | round trip us, median (min) | ping-pong Gbit/s | streaming Gbit/s |")
print("|---|---|---|---|---|---|")
for (peer, host, b), kvs in sorted(rows.items()):
    med = statistics.median(float(k["rtt_us_median"]) for k in kvs)
    low = min(float(k["rtt_us_min"]) for k in kvs)
    stream = statistics.median(float(k["stream_gbit_s"]) for k in kvs)
    print(f"| {peer} | {host} | {b:,} | {med:.1f} ({low:.1f}) | {2 * b * 8 / med / 1e3:.2f} | {stream:.2f} |")
ratios = [link[r] / payload[r] for r in link if payload[r]]
print()
print(f"{len(link)} runs; bytes counted on rank 0's link / bytes sent by the program: "
      + ", ".join(f"{x:.3f}" for x in ratios)
      + (" (all traffic crossed the shaped links)" if ratios and min(ratios) >= 1 else " (LESS than sent: some traffic bypassed the links)"))
EOF
