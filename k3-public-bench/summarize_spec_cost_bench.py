#!/usr/bin/env python3
"""Summarizes run-spec-cost-bench.sh: the JSON lines of spec_cost_bench runs -> a Markdown table
on stdout. Per arm (acceptance, k, adaptive, confidence) the medians over runs; per acceptance,
adaptive / the best fixed k (k = 0 included) by median tokens/s. Python stdlib only.

usage: summarize_spec_cost_bench.py RUN.jsonl...
"""
import collections
import json
import os
import statistics
import sys

arms = collections.OrderedDict()
plain = []
for path in sys.argv[1:]:
    for line in open(path):
        if not line.startswith("{"):
            continue
        a = json.loads(line)
        if a["k"] == 0:
            plain.append(a)
        else:
            arms.setdefault((a["accept"], a["k"], a["adaptive"], a["confidence"]), []).append(a)


def med(rs, f):
    return statistics.median(f(r) for r in rs)


def row(label, accept, rs):
    return (f"| {accept:.1f} | {label} | {med(rs, lambda r: r['tok_s']):.3f} | {len(rs)} "
            f"| {med(rs, lambda r: r['accepted'] / r['drafted'] if r['drafted'] else 0):.2f} "
            f"| {med(rs, lambda r: r['committed'] / r['steps']):.2f} | {med(rs, lambda r: r['verify_passes'] / r['steps']):.2f} "
            f"| {med(rs, lambda r: r['spine_bytes_per_token']) / 1e6:.1f} | {med(rs, lambda r: r['expert_bytes_per_token']) / 1e6:.1f} "
            f"| {'yes' if all(r['same_ids'] for r in rs) else 'NO'} |")


md = ["# The verify loop's cost model against fixed k (k3-public-bench/run-spec-cost-bench.sh)", "",
      os.environ.get("PROVENANCE", "(machine and commit not recorded)"), "",
      f"Command: `{os.environ.get('COMMAND', '?')}` (as root: it drops the page cache before each run).", "",
      "The synthetic K3-shaped bench model (tools/make_synthetic_k3.py --preset bench) with its spine streamed, "
      "experts and spine read from the model directory with O_DIRECT, fresh engine and cold cache per arm, greedy. "
      "The scripted drafter proposes the target's own greedy continuation; guess q holds with probability "
      "p_q = accept + 0.25 u_q (u_q in [-1, 1] fixed per position, p clamped to [0.02, 0.98]). Confidence: none (the "
      "alpha^j model), true (reports p_q), sqrt (reports sqrt(p_q): overconfident). Adaptive arms have max k 8. "
      "Medians over the runs (n); accepted = accepted / drafted; spine and expert MB are per committed token.", "",
      "| accept | arm | tok/s | n | accepted | committed per pass | verify passes per pass | spine MB/token | expert MB/token | ids = plain |",
      "|---|---|---|---|---|---|---|---|---|---|"]
if plain:
    md.append(row("plain (k = 0)", 0, plain))
ratios = []
for accept in sorted({k[0] for k in arms}):
    fixed = {k: rs for k, rs in arms.items() if k[0] == accept and not k[2]}
    best_k, best = 0, med(plain, lambda r: r["tok_s"]) if plain else 0
    for key, rs in fixed.items():
        md.append(row(f"fixed k = {key[1]}", accept, rs))
        if med(rs, lambda r: r["tok_s"]) > best:
            best_k, best = key[1], med(rs, lambda r: r["tok_s"])
    for key, rs in arms.items():
        if key[0] == accept and key[2]:
            md.append(row(f"adaptive, confidence {key[3]}", accept, rs))
            ratios.append((accept, key[3], med(rs, lambda r: r["tok_s"]) / best, best_k,
                           med(rs, lambda r: r["confidence_cuts"])))
md += ["", "Adaptive against the best fixed k of the same acceptance (k = 0 included), median tokens/s:", "",
       "| accept | confidence | adaptive / best fixed | best fixed k | drafts cut by confidence (median) |", "|---|---|---|---|---|"]
for accept, conf, ratio, k, cuts in ratios:
    md.append(f"| {accept:.1f} | {conf} | {ratio:.3f} | {k} | {cuts:.0f} |")
print("\n".join(md))
