#!/usr/bin/env python3
"""Summarizes a run-bench.sh run: reads the arms (stdin: name|manifest|prefix|drives|replicate),
WORK/ceilings.txt (data file, ceiling GB/s, engine), WORK/runs/*.json (deltafin run --stats-json)
and WORK/runs/cold.txt (run, 1 when the page cache was dropped before it), and writes
OUT/results.csv (the schema in plot.sh) and OUT/results.md. REAL_DRIVES (environment): the
--drive directories with their devices, one a line, when the run used the user's drives instead
of throttled ones. Python stdlib only.

usage: summarize_bench.py WORK OUT READ_MBPS CACHE_GB TOKENS < arms
"""
import csv
import glob
import json
import os
import statistics
import sys

work, out, mbps, cache, tokens = sys.argv[1:6]
arms = [line.rstrip("\n").split("|")[:5] for line in sys.stdin if line.strip()]
ceiling, engines = {}, set()
for line in open(os.path.join(work, "ceilings.txt")):
    path, gbps, engine = line.split()
    ceiling[path] = float(gbps)
    engines.add(engine)
cold = dict(line.split() for line in open(os.path.join(work, "runs", "cold.txt")))
real_drives = [d for d in os.environ.get("REAL_DRIVES", "").split("\n") if d]


def rate(d):
    return d["tokens"] / d["seconds"] if d["seconds"] > 0 else 0.0


rows, table, hashes = [], [], set()
for name, manifest, _prefix, n, rep in arms:
    runs = []  # each run's stats, with "cold": whether the page cache was dropped before it
    for p in sorted(glob.glob(os.path.join(work, "runs", name + ".*.json"))):
        runs.append({**json.load(open(p)), "cold": cold[os.path.basename(p)[:-len(".json")]] == "1"})
    if not runs:
        continue
    runs.sort(key=lambda r: rate(r["decode"]))
    all_cold = all(r["cold"] for r in runs)
    med = runs[len(runs) // 2]
    d = med["decode"]
    gb_per_token = d["expert_bytes"] / d["tokens"] / 1e9
    drives = med["drives"]
    ceilings = [ceiling[x["path"]] for x in drives]
    floor = sum(ceilings) / gb_per_token if gb_per_token else float("inf")  # inf: every expert was a cache hit
    drive_rates = [x["decode_bytes"] / d["seconds"] / 1e9 for x in drives]
    hashes.update(r["ids_xxh3"] for r in runs)
    for i, x in enumerate(drives):
        rows.append({"arm": name, "drives": n, "replicate": rep, "cache_gb": cache,
                     "decode_tok_s": f"{rate(d):.4f}", "floor_tok_s": f"{floor:.4f}",
                     "expert_gb_per_token": f"{gb_per_token:.5f}", "drive_index": i,
                     "drive_gbps": f"{drive_rates[i]:.4f}", "drive_ceiling_gbps": f"{ceilings[i]:.4f}",
                     "prefill_tok_s": f"{rate(med['prefill']):.3f}", "ids_xxh3": med["ids_xxh3"],
                     "cold": int(all_cold)})
    mem = med["memory"]
    run_list = ", ".join(f"{rate(r['decode']):.2f}" + ("" if r["cold"] else "*") for r in runs)
    table.append((name, int(n), rep, run_list, rate(d), floor, gb_per_token,
                  sum(drive_rates), sum(ceilings), drive_rates, ceilings, mem, med["ids_xxh3"]))

with open(os.path.join(out, "results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(rows)

base = next((t[4] for t in table if t[0] == "stripe1"), None)
disk_base = next((t[4] for t in table if t[0] == "disk1"), None)
not_cold = sorted(k for k, v in cold.items() if v != "1")
reason_file = os.path.join(work, "drop-cache.txt")
reason = open(reason_file).read().strip() if os.path.exists(reason_file) else ""
cold_text = ("every run cold (page cache dropped, bypass on)" if not not_cold else
             f"{len(not_cold)} of {len(cold)} runs NOT cold, marked * ({reason or 'the page cache could not be dropped'}; "
             f"expert reads still bypass the cache, the spine may have been cached)")
drives_text = ("Drives: the user's own, unthrottled (--drive): " + ", ".join(real_drives) if real_drives else
               f"Throttled drives: loop devices capped at {mbps} MB/s each by the blkio cgroup (scripts/drives.sh)")
disk_text = "; disk1: this machine's own disk (the work directory), unthrottled" if disk_base is not None else ""
engine_names = {"psync": "fio (psync)", "io_uring": "fio (io_uring)", "builtin": "read_ceiling_bench (no fio; the engine's reader)"}
engine_text = " / ".join(engine_names.get(e, e) for e in sorted(engines))
md = [f"# Streaming benchmark (k3-public-bench/run-bench.sh)", "", os.environ.get("PROVENANCE", "(machine and commit not recorded)"), "",
      f"Synthetic Kimi K3-shaped model (tools/make_synthetic_k3.py --preset bench: 9 layers, 8 MoE layers x 256 "
      f"MXFP4 experts of 1.25 MB, top-16; 2.57 GB of routed experts), expert budget --cache-gb {cache}, "
      f"{tokens} decoded tokens per run after a 16-token prompt, {cold_text}. {drives_text}{disk_text}. Ceilings: {engine_text}, 1 MiB uncached "
      f"random reads, 8 in flight, each drive alone (k3-public-bench/fio-ceiling.sh). Decode tok/s: median of the runs "
      f"(all runs listed). "
      f"Floor = sum of the arm's drive ceilings / expert GB read per decoded token.", "",
      "| arm | drives | layout | decode tok/s (median; runs) | floor tok/s | of floor | expert GB/token | drives' GB/s in decode | ceiling GB/s | of ceiling | vs stripe1 (disk arms: vs disk1) | peak RSS / spine + budget |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for (name, n, rep, run_list, r, floor, gbt, agg, ceil, per, ceils, mem, h) in table:
    layout = ("mirrored" if rep == "1" else "striped") + (", lookahead" if name.endswith("lookahead") else "")
    md.append(f"| {name} | {n} | {layout} | {r:.2f} ({run_list}) "
              f"| {floor:.2f} | {100 * r / floor:.0f}% | {gbt:.4f} | {agg:.3f} ({', '.join(f'{x:.3f}' for x in per)}) "
              f"| {ceil:.3f} ({', '.join(f'{x:.3f}' for x in ceils)}) | {100 * agg / ceil:.0f}% "
              f"| {(r / (disk_base if name.startswith('disk') else base) if (disk_base if name.startswith('disk') else base) else 0):.2f}x | {mem['peak_rss'] / 1e9:.3f} / {(mem['spine'] + mem['budget']) / 1e9:.3f} GB |")
md += ["", f"Generated ids: {'identical in every run of every arm' if len(hashes) == 1 else 'DIFFER: ' + ', '.join(sorted(hashes))}"
       f" (xxh3 {', '.join(sorted(hashes))}).", ""]
pre = os.path.join(work, "runs", "prefill256.json")
if os.path.exists(pre):
    p = json.load(open(pre))
    e = p["experts"]
    md += [f"Prefill of a 256-token prompt in chunks of 64: {rate(p['prefill']):.2f} tok/s; {e['runs']} expert runs, "
           f"{e['reads']} expert reads, {e['repeat_reads_in_pass']} experts read twice within a pass "
           f"(each expert at most once per chunk).", ""]
open(os.path.join(out, "results.md"), "w").write("\n".join(md))
print("\n".join(md))
