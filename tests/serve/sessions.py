#!/usr/bin/env python3
"""`deltafin serve` holds several sessions (issue 36, item 4) and keeps prefixes on disk, on loopback.

Two conversations that share a long system prompt take turns, interleaved (A1 B1 A2 B2 A3): B1
departs inside A's first prompt, so it gets a fresh session and A's stays; from the second turn on,
each turn keeps its own conversation's whole history (usage.prompt_tokens_details.cached_tokens is
the previous turn's prompt and reply, and /metrics counts the hits and the positions they saved)
and prefills only the new tokens. Greedy replies equal those of a server with --no-session-reuse,
which prefills every prompt from the start. Then a server whose --ctx-size plans room for one such
conversation only drops the least recently used session (deltafin_sessions_dropped_total) and its
replies are still the same. Then with --prefix-cache DIR: the same replies, states saved; and a
restarted server on the same DIR finds every turn's prefix on disk (even a first turn finds its
own saved prompt) with the same replies.
The same on K3 (the k3_tiny fixture with k2_tiny's tokenizer), whose prompts are saved at all but
their last position, so that a first turn run again on a restarted server finds its prompt too.
--prefix-cache with --no-session-reuse is refused in one line.
Usage: sessions.py DELTAFIN_BINARY MODEL_DIR FIXTURES_DIR
"""
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

failures = []


class Server:
    def __init__(self, binary, model, flags):
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log")
        self.proc = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "--draft", "off", *flags], stderr=self.log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with open(self.log.name) as f:
                m = re.search(r"on http://([0-9.]+):([0-9]+)", f.read())
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.proc.kill()
        sys.exit("server did not start: " + open(self.log.name).read())

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def request(self, method, path, body=None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        conn.request(method, path, body=json.dumps(body) if body else None,
                     headers={"Content-Type": "application/json"} if body else {})
        response = conn.getresponse()
        data = response.read().decode()
        conn.close()
        if response.status != 200:
            sys.exit(f"{method} {path}: status {response.status}: {data}")
        return data

    def chat(self, messages):
        r = json.loads(self.request("POST", "/v1/chat/completions",
                                    {"messages": messages, "temperature": 0, "max_tokens": 12}))
        return r["choices"][0]["message"]["content"], r["usage"]

    def metrics(self):
        text = self.request("GET", "/metrics")
        return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(deltafin_\S+) (\S+)$", text, re.M)}


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what, file=sys.stderr)


def system_prompt(tools):
    return "You are a coding agent. Tools:\n" + "\n".join(
        f'{{"name": "tool_{i}", "description": "reads file number {i} of the workspace", "parameters": {{"path": "string"}}}}'
        for i in range(tools))


TASKS = {"A": "Fix the failing parser test.", "B": "Document the --verbose flag."}
ORDER = ["A", "B", "A", "B", "A"]


def conversation(server, tools):
    """Runs the interleaved turns; returns [(agent, reply, usage, previous turn's prompt + reply tokens)]."""
    histories = {a: [{"role": "system", "content": system_prompt(tools)}, {"role": "user", "content": TASKS[a]}] for a in "AB"}
    steps = {"A": 0, "B": 0}
    rows = []
    for agent in ORDER:
        steps[agent] += 1
        messages = histories[agent]
        reply, usage = server.chat(messages)
        rows.append((agent, reply, usage))
        messages += [{"role": "assistant", "content": reply},
                     {"role": "user", "content": f"Tool result {steps[agent]}: ok. Next step."}]
    return rows


def check_model(binary, model, name, tools):
    """Every check above on one model; failures name it."""
    def check(ok, what):
        if not ok:
            failures.append(f"{name}: {what}")
            print(f"FAIL: {name}: {what}", file=sys.stderr)

    fresh = Server(binary, model, ["--no-session-reuse"])
    try:
        expected = conversation(fresh, tools)
    finally:
        fresh.stop()
    check(all(u["prompt_tokens_details"]["cached_tokens"] == 0 for _, _, u in expected),
          "--no-session-reuse kept a prefix")

    held = Server(binary, model, [])
    try:
        rows = conversation(held, tools)
        metrics = held.metrics()
    finally:
        held.stop()
    for i, ((agent, reply, usage), (_, want, _)) in enumerate(zip(rows, expected)):
        check(reply == want, f"turn {i} ({agent}): reply {reply!r} differs from --no-session-reuse's {want!r}")
    # Turn 1 of each agent keeps nothing (B1 departs inside A's first prompt: a fresh session);
    # each later turn keeps its own previous prompt and reply: everything but the new message.
    last = {}
    saved = 0
    for i, (agent, reply, usage) in enumerate(rows):
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        if agent not in last:
            check(cached == 0, f"turn {i} ({agent}): first turn kept {cached} positions")
        else:
            previous_prompt, previous_completion = last[agent]
            check(cached >= previous_prompt, f"turn {i} ({agent}): kept {cached} positions, fewer than the previous "
                                             f"prompt's {previous_prompt}")
            check(cached <= previous_prompt + previous_completion and cached < usage["prompt_tokens"],
                  f"turn {i} ({agent}): kept {cached} positions of {usage['prompt_tokens']}")
            saved += cached
        last[agent] = (usage["prompt_tokens"], usage["completion_tokens"])
    hits = metrics.get('deltafin_prefix_hits_total{source="memory"}')
    positions = metrics.get('deltafin_prefix_positions_saved_total{source="memory"}')
    check(hits == 3, f"prefix hits in /metrics: want 3, got {hits}")
    check(positions == saved, f"positions saved in /metrics: want {saved}, got {positions}")
    check(metrics.get("deltafin_sessions_held") == 2, "sessions held: want 2")
    check(metrics.get("deltafin_sessions_dropped_total") == 0, "sessions dropped: want 0")
    check(0 < metrics.get("deltafin_state_bytes", 0) <= metrics.get("deltafin_state_budget_bytes", 0),
          "state bytes not within the budget")

    # Room for one conversation only: the other's session is dropped each time, replies unchanged.
    tight = Server(binary, model, ["--ctx-size", str(rows[-1][2]["prompt_tokens"] + 64)])
    try:
        tight_rows = conversation(tight, tools)
        metrics = tight.metrics()
    finally:
        tight.stop()
    for i, ((agent, reply, _), (_, want, _)) in enumerate(zip(tight_rows, expected)):
        check(reply == want, f"tight budget, turn {i} ({agent}): reply {reply!r} differs from {want!r}")
    check(metrics.get("deltafin_sessions_dropped_total", 0) >= 1, "tight budget: no session dropped")
    check(metrics.get("deltafin_sessions_held") == 1, "tight budget: more than one session held")

    # The prefix cache: the same replies; a restarted server finds each turn's prefix on disk.
    with tempfile.TemporaryDirectory(prefix="deltafin-sessions-cache-") as cache:
        for run in ("first", "restarted"):
            server = Server(binary, model, ["--prefix-cache", cache])
            try:
                cache_rows = conversation(server, tools)
                metrics = server.metrics()
            finally:
                server.stop()
            for i, ((agent, reply, _), (_, want, _)) in enumerate(zip(cache_rows, expected)):
                check(reply == want, f"--prefix-cache ({run} server), turn {i} ({agent}): reply {reply!r} differs from {want!r}")
            check(metrics.get("deltafin_prefix_cache_saves_total", 0) > 0 or run == "restarted",
                  f"--prefix-cache ({run} server): nothing saved")
        # Each agent's first turn restores from disk, the later ones continue the session in memory.
        disk_hits = metrics.get('deltafin_prefix_hits_total{source="disk"}', 0)
        check(disk_hits == 2, f"restarted server: {disk_hits} prefixes found on disk, want 2")
        for i, (agent, _, usage) in enumerate(cache_rows):
            check(usage["prompt_tokens_details"]["cached_tokens"] > 0, f"restarted server, turn {i} ({agent}): nothing kept")
        kept = metrics.get('deltafin_prefix_positions_saved_total{source="disk"}', 0) + \
            metrics.get('deltafin_prefix_positions_saved_total{source="memory"}', 0)
        check(kept == sum(u["prompt_tokens_details"]["cached_tokens"] for _, _, u in cache_rows),
              "restarted server: positions saved in /metrics differ from the usage's cached tokens")



def main():
    binary, model, fixtures = sys.argv[1], sys.argv[2], sys.argv[3]
    # --prefix-cache with --no-session-reuse (which prefills every prompt from the start): refused
    # in one line naming the flag, exit 1, before the model loads.
    with tempfile.TemporaryDirectory(prefix="deltafin-sessions-refused-") as d:
        refused = subprocess.run([binary, "serve", "-m", model, "--port", "0", "--no-session-reuse", "--prefix-cache", d],
                                 capture_output=True, text=True, timeout=60)
        lines = refused.stderr.strip().splitlines()
        check(refused.returncode == 1 and len(lines) == 1 and "--prefix-cache" in lines[0],
              f"--prefix-cache with --no-session-reuse: exit {refused.returncode}, {refused.stderr!r}")
    check_model(binary, model, "bundled model (K2)", 40)
    # K3 (its recurrent state is saved at all but a prompt's last position): the k3_tiny fixture
    # with k2_tiny's tokenizer (both have 320 tokens).
    with tempfile.TemporaryDirectory(prefix="deltafin-sessions-k3-") as k3:
        for f in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(fixtures, "k3_tiny", f), k3)
        for f in ("tiktoken.model", "tokenizer_config.json"):
            shutil.copy(os.path.join(fixtures, "k2_tiny", f), k3)
        check_model(binary, k3, "k3_tiny", 8)  # (a byte-level tokenizer, a context of 4,096)
    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("sessions: ok")


if __name__ == "__main__":
    main()
