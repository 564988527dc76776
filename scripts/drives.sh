#!/usr/bin/env bash
# Turns one machine into N throttled "drives" for the multi-SSD benchmarks (needs root, loop
# devices, and cgroup v1 blkio at /sys/fs/cgroup/blkio for throttling):
#
#   scripts/drives.sh up N [--size-gb G] [--read-mbps M | M0,M1,...] [--root DIR]
#       For i in 0..N-1: a sparse G GiB image DIR/drive$i.img (default 16 GiB under
#       /var/tmp/deltafin-drives) on a loop device with --direct-io=on, ext4, mounted at
#       /mnt/deltafin-drive$i. Creates the blkio cgroup deltafin-bench and caps reads from each
#       loop device at M MB/s (1e6 bytes; 0 = no cap) for processes in it; a list of N rates gives
#       drive i the i-th (heterogeneous drives, for example 150,100,75,50). Writes are not capped.
#   scripts/drives.sh exec CMD...   run CMD inside the cgroup (only there do the caps apply)
#   scripts/drives.sh status
#   scripts/drives.sh down          unmount, detach, delete the images, remove the cgroup
#
# Everything it creates is recorded in $DELTAFIN_DRIVES_STATE (default
# /var/tmp/deltafin-drives.state); `down` removes only what is recorded there, after checking
# that each mount and loop device is still the one it made.
#
# Several independent sets (one per emulated host, scripts/hosts.sh): DELTAFIN_DRIVES_NAME=NAME
# (default deltafin) names the set's state /var/tmp/NAME-drives.state, images under
# /var/tmp/NAME-drives, mounts /mnt/NAME-drive$i and cgroup NAME-bench; every subcommand takes it.
#
# Real drives need none of this: pass each drive's mount point to `deltafin place --drive DIR`
# (and run the benchmarks directly, without `exec`).
set -euo pipefail
[ "$(uname -s)" = Linux ] || { echo "drives.sh: Linux only (loop devices, blkio cgroup); on a Mac benchmark real drives: k3-public-bench/run-bench.sh --drive DIR" >&2; exit 1; }

die() { echo "drives.sh: $*" >&2; exit 1; }
name=${DELTAFIN_DRIVES_NAME:-deltafin}
[[ $name =~ ^[a-z][a-z0-9-]{0,30}$ ]] || die "DELTAFIN_DRIVES_NAME=$name: lower-case letters, digits and '-', at most 31"
state=${DELTAFIN_DRIVES_STATE:-/var/tmp/$name-drives.state}
blkio=/sys/fs/cgroup/blkio
cgroup=$blkio/$name-bench
record() { echo "$*" >> "$state"; }
need_root() { [ "$(id -u)" -eq 0 ] || die "must run as root"; }

up() {
  local n=${1:-} size=16 mbps=0 root=/var/tmp/$name-drives
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "usage: drives.sh up N [--size-gb G] [--read-mbps M | M0,M1,...] [--root DIR]"
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --size-gb) size=${2:?}; shift 2 ;;
      --read-mbps) mbps=${2:?}; shift 2 ;;
      --root) root=${2:?}; shift 2 ;;
      *) die "unknown option $1" ;;
    esac
  done
  [[ $size =~ ^[1-9][0-9]*$ ]] || die "--size-gb takes a whole number of GiB"
  [[ $mbps =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--read-mbps takes a whole number of MB/s, or N of them separated by commas"
  local rates=() any=0
  IFS=, read -r -a rates <<< "$mbps"
  if [ ${#rates[@]} -eq 1 ]; then
    for ((i = 1; i < n; i++)); do rates+=("${rates[0]}"); done
  fi
  [ ${#rates[@]} -eq "$n" ] || die "--read-mbps $mbps: ${#rates[@]} rates for $n drives"
  for r in "${rates[@]}"; do [ "$r" -eq 0 ] || any=1; done
  need_root
  if [ -e "$state" ]; then die "already up (state in $state); run 'drives.sh down' first"; fi
  [ -e /dev/loop-control ] || [ -e /dev/loop0 ] || die "no loop devices (modprobe loop?)"
  losetup -f >/dev/null 2>&1 || die "no free loop device"
  [ -d "$blkio" ] || [ "$any" -eq 0 ] || die "no cgroup v1 blkio at $blkio: cannot throttle"
  if [ -e "$cgroup" ]; then die "$cgroup exists but is not ours; remove it first"; fi
  for ((i = 0; i < n; i++)); do
    if [ -e "$root/drive$i.img" ]; then die "$root/drive$i.img exists but is not ours"; fi
    if mountpoint -q "/mnt/$name-drive$i"; then die "/mnt/$name-drive$i is already a mount point"; fi
  done

  trap 'echo "drives.sh: up failed; undoing" >&2; down' ERR
  record "# $name drives: $n x $size GiB, read cap $([ "$any" -gt 0 ] && echo "$mbps MB/s" || echo none)"
  [ -d "$root" ] || { mkdir -p "$root"; record "dir $root"; }
  if [ -d "$blkio" ]; then mkdir "$cgroup"; record "cgroup $cgroup"; fi
  for ((i = 0; i < n; i++)); do
    local img=$root/drive$i.img mnt=/mnt/$name-drive$i dev
    record "image $img"; truncate -s "${size}G" "$img"
    dev=$(losetup --find --show --direct-io=on "$img"); record "loop $dev $img"
    [ "$(cat "/sys/block/${dev#/dev/}/loop/dio")" = 1 ] || echo "drives.sh: warning: $dev has no direct I/O" >&2
    mkfs.ext4 -q -m 0 "$dev"
    [ -d "$mnt" ] || { mkdir -p "$mnt"; record "dir $mnt"; }
    mount "$dev" "$mnt"; record "mount $mnt $dev"
    chmod 1777 "$mnt"
    if [ "${rates[$i]}" -gt 0 ]; then
      echo "$(cat "/sys/block/${dev#/dev/}/dev") $((rates[i] * 1000000))" > "$cgroup/blkio.throttle.read_bps_device"
    fi
    echo "drive$i: $mnt on $dev ($img, ${size} GiB, read cap $([ "${rates[$i]}" -gt 0 ] && echo "${rates[$i]} MB/s" || echo none))"
  done
  trap - ERR
  if [ "$any" -gt 0 ]; then echo "reads capped inside $cgroup (use 'drives.sh exec')"; fi
}

down() {
  need_root
  [ -e "$state" ] || { echo "drives.sh: nothing is up"; return 0; }
  local kind a b src
  while read -r kind a b; do
    if [ "$kind" = cgroup ] && [ -d "$a" ] && grep -q . "$a/cgroup.procs"; then
      die "processes still in $a: $(tr '\n' ' ' < "$a/cgroup.procs")- end them first"
    fi
  done < "$state"
  while read -r kind a b; do  # undo in reverse order of creation; rerunnable after a failure
    case $kind in
      mount)
        src=$(findmnt -n -o SOURCE --mountpoint "$a" || true)
        if [ "$src" = "$b" ]; then umount "$a" || die "cannot unmount $a (in use? fuser -vm $a); run down again"
        elif [ -n "$src" ]; then echo "drives.sh: $a is mounted from $src, not $b; left alone" >&2; fi ;;
      loop)
        src=$(losetup -n -O BACK-FILE "$a" 2>/dev/null || true)
        if [ "$src" = "$b" ]; then losetup -d "$a"
        elif [ -n "$src" ]; then echo "drives.sh: $a now backs $src, not $b; left alone" >&2; fi ;;
      image) rm -f "$a" ;;
      dir) if [ -d "$a" ]; then rmdir "$a" 2>/dev/null || echo "drives.sh: $a is not empty; left alone" >&2; fi ;;
      cgroup) if [ -d "$a" ]; then rmdir "$a"; fi ;;
    esac
  done < <(awk '{ line[NR] = $0 } END { for (i = NR; i > 0; i--) print line[i] }' "$state")
  rm -f "$state"
  echo "drives down"
}

status() {
  [ -e "$state" ] || { echo "no drives up"; return 0; }
  head -1 "$state"
  local kind a b
  while read -r kind a b; do
    [ "$kind" = mount ] || continue
    local cap=none mm; mm=$(cat "/sys/block/${b#/dev/}/dev" 2>/dev/null || echo "?")
    if [ -r "$cgroup/blkio.throttle.read_bps_device" ]; then
      cap=$(awk -v d="$mm" '$1 == d { print $2 / 1e6 " MB/s" }' "$cgroup/blkio.throttle.read_bps_device")
    fi
    echo "$a  $b ($mm)  read cap: ${cap:-none}  $(df -hP "$a" | awk 'NR == 2 { print "used/size:", $3, $2 }')"
  done < "$state"
  if [ -d "$cgroup" ]; then echo "cgroup $cgroup: $(wc -l < "$cgroup/cgroup.procs") processes"; fi
}

cmd=${1:-}; shift || true
case $cmd in
  up) up "$@" ;;
  down) down ;;
  status) status ;;
  exec)
    [ $# -gt 0 ] || die "usage: drives.sh exec CMD..."
    [ -e "$state" ] || die "no drives up"
    if [ -d "$cgroup" ]; then echo $$ > "$cgroup/cgroup.procs" || die "cannot join $cgroup (root?)"; fi
    exec "$@" ;;
  *) die "usage: drives.sh up N [--size-gb G] [--read-mbps M | M0,M1,...] [--root DIR] | down | exec CMD... | status" ;;
esac
