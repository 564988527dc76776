#!/usr/bin/env bash
# Drops the operating system's file cache before a cold benchmark run: `sync`, then
# `echo 3 > /proc/sys/vm/drop_caches` on Linux or `purge` on macOS. Both need root: when not root
# it tries `sudo -n` (works after `sudo -v`, never prompts). Exits 0 when the cache was dropped;
# otherwise prints why not on stderr and exits 1, so that the caller can mark its run as not cold.
#   k3-public-bench/drop-cache.sh
set -euo pipefail

sudo=
if [ "$(id -u)" -ne 0 ]; then sudo="sudo -n"; fi
sync
case $(uname -s) in
  Linux)
    if $sudo sh -c 'echo 3 > /proc/sys/vm/drop_caches' 2>/dev/null; then exit 0; fi
    echo "drop-cache.sh: cannot write /proc/sys/vm/drop_caches (needs root)" >&2 ;;
  Darwin)
    if $sudo purge 2>/dev/null; then exit 0; fi
    echo "drop-cache.sh: purge failed (it needs root: run under sudo, or sudo -v first)" >&2 ;;
  *)
    echo "drop-cache.sh: no way to drop the cache on $(uname -s)" >&2 ;;
esac
exit 1
