#!/usr/bin/env bash
# The cache simulator against the engine's own receipt: a run records its routing trace and its
# receipt; cache_sim replays the trace at the receipt's expert budget and must count the same
# hits, reads and expert bytes read, exactly. Two models: the bundled one (K2 family, with its
# draft model: verify passes and rewinds) and the K3-shaped MXFP4 fixture; budgets from all
# experts down to a few (where the store's reads wait for room), and chunked prefill; with mpirun,
# each host of a run on 2 and 3 ranks against its own line of the receipt.
#   receipt_match.sh DELTAFIN CACHE_SIM BUNDLED_MODEL FIXTURES
set -euo pipefail
bin=$1 sim=$2 bundled=$3 fixtures=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
checks=0

check() {  # name, then the run's arguments
  local name=$1; shift
  "$bin" run "$@" --record-routing "$work/t" --stats-json "$work/r.json" >/dev/null 2>"$work/err" ||
    { echo "FAIL $name: the run failed: $(cat "$work/err")"; exit 1; }
  local budget
  budget=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["memory"]["budget"])' "$work/r.json")
  "$sim" "$work/t" --budget-bytes "$budget" --json "$work/s.json" >/dev/null
  python3 - "$name" "$work/r.json" "$work/s.json" <<'PY'
import json, sys
name, receipt, sim = sys.argv[1], json.load(open(sys.argv[2]))["experts"], json.loads(open(sys.argv[3]).readline())
engine = (receipt["hits"], receipt["reads"], receipt["bytes_read"])
simulated = (sim["hits"], sim["misses"], sim["bytes_read"])
if engine != simulated:
    sys.exit(f"FAIL {name}: engine (hits, reads, bytes) {engine} != simulator {simulated}")
print(f"ok {name}: hits {engine[0]}, reads {engine[1]}, bytes {engine[2]}")
PY
  checks=$((checks + 1))
}

prompt="def fibonacci(n):"
for gb in 1 0.008 0.004 0.002 0.0005; do
  check "bundled --cache-gb $gb" --model "$bundled" --prompt "$prompt" -n 32 --cache-gb "$gb"
done
check "bundled --chunk 3 --draft off --cache-gb 0.004" --model "$bundled" --prompt "$prompt" -n 24 --chunk 3 --draft off --cache-gb 0.004
for gb in 1 0.0002 0.00005; do
  check "k3 mxfp4 --cache-gb $gb" --model "$fixtures/k3_tiny_mxfp4" --tokens 1,2,3,4,5,6,7,8 --ids -n 24 --cache-gb "$gb"
done
# Several hosts: each rank's store against its own line of the receipt (its share of each pass).
if command -v mpirun >/dev/null; then
  mpirun=(mpirun --oversubscribe --bind-to none)
  [ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
  for n in 2 3; do
    "${mpirun[@]}" -n $n "$bin" run --model "$bundled" --prompt "$prompt" -n 32 --cache-gb 0.004 \
      --record-routing "$work/t" --stats-json "$work/r.json" >/dev/null 2>"$work/err" ||
      { echo "FAIL mpirun -n $n: the run failed: $(cat "$work/err")"; exit 1; }
    for ((host = 0; host < n; host++)); do
      "$sim" "$work/t" --hosts $n --host $host --budget-bytes 4000000 --json "$work/s.json" >/dev/null
      python3 - "mpirun -n $n, host $host" "$work/r.json" "$work/s.json" "$host" <<'PY'
import json, sys
name, host = sys.argv[1], int(sys.argv[4])
r = json.load(open(sys.argv[2]))["hosts"][host]
s = json.loads(open(sys.argv[3]).readline())
engine, simulated = (r["hits"], r["misses"], r["expert_bytes_read"]), (s["hits"], s["misses"], s["bytes_read"])
if engine != simulated:
    sys.exit(f"FAIL {name}: engine (hits, reads, bytes) {engine} != simulator {simulated}")
print(f"ok {name}: hits {engine[0]}, reads {engine[1]}, bytes {engine[2]}")
PY
      checks=$((checks + 1))
    done
  done
else
  echo "receipt_match: no mpirun, the several-hosts checks skipped"
fi
echo "receipt_match: $checks runs, simulator = receipt"
