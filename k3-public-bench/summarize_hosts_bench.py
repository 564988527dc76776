#!/usr/bin/env python3
"""One table row of k3-public-bench/run-hosts-bench.sh: the median over an arm's runs.

  summarize_hosts_bench.py (--base FILE | --record-base FILE) BUDGET CEILINGS STATS.json...

CEILINGS: lines "HOST GB/s", one per drive of every host (the floor's sum). STATS: the
`deltafin run --stats-json` of each run (rank 0's, with the per-host receipt under "hosts" when the
MPI engine writes one); STATS.link, where present, the bytes that crossed rank 0's link in the run. --record-base writes this arm's median tok/s to FILE (the 1-host arm);
--base reads it for the speedup column. Prints:
| budget | runs | tok/s | x 1 host | spine GB/token | experts GB/token | floor tok/s | of floor | link MB | per host |
"""
import json
import statistics
import sys


def per_host(hosts, seconds, decode_seconds=0):
    """Each host's receipt (--stats-json "hosts", whole run): expert GB read and the rate over its
    busiest drive's busy time; for the other hosts, the network's part of rank 0's waits and its
    share of the run (of the decode where the receipt has it), rank 0's wait for it, and the mean message sizes of a round trip (Run to it, Result back)."""
    cells = []
    for h in hosts:
        text = f"{h.get('name', h.get('rank', '?'))}: {h.get('expert_bytes_read', 0) / 1e9:.3f} GB"
        if h.get("drive_busy_seconds"):
            text += f" at {h['expert_bytes_read'] / h['drive_busy_seconds'] / 1e9:.3f} GB/s"
        trips = h.get("round_trips", 0)
        if trips:
            net = h.get("network_seconds", 0)
            share = f" ({100 * net / seconds:.0f} %)" if seconds else ""
            if "decode_network_seconds" in h and decode_seconds:  # the share of a decode step
                share = f" ({100 * h['decode_network_seconds'] / decode_seconds:.1f} % of the decode)"
            text += (f", network {net:.3f} s{share}, rank 0 waited {h.get('stall_seconds', 0):.3f} s, {trips} round trips"
                     f" of {h.get('bytes_to', 0) / trips / 1e3:.1f} KB + {h.get('bytes_from', 0) / trips / 1e3:.1f} KB")
        cells.append(text)
    return "; ".join(cells) or "-"


def main(argv):
    mode, base_file = argv[1], argv[2]
    budget, ceilings = argv[3], argv[4]
    stats = [json.load(open(p)) for p in argv[5:]]
    ceil = sum(float(line.split()[1]) for line in open(ceilings) if line.strip()) * 1e9
    rates, spine, experts = [], [], []
    for r in stats:
        d = r["decode"]
        t = max(d["tokens"], 1)
        rates.append(t / d["seconds"])
        spine.append(r["spine"]["decode_bytes_read"] / t)
        # Every host's expert reads in the decode (rank 0's own are d["expert_bytes"]).
        hosts = r.get("hosts") or []
        if hosts and all("decode_expert_bytes_read" in h for h in hosts):
            experts.append(sum(h["decode_expert_bytes_read"] for h in hosts) / t)
        else:
            experts.append(d["expert_bytes"] / t)
    tok_s = statistics.median(rates)
    if mode == "--record-base":
        open(base_file, "w").write(f"{tok_s}\n")
        speedup = "1.00"
    else:
        try:
            speedup = f"{tok_s / float(open(base_file).read()):.2f}"
        except (OSError, ValueError):
            speedup = "-"
    per_token = statistics.median(s + e for s, e in zip(spine, experts))
    floor = ceil / per_token if per_token else 0
    links = []
    for p in argv[5:]:
        try:
            links.append(int(open(p + ".link").read()))
        except (OSError, ValueError):
            pass
    link = f"{statistics.median(links) / 1e6:.1f}" if links else "-"
    mid = stats[rates.index(sorted(rates)[len(rates) // 2])]
    hosts = per_host(mid.get("hosts", []), mid["decode"]["seconds"] + mid.get("prefill", {}).get("seconds", 0),
                     mid["decode"]["seconds"])
    print(f"| {budget if budget != '0' else 'default'} | {len(stats)} | {tok_s:.3f} | {speedup} | "
          f"{statistics.median(spine) / 1e9:.4f} | {statistics.median(experts) / 1e9:.4f} | {floor:.3f} | "
          f"{100 * tok_s / floor if floor else 0:.0f} % | {link} | {hosts} |")


if __name__ == "__main__":
    if len(sys.argv) < 6 or sys.argv[1] not in ("--base", "--record-base"):
        sys.exit(__doc__)
    main(sys.argv)
