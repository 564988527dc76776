#!/usr/bin/env python3
"""Summarizes run-spec-bench.sh: WORK/*.json (deltafin run --stats-json) -> OUT/results.md and
results.csv. Arms are named <model>-<prompt>-<mode>; each mode is compared with the 'off' arm of
the same model and prompt, whose ids it must equal. Python stdlib only.

usage: summarize_spec_bench.py WORK OUT TOKENS
"""
import collections
import csv
import glob
import json
import os
import re
import statistics
import sys

work, out, tokens = sys.argv[1:4]
runs = collections.defaultdict(list)
for path in glob.glob(os.path.join(work, "*.*.json")):
    m = re.match(r"(.+)\.\d+\.json$", os.path.basename(path))
    if m:
        runs[m.group(1)].append(json.load(open(path)))


def tok_s(r):
    return len(r["ids"]) / (r["decode"]["seconds"] + 1e-12)  # committed tokens per decode second


rows = []
for name, rs in sorted(runs.items()):
    model, prompt, mode = re.match(r"(.+?)-(.+)-(off|draft-k4|draft|ngram)$", name).groups()
    med = sorted(rs, key=tok_s)[len(rs) // 2]
    sp, dec = med["speculative"], med["decode"]
    rows.append({"arm": name, "model": model, "prompt": prompt, "mode": mode, "tok_s": statistics.median(map(tok_s, rs)),
                 "runs": [tok_s(r) for r in rs], "accept": sp["accepted"] / sp["drafted"] if sp["drafted"] else 0.0,
                 "per_pass": sp["committed"] / sp["steps"] if sp["steps"] else 1.0,
                 "union": sp["decode_expert_runs"] / max(sp["steps"], 1) / max(sp["moe_layers"], 1),
                 "bytes_per_token": dec["expert_bytes"] / max(sp["committed"], 1),
                 "ids": {r["ids_xxh3"] for r in rs}})
base = {(r["model"], r["prompt"]): r for r in rows if r["mode"] == "off"}
with open(os.path.join(out, "results.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["arm", "model", "prompt", "mode", "decode_tok_s", "speedup", "acceptance", "tokens_per_pass",
                "experts_per_layer_per_pass", "expert_bytes_per_token", "ids_match_plain"])
    for r in rows:
        b = base[(r["model"], r["prompt"])]
        r["speedup"] = r["tok_s"] / b["tok_s"]
        r["same"] = r["ids"] == b["ids"] and len(r["ids"]) == 1
        w.writerow([r["arm"], r["model"], r["prompt"], r["mode"], f"{r['tok_s']:.3f}", f"{r['speedup']:.3f}",
                    f"{r['accept']:.3f}", f"{r['per_pass']:.3f}", f"{r['union']:.2f}", int(r["bytes_per_token"]), r["same"]])

# One line per (model, prompt kind, mode): medians summed over the prompts of that kind.
groups = collections.OrderedDict()
for r in rows:
    kind = re.sub(r"\d+$", "", r["prompt"])
    groups.setdefault((r["model"], kind, r["mode"]), []).append(r)
md = ["# Speculative decoding benchmark (k3-public-bench/run-spec-bench.sh)", "", os.environ.get("PROVENANCE", "(machine and commit not recorded)"), "",
      f"Greedy, {tokens} new tokens per run, median of the runs per prompt; speed-up = tokens/s against the plain "
      "('off') arm of the same prompts, which every arm's ids must equal. bundled: models/default (36 M MoE, INT4 "
      "experts, all in RAM) with models/default-draft or prompt lookup; code prompts are where its draft is accepted, "
      "random-token prompts where it is not. k3synth: the synthetic K3-shaped model, storage-bound on one drive "
      "throttled by the blkio cgroup, with prompt lookup on a repetitive and a random prompt. draft = adaptive k; "
      "draft-k4 = always 4 guesses (--no-adaptive).", "",
      "| model | prompts | drafter | decode tok/s | speed-up | guesses accepted | tokens per target pass | experts per layer per pass | expert MB per token | ids = plain |",
      "|---|---|---|---|---|---|---|---|---|---|"]
for (model, kind, mode), rs in groups.items():
    total = sum(r["tok_s"] for r in rs)
    plain = sum(base[(r["model"], r["prompt"])]["tok_s"] for r in rs)
    md.append(f"| {model} | {kind} ({len(rs)}) | {mode} | {total / len(rs):.2f} | {total / plain:.3f}x "
              f"| {statistics.mean(r['accept'] for r in rs):.2f} | {statistics.mean(r['per_pass'] for r in rs):.2f} "
              f"| {statistics.mean(r['union'] for r in rs):.1f} | {statistics.mean(r['bytes_per_token'] for r in rs) / 1e6:.2f} "
              f"| {'yes' if all(r['same'] for r in rs) else 'NO'} |")
scripted = os.path.join(work, "scripted.jsonl")
if os.path.exists(scripted):
    arms = [json.loads(line) for line in open(scripted) if line.startswith("{")]
    md += ["", "## Storage-bound, drafts of controlled acceptance", "",
           "k3synth on one throttled drive, --cache-gb 0.5, cold cache per arm (k3-public-bench/spec_storage_bench.cpp): "
           "a scripted drafter proposes the target's own greedy continuation, each guess replaced by a wrong token with "
           "probability 1 - accept. Expert MB per token = expert bytes read during decode / committed tokens.", "",
           "| arm | accept | k | decode tok/s | speed-up | guesses accepted | tokens per pass | experts per pass (all layers) | expert MB per token | ids = plain |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for a in arms:
        got = a["accepted"] / a["drafted"] if a["drafted"] else 0.0
        md.append(f"| {a['arm']} | {a['accept']:.1f} | {a['k']} | {a['tok_s']:.3f} | {a['tok_s'] / a['plain_tok_s']:.3f}x "
                  f"| {got:.2f} | {a['committed'] / a['steps']:.2f} | {a['experts_per_pass']:.1f} "
                  f"| {a['bytes_per_token'] / 1e6:.1f} | {'yes' if a['same_ids'] else 'NO'} |")
open(os.path.join(out, "results.md"), "w").write("\n".join(md) + "\n")
print("\n".join(md))
