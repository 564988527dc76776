#!/usr/bin/env bash
# The default thread count against the CPUs a process may really use (issue 41, item 5): an
# affinity mask (taskset, a container's cpuset) and a CPU quota on a *parent* cgroup (docker
# --cpus) each narrow it; a pool wider than that only takes turns on a busy machine.
#
# Usage: tests/memory/cpu_limits.sh BINARY MODEL_DIR
# Exit: 0 pass, 1 fail (the quota case is skipped, with a note, where no cpu controller may be written).
set -uo pipefail
bin=$1 model=$2
failed=0
check() {  # check NAME CONDITION-RESULT DETAIL
  if [ "$2" = 0 ]; then echo "ok   $1"; else echo "FAIL $1: $3"; failed=1; fi
}
args=(run -m "$model" -p "def f(x):" -n 2 --draft off --temp 0 --stats)
cpus=$(nproc --all)

# An affinity mask of one CPU: one thread.
out=$(taskset -c 0 "$bin" "${args[@]}" 2>&1); rc=$?
check "taskset -c 0: exit 0" "$([ $rc = 0 ]; echo $?)" "exit $rc: $out"
check "taskset -c 0: 1 thread" "$(grep -q ', 1 thread)' <<< "$out"; echo $?)" "$(grep -i '^model' <<< "$out")"
# No mask: as many threads as the machine has CPUs (this test's own cgroup sets no quota).
out=$("$bin" "${args[@]}" 2>&1)
want=$([ "$cpus" = 1 ] && echo ', 1 thread)' || echo ", $(nproc) threads)")
check "no mask: one thread per CPU" "$(grep -qF "$want" <<< "$out"; echo $?)" "$(grep -i '^model' <<< "$out") (want $want)"

# A quota of one CPU on a parent cgroup (v2 cpu.max, or v1 cpu.cfs_quota_us), the run in its
# child: one thread.
quota_case() {  # quota_case PARENT_DIR QUOTA_FILE QUOTA_VALUE
  local parent=$1
  out=$(sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$parent/child" "$bin" "${args[@]}" 2>&1); rc=$?
  check "$2 of one CPU on the parent: exit 0" "$([ $rc = 0 ]; echo $?)" "exit $rc: $out"
  check "$2 of one CPU on the parent: 1 thread" "$(grep -q ', 1 thread)' <<< "$out"; echo $?)" "$(grep -i '^model' <<< "$out")"
}
parent=""
trap '[ -n "$parent" ] && rmdir "$parent/child" "$parent" 2>/dev/null; true' EXIT
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  base=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
  if grep -qw cpu "$base/cgroup.subtree_control" 2>/dev/null && mkdir "$base/deltafin-cpus-$$" 2>/dev/null; then
    parent="$base/deltafin-cpus-$$"
    if echo +cpu > "$parent/cgroup.subtree_control" 2>/dev/null && mkdir "$parent/child" &&
       echo "100000 100000" > "$parent/cpu.max"; then quota_case "$parent" cpu.max
    else echo "note: cannot set cpu.max under $base; quota case not run"; fi
  else echo "note: no writable cgroup v2 cpu controller at $base; quota case not run"; fi
elif [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
  base=/sys/fs/cgroup/cpu$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ {print $3}' /proc/self/cgroup)
  if mkdir "${base%/}/deltafin-cpus-$$" 2>/dev/null; then
    parent="${base%/}/deltafin-cpus-$$"
    if mkdir "$parent/child" && echo 100000 > "$parent/cpu.cfs_period_us" && echo 100000 > "$parent/cpu.cfs_quota_us"; then
      quota_case "$parent" cpu.cfs_quota_us
    else echo "note: cannot set cpu.cfs_quota_us under $base; quota case not run"; fi
  else echo "note: cannot create a cgroup under $base; quota case not run"; fi
else
  echo "note: no cgroup cpu controller mounted; quota case not run"
fi
exit $failed
