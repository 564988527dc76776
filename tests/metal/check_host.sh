#!/usr/bin/env bash
# The Linux check of the Metal host code: src/backend/metal/metal_backend.mm compiled with
# clang -fsyntax-only as Objective-C++ (ARC, blocks) against tests/metal/metal_stub, warnings as
# errors; then two planted selector typos, which must be rejected.
# Usage: check_host.sh CLANG
set -u
clang="$1"
root="$(cd "$(dirname "$0")/../.." && pwd)"
flags=(-std=c++20 -fsyntax-only -x objective-c++ -fobjc-arc -fblocks -fobjc-runtime=macosx-13.0 -Werror -Wall
       -Wno-unused-parameter -I "$root/tests/metal/metal_stub" -I "$root/src" -I "$root/kernels" -I "$root/include")
host="$root/src/backend/metal/metal_backend.mm"
if ! "$clang" "${flags[@]}" "$host"; then
  echo "FAIL metal_backend.mm does not pass the syntax check"
  exit 1
fi
echo "ok   metal_backend.mm"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
status=0
# planted: a misspelt selector, then a wrong argument label
for typo in 's/newBufferWithLength:/newBufferWithLenght:/' 's/offset:b.offset atIndex:i/offset:b.offset index:i/'; do
  sed "$typo" "$host" > "$tmp/planted.mm"
  if cmp -s "$host" "$tmp/planted.mm"; then
    echo "FAIL planted typo '$typo' changed nothing"
    status=1
  elif "$clang" "${flags[@]}" "$tmp/planted.mm" > "$tmp/out" 2>&1; then
    echo "FAIL planted typo '$typo' was accepted"
    status=1
  elif grep -q "no known instance method for selector\|instance method .* not found" "$tmp/out"; then
    echo "ok   planted typo '$typo' rejected"
  else
    echo "FAIL planted typo '$typo' rejected for another reason:"
    cat "$tmp/out"
    status=1
  fi
done
exit $status
