#!/usr/bin/env python3
"""The bytes run-bench.sh's placements need on each drive, before anything is generated or placed:
reads the synthetic checkpoint's tensors (tools/make_synthetic_k3.py --list-tensors, JSON lines on
stdin) and prints an upper bound of what `deltafin place` writes per drive for the given arms, as
src/io/placer.cpp lays them out: each routed expert one record (its six tensors, each started on a
64-byte boundary, padded to 4096 bytes), each layer's experts spread evenly over the drives of a
stripe; each spine matrix (2-D or more, not an expert) a record of its own padded to 4096, on the
drive with the fewest spine bytes so far (so at most total / n + the largest one per drive); a
mirrored arm holds everything on every drive. Python stdlib only.

usage: bench_space.py --stripes "1 2 4" [--mirror N] < tensors.jsonl
prints
  model BYTES        the checkpoint's size (what generating it writes; 256 bytes of header a tensor)
  placement BYTES    one placement on a single drive (the disk arm's)
  drive I BYTES      drive I's bytes summed over the arms (stripes on drives 0..n-1, mirror on 0..N-1)
"""
import argparse
import json
import re
import sys
from collections import defaultdict

ALIGN = 4096
EXPERT = re.compile(r"layers\.(\d+)\..*\.experts\.(\d+)\.")


def round_up(x, a):
    return (x + a - 1) // a * a


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stripes", default="", help="drive counts of the striped arms, e.g. '1 2 4'")
    ap.add_argument("--mirror", type=int, default=0, help="drives of the mirrored arm (0: none)")
    a = ap.parse_args()
    tensors = [json.loads(line) for line in sys.stdin if line.strip()]
    if not tensors:
        sys.exit("bench_space.py: no tensors on stdin")
    records = defaultdict(int)  # (layer, expert) -> record bytes before the final padding
    spine = []
    for t in tensors:
        m = EXPERT.search(t["name"])
        if m:
            records[m.group(1), m.group(2)] += round_up(t["nbytes"], 64)
        elif len(t["shape"]) >= 2 and t["nbytes"] > 0:
            spine.append(round_up(t["nbytes"], ALIGN))
    per_layer = defaultdict(list)
    for (layer, _), size in records.items():
        per_layer[layer].append(round_up(size, ALIGN))
    spine_total, spine_max = sum(spine), max(spine, default=0)

    def per_drive(n, mirrored):
        experts = sum(sum(sizes) if mirrored else -(-len(sizes) // n) * max(sizes) for sizes in per_layer.values())
        return experts + (spine_total if mirrored else min(spine_total, -(-spine_total // n) + spine_max))

    stripes = [int(n) for n in a.stripes.split()]
    drives = [0] * max(stripes + [a.mirror, 0])
    for n in stripes:
        for i in range(n):
            drives[i] += per_drive(n, False)
    for i in range(a.mirror):
        drives[i] += per_drive(a.mirror, True)
    print("model", sum(t["nbytes"] + 256 for t in tensors))  # + each tensor's entry in its shard's header
    print("placement", per_drive(1, False))
    for i, size in enumerate(drives):
        print("drive", i, size)


if __name__ == "__main__":
    main()
