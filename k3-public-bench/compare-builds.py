#!/usr/bin/env python3
"""Paired throughput of two deltafin builds on the same machine: runs alternate (old, new), (new,
old), ... so that drift of a shared or throttled machine cancels in the per-pair ratio; prints the
medians of each build and of the new/old ratios, for prefill and decode.

  k3-public-bench/compare-builds.py OLD_BINARY NEW_BINARY PAIRS -- RUN_ARGS...

RUN_ARGS are `deltafin run` arguments (--stats-json is added; rates are its tokens / seconds. Before
the receipt's decode.tokens counted tokens rather than target passes, an old build's decode rate under
speculation counts passes: compare with --draft off). Example (the bundled model, no I/O):
  k3-public-bench/compare-builds.py /tmp/old/build/deltafin build/deltafin 10 -- \\
      -f prompt.txt -n 64 --ignore-eos --draft off --threads 2 --no-bypass
"""
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile


def run(binary, args):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "stats.json")
        subprocess.run([binary, "run", *args, "--stats-json", path], capture_output=True, text=True, check=True)
        stats = json.load(open(path))
    rate = lambda phase: stats[phase]["tokens"] / stats[phase]["seconds"] if stats[phase]["seconds"] > 0 else 0.0
    return rate("prefill"), rate("decode")


def main():
    if len(sys.argv) < 5 or "--" not in sys.argv:
        sys.exit(__doc__)
    old, new, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    args = sys.argv[sys.argv.index("--") + 1:]
    results = {"old": [], "new": []}
    for i in range(pairs):
        for build in (("old", "new") if i % 2 == 0 else ("new", "old")):
            results[build].append(run(old if build == "old" else new, args))
    med = statistics.median
    for k, phase in enumerate(("prefill", "decode")):
        o = [r[k] for r in results["old"]]
        n = [r[k] for r in results["new"]]
        ratio = med([b / a for a, b in zip(o, n)])
        print(f"{phase}: old {med(o):.1f} tok/s, new {med(n):.1f} tok/s, new/old {ratio:.3f} (median of {pairs} pairs)")
    print("run args:", shlex.join(args))


if __name__ == "__main__":
    main()
