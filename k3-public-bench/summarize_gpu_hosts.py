#!/usr/bin/env python3
"""The tables of k3-public-bench/run-gpu-hosts-bench.sh (issue 40) from its output directory.

  summarize_gpu_hosts.py OUT_DIR CONFIG.json

OUT_DIR holds machine.txt, identity.txt (tab-separated: model, ranks, check, result) and
k3-MODE-RANKS-RUN.json, the `deltafin run --stats-json` of each decode run (rank 0's, with the
per-host receipt under "hosts" on 2 or more ranks). CONFIG.json is the K3-shaped model's: its MoE
layers turn the decode's time a token into time a MoE layer. Prints markdown: the machine, the
identity table, and per mode and rank count the median tok/s, its ratio to one rank, and of a MoE
layer's exchange with the other ranks (decode only): rank 0's wait for the slowest rank after its
own experts, the network's part of that wait (the round trip less the rank's own work: MPI and
the messages' encoding), the round trip, and the bytes of a round trip (mean over the ranks).
"""
import collections
import glob
import json
import os
import re
import statistics
import sys


def moe_layers(config_path):
    c = json.load(open(config_path))
    c = c.get("text_config", c)
    return c["num_hidden_layers"] - c.get("first_k_dense_replace", 0)


def identity_table(path):
    rows = collections.OrderedDict()
    for line in open(path):
        model, ranks, check, result = line.rstrip("\n").split("\t")
        kind = "decode ids" if check.startswith("decode ids") else check
        cell = rows.setdefault((model, int(ranks)), {}).setdefault(kind, [0, 0, []])
        cell[0] += result == "same"
        cell[1] += 1
        if result != "same":
            cell[2].append(result)
    out = ["| model | ranks | ids | logits | transformers' ids | decode ids, every run |", "|---|---|---|---|---|---|"]
    failures = 0
    for (model, ranks), checks in rows.items():
        cells = []
        for kind in ("ids", "logits", "golden", "decode ids"):
            if kind not in checks:
                cells.append("")
                continue
            same, total, bad = checks[kind]
            failures += total - same
            if total == 1:
                cells.append("identical" if same else f"**{bad[0]}**")
            else:
                cells.append(f"{same} of {total} identical" + ("" if same == total else f" (**{bad[0]}**)"))
        out.append(f"| {model} | {ranks} | " + " | ".join(cells) + " |")
    return out, failures


def decode_table(out_dir, layers):
    runs = collections.defaultdict(list)
    for path in glob.glob(os.path.join(out_dir, "k3-*-*-*.json")):
        m = re.match(r"k3-(\w+)-(\d+)-(\d+)\.json$", os.path.basename(path))
        if m:
            runs[(m.group(1), int(m.group(2)))].append(json.load(open(path)))
    out = ["| experts | ranks | runs | tok/s (median) | ms a token | x 1 rank | ms a MoE layer (of the token) | "
           "rank 0 waited, ms a MoE layer | network, ms a MoE layer | round trip, ms | KB a round trip (to a rank, back) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    base = {}
    for mode in ("resident", "streamed"):
        for ranks in sorted(n for (m, n) in runs if m == mode):
            stats = runs[(mode, ranks)]
            rates = [r["decode"]["tokens"] / r["decode"]["seconds"] for r in stats if r["decode"]["seconds"] > 0]
            if not rates:
                continue
            tok_s = statistics.median(rates)
            if ranks == 1:
                base[mode] = tok_s
            ratio = f"{tok_s / base[mode]:.2f}" if mode in base else "-"
            waits, nets, trips, sizes = [], [], [], []
            for r in stats:
                hosts = [h for h in r.get("hosts") or [] if h.get("rank", 0) > 0 and h.get("decode_round_trips")]
                if not hosts:
                    continue
                # Each host's wait is timed from the end of rank 0's own experts: the slowest is the layer's.
                waits.append(max(h["decode_stall_seconds"] / h["decode_round_trips"] for h in hosts))
                nets.append(max(h["decode_network_seconds"] / h["decode_round_trips"] for h in hosts))
                trips.append(max(h["decode_round_trip_seconds"] / h["decode_round_trips"] for h in hosts))
                sizes.append((sum(h["decode_bytes_to"] / h["decode_round_trips"] for h in hosts) / len(hosts),
                              sum(h["decode_bytes_from"] / h["decode_round_trips"] for h in hosts) / len(hosts)))
            ms = 1000 / tok_s

            def cell(values):
                return f"{1000 * statistics.median(values):.3f}" if values else "-"

            size = (f"{statistics.median(s[0] for s in sizes) / 1e3:.1f}, {statistics.median(s[1] for s in sizes) / 1e3:.1f}"
                    if sizes else "-")
            out.append(f"| {mode} | {ranks} | {len(rates)} | {tok_s:.2f} | {ms:.2f} | {ratio} | {ms / layers:.3f} | "
                       f"{cell(waits)} | {cell(nets)} | {cell(trips)} | {size} |")
    return out


def main(argv):
    out_dir, config = argv[1], argv[2]
    layers = moe_layers(config)
    lines = [open(os.path.join(out_dir, "machine.txt")).read().rstrip(), "", "## Identity", ""]
    table, failures = identity_table(os.path.join(out_dir, "identity.txt"))
    lines += table
    lines += ["", f"## Decode of the K3-shaped model ({layers} MoE layers)", ""]
    lines += decode_table(out_dir, layers)
    print("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
