#!/usr/bin/env bash
# Routed experts on several hosts (issue 35): `mpirun -n 3` on this one machine, against one host
# and against transformers' greedy ids (the fixtures' golden.json):
#   - the bundled model (speculation by its draft model, chunked prefill), tiny K2 and K3 fixtures:
#     ids, and logits bit for bit, identical to one host; the fixtures' ids equal their goldens;
#   - faults: a host that hangs (SIGSTOP), a host that dies (SIGKILL), a host started with another
#     model, another placement, another build; each ends the run with a clear line and no hang.
#
# Usage: tests/hosts/mpirun_hosts.sh BINARY BUNDLED_MODEL FIXTURES_DIR
# Exit: 0 pass, 1 fail, 77 skipped (no mpirun, or a build without MPI).
set -uo pipefail
bin=$1 model=$2 fixtures=$3
command -v mpirun > /dev/null || { echo "mpirun_hosts: SKIPPED: no mpirun (scripts/setup.sh installs Open MPI)"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/deltafin-hosts.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Root in CI; --oversubscribe: 3 ranks on a machine of 2 cores. Threads: 1 per rank.
# Every rank this script starts carries its tag, so the fault cases stop only this test's ranks
# (never another deltafin on the machine).
tag="deltafin-hosts-test-$$"
mpirun=(mpirun --oversubscribe --bind-to none -x "DELTAFIN_TEST_RUN=$tag")
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
mpi=("${mpirun[@]}" -n 3)
# No shared-memory transport: the messages take the network path, on loopback only.
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
if ! "${mpi[@]}" "$bin" run -m "$model" -p x -n 1 --draft off --threads 1 > "$work/probe" 2>&1; then
  if grep -q "built without MPI" "$work/probe"; then
    echo "mpirun_hosts: SKIPPED: this deltafin was built without MPI"; exit 77
  fi
fi
failed=0
check() {  # check NAME STATUS DETAIL
  if [ "$2" = 0 ]; then echo "ok   $1"; else echo "FAIL $1: $3"; failed=1; fi
}
same() {  # same NAME FILE_A FILE_B
  check "$1" "$(cmp -s "$2" "$3"; echo $?)" "$(cmp "$2" "$3" 2>&1 | head -1)"
}

# --- identical to one host -------------------------------------------------------------------
common=(--threads 1 --temp 0)
"$bin" run -m "$model" -p "def fib(n):" -n 40 --ids "${common[@]}" > "$work/one.ids" 2> "$work/one.err"
"${mpi[@]}" "$bin" run -m "$model" -p "def fib(n):" -n 40 --ids "${common[@]}" > "$work/three.ids" 2> "$work/three.err"
same "bundled model, draft auto: ids of 3 hosts = 1 host" "$work/one.ids" "$work/three.ids"
"${mpi[@]}" "$bin" run -m "$model" -p "def fib(n):" -n 40 --ids --draft off --chunk 3 "${common[@]}" > "$work/three-chunk3.ids" 2>> "$work/three.err"
same "bundled model, --draft off --chunk 3 on 3 hosts = 1 host" "$work/one.ids" "$work/three-chunk3.ids"
tokens=1,17,300,42,7,99,5,1000,3,64
"$bin" logits -m "$model" --tokens $tokens --out "$work/one.npy" "${common[@]:0:2}" 2>> "$work/one.err"
"${mpi[@]}" "$bin" logits -m "$model" --tokens $tokens --out "$work/three.npy" --chunk 4 "${common[@]:0:2}" 2>> "$work/three.err"
same "bundled model: logits of 3 hosts (chunk 4) = 1 host, bit for bit" "$work/one.npy" "$work/three.npy"

for fixture in k2_tiny k3_tiny_mxfp4; do
  dir=$fixtures/$fixture
  prompt=$(python3 -c "import json;print(','.join(map(str,json.load(open('$dir/golden.json'))['prompt'])))")
  golden=$(python3 -c "import json;print(' '.join(map(str,json.load(open('$dir/golden.json'))['generated'])))")
  "${mpi[@]}" "$bin" run -m "$dir" --placement none --tokens "$prompt" -n 24 --ids --draft off "${common[@]}" \
    > "$work/$fixture.ids" 2>> "$work/three.err"
  check "$fixture on 3 hosts: transformers' greedy ids" "$([ "$(tr -d '\n' < "$work/$fixture.ids")" = "$golden" ]; echo $?)" \
    "got $(cat "$work/$fixture.ids"), want $golden"
  "$bin" logits -m "$dir" --placement none --tokens "$prompt" --out "$work/$fixture-one.npy" --threads 1 2>> "$work/one.err"
  "${mpi[@]}" "$bin" logits -m "$dir" --placement none --tokens "$prompt" --out "$work/$fixture-three.npy" --threads 1 \
    --chunk 3 2>> "$work/three.err"
  same "$fixture: logits of 3 hosts = 1 host, bit for bit" "$work/$fixture-one.npy" "$work/$fixture-three.npy"
done
[ $failed = 0 ] || { echo "--- stderr of the multi-host runs:"; tail -20 "$work/three.err"; }

# --- faults ----------------------------------------------------------------------------------
# The pids of this script's ranks (their environment carries its tag); only rank $1 when given.
test_ranks() {
  local p env
  for p in $(pgrep -x "$name" || true); do
    env=$(tr '\0' '\n' 2>/dev/null < "/proc/$p/environ") || continue
    grep -qx "DELTAFIN_TEST_RUN=$tag" <<< "$env" || continue
    [ -z "${1:-}" ] || grep -qx "OMPI_COMM_WORLD_RANK=$1" <<< "$env" || continue
    echo "$p"
  done
}
# Stops what is left of this script's ranks.
stop_ranks() {
  local p
  for p in $(test_ranks); do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  return 0
}
name=$(basename "$bin")
# fault NAME SIGNAL: a long run on 3 hosts; rank 2 gets SIGNAL once it has started.
fault() {
  "${mpi[@]}" "$bin" run -m "$model" -p "def fib(n):" -n 16000 --ignore-eos --ids --draft off --threads 1 \
    --host-timeout 3 > "$work/fault.out" 2> "$work/fault.err" &
  local job=$! pid="" i
  for i in $(seq 1 100); do
    pid=$(test_ranks 2 | head -1); [ -n "$pid" ] && [ -s "$work/fault.out" ] && break
    sleep 0.1
  done
  [ -n "$pid" ] && kill -"$2" "$pid"
  for i in $(seq 1 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$job" 2>/dev/null; then kill -9 "$job"; [ -n "$pid" ] && kill -CONT "$pid" 2>/dev/null; echo hung >> "$work/fault.err"; fi
  wait "$job"; echo $?
}
rc=$(fault "hang" STOP)
check "a host that hangs: one line naming it, exit 1" \
  "$([ "$rc" = 1 ] && grep -q "deltafin: host .* (rank 2) did not answer within 3 s" "$work/fault.err"; echo $?)" \
  "exit $rc: $(head -5 "$work/fault.err")"
stop_ranks
rc=$(fault "dies" KILL)
check "a host that dies: mpirun names it, the run stops (exit $rc)" \
  "$([ "$rc" != 0 ] && ! grep -q hung "$work/fault.err" && grep -q "rank 2" "$work/fault.err"; echo $?)" \
  "exit $rc: $(head -8 "$work/fault.err")"
stop_ranks

# Another model, placement or build on one host (mpirun's MPMD form: one rank differs).
args=(-m "$model" -p x -n 4 --draft off --threads 1 --host-timeout 20)
rc=$("${mpirun[@]}" -n 2 "$bin" run "${args[@]}" : -n 1 "$bin" run "${args[@]:2}" -m "$fixtures/k2_tiny" \
     > /dev/null 2> "$work/mpmd.err"; echo $?)
check "a host with another model: one line, exit 1" \
  "$([ "$rc" = 1 ] && grep -q "deltafin: host .* (rank 2) opened another model" "$work/mpmd.err"; echo $?)" "exit $rc: $(head -3 "$work/mpmd.err")"
mkdir "$work/drive0"
"$bin" place -m "$model" --drive "$work/drive0" --out "$work/placement.json" > /dev/null
rc=$("${mpirun[@]}" -n 2 "$bin" run "${args[@]}" --placement none : -n 1 "$bin" run "${args[@]}" --placement "$work/placement.json" \
     > /dev/null 2> "$work/mpmd.err"; echo $?)
check "a host with another placement: one line, exit 1" \
  "$([ "$rc" = 1 ] && grep -q "deltafin: host .* (rank 2) reads its experts from another placement" "$work/mpmd.err"; echo $?)" \
  "exit $rc: $(head -3 "$work/mpmd.err")"
sed 's|deltafin-wire/1|deltafin-wire/0|' "$bin" > "$work/deltafin-other" && chmod +x "$work/deltafin-other"
rc=$("${mpirun[@]}" -n 2 "$bin" run "${args[@]}" : -n 1 "$work/deltafin-other" run "${args[@]}" > /dev/null 2> "$work/mpmd.err"; echo $?)
check "a host with another build: one line, exit 1" \
  "$([ "$rc" = 1 ] && grep -q "deltafin: host .* (rank 2) runs another deltafin build" "$work/mpmd.err"; echo $?)" \
  "exit $rc: $(head -3 "$work/mpmd.err")"
run=(run -p "def fib(n):" -n 40 --ids --draft off --placement "$work/placement.json" "${common[@]}")
"$bin" "${run[@]}" > "$work/placed-one.ids" 2> /dev/null
# A host whose drive fails: rank 2 sees its copy of the placement's drive through a bind mount
# (its own mount namespace) filled with 0xff, so every record it reads is damaged; rank 0 has
# the others run its experts, the output is unchanged. Root only (unshare -m, mount).
if [ "$(id -u)" = 0 ] && command -v unshare > /dev/null; then
  mkdir "$work/broken"
  data=$(ls "$work/drive0")
  head -c "$(wc -c < "$work/drive0/$data")" /dev/zero | tr '\0' '\377' > "$work/broken/$data"
  "${mpirun[@]}" -n 2 "$bin" "${run[@]}" : -n 1 unshare -m sh -c 'mount --bind "$0" "$1" && shift && exec "$@"' \
    "$work/broken" "$work/drive0" "$bin" "${run[@]}" > "$work/failed-drive.ids" 2> "$work/failed-drive.err"
  same "a host whose drive fails: the others run its experts, ids unchanged" "$work/placed-one.ids" "$work/failed-drive.ids"
  check "a host whose drive fails: one warning naming it" \
    "$(grep -q "warning: host .* (rank 2) could not read layer" "$work/failed-drive.err"; echo $?)" "$(head -3 "$work/failed-drive.err")"
  # The same on rank 0: its own experts go to the other hosts.
  "${mpirun[@]}" -n 1 unshare -m sh -c 'mount --bind "$0" "$1" && shift && exec "$@"' "$work/broken" "$work/drive0" \
    "$bin" "${run[@]}" : -n 2 "$bin" "${run[@]}" > "$work/failed-drive0.ids" 2> "$work/failed-drive0.err"
  same "rank 0's drive fails: the other hosts run its experts, ids unchanged" "$work/placed-one.ids" "$work/failed-drive0.ids"
fi

# A placement for 3 hosts (place --hosts 3): each rank reads only its own drive; with every
# expert on every host (--replicate-hosts 1) a host whose drive fails is covered by the others,
# without copies the run ends naming the host, the layer and the expert.
for copies in 0 1; do
  dirs=()
  for h in 0 1 2; do mkdir -p "$work/hosts$copies/h$h"; dirs+=(--drive "$work/hosts$copies/h$h"); done
  extra=(); [ $copies = 1 ] && extra=(--replicate-hosts 1)
  "$bin" place -m "$model" --hosts 3 "${dirs[@]}" "${extra[@]}" --out "$work/hosts$copies.json" > /dev/null
done
run=(run -p "def fib(n):" -n 40 --ids --draft off "${common[@]}")
"${mpi[@]}" "$bin" "${run[@]}" --placement "$work/hosts0.json" > "$work/hosts0.ids" 2>> "$work/three.err"
same "a placement for 3 hosts (place --hosts 3): ids = 1 host" "$work/placed-one.ids" "$work/hosts0.ids"
"${mpi[@]}" "$bin" "${run[@]}" --placement "$work/hosts1.json" > "$work/hosts1.ids" 2>> "$work/three.err"
same "a placement with every expert on every host: ids = 1 host" "$work/placed-one.ids" "$work/hosts1.ids"
rc=$("${mpirun[@]}" -n 2 "$bin" "${run[@]}" --placement "$work/hosts0.json" > /dev/null 2> "$work/hosts-count.err"; echo $?)
check "a placement for 3 hosts on 2 ranks: one line, exit 1" \
  "$([ "$rc" = 1 ] && grep -q "a placement for 3 hosts, but mpirun started 2 ranks" "$work/hosts-count.err"; echo $?)" \
  "exit $rc: $(head -2 "$work/hosts-count.err")"
[ "$(id -u)" = 0 ] && command -v unshare > /dev/null && for copies in 1 0; do
  data=$(ls "$work/hosts$copies/h2")
  mkdir -p "$work/broken$copies"
  head -c "$(wc -c < "$work/hosts$copies/h2/$data")" /dev/zero | tr '\0' '\377' > "$work/broken$copies/$data"
  rc=$("${mpirun[@]}" -n 2 "$bin" "${run[@]}" --placement "$work/hosts$copies.json" : -n 1 unshare -m sh -c \
       'mount --bind "$0" "$1" && shift && exec "$@"' "$work/broken$copies" "$work/hosts$copies/h2" \
       "$bin" "${run[@]}" --placement "$work/hosts$copies.json" > "$work/broken$copies.ids" 2> "$work/broken$copies.err"; echo $?)
  if [ $copies = 1 ]; then
    same "host placement, a host's drive fails, copies on the others: ids unchanged" "$work/placed-one.ids" "$work/broken1.ids"
  else
    check "host placement, a host's drive fails, no copies: one line naming host, layer and expert, exit 1" \
      "$([ "$rc" = 1 ] && grep -q "deltafin: layer [0-9]* expert [0-9]*: host .* (rank 2) could not read it (.*), and no other host holds it" \
         "$work/broken0.err"; echo $?)" "exit $rc: $(grep deltafin "$work/broken0.err" | head -3)"
  fi
done
# Commands that run on one host refuse mpirun.
rc=$("${mpi[@]}" "$bin" inspect -m "$model" > /dev/null 2> "$work/one-host.err"; echo $?)
check "inspect under mpirun -n 3: refused in one line" \
  "$([ "$rc" = 1 ] && grep -q "inspect runs on one host" "$work/one-host.err"; echo $?)" "exit $rc: $(head -3 "$work/one-host.err")"
exit $failed
