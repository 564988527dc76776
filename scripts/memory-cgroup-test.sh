#!/usr/bin/env bash
# The one memory budget under a real cgroup memory limit (issue 16): a synthetic Kimi K3-shaped
# model whose spine is larger than the limit runs with --memory-gb inside a cgroup (v2, else v1:
# whichever the machine has) and gives the same ids as an unconstrained run; its peak RSS stays
# within the budget plus a stated overhead; the receipt shows the spine bytes read per token.
#
# Usage: scripts/memory-cgroup-test.sh [WORK_DIR]   (needs root or a delegated cgroup; build/deltafin)
# Env: BUDGET_GB (default 0.5), OVERHEAD_MB (default 64: the binary, libraries, thread stacks,
#      tokenizer and allocator slack outside the budget), PRESET (make_synthetic_k3.py, bench),
#      TOKENS (decode length, 8).
# Exit: 0 pass, 1 fail, 77 skipped (no usable cgroup), with the reason on one line.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-${TMPDIR:-/tmp}/deltafin-cgroup-test}
budget_gb=${BUDGET_GB:-0.5}
overhead_mb=${OVERHEAD_MB:-64}
preset=${PRESET:-bench}
tokens=${TOKENS:-8}
bin=$PWD/build/deltafin
py=${PYTHON:-python3}
"$py" -c "import numpy" 2>/dev/null || py=/usr/bin/python3  # the tools need numpy
[ -x "$bin" ] || { echo "memory-cgroup-test: build/deltafin missing (scripts/build.sh)" >&2; exit 1; }

skip() { echo "memory-cgroup-test: SKIPPED: $*" >&2; exit 77; }

# The cgroup: a child of this shell's own, so every limit above still applies.
limit_bytes=$("$py" -c "print(int(($budget_gb * 1e9) + $overhead_mb * 1e6))")
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  version=2
  parent=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
  grep -qw memory "$parent/cgroup.subtree_control" 2>/dev/null || skip "cgroup v2 without the memory controller delegated to $parent"
  limit_file=memory.max
elif [ -d /sys/fs/cgroup/memory ]; then
  version=1
  parent=/sys/fs/cgroup/memory$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
  limit_file=memory.limit_in_bytes
else
  skip "no cgroup memory controller mounted"
fi
group="$parent/deltafin-test-$$"
mkdir "$group" 2>/dev/null || skip "cannot create $group (not root, or the cgroup is not delegated)"
trap 'rmdir "$group" 2>/dev/null || true' EXIT
echo "$limit_bytes" > "$group/$limit_file" || skip "cannot set $group/$limit_file"
[ "$version" = 1 ] && [ -f "$group/memory.memsw.limit_in_bytes" ] && echo "$limit_bytes" > "$group/memory.memsw.limit_in_bytes" 2>/dev/null || true

model="$work/k3-$preset"
if [ ! -f "$model/config.json" ]; then
  mkdir -p "$work"
  nice "$py" tools/make_synthetic_k3.py "$model" --preset "$preset" >/dev/null
fi
spine=$("$bin" inspect -m "$model" | sed -n 's/.* GB routed experts, \([0-9.]*\) GB spine.*/\1/p')
echo "model      $model (spine $spine GB from the tensors); cgroup v$version limit $limit_bytes B = --memory-gb $budget_gb + $overhead_mb MB"

args=(run -m "$model" --tokens 11,220,3301,47,5000,123,9 -n "$tokens" --temp 0 --ids --ignore-eos --draft off)
free_ids=$("$bin" "${args[@]}" 2>/dev/null)
# Inside the cgroup: the process moves itself in, then execs deltafin.
receipt="$work/receipt.txt"
json="$work/receipt.json"
limited_ids=$(sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$group" /usr/bin/time -f "time-maxrss-kb %M" \
  "$bin" "${args[@]}" --memory-gb "$budget_gb" --stats=full --stats-json "$json" 2>"$receipt") || {
  cat "$receipt" >&2
  echo "memory-cgroup-test: FAIL: the run inside the cgroup failed" >&2
  exit 1
}
peak_kb=$(sed -n 's/^time-maxrss-kb //p' "$receipt")
grep -E '^(decode|budget|spine|rss|memory) ' "$receipt"
echo "unlimited  $free_ids"
echo "cgroup     $limited_ids"
echo "peak RSS   $peak_kb KB (limit $limit_bytes B)"
status=0
[ "$free_ids" = "$limited_ids" ] || { echo "memory-cgroup-test: FAIL: ids differ" >&2; status=1; }
"$py" - "$peak_kb" "$budget_gb" "$overhead_mb" "$spine" "$json" <<'EOF' || status=1
import json, sys
peak_kb, budget_gb, overhead_mb, spine_gb, path = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
peak = peak_kb * 1024
limit = budget_gb * 1e9 + overhead_mb * 1e6
r = json.load(open(path))
per_token = r["spine"]["decode_bytes_read"] / max(r["decode"]["tokens"], 1)
print(f"check      peak RSS {peak / 1e9:.4f} GB <= budget {budget_gb} GB + {overhead_mb} MB; spine {spine_gb} GB > limit "
      f"{limit / 1e9:.4f} GB; spine read per decode token {per_token / 1e9:.4f} GB")
ok = peak <= limit and spine_gb * 1e9 > limit and per_token > 0
if not ok: print("memory-cgroup-test: FAIL", file=sys.stderr)
sys.exit(0 if ok else 1)
EOF
[ "$status" = 0 ] && echo "memory-cgroup-test: PASS"
exit "$status"
