#!/usr/bin/env bash
# The several-hosts design (issue 35: routed experts split over MPI ranks, src/hosts) on one
# machine with GPUs (issue 40): `mpirun -n N deltafin ... --backend cuda`, one rank per GPU (the
# ranks of a machine take its GPUs in turn: src/hosts/local_device.hpp; with more ranks than GPUs
# they share one, each with its share of its memory, which checks the plumbing, not the speed-up).
# Hidden states and expert outputs go through host memory by MPI (the bundle's Open MPI has no
# CUDA support). Run on the GPU machine from the repository root, with a bundle made here by
# scripts/gpu-bundle.sh (it carries Open MPI):
#   k3-public-bench/run-gpu-hosts-bench.sh [--bundle DIR] [--ranks "1 2 4"] [--repeat 3] [--tokens 8]
#       [--backend cuda|cpu] [--preset k3|bench] [--model DIR] [--out DIR]
# 1. Identity: the bundled model and every golden fixture, then the K3-shaped model
#    (tools/make_synthetic_k3.py --preset k3: K3's real per-layer shapes, 128 experts, written to
#    --model, default /tmp/k3-PRESET): greedy ids (16 after a prompt of 16 ids) and the prompt's
#    logits of N ranks against one rank, bit for bit; each fixture's ids on the most ranks against
#    transformers' (its golden.json).
# 2. Decode of the K3-shaped model at each rank count, median of --repeat runs: every expert in VRAM
#    (--cache-gb 12/N on each of N ranks, filled by a 64-token prompt) and every expert streamed from the
#    machine's disk (--cache-gb 0.6: each token's experts read, page cache bypassed, and copied);
#    the receipt's per-host figures give the time rank 0 waited for the other ranks in a MoE layer
#    and the network's part of it. Each run's ids must equal the one-rank run's.
# Writes OUT/gpu-hosts.md (k3-public-bench/summarize_gpu_hosts.py), with the logs and stats beside
# it (default OUT: $OUT, else gpu-hosts). Exit 1 when an identity check fails. --backend cpu
# --preset bench runs the same on a machine without a GPU (a dry run of this script). Bounded:
# every run is killed after RUN_TIMEOUT seconds (default 300).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
. scripts/portable.sh
bundle='' ranks="1 2 4" repeat=3 tokens=8 backend=cuda preset=k3 model='' out=${OUT:-gpu-hosts}
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) bundle=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --preset) preset=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "run-gpu-hosts-bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
die() { echo "run-gpu-hosts-bench.sh: $*" >&2; exit 1; }
for n in $ranks; do [[ $n =~ ^[1-8]$ ]] || die "--ranks takes rank counts from 1 to 8"; done
[[ $repeat =~ ^[1-9]$ ]] || die "--repeat takes 1 to 9"
[[ $tokens =~ ^[1-9][0-9]?$ ]] || die "--tokens takes 1 to 99"
case $backend in cuda|cpu) ;; *) die "--backend takes cuda or cpu" ;; esac
case $preset in k3|bench) ;; *) die "--preset takes k3 or bench" ;; esac
commit=''
if [ -n "$bundle" ]; then
  bundle=$(cd "$bundle" && pwd) || die "no bundle directory $bundle"
  export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" DELTAFIN_TEXT_REF="$bundle/text-ref"
  [ -f "$bundle/mpi/env.sh" ] && . "$bundle/mpi/env.sh"
  bin=$bundle/deltafin
  commit=$(cat "$bundle/commit")
else
  bin=$root/build/deltafin
fi
[ -x "$bin" ] || die "no $bin (scripts/build.sh, or --bundle DIR from scripts/gpu-bundle.sh)"
command -v mpirun > /dev/null || die "no mpirun (scripts/setup.sh installs Open MPI; a bundle carries it)"
py=$(numpy_python) || exit 1
model=${model:-/tmp/k3-$preset}
mkdir -p "$out" && out=$(cd "$out" && pwd)
rm -f "$out"/identity.txt "$out"/k3-*.json
mpirun=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
max_ranks=1
for n in $ranks; do [ "$n" -gt "$max_ranks" ] && max_ranks=$n; done

# ranks N ARGS...: deltafin ARGS on N ranks (1: no mpirun), at most RUN_TIMEOUT seconds.
ranks_run() {
  local n=$1; shift
  if [ "$n" = 1 ]; then with_timeout "${RUN_TIMEOUT:-300}" "$bin" "$@"
  else with_timeout "${RUN_TIMEOUT:-300}" "${mpirun[@]}" -n "$n" "$bin" "$@"; fi
}
failed=0
# record MODEL RANKS CHECK RESULT: one identity line, tab-separated (RESULT same, or what went wrong).
record() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$out/identity.txt"
  echo "$1, $2 ranks, $3: $4"
  [ "$4" = same ] || failed=1
}
# compare MODEL RANKS CHECK FILE_A FILE_B
compare() {
  if [ ! -s "$5" ]; then record "$1" "$2" "$3" "no-output"
  elif cmp -s "$4" "$5"; then record "$1" "$2" "$3" same
  else record "$1" "$2" "$3" differs; fi
}

# identity DIR NAME ARGS...: ids and logits of every rank count against one rank's; the golden ids.
identity() {
  local dir=$1 name=$2 ids n
  shift 2
  ids=$(csv_range 3 18)
  local common=(--backend "$backend" -m "$dir" --placement none --tokens "$ids" "$@")
  for n in $ranks; do
    ranks_run "$n" run "${common[@]}" -n 16 --ids --ignore-eos --draft off > "$out/$name-$n.ids" 2> "$out/$name-$n.err"
    ranks_run "$n" logits "${common[@]}" --out "$out/$name-$n.npy" >> "$out/$name-$n.err" 2>&1
    [ "$n" = 1 ] && continue
    compare "$name" "$n" ids "$out/$name-1.ids" "$out/$name-$n.ids"
    compare "$name" "$n" logits "$out/$name-1.npy" "$out/$name-$n.npy"
  done
  [ -f "$dir/golden.json" ] || return 0
  local prompt want got
  prompt=$("$py" -c "import json,sys;print(','.join(map(str,json.load(open(sys.argv[1]))['prompt'])))" "$dir/golden.json")
  want=$("$py" -c "import json,sys;print(' '.join(map(str,json.load(open(sys.argv[1]))['generated'])))" "$dir/golden.json")
  got=$(ranks_run "$max_ranks" run --backend "$backend" -m "$dir" --placement none --tokens "$prompt" \
    -n "$(echo "$want" | wc -w | tr -d ' ')" --ids --ignore-eos --draft off "$@" 2>> "$out/$name-golden.err")
  if [ "$(echo "$got" | tr -s ' \n' '  ' | xargs)" = "$want" ]; then record "$name" "$max_ranks" golden same
  else record "$name" "$max_ranks" golden "differs(got:$(echo "$got" | tr -s ' \n' ',,'))"; fi
}

{
  echo "$(DELTAFIN_COMMIT=$commit k3-public-bench/provenance.sh "$bin")"
  echo
  echo '```'
  command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
  "$bin" --version
  mpirun --version | head -1
  [ -n "$bundle" ] && [ -f "$bundle/mpi/cuda-support" ] && echo "Open MPI CUDA support: $(cat "$bundle/mpi/cuda-support")"
  echo '```'
} > "$out/machine.txt"
cat "$out/machine.txt"

# The K3-shaped model is written meanwhile (about a minute on the GPU machine).
gen_pid=''
if [ ! -f "$model/config.json" ]; then
  "$py" tools/make_synthetic_k3.py "$model" --preset "$preset" --force > "$out/make-model.log" 2>&1 &
  gen_pid=$!
fi

# 1. Identity on the bundled model and the golden fixtures (the model fixtures: they keep hidden.npy).
identity models/default default
for dir in tests/fixtures/*/; do
  [ -f "$dir/golden.json" ] && [ -f "$dir/hidden.npy" ] || continue
  identity "${dir%/}" "$(basename "$dir")"
done

# 2. The K3-shaped model: identity, then decode resident and streamed.
if [ -n "$gen_pid" ]; then
  wait "$gen_pid" || die "tools/make_synthetic_k3.py failed: $(tail -1 "$out/make-model.log")"
fi
identity "$model" k3-shaped --cache-gb 0.6
prompt=$(csv_range 5 68)
for mode in resident streamed; do
  for n in $ranks; do
    # Resident: 12 GB of cache over the ranks (the model's experts are 9.2 GB, each rank caches its share).
    if [ "$mode" = resident ]; then args=(--tokens "$prompt" --cache-gb "$(awk -v n="$n" 'BEGIN { print 12 / n }')")
    else args=(--tokens 1 --cache-gb 0.6); fi
    for r in $(seq 1 "$repeat"); do
      base=$out/k3-$mode-$n-$r
      ranks_run "$n" run --backend "$backend" -m "$model" --placement none "${args[@]}" -n "$tokens" --ids --ignore-eos \
        --draft off --stats-json "$base.json" > "$base.ids" 2> "$base.err" || echo "k3-$mode-$n-$r: exit $? ($(tail -1 "$base.err"))"
      [ "$n" = 1 ] && [ "$r" = 1 ] || compare k3-shaped-$mode "$n" "decode ids, run $r" "$out/k3-$mode-1-1.ids" "$base.ids"
    done
  done
done

"$py" k3-public-bench/summarize_gpu_hosts.py "$out" "$model/config.json" > "$out/gpu-hosts.md" || failed=1
cat "$out/gpu-hosts.md"
exit $failed
