#!/usr/bin/env python3
"""The table of run-k3-routing-projection.sh: per routing model, its statistics (overlap, distinct
experts over 9 positions, top-10 % share) and the simulator's hit rate and expert GB per decoded token
on one host and on 4 hosts (each host's store, and the busiest), under the store's policy and
Belady's bound; the read time a token at 28 GB/s of drives per host.
  summarize_k3_projection.py ROWS_JSONL WORKDIR   (WORKDIR/<model>-stats.json from routing_stats.py)"""
import json
import os
import sys

DRIVES_GBPS = 28.0  # four 7 GB/s drives a host, as docs/hosts-projection.md


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    models = list(dict.fromkeys(r["model"] for r in rows))
    print("| routing model | overlap | distinct / 9 | top-10 % share |")
    print("| --- | --- | --- | --- |")
    for m in models:
        s = json.load(open(os.path.join(sys.argv[2], f"{m}-stats.json")))["traces"][0]["summary"]
        print(f"| {m} | {s['overlap']['decode']:.1%} | {s['distinct']['decode']:.1f} | {s['top10_share']:.1%} |")
    print()
    print("| routing model | policy | 1 host: hit | GB/token | ms/token | 4 hosts: rank 0 hit | ranks 1-3 hit | busiest GB/token | ms/token |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for m in models:
        for policy in ("store", "oracle"):
            one = next(r for r in rows if r["model"] == m and r["policy"] == policy and r["setup"] == "1 host")
            hosts = sorted((r for r in rows if r["model"] == m and r["policy"] == policy and r["setup"] == "4 hosts"),
                           key=lambda r: r["host"])
            hit = lambda r: r["hits"] / max(1, r["hits"] + r["misses"])
            gb = lambda r: r["bytes_per_decoded_token"] / 1e9
            busiest = max(gb(r) for r in hosts)
            others = sum(hit(r) for r in hosts[1:]) / max(1, len(hosts) - 1)
            print(f"| {m} | {'store' if policy == 'store' else 'Belady bound'} | {hit(one):.1%} | {gb(one):.2f} | "
                  f"{1000 * gb(one) / DRIVES_GBPS:.0f} | {hit(hosts[0]):.1%} | {others:.1%} | {busiest:.2f} | "
                  f"{1000 * busiest / DRIVES_GBPS:.0f} |")


if __name__ == "__main__":
    main()
