#!/usr/bin/env bash
# The network ceilings of the emulated hosts (scripts/hosts.sh), per link profile: N hosts up on
# unshaped, 10 GbE-shaped and Thunderbolt 5-shaped links in turn, RUNS runs of
# k3-public-bench/net-ceiling.sh each (MPI ping-pong, rank 0 against every other rank), next to
# what the profile's figures predict (the RTT assumption + both messages at the link rate).
# Writes OUT (default k3-public-bench/results/hosts-network.md); removes the hosts when it ends,
# also on failure or Ctrl-C. Needs Linux, root, iproute2 and Open MPI.
#   k3-public-bench/run-net-bench.sh [HOSTS (3)] [RUNS (5)] [OUT]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
n=${1:-3} runs=${2:-5} out=${3:-$root/k3-public-bench/results/hosts-network.md}
hosts_sh=$root/scripts/hosts.sh
[[ $n =~ ^[2-9]$ ]] || { echo "run-net-bench.sh: HOSTS from 2 to 9" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "run-net-bench.sh: needs root (network namespaces)" >&2; exit 1; }
[ ! -e "${DELTAFIN_HOSTS_STATE:-/var/tmp/deltafin-hosts.state}" ] || { echo "run-net-bench.sh: hosts are up already (scripts/hosts.sh down first)" >&2; exit 1; }
trap '"$hosts_sh" down >/dev/null 2>&1 || "$hosts_sh" down; rm -f "$out.tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

{
  "$root/k3-public-bench/provenance.sh" 2>/dev/null || true
  echo
  echo "# Network ceilings between emulated hosts"
  echo
  echo "Command: \`k3-public-bench/run-net-bench.sh $n $runs\` ($n hosts: scripts/hosts.sh, one MPI rank per network namespace,"
  echo "Open MPI $(mpirun --version 2>/dev/null | sed -n 's/.*(Open MPI) //p' | head -1) over TCP on the veth links; $runs runs of net-ceiling.sh per profile)."
} > "$out.tmp"
for link in none 10gbe tb5; do
  "$hosts_sh" up "$n" --link "$link" >/dev/null
  load_before=$(cut -d' ' -f1 /proc/loadavg)
  table=$("$root/k3-public-bench/net-ceiling.sh" "$runs" 2>/dev/null)
  {
    echo
    echo "## --link $link"
    echo
    if [ "$link" = none ]; then echo "Links unshaped (veth pairs and a bridge)."
    else "$hosts_sh" status | sed -n 's/^link shaping/Link shaping/p'; fi
    echo "Load average (1 min) before / after: $load_before / $(cut -d' ' -f1 /proc/loadavg)."
    echo
    case $link in
      10gbe) rate=10 rtt=50 ;;
      tb5) rate=80 rtt=20 ;;
      *) rate= rtt= ;;
    esac
    if [ -n "$rate" ]; then
      # the profile's model next to each row: RTT assumption + a message each way at the rate
      echo "$table" | awk -v rate="$rate" -v rtt="$rtt" -F'|' '
        /^\| rank/ { print $0 " model round trip us |"; next }
        /^\|---/ { print $0 "---|"; next }
        /^\| [0-9]/ { b = $4; gsub(/[ ,]/, "", b); printf "%s %.1f |\n", $0, rtt + 2 * b * 8 / (rate * 1e3); next }
        { print }'
    else
      echo "$table"
    fi
  } >> "$out.tmp"
  "$hosts_sh" down >/dev/null
done
cat >> "$out.tmp" <<'NOTES'

## What the profiles assume, and what this emulation can and cannot show

- 10gbe: 10 Gbit/s each way on every host's port of one switch, and 50 us for the round trip of a
  small MPI message over kernel TCP (NIC, switch and both TCP stacks; an assumption, not measured).
- tb5: 80 Gbit/s each way (Thunderbolt 5's symmetric rate; its 120 Gbit/s boost is one-way, for
  displays), and 20 us for the round trip (point to point, no switch; an assumption between RDMA
  over Thunderbolt and TCP over a Thunderbolt bridge, not measured). `hosts.sh up --rtt-us U` and
  `--rate-gbit R` change either figure.
- Topology: every host hangs off one bridge, so rank 0's link carries the traffic of all the other
  hosts, as a switch port does. A Thunderbolt mesh has a cable per pair: with three or more hosts
  the tb5 profile understates rank 0's bandwidth.
- The model column is what the profile predicts for a round trip: the RTT assumption plus the
  message sent each way at the link rate. Measured round trips below it mean that the emulated link
  is faster than the profile there (below, the reasons), above it that this machine is slower.
- tbf lets a burst of its bucket (131,072 B at 10 Gbit/s, 1 MB at 80: at least two 64 KiB GSO
  packets, else it splits them) pass at the veth's own speed, so messages up to about the bucket
  cross faster than the profile's rate; only longer transfers (the 1.8 MB row) show it. A 32 KiB
  bucket (tbf then splits the GSO packets) made the 229 KB round trips 3.7 times slower at 10 Gbit/s
  (940 us against 252 us, medians of 3 runs, 2 hosts), far below the rate, so the bucket stays.
- Without sch_netem in the kernel (the development VM's has none) no delay is added; the round
  trip is then the machine's own (veth, bridge, both TCP stacks, Open MPI), and the model column
  carries the assumption.
- The ranks poll (Open MPI spins while it waits), and emulated hosts share this machine's cores
  with each other and with whatever else runs: under load a round trip waits for a scheduler slice
  (4 ms steps at HZ=250), which is why medians are given with the minimum and the load average.
  With shaping, queued packets leave from softirq work that the load delays as well.
NOTES
mv "$out.tmp" "$out"
cat "$out"
