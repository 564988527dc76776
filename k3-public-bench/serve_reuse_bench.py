#!/usr/bin/env python3
"""Time to first token of a conversation's second turn on `deltafin serve`, with the session
kept between requests (the default: the history's KV cache is reused, only the new turn is
prefilled) and without it (--no-session-reuse: the whole history is prefilled again).

Each repeat starts from a fresh history: turn 1 is a long system message (synthetic Python
source, --history-lines lines) and a question; turn 2 adds the reply and a follow-up. Turn 2 is
timed at the client (request sent -> first streamed token) and at the server (its
deltafin_first_token_seconds gauge); the median of --repeat runs is written to a Markdown file
named after the machine, CPU, SIMD target and commit, with the provenance line in it.

  k3-public-bench/serve_reuse_bench.py [--model DIR] [--history-lines 120] [--repeat 5] [--out DIR]
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_server(binary, model, extra):
    proc = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "--draft", "off", *extra],
                            stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    match = re.search(r"on http://([0-9.]+):([0-9]+)", line)
    if not match:
        proc.kill()
        sys.exit(f"serve_reuse_bench: the server did not start: {line}")
    return proc, match.group(1), int(match.group(2))


def streamed_chat(host, port, messages, max_tokens):
    """Returns (reply text, seconds from sending to the first token, usage)."""
    body = json.dumps({"model": "default", "messages": messages, "temperature": 0, "max_tokens": max_tokens,
                       "stream": True, "stream_options": {"include_usage": True}})
    conn = http.client.HTTPConnection(host, port, timeout=600)
    start = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        sys.exit(f"serve_reuse_bench: status {response.status}: {response.read()!r}")
    text, first, usage = "", None, None
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk["choices"] and first is None:
            first = time.perf_counter() - start
        for choice in chunk["choices"]:
            text += choice["delta"].get("content") or ""
        usage = chunk.get("usage") or usage
    conn.close()
    return text, first, usage


def server_first_token_seconds(host, port):
    conn = http.client.HTTPConnection(host, port, timeout=60)
    conn.request("GET", "/metrics")
    metrics = conn.getresponse().read().decode()
    conn.close()
    return float(re.search(r"^deltafin_first_token_seconds (\S+)$", metrics, re.M).group(1))


def history(lines, repeat_index):
    source = "".join(f"def f{repeat_index}_{i}(x):\n    return x * {i} + {i * i}\n\n" for i in range(lines))
    return [{"role": "system", "content": "You review this module:\n" + source},
            {"role": "user", "content": "What does f0_3 return for 2?"}]


def measure(binary, model, reuse, args):
    proc, host, port = start_server(binary, model, [] if reuse else ["--no-session-reuse"])
    rows = []
    try:
        for r in range(args.repeat):
            messages = history(args.history_lines, r)  # a history of its own each time: nothing left over
            reply, _, usage1 = streamed_chat(host, port, messages, args.reply_tokens)
            messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "And for 3?"}]
            _, first, usage2 = streamed_chat(host, port, messages, args.reply_tokens)
            rows.append({"client": first, "server": server_first_token_seconds(host, port),
                         "prompt": usage2["prompt_tokens"], "cached": usage2["prompt_tokens_details"]["cached_tokens"],
                         "turn1_prompt": usage1["prompt_tokens"]})
    finally:
        proc.terminate()
        proc.wait()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=os.path.join(ROOT, "models/default"))
    parser.add_argument("--binary", default=os.path.join(ROOT, "build/deltafin"))
    parser.add_argument("--history-lines", type=int, default=120)
    parser.add_argument("--reply-tokens", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(ROOT, "k3-public-bench/results/serve-reuse"))
    args = parser.parse_args()

    provenance = subprocess.run([os.path.join(ROOT, "k3-public-bench/provenance.sh"), args.binary],
                                capture_output=True, text=True, check=True).stdout.strip()
    arms = {"reuse": measure(args.binary, args.model, True, args),
            "no reuse (--no-session-reuse)": measure(args.binary, args.model, False, args)}

    lines = ["# Turn-2 time to first token: session reuse", "", provenance, "",
             f"Command: `k3-public-bench/serve_reuse_bench.py --history-lines {args.history_lines} "
             f"--reply-tokens {args.reply_tokens} --repeat {args.repeat}` (model {os.path.basename(args.model)}, "
             "greedy, no drafter, streamed).", "",
             "| arm | turn-2 prompt tokens | kept from turn 1 | TTFT at the client (median, ms) | "
             "prefill + first token at the server (median, ms) | runs (client ms) |",
             "|---|---|---|---|---|---|"]
    for name, rows in arms.items():
        lines.append(f"| {name} | {rows[0]['prompt']} | {statistics.median(r['cached'] for r in rows):.0f} | "
                     f"{1e3 * statistics.median(r['client'] for r in rows):.1f} | "
                     f"{1e3 * statistics.median(r['server'] for r in rows):.1f} | "
                     f"{', '.join('%.1f' % (1e3 * r['client']) for r in rows)} |")
    report = "\n".join(lines) + "\n"

    match = re.search(r"CPU: (.*?), \d+ cores.*?SIMD: ([^ ;]+).*commit (\S+?)\.$", provenance)
    cpu, simd, commit = (match.group(1), match.group(2), match.group(3)) if match else ("cpu", "simd", "commit")
    slug = lambda s: re.sub(r"[^A-Za-z0-9.]+", "-", s).strip("-")
    machine = f"{os.uname().sysname}-{os.uname().machine}"
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{slug(machine)}_{slug(cpu)}_{slug(simd)}_{slug(commit)}.md")
    with open(path, "w") as f:
        f.write(report)
    print(report)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
