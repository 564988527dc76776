# Portable stand-ins for GNU tools, sourced by the scripts so that they run on macOS's bash 3.2
# and BSD tools as well as on Linux (scripts/lint-portable.sh rejects the GNU forms):
#   file_bytes FILE             size in bytes (GNU `stat -c %s`, BSD `stat -f %z` differ)
#   cpu_count                   online CPUs (no `nproc` on macOS)
#   csv_range FIRST LAST        "FIRST,FIRST+1,...,LAST" (BSD `seq -s,` may end with one more comma)
#   numpy_python                the first of $PYTHON, python3, /usr/bin/python3 that has numpy
#                               (tools/: a pyenv python3 may lack it, as macOS's /usr/bin/python3 does)
#   with_timeout SECONDS CMD... CMD, killed after SECONDS (`timeout`, else `gtimeout`, else a
#                               watchdog: CMD's stdin is then /dev/null); exit status 124 when
#                               it was killed, as GNU timeout's
# Source it: . "$root/scripts/portable.sh"

file_bytes() {
  wc -c < "$1" | tr -d ' '
}

cpu_count() {
  getconf _NPROCESSORS_ONLN 2>/dev/null || sysctl -n hw.ncpu
}

csv_range() {
  awk -v a="$1" -v b="$2" 'BEGIN { for (i = a; i <= b; i++) printf "%s%d", (i > a ? "," : ""), i; print "" }'
}

numpy_python() {
  local py
  for py in ${PYTHON:-} python3 /usr/bin/python3; do
    if "$py" -c 'import numpy' 2>/dev/null; then echo "$py"; return 0; fi
  done
  echo "portable.sh: no python3 with numpy (scripts/setup.sh)" >&2
  return 1
}

with_timeout() {
  local secs=$1
  shift
  if command -v timeout >/dev/null; then timeout "$secs" "$@"; return; fi  # lint-portable: ok (the fallback itself)
  if command -v gtimeout >/dev/null; then gtimeout "$secs" "$@"; return; fi
  local flag rc=0 cmd watchdog
  flag=$(mktemp "${TMPDIR:-/tmp}/with_timeout.XXXXXX")
  "$@" &
  cmd=$!
  (sleep "$secs" && echo killed > "$flag" && kill -TERM "$cmd" 2>/dev/null) &
  watchdog=$!
  wait "$cmd" || rc=$?
  kill "$watchdog" 2>/dev/null || true
  wait "$watchdog" 2>/dev/null || true
  if [ -s "$flag" ]; then rc=124; fi
  rm -f "$flag"
  return "$rc"
}
