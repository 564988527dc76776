#!/usr/bin/env python3
"""Tables of run-routing-bench.sh: the engine's receipts (bytes per decoded token by policy and budget,
the simulator's count against each receipt, the ids of every run of a text) and the simulator's rows
(policies, Belady's bound, speculation widths). Exits 3 when a text's runs gave different ids or the
simulator differs from a receipt.
  summarize_routing_bench.py ENGINE_JSONL SIM_JSONL"""
import json
import os
import sys


def main():
    engine = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    sims = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
    bad = []
    policies = list(dict.fromkeys(r["policy"] for r in engine))
    fractions = sorted({r["fraction"] for r in engine})
    texts = list(dict.fromkeys(r["text"] for r in engine))
    print("## The engine's receipt: expert bytes per decoded token (MB)\n")
    head = "| text | budget | " + " | ".join(policies)
    if len(policies) > 1:
        head += f" | {policies[-1]} vs {policies[0]}"
    print(head + " | simulator = receipt |")
    print("|" + " --- |" * (head.count("|") + 1))
    for t in texts:
        ids = {r["ids"] for r in engine if r["text"] == t}
        if len(ids) != 1:
            bad.append(f"{t}: {len(ids)} different outputs across policies and budgets")
        for f in fractions:
            row = {r["policy"]: r for r in engine if r["text"] == t and r["fraction"] == f}
            per = [row[p]["decode_expert_bytes"] / row[p]["decode_tokens"] for p in policies]
            same = all(tuple(r["sim"]) == (r["hits"], r["reads"], r["bytes_read"]) for r in row.values())
            if not same:
                bad.append(f"{t} at {f}: simulator != receipt")
            cells = " | ".join(f"{v / 1e6:.3f}" for v in per)
            delta = f" | {100 * (per[-1] / per[0] - 1):+.1f} %" if len(policies) > 1 else ""
            print(f"| {t} | {f:.0%} | {cells}{delta} | {'yes' if same else 'NO'} |")
    print(f"\nEvery run of a text gave the same ids: {'yes' if not any('outputs' in b for b in bad) else 'NO'}.\n")
    print("## The simulator: expert bytes per decoded token (MB) by policy\n")
    sim_policies = list(dict.fromkeys(r["policy"] for r in sims))
    for w in sorted({r["verify_width"] for r in sims}):
        print(f"### {'plain decode' if w == 0 else f'verify passes of {w} positions (every draft accepted)'}\n")
        print("| trace | budget | " + " | ".join(sim_policies) + " |")
        print("|" + " --- |" * (len(sim_policies) + 2))
        for trace in dict.fromkeys(r["trace"] for r in sims):
            for share in sorted({r["share"] for r in sims if r["trace"] == trace}):
                row = {r["policy"]: r for r in sims if r["trace"] == trace and r["share"] == share and r["verify_width"] == w}
                if not row:
                    continue
                cells = " | ".join(f"{row[p]['bytes_per_decoded_token'] / 1e6:.3f}" if p in row else "" for p in sim_policies)
                name = os.path.basename(trace).removesuffix("-0.5.trace")
                print(f"| {name} | {share:.1%} | {cells} |")
        print()
    if bad:
        print("FAILED: " + "; ".join(bad))
        sys.exit(3)


if __name__ == "__main__":
    main()
