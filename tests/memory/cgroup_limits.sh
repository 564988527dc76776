#!/usr/bin/env bash
# The memory budget against real cgroup limits (issue 33, items 3 and 4): a limit set on a
# *parent* cgroup is the default budget's source, and an explicit --memory-gb larger than a
# cgroup's room is refused in one line naming that cgroup, not left to the OOM killer.
#
# Usage: tests/memory/cgroup_limits.sh BINARY MODEL_DIR
# Exit: 0 pass, 1 fail, 77 skipped (no memory controller we may write: not root, or not delegated).
set -uo pipefail
bin=$1 model=$2
skip() { echo "cgroup_limits: SKIPPED: $*"; exit 77; }
failed=0
check() {  # check NAME CONDITION-RESULT DETAIL
  if [ "$2" = 0 ]; then echo "ok   $1"; else echo "FAIL $1: $3"; failed=1; fi
}

if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  base=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
  grep -qw memory "$base/cgroup.subtree_control" 2>/dev/null || skip "cgroup v2 without the memory controller delegated to $base"
  limit_file=memory.max
else
  [ -d /sys/fs/cgroup/memory ] || skip "no cgroup memory controller mounted"
  base=/sys/fs/cgroup/memory$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
  limit_file=memory.limit_in_bytes
fi
parent="$base/deltafin-limits-$$"
mkdir "$parent" 2>/dev/null || skip "cannot create $parent"
cleanup() { rmdir "$parent/child" "$parent/small" "$parent" 2>/dev/null || true; }
trap cleanup EXIT
if [ "$limit_file" = memory.max ]; then echo +memory > "$parent/cgroup.subtree_control" 2>/dev/null || skip "cannot delegate memory in $parent"; fi
mkdir "$parent/child" "$parent/small" || skip "cannot create child cgroups"

# in_cgroup DIR COMMAND...: runs COMMAND as a member of DIR (the shell moves itself in, then execs).
in_cgroup() { local dir=$1; shift; sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$dir" "$@"; }
args=(run -m "$model" -p "def f(x):" -n 4 --draft off --temp 0)

# 3. A limit on the parent only (300 MB; the bundled model needs well under 100 MB): the
# child's run takes its default budget from the parent's limit and says so in the receipt.
echo 300000000 > "$parent/$limit_file" || skip "cannot set $parent/$limit_file"
out=$(in_cgroup "$parent/child" "$bin" "${args[@]}" --stats 2>&1); rc=$?
check "parent limit: exit 0" "$([ $rc = 0 ]; echo $?)" "exit $rc: $out"
check "parent limit: the budget comes from the parent's limit" \
  "$(grep -q "the cgroup limit $parent/$limit_file" <<< "$out"; echo $?)" "$(grep -i budget <<< "$out")"

# 4. An explicit --memory-gb past a 24 MB cgroup's room: refused in one line naming the cgroup
# (before: the OOM killer, exit 137, no message).
echo 24000000 > "$parent/small/$limit_file" || skip "cannot set $parent/small/$limit_file"
out=$(in_cgroup "$parent/small" "$bin" "${args[@]}" --memory-gb 1 2>&1); rc=$?
check "--memory-gb 1 in 24 MB: exit 1" "$([ $rc = 1 ]; echo $?)" "exit $rc: $out"
check "--memory-gb 1 in 24 MB: one line naming the cgroup" \
  "$([ "$(wc -l <<< "$out")" = 1 ] && grep -q -- "--memory-gb 1: more than this machine can give.*$parent/small/$limit_file" <<< "$out"; echo $?)" "$out"
# The default budget in the same cgroup: too small for the model, refused, not killed.
out=$(in_cgroup "$parent/small" "$bin" "${args[@]}" 2>&1); rc=$?
check "default budget in 24 MB: exit 1 with the minimum named" \
  "$([ $rc = 1 ] && grep -q "below the minimum working set" <<< "$out"; echo $?)" "exit $rc: $out"
exit $failed
