#!/usr/bin/env bash
# The multi-turn agent benchmark (issue 36): two agents sharing a long system prompt with a tool
# list take six turns, interleaved, against `deltafin serve` (k3-public-bench/agent_bench.py);
# time to first token per turn with every prompt prefilled from the start (--no-session-reuse),
# with held sessions (the default), with --prefix-cache and room in memory for one conversation
# (the other goes through the disk cache), and with --prefix-cache on a server restarted before
# every turn. Greedy; replies identical across arms or it fails. On
#   - the bundled model (models/default), and
#   - the synthetic K3-shaped bench model (tools/make_synthetic_k3.py --preset bench, with the
#     bundled model's vocabulary, 4,096, and its tokenizer copied in, so that the server can
#     take chat requests; written under WORK_DIR once, ~3.3 GB).
# Results: k3-public-bench/results/agent-bench.md with the command and the provenance line.
#   k3-public-bench/run-agent-bench.sh [--repeat 3] [--turns 6] [--work DIR] [--out FILE] [--no-k3]
# (about 20 minutes on 2 cores with the defaults). DELTAFIN_BINARY: another binary than
# build/deltafin (a copy under another name is safe from tests that kill every `deltafin`).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${DELTAFIN_BINARY:-$root/build/deltafin}
repeat=3 turns=6 work=/var/tmp/deltafin-agent-bench k3=1
out=$root/k3-public-bench/results/agent-bench.md
# Per model: tools in the system prompt, reply tokens, serve flags. The K3-shaped model's state
# (latent cache of its MLA layers, KDA state with rewind snapshots) is larger per session: a
# --ctx-size of 32768 plans the state share that two conversations of this length are held in.
# Its prefill runs at tens of tokens a second on 2 cores: a shorter system prompt keeps the run
# within minutes.
default_args="--tools 8 --reply-tokens 24"
k3_args="--tools 1 --reply-tokens 8 --server-flag=--ctx-size=32768"
while [ $# -gt 0 ]; do
  case $1 in
    --repeat) repeat=$2; shift 2 ;;
    --turns) turns=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-k3) k3=0; shift ;;
    *) echo "run-agent-bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "run-agent-bench.sh: build first (scripts/build.sh)" >&2; exit 1; }
py=python3
"$py" -c "import numpy" 2>/dev/null || py=/usr/bin/python3  # (the model writer needs numpy)

{
  "$root/k3-public-bench/provenance.sh" "$bin"
  echo
  echo "# Agent benchmark: time to first token per turn, two agents interleaved"
  echo
  echo "Command: \`k3-public-bench/run-agent-bench.sh --repeat $repeat --turns $turns\`"
  echo "(k3-public-bench/agent_bench.py against \`deltafin serve --draft off\`, greedy, streamed: the time from"
  echo "sending a request to its first chunk with content, at the client). Turn A2 is agent A's second turn; each"
  echo "agent's turn after its first sends its whole history. Arms: no-reuse = \`--no-session-reuse\` (every"
  echo "prompt prefilled from position 0); sessions = the default (each agent's session held in memory);"
  echo "prefix-cache = \`--prefix-cache DIR\` (empty at the start) with a \`--ctx-size\` that plans the state of"
  echo "one conversation, so that each agent's session is dropped to DIR and restored from it at its next turn;"
  echo "restarted = \`--prefix-cache DIR\` (empty at the start) on a server restarted before every turn (each"
  echo "turn also reads its experts cold). Medians of $repeat runs, the arms interleaved; each run on a fresh"
  echo "server (its first turn reads the experts cold)."
  echo
} > "$out.tmp"

"$py" "$root/k3-public-bench/agent_bench.py" --binary "$bin" --model "$root/models/default" --label "bundled model (models/default)" \
  --turns "$turns" --repeat "$repeat" $default_args --markdown "$out.tmp"

if [ "$k3" = 1 ]; then
  model=$work/k3-bench-v4096
  if [ ! -f "$model/tokenizer.json" ]; then
    mkdir -p "$work"
    nice "$py" "$root/tools/make_synthetic_k3.py" "$model" --preset bench --vocab 4096 >/dev/null
    cp "$root/models/default/tokenizer.json" "$root/models/default/tokenizer_config.json" "$model/"
  fi
  "$py" "$root/k3-public-bench/agent_bench.py" --binary "$bin" --model "$model" \
    --label "K3-shaped bench model (make_synthetic_k3.py --preset bench --vocab 4096)" \
    --turns "$turns" --repeat "$repeat" $k3_args --markdown "$out.tmp"
fi
mv "$out.tmp" "$out"
cat "$out"
