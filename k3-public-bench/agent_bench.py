#!/usr/bin/env python3
"""A scripted multi-turn agent conversation against `deltafin serve`: time to first token per turn
with and without kept prefixes (k3-public-bench/run-agent-bench.sh runs it; stdlib only).

Two agents share one long system prompt (an agent's instructions and a tool list as JSON
schemas) and take turns, interleaved: A1 B1 A2 B2 A3 B3 (--turns in all). Each turn after an
agent's first sends its whole history: the previous replies and a tool result with the next
instruction, as an agent framework does. Requests are greedy (temperature 0), streamed, with
--reply-tokens new tokens at most; the time to first token is measured at the client, from
sending the request to the first streamed chunk with content, and read from the server too
(its deltafin_first_token_seconds gauge: prefill and first token).

Arms, each on a fresh server (--port 0), the conversation run --repeat times per arm:
  no-reuse      --no-session-reuse: every prompt prefilled from position 0
  sessions      the default: held sessions, each agent keeps its prefix in memory
  prefix-cache  --prefix-cache DIR (empty at the start) and a --ctx-size that plans the state of
                one conversation only: the other agent's session is dropped to the disk cache at
                each turn and restored from it at its next one
  restarted     --prefix-cache DIR (empty at the start) with the server restarted before every
                turn: each turn finds its prefix on disk, on a server that reads its experts cold
The last two only where the binary has --prefix-cache; no-reuse runs first (its longest prompt
sizes prefix-cache's --ctx-size). Every arm's replies must be identical, turn by turn and repeat
by repeat (exit 1 otherwise).
Prints a JSON line per turn and a Markdown table (--markdown FILE appends it).

  agent_bench.py --binary build/deltafin --model DIR [--arms no-reuse,sessions,prefix-cache,restarted]
                 [--turns 6] [--tools 6] [--reply-tokens 16] [--repeat 3] [--server-flag=--ctx-size=16384 ...]
"""
import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEMORY_HITS = 'deltafin_prefix_hits_total{source="memory"}'
DISK_HITS = 'deltafin_prefix_hits_total{source="disk"}'

TOOL_VERBS = ["read", "write", "list", "search", "run", "diff", "patch", "fetch", "open", "close", "rename", "delete"]
TOOL_NOUNS = ["file", "directory", "test", "commit", "branch", "issue", "log", "process", "symbol", "config"]


def system_prompt(tools):
    """An agent's instructions and `tools` tool definitions (OpenAI function schemas)."""
    defs = []
    for i in range(tools):
        verb, noun = TOOL_VERBS[i % len(TOOL_VERBS)], TOOL_NOUNS[(i // len(TOOL_VERBS) + i) % len(TOOL_NOUNS)]
        defs.append({"type": "function", "function": {
            "name": f"{verb}_{noun}_{i}",
            "description": f"{verb.capitalize()} a {noun} of the workspace and return the result as text; "
                           f"fails with a message naming the {noun} when it does not exist.",
            "parameters": {"type": "object", "required": ["path"], "properties": {
                "path": {"type": "string", "description": f"The {noun}'s path, relative to the workspace root"},
                "limit": {"type": "integer", "description": "Lines at most (default 200)"},
                "recursive": {"type": "boolean", "description": "Descend into directories"}}}}})
    return ("You are a coding agent working in a repository. Think step by step, call one tool at a time, "
            "and answer with a tool call in JSON or with a final answer.\n\n# Tools\n\n" +
            "\n".join(json.dumps(d) for d in defs))


def tool_result(agent, step):
    """The tool output and the next instruction an agent's framework sends after its reply."""
    lines = "\n".join(f"{agent.lower()}/src/module_{step}_{k}.py: {k * 17 + step} lines, last changed {k + step} days ago"
                      for k in range(6))
    return f"Tool result (agent {agent}, step {step}):\n{lines}\nContinue with the next step of the task."


def task(agent):
    return {"A": "Find why the parser test fails on empty input and fix it.",
            "B": "Add a --verbose flag to the command line tool and document it."}[agent]


class Server:
    """A `deltafin serve` on a free port, its stderr in a file (named in the failures)."""

    def __init__(self, binary, model, flags):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="deltafin-agent-bench-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "--draft", "off", *flags],
                                     stderr=self.log)
        match = None
        while match is None and self.proc.poll() is None:
            time.sleep(0.05)
            with open(self.log.name) as f:
                match = re.search(r"on http://([0-9.]+):([0-9]+)", f.read())
        if not match:
            sys.exit(f"agent_bench: the server did not start ({' '.join(flags)}): {self.log_tail()}")
        self.host, self.port = match.group(1), int(match.group(2))

    def log_tail(self):
        with open(self.log.name) as f:
            return " | ".join(f.read().strip().splitlines()[-5:])

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        os.unlink(self.log.name)

    def chat(self, messages, max_tokens):
        """Returns (reply, seconds from sending to the first chunk with content, usage)."""
        body = json.dumps({"messages": messages, "temperature": 0, "max_tokens": max_tokens, "stream": True,
                           "stream_options": {"include_usage": True}})
        conn = http.client.HTTPConnection(self.host, self.port, timeout=1800)
        start = time.perf_counter()
        try:
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
        except OSError as e:
            sys.exit(f"agent_bench: POST: {e} (exit status {self.proc.poll()}; server log {self.log.name}: {self.log_tail()})")
        if response.status != 200:
            sys.exit(f"agent_bench: status {response.status}: {response.read()!r}")
        text, first, usage = "", None, None
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                sys.exit(f"agent_bench: error event: {chunk['error']}")
            for choice in chunk.get("choices", []):
                piece = choice.get("delta", {}).get("content") or ""
                if piece and first is None:
                    first = time.perf_counter() - start
                text += piece
            usage = chunk.get("usage") or usage
        conn.close()
        if first is None:  # an empty reply: its first chunk is the end
            first = time.perf_counter() - start
        return text, first, usage

    def metric(self, name):
        try:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
            conn.close()
        except OSError as e:
            sys.exit(f"agent_bench: GET /metrics: {e} (exit status {self.proc.poll()}; server log {self.log.name}: {self.log_tail()})")
        match = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
        return float(match.group(1)) if match else None


class Arm:
    """Starts the arm's server(s): one for the whole conversation, or (restarted) one per turn."""

    def __init__(self, name, args, cache_dir, one_session_ctx):
        self.args, self.restart = args, name == "restarted"
        flags = [f for f in args.server_flag]
        if name == "no-reuse":
            flags.append("--no-session-reuse")
        if name in ("prefix-cache", "restarted"):
            shutil.rmtree(cache_dir, ignore_errors=True)
            flags += ["--prefix-cache", cache_dir]
        if name == "prefix-cache":  # room in the plan for one conversation's state
            flags = [f for i, f in enumerate(flags) if f != "--ctx-size" and (i == 0 or flags[i - 1] != "--ctx-size")]
            flags += ["--ctx-size", str(one_session_ctx)]
        self.flags, self.server, self.counters = flags, None, {}

    def chat(self, messages, max_tokens):
        if self.server is None or self.restart:
            self.stop()
            self.server = Server(self.args.binary, self.args.model, self.flags)
        reply, first, usage = self.server.chat(messages, max_tokens)
        return reply, first, usage, self.server.metric("deltafin_first_token_seconds")

    def stop(self):
        if self.server:
            for key in ("deltafin_sessions_dropped_total", MEMORY_HITS, DISK_HITS):
                self.counters[key] = self.counters.get(key, 0) + (self.server.metric(key) or 0)
            self.server.stop()
            self.server = None


def conversation(arm, args):
    """Runs the scripted turns; returns one row per turn."""
    system = system_prompt(args.tools)
    histories = {a: [{"role": "system", "content": system}, {"role": "user", "content": task(a)}] for a in "AB"}
    steps = {"A": 0, "B": 0}
    rows = []
    for t in range(args.turns):
        agent = "AB"[t % 2]
        steps[agent] += 1
        messages = histories[agent]
        reply, first, usage, server_first = arm.chat(messages, args.reply_tokens)
        rows.append({"turn": f"{agent}{steps[agent]}", "ttft": first, "server_ttft": server_first,
                     "prompt": usage["prompt_tokens"], "cached": usage["prompt_tokens_details"]["cached_tokens"],
                     "reply": reply})
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": tool_result(agent, steps[agent])}]
    return rows


def run_arm(name, args, cache_dir, one_session_ctx):
    arm = Arm(name, args, cache_dir, one_session_ctx)
    try:
        rows = conversation(arm, args)
    finally:
        arm.stop()
    return rows, arm.counters


def has_prefix_cache(binary):
    out = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True).stdout
    return "--prefix-cache" in out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=os.path.join(ROOT, "build/deltafin"))
    parser.add_argument("--model", default=os.path.join(ROOT, "models/default"))
    parser.add_argument("--label", default="", help="the model's name in the table")
    parser.add_argument("--arms", default="no-reuse,sessions,prefix-cache,restarted")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--tools", type=int, default=6)
    parser.add_argument("--reply-tokens", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--server-flag", action="append", default=[], help="passed to serve (repeatable; --x=y is split)")
    parser.add_argument("--markdown", help="append the table to this file")
    args = parser.parse_args()
    args.server_flag = [p for f in args.server_flag for p in f.split("=", 1)]
    arms = [a for a in args.arms.split(",") if a]
    known = ["no-reuse", "sessions", "prefix-cache", "restarted"]
    for a in arms:
        if a not in known:
            sys.exit(f"agent_bench: --arms: unknown arm '{a}' ({', '.join(known)})")
    arms = [a for a in known if a in arms]  # no-reuse first: its prompts size prefix-cache's --ctx-size
    if not has_prefix_cache(args.binary):
        for a in ("prefix-cache", "restarted"):
            if a in arms:
                print(f"agent_bench: this binary has no --prefix-cache: the {a} arm is skipped", file=sys.stderr)
                arms.remove(a)

    cache_dir = tempfile.mkdtemp(prefix="deltafin-agent-bench-cache-")
    results = {a: [] for a in arms}  # arm -> [rows of each repeat]
    counters = {a: {} for a in arms}  # arm -> summed /metrics counters
    one_session_ctx = 8192
    try:
        for r in range(args.repeat):  # the arms interleaved, so that a drift of the machine falls on each
            for arm in arms:
                rows, seen = run_arm(arm, args, cache_dir, one_session_ctx)
                results[arm].append(rows)
                for k, v in seen.items():
                    counters[arm][k] = counters[arm].get(k, 0) + v
                if r == 0 and arm == arms[0]:
                    one_session_ctx = max(row["prompt"] for row in rows) + args.reply_tokens + 8
                for row in rows:
                    print(json.dumps({"arm": arm, "repeat": r, **{k: v for k, v in row.items() if "reply" not in k}}), flush=True)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)

    # Identical replies across arms and repeats (greedy decoding is exact; a difference is a bug).
    reference = [row["reply"] for row in results[arms[0]][0]]
    for arm in arms:
        for r, rows in enumerate(results[arm]):
            for t, row in enumerate(rows):
                if row["reply"] != reference[t]:
                    sys.exit(f"agent_bench: {arm}, repeat {r}, turn {row['turn']}: the reply differs from "
                             f"{arms[0]}'s: {row['reply']!r} vs {reference[t]!r}")

    turns = [row["turn"] for row in results[arms[0]][0]]
    label = args.label or os.path.basename(os.path.normpath(args.model))
    lines = [f"### {label}", "",
             f"{args.turns} turns ({', '.join(turns)}), {args.tools} tools in the system prompt, {args.reply_tokens} reply tokens, "
             f"{args.repeat} repeats; server flags: `--draft off {' '.join(args.server_flag)}`. Replies identical across arms: yes.", "",
             "Time to first token at the client, median ms (prompt tokens / tokens kept, from the response's usage):", "",
             "| arm | " + " | ".join(turns) + " | sum |", "|---|" + "---|" * (len(turns) + 1)]
    for arm in arms:
        cells = []
        for t in range(len(turns)):
            ttft = statistics.median(rows[t]["ttft"] for rows in results[arm])
            row = results[arm][0][t]
            cells.append(f"{1e3 * ttft:.0f} ({row['prompt']}/{row['cached']})")
        total = statistics.median(sum(row["ttft"] for row in rows) for rows in results[arm])
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {1e3 * total:.0f} |")
    def per_run(arm, key):
        return counters[arm].get(key, 0) / args.repeat

    kept = "; ".join(f"{arm}: {per_run(arm, MEMORY_HITS):.1f} from memory, {per_run(arm, DISK_HITS):.1f} from disk, "
                     f"{per_run(arm, 'deltafin_sessions_dropped_total'):.1f} sessions dropped" for arm in arms)
    lines += ["", f"Prefixes kept per conversation (/metrics, mean over the repeats): {kept}."]
    if "prefix-cache" in arms:
        lines += ["", f"prefix-cache ran with `--ctx-size {one_session_ctx}` (the longest prompt and its reply)."]
    lines += ["", "Prefill and first token at the server (deltafin_first_token_seconds), median ms:", "",
              "| arm | " + " | ".join(turns) + " |", "|---|" + "---|" * len(turns)]
    for arm in arms:
        cells = [f"{1e3 * statistics.median(rows[t]['server_ttft'] for rows in results[arm]):.0f}" for t in range(len(turns))]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
