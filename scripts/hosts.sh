#!/usr/bin/env bash
# Turns one Linux machine into N emulated hosts for the multi-host benchmark (issue 35; needs root
# and iproute2; drives need what scripts/drives.sh needs):
#
#   scripts/hosts.sh up N [--link 10gbe|tb5|none] [--rate-gbit R] [--rtt-us U]
#                         [--drives-per-host D [--read-mbps M | M0,...,M{N-1}] [--size-gb G]]
#       Host K (0..N-1) is the network namespace deltafin-hostK, joined by a veth pair
#       (deltafin-hK outside, deltafin0 inside) to the bridge deltafin-br at 10.213.0.(K+1)/24; the
#       bridge itself is 10.213.0.254 (mpirun's side). The bridge is attached to nothing else:
#       traffic stays on this machine. Each link is shaped in both directions (egress of both
#       veth ends: the host's port on a switch) with a tbf rate cap and, where the kernel has
#       sch_netem, a delay of RTT/4 per end (a round trip between two hosts crosses four):
#         10gbe: 10 Gbit/s, RTT 50 us (MPI over kernel TCP through one switch; assumption)
#         tb5:   80 Gbit/s, RTT 20 us (Thunderbolt 5 point to point; assumption, see
#                k3-public-bench/results/hosts-network.md)
#         none:  no shaping
#       --rate-gbit / --rtt-us override the profile's figures. Without sch_netem the delay is
#       not emulated (status says so): only the rate is.
#       --drives-per-host D gives host K its own D throttled drives: scripts/drives.sh with
#       DELTAFIN_DRIVES_NAME=deltafin-hostK (mounts /mnt/deltafin-hostK-drive$i, blkio cgroup
#       deltafin-hostK-bench); --read-mbps M caps every drive, M0,...,M{N-1} caps host K's at MK.
#   scripts/hosts.sh exec K CMD...   CMD inside host K's namespace and its drives' cgroup, with
#                                    DELTAFIN_HOST=deltafin-hostK and hostname deltafin-hostK
#   scripts/hosts.sh mpirun ARGS...  mpirun with one slot per host (rank r on host r), the daemons
#                                    started through `hosts.sh agent`, MPI traffic on 10.213.0.0/24,
#                                    ranks not bound to cores (unless ARGS say --bind-to)
#   scripts/hosts.sh agent HOST CMD...  mpirun's rsh agent (plm_rsh_agent): `exec` for a host name
#   scripts/hosts.sh status
#   scripts/hosts.sh down            ends the processes left in the namespaces (TERM, then KILL
#                                    after 5 s), removes the drives, links, namespaces, bridge
#
# Everything it creates is recorded in $DELTAFIN_HOSTS_STATE (default /var/tmp/deltafin-hosts.state);
# `down` removes only what is recorded there and is rerunnable. `up` with the same arguments again
# does nothing; with others it refuses until `down`.
set -euo pipefail
[ "$(uname -s)" = Linux ] || { echo "hosts.sh: Linux only (network namespaces, tc); on several Macs use real hosts (README: Several machines)" >&2; exit 1; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
state=${DELTAFIN_HOSTS_STATE:-/var/tmp/deltafin-hosts.state}
dir=/var/tmp/deltafin-hosts
prefix=10.213.0
subnet=$prefix.0/24
bridge=deltafin-br
max_hosts=64

die() { echo "hosts.sh: $*" >&2; exit 1; }
record() { echo "$*" >> "$state"; }
need_root() { [ "$(id -u)" -eq 0 ] || die "must run as root"; }
usage="usage: hosts.sh up N [--link 10gbe|tb5|none] [--rate-gbit R] [--rtt-us U] [--drives-per-host D [--read-mbps M|M0,...] [--size-gb G]] | exec K CMD... | mpirun ARGS... | status | down"

# shape NS DEV RATE_GBIT RTT_US: egress of one veth end (NS empty: this namespace); prints it
shape() {
  local ns=$1 dev=$2 rate=$3 rtt=$4 burst parent="root handle 1:" tcn=(tc)
  [ -z "$ns" ] || tcn=(tc -n "$ns")
  # tbf's bucket: 100 us at the rate, at least two 64 KiB GSO packets (smaller buckets split them)
  # (a 32 KiB bucket measured 3.7x slower 229 KB round trips: k3-public-bench/results/hosts-network.md)
  burst=$(awk -v r="$rate" 'BEGIN { b = r * 1e9 / 8 * 100e-6; if (b < 131072) b = 131072; printf "%d", b }')
  if [ "$rtt" != 0 ]; then
    local delay_us; delay_us=$(awk -v u="$rtt" 'BEGIN { printf "%.1f", u / 4 }')
    local err
    if err=$("${tcn[@]}" qdisc add dev "$dev" root handle 1: netem delay "${delay_us}us" limit 100000 2>&1); then
      parent="parent 1:1 handle 10:"
      printf 'netem delay %sus + ' "$delay_us"
    elif [[ $err == *"qdisc kind is unknown"* ]]; then
      printf 'no delay (kernel without sch_netem) + '
    else
      die "tc netem on $dev: $err"
    fi
  fi
  # shellcheck disable=SC2086
  "${tcn[@]}" qdisc add dev "$dev" $parent tbf rate "${rate}gbit" burst "$burst" latency 20ms
  echo "tbf ${rate}gbit burst $burst"
}

up() {
  local n=${1:-} link=10gbe rate= rtt= drives=0 mbps=0 size=8
  [[ $n =~ ^[1-9][0-9]*$ ]] && [ "$n" -le $max_hosts ] || die "$usage (N from 1 to $max_hosts)"
  local args="$*"
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --link) link=${2:?--link takes 10gbe, tb5 or none}; shift 2 ;;
      --rate-gbit) rate=${2:?}; shift 2 ;;
      --rtt-us) rtt=${2:?}; shift 2 ;;
      --drives-per-host) drives=${2:?}; shift 2 ;;
      --read-mbps) mbps=${2:?}; shift 2 ;;
      --size-gb) size=${2:?}; shift 2 ;;
      *) die "unknown option $1; $usage" ;;
    esac
  done
  case $link in
    10gbe) rate=${rate:-10} rtt=${rtt:-50} ;;
    tb5) rate=${rate:-80} rtt=${rtt:-20} ;;
    none) [ -z "$rate$rtt" ] || die "--link none takes no --rate-gbit / --rtt-us" ;;
    *) die "--link $link: 10gbe, tb5 or none" ;;
  esac
  if [ "$link" != none ]; then
    [[ $rate =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v r="$rate" 'BEGIN { exit !(r > 0 && r <= 400) }' || die "--rate-gbit takes a number of Gbit/s in (0, 400]"
    [[ $rtt =~ ^[0-9]+$ ]] && [ "$rtt" -le 100000 ] || die "--rtt-us takes a whole number of microseconds up to 100000"
  fi
  [[ $drives =~ ^[0-9]+$ ]] && [ "$drives" -le 16 ] || die "--drives-per-host takes a whole number from 0 to 16"
  [[ $size =~ ^[1-9][0-9]*$ ]] || die "--size-gb takes a whole number of GiB"
  [[ $mbps =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--read-mbps takes a whole number of MB/s, or N of them separated by commas"
  local rates=()
  IFS=, read -r -a rates <<< "$mbps"
  if [ ${#rates[@]} -eq 1 ]; then
    local k; for ((k = 1; k < n; k++)); do rates+=("${rates[0]}"); done
  fi
  [ ${#rates[@]} -eq "$n" ] || die "--read-mbps $mbps: ${#rates[@]} rates for $n hosts"
  need_root
  if [ -e "$state" ]; then
    if [ "$(sed -n 's/^args //p' "$state")" = "$args" ]; then echo "hosts already up ($args)"; return 0; fi
    die "already up with other arguments (state in $state); run 'hosts.sh down' first"
  fi
  command -v ip >/dev/null && command -v tc >/dev/null || die "needs iproute2 (ip, tc)"
  if ip link show "$bridge" >/dev/null 2>&1; then die "link $bridge exists but is not ours; remove it first"; fi
  if ip -4 route show | grep -q "^$prefix\."; then die "a route into $subnet exists: the subnet is taken"; fi
  local k
  for ((k = 0; k < n; k++)); do
    if ip netns list | grep -q "^deltafin-host$k\b"; then die "namespace deltafin-host$k exists but is not ours"; fi
    if ip link show "deltafin-h$k" >/dev/null 2>&1; then die "link deltafin-h$k exists but is not ours"; fi
  done
  [ -e "$dir" ] && die "$dir exists but is not ours"

  trap 'echo "hosts.sh: up failed; undoing" >&2; down' ERR
  record "# deltafin hosts: $n, link $link${rate:+ $rate Gbit/s}${rtt:+ RTT $rtt us}, $drives drives per host"
  record "args $args"
  mkdir -p "$dir"; record "dir $dir"
  record "bridge $bridge"
  ip link add "$bridge" type bridge
  ip addr add "$prefix.254/24" dev "$bridge"
  ip link set "$bridge" up
  local shaping=unshaped
  for ((k = 0; k < n; k++)); do
    local ns=deltafin-host$k out=deltafin-h$k
    record "netns $ns"; ip netns add "$ns"
    record "link $out"; ip link add "$out" type veth peer name deltafin0 netns "$ns"
    ip link set "$out" master "$bridge" up
    ip -n "$ns" addr add "$prefix.$((k + 1))/24" dev deltafin0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set deltafin0 up
    if [ "$link" != none ]; then
      shape "" "$out" "$rate" "$rtt" > /dev/null
      shaping=$(shape "$ns" deltafin0 "$rate" "$rtt")
    fi
    record "host $k $ns $prefix.$((k + 1))"
    echo "host $k: $ns at $prefix.$((k + 1)), link: $shaping"
  done
  record "shaping $shaping"
  for ((k = 0; k < n; k++)); do
    [ "$drives" -gt 0 ] || break
    record "drives deltafin-host$k"
    DELTAFIN_DRIVES_NAME=deltafin-host$k "$root/scripts/drives.sh" up "$drives" --size-gb "$size" --read-mbps "${rates[$k]}" |
      sed "s/^/host $k: /"
  done
  for ((k = 0; k < n; k++)); do echo "deltafin-host$k slots=1"; done > "$dir/hostfile"
  record "file $dir/hostfile"
  trap - ERR
  echo "hostfile $dir/hostfile; run ranks with: scripts/hosts.sh mpirun -n $n PROGRAM ARGS..."
}

# end_processes NS: TERM the processes inside namespace NS, KILL what is left after 5 s
end_processes() {
  local ns=$1 pids i
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  [ -n "${pids// /}" ] || return 0
  echo "hosts.sh: ending processes left in $ns: $pids" >&2
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    [ -n "$(ip netns pids "$ns" 2>/dev/null)" ] || return 0
    sleep 0.1
  done
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  # shellcheck disable=SC2086
  [ -z "${pids// /}" ] || kill -KILL $pids 2>/dev/null || true
  sleep 0.5
}

down() {
  need_root
  [ -e "$state" ] || { echo "hosts.sh: nothing is up"; return 0; }
  local kind a b
  while read -r kind a b; do
    if [ "$kind" = netns ] && ip netns list | grep -q "^$a\b"; then end_processes "$a"; fi
  done < "$state"
  while read -r kind a b; do  # undo in reverse order of creation; rerunnable after a failure
    case $kind in
      file) rm -f "$a" ;;
      drives) DELTAFIN_DRIVES_NAME=$a "$root/scripts/drives.sh" down >/dev/null || die "cannot remove the drives of $a; run down again" ;;
      link) if ip link show "$a" >/dev/null 2>&1; then ip link del "$a"; fi ;;
      netns) if ip netns list | grep -q "^$a\b"; then ip netns del "$a"; fi ;;
      bridge) if ip link show "$a" >/dev/null 2>&1; then ip link del "$a"; fi ;;
      dir) if [ -d "$a" ]; then rmdir "$a" 2>/dev/null || echo "hosts.sh: $a is not empty; left alone" >&2; fi ;;
    esac
  done < <(awk '{ line[NR] = $0 } END { for (i = NR; i > 0; i--) print line[i] }' "$state")
  rm -f "$state"
  echo "hosts down"
}

status() {
  [ -e "$state" ] || { echo "no hosts up"; return 0; }
  head -1 "$state"
  sed -n 's/^shaping /link shaping (each end): /p' "$state"
  local kind k ns ip
  while read -r kind k ns ip; do
    [ "$kind" = host ] || continue
    echo "host $k: $ns at $ip, $(ip netns pids "$ns" 2>/dev/null | wc -l | tr -d ' ') processes; tx/rx bytes $(ip -n "$ns" -s -j link show deltafin0 2>/dev/null |
      python3 -c 'import json, sys; s = json.load(sys.stdin)[0]["stats64"]; print(s["tx"]["bytes"], s["rx"]["bytes"])' 2>/dev/null || echo '?')"
    if grep -q "^drives $ns\$" "$state"; then DELTAFIN_DRIVES_NAME=$ns "$root/scripts/drives.sh" status | sed 's/^/  /'; fi
  done < "$state"
}

# host_exec NS CMD...: CMD in namespace NS (recorded in the state) and its drives' cgroup
host_exec() {
  local ns=$1; shift
  [ -e "$state" ] || die "no hosts up"
  grep -q "^netns $ns\$" "$state" || die "no host $ns (hosts.sh status)"
  local cgroup=/sys/fs/cgroup/blkio/$ns-bench
  if grep -q "^drives $ns\$" "$state" && [ -d "$cgroup" ]; then
    echo $$ > "$cgroup/cgroup.procs" || die "cannot join $cgroup"
  fi
  # Only the network namespace is entered (nsenter, not `ip netns exec`, which remounts /sys and so
  # hides /sys/fs/cgroup: deltafin's memory budget and CPU count read their cgroup limits there),
  # plus a UTS namespace with the host's own name, so that MPI tells the hosts apart by name.
  exec nsenter --net="/run/netns/$ns" env DELTAFIN_HOST="$ns" unshare --uts sh -c 'hostname "$DELTAFIN_HOST" && exec "$@"' sh "$@"
}

cmd=${1:-}; shift || true
case $cmd in
  up) up "$@" ;;
  down) down ;;
  status) status ;;
  exec)
    [ $# -ge 2 ] && [[ $1 =~ ^[0-9]+$ ]] || die "usage: hosts.sh exec K CMD..."
    need_root
    k=$1; shift
    host_exec "deltafin-host$k" "$@" ;;
  agent)  # called by mpirun as an ssh: HOST followed by a command line that a shell runs
    [ $# -ge 2 ] || die "usage: hosts.sh agent HOST CMD..."
    need_root
    ns=$1; shift
    host_exec "$ns" sh -c "$*" ;;
  mpirun)
    [ -e "$state" ] && [ -f "$dir/hostfile" ] || die "no hosts up (or 'up' did not finish: hosts.sh down, then up)"
    asroot=()
    [ "$(id -u)" -ne 0 ] || asroot=(--allow-run-as-root)
    export DELTAFIN_HOSTS_STATE="$state"
    # no binding unless ARGS ask (--bind-to): every daemon thinks it has the whole machine and
    # would bind its rank to core 0, all ranks on one core
    export OMPI_MCA_hwloc_base_binding_policy=${OMPI_MCA_hwloc_base_binding_policy:-none}
    exec mpirun ${asroot[@]+"${asroot[@]}"} -hostfile "$dir/hostfile" --mca plm_rsh_agent "$root/scripts/hosts.sh agent" \
      --mca plm_rsh_no_tree_spawn 1 --mca btl tcp,self --mca btl_tcp_if_include "$subnet" \
      --mca oob_tcp_if_include "$subnet" "$@" ;;
  *) die "$usage" ;;
esac
