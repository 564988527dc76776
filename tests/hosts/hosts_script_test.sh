#!/usr/bin/env bash
# scripts/hosts.sh (the emulated hosts of k3-public-bench/run-hosts-bench.sh): its refusals in one
# line with exit 1; then, as root with network namespaces, Open MPI and no emulated hosts already
# up (else exit 77, skipped): `up 2` on shaped links with a throttled drive per host (when loop
# devices and cgroup v1 blkio exist), the same `up` again (nothing to do) and another (refused),
# `exec` inside a host (its hostname, address and blkio cgroup), two MPI ranks of
# tools/mpi_pingpong.c through `hosts.sh mpirun` (one per host, its traffic counted on the shaped
# link), `down` ending a process left in a namespace and leaving nothing behind, and an `up` that
# fails half way undoing itself.
#   tests/hosts/hosts_script_test.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
hosts=$root/scripts/hosts.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/hosts-test.XXXXXX")
export DELTAFIN_HOSTS_STATE=$work/hosts.state
fail() { echo "FAIL: $*" >&2; "$hosts" down >/dev/null 2>&1; rm -rf "$work"; exit 1; }

# refuses CODE_FRAGMENT ARGS...: exit 1 and one line on stderr containing CODE_FRAGMENT
refuses() {
  local want=$1 err rc; shift
  err=$("$hosts" "$@" 2>&1 >/dev/null); rc=$?
  [ "$rc" -eq 1 ] || fail "hosts.sh $*: exit $rc, not 1"
  [ "$(printf '%s\n' "$err" | wc -l | tr -d ' ')" -eq 1 ] || fail "hosts.sh $*: not one line: $err"
  case $err in *"$want"*) ;; *) fail "hosts.sh $*: '$err' does not say '$want'" ;; esac
}
refuses "usage" up
refuses "N from 1 to 64" up 0
refuses "N from 1 to 64" up 65
refuses "--link bogus" up 2 --link bogus
refuses "unknown option --bogus" up 2 --bogus 1
refuses "--rate-gbit" up 2 --rate-gbit fast
refuses "--link none takes no" up 2 --link none --rtt-us 10
refuses "3 rates for 2 hosts" up 2 --drives-per-host 1 --read-mbps 1,2,3
refuses "--drives-per-host" up 2 --drives-per-host 99
refuses "usage: hosts.sh exec K CMD" exec 1
refuses "no hosts up" mpirun -n 2 true
refuses "usage" bogus
echo "refusals: ok"

if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
  echo "skipped the namespaces: needs root, iproute2 and Open MPI"; rm -rf "$work"; exit 77
fi
if ip netns list 2>/dev/null | grep -q '^deltafin-host' || ip link show deltafin-br >/dev/null 2>&1; then
  echo "skipped the namespaces: emulated hosts are up already (a benchmark?)"; rm -rf "$work"; exit 77
fi
if ! ip netns add deltafin-probe-$$ 2>/dev/null; then echo "skipped: cannot create network namespaces"; rm -rf "$work"; exit 77; fi
ip netns del deltafin-probe-$$
trap 'fail "interrupted"' INT TERM

drive_args=() cgroup_want=
if [ -e /dev/loop-control ] && [ -d /sys/fs/cgroup/blkio ] && command -v mkfs.ext4 >/dev/null &&
   [ ! -e /var/tmp/deltafin-host0-drives.state ] && [ ! -e /var/tmp/deltafin-host1-drives.state ]; then
  drive_args=(--drives-per-host 1 --size-gb 1 --read-mbps 50,20)
  cgroup_want=deltafin-host1-bench
fi
"$hosts" up 2 --link 10gbe ${drive_args[@]+"${drive_args[@]}"} > "$work/up.txt" 2>&1 || fail "up: $(cat "$work/up.txt")"
out=$("$hosts" up 2 --link 10gbe ${drive_args[@]+"${drive_args[@]}"} 2>&1) || fail "the same up again: $out"
case $out in *"already up"*) ;; *) fail "the same up again said: $out" ;; esac
refuses "other arguments" up 3
tc qdisc show dev deltafin-h1 | grep -q 'tbf.*rate 10Gbit' || fail "no 10 Gbit/s tbf on deltafin-h1: $(tc qdisc show dev deltafin-h1)"
ip netns exec deltafin-host1 tc qdisc show dev deltafin0 | grep -q 'tbf.*rate 10Gbit' || fail "no tbf inside deltafin-host1"

out=$("$hosts" exec 1 sh -c 'echo "$(hostname) $DELTAFIN_HOST $(ip -4 -o addr show deltafin0 | awk "{ print \$4 }") $(grep blkio: /proc/self/cgroup)"')
case $out in "deltafin-host1 deltafin-host1 10.213.0.2/24 "*"$cgroup_want"*) ;; *) fail "exec 1 ran as: $out" ;; esac
if [ -n "$cgroup_want" ]; then
  grep -q ' 20000000$' "/sys/fs/cgroup/blkio/$cgroup_want/blkio.throttle.read_bps_device" || fail "host 1's drive is not capped at 20 MB/s"
  mountpoint -q /mnt/deltafin-host1-drive0 || fail "no /mnt/deltafin-host1-drive0"
fi

mpicc -O2 -o "$work/mpi_pingpong" "$root/k3-public-bench/tools/mpi_pingpong.c" || fail "mpicc"
before=$(ip -s -j link show deltafin-h0 | python3 -c 'import json, sys; s = json.load(sys.stdin)[0]["stats64"]; print(s["tx"]["bytes"] + s["rx"]["bytes"])')
"$hosts" mpirun -n 2 --bind-to none "$work/mpi_pingpong" --sizes 8,229408 --seconds 0.1 --iters 50 > "$work/pp.txt" 2>&1 ||
  fail "mpirun: $(cat "$work/pp.txt")"
after=$(ip -s -j link show deltafin-h0 | python3 -c 'import json, sys; s = json.load(sys.stdin)[0]["stats64"]; print(s["tx"]["bytes"] + s["rx"]["bytes"])')
grep -q '^ranks=2 rank0_host=deltafin-host0' "$work/pp.txt" || fail "rank 0 not on deltafin-host0: $(cat "$work/pp.txt")"
grep -q '^peer=1 host=deltafin-host1 bytes=229408 ' "$work/pp.txt" || fail "no 229408-byte line from deltafin-host1: $(cat "$work/pp.txt")"
# at least the timed round trips of 229,408 bytes each way crossed rank 0's shaped link
iters=$(sed -n 's/^peer=1 .*bytes=229408 iters=\([0-9]*\) .*/\1/p' "$work/pp.txt")
[ $((after - before)) -ge $((iters * 2 * 229408)) ] || fail "only $((after - before)) bytes on deltafin-h0 for $iters round trips"

"$hosts" exec 1 sleep 300 &
for _ in 1 2 3 4 5 6 7 8 9 10; do [ -n "$(ip netns pids deltafin-host1)" ] && break; sleep 0.2; done
"$hosts" down > "$work/down.txt" 2>&1 || fail "down: $(cat "$work/down.txt")"
wait
grep -q 'ending processes left in deltafin-host1' "$work/down.txt" || fail "down did not say it ended the sleep: $(cat "$work/down.txt")"
! ip netns list | grep -q '^deltafin-host' || fail "namespaces left: $(ip netns list)"
! ip link show deltafin-br >/dev/null 2>&1 || fail "bridge left"
! ip link show deltafin-h0 >/dev/null 2>&1 || fail "veth left"
[ ! -e "$DELTAFIN_HOSTS_STATE" ] || fail "state left"
[ ! -e /var/tmp/deltafin-hosts ] || fail "/var/tmp/deltafin-hosts left"
! mountpoint -q /mnt/deltafin-host1-drive0 2>/dev/null || fail "drive left mounted"
[ ! -d /sys/fs/cgroup/blkio/deltafin-host1-bench ] || fail "cgroup left"
out=$("$hosts" down 2>&1) || fail "a second down: $out"

# an up that fails half way (a drive image larger than ext4 allows) undoes what it made
if [ -n "$cgroup_want" ]; then
  if "$hosts" up 2 --drives-per-host 1 --size-gb 99999 > "$work/bad.txt" 2>&1; then fail "up with a 99999 GiB drive succeeded"; fi
  grep -q 'up failed; undoing' "$work/bad.txt" || fail "the failed up did not undo: $(cat "$work/bad.txt")"
  ! ip netns list | grep -q '^deltafin-host' || fail "namespaces left after a failed up: $(ip netns list)"
  ! ip link show deltafin-br >/dev/null 2>&1 || fail "bridge left after a failed up"
  [ ! -e "$DELTAFIN_HOSTS_STATE" ] || fail "state left after a failed up"
  [ ! -e /var/tmp/deltafin-host0-drives ] || fail "drive images left after a failed up"
fi
rm -rf "$work"
echo "hosts.sh: ok"
