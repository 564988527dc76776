#!/usr/bin/env python3
"""Summarizes a run-bench.sh run: reads the arms (stdin: name|manifest|prefix|drives|replicate),
WORK/ceilings.txt (tab-separated: data file, ceiling GB/s, engine, and for an unthrottled drive measured before
and after the arms both samples "BEFORE,AFTER": the ceiling is the higher), WORK/runs/*.json (deltafin run --stats-json)
and WORK/runs/cold.txt (run, 1 when the page cache was dropped before it), and writes
OUT/results.csv (the schema in plot.sh) and OUT/results.md. Environment: MODEL_DIR, the synthetic
model (described from its config.json and safetensors headers); REAL_DRIVES, the --drive
directories with their devices, one a line, when the run used the user's drives instead of
throttled ones; PROVENANCE, the machine and commit line. Python stdlib only.

Speedups compare each arm with the narrowest throttled (or --drive) arm present (stripe1 in a full
run), disk arms with disk1; an arm with nothing to compare with shows "-". Where the drives read
faster during decode than their measured ceiling, the ceiling was under-measured (a throttle's
banked credit, a busy or variable disk): "of floor" and "of ceiling" would pass 100% and mean
nothing, so the table shows "ceiling under-measured" there and a note says by how much.
Exit status 3 when the arms did not all generate the same ids (the tables are still written).

usage: summarize_bench.py WORK OUT READ_MBPS CACHE_GB TOKENS < arms
"""
import csv
import glob
import json
import os
import struct
import sys

work, out, mbps, cache, tokens = sys.argv[1:6]
arms = [line.rstrip("\n").split("|")[:5] for line in sys.stdin if line.strip()]
ceiling, engines, samples = {}, set(), {}
for line in open(os.path.join(work, "ceilings.txt")):
    path, gbps, engine, *before_after = line.rstrip("\n").split("\t")
    ceiling[path] = float(gbps)
    engines.add(engine)
    if before_after and "," in before_after[0]:
        samples[os.path.dirname(path)] = before_after[0].split(",")
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
    # The drives (or the expert bytes of the decode) went faster than their measured ceiling?
    over = max(sum(drive_rates), rate(d) * gb_per_token) > sum(ceilings) * 1.01
    for i, x in enumerate(drives):
        rows.append({"arm": name, "drives": n, "replicate": rep, "cache_gb": cache,
                     "decode_tok_s": f"{rate(d):.4f}", "floor_tok_s": f"{floor:.4f}",
                     "expert_gb_per_token": f"{gb_per_token:.5f}", "drive_index": i,
                     "drive_gbps": f"{drive_rates[i]:.4f}", "drive_ceiling_gbps": f"{ceilings[i]:.4f}",
                     "prefill_tok_s": f"{rate(med['prefill']):.3f}", "ids_xxh3": med["ids_xxh3"],
                     "cold": int(all_cold), "ceiling_under_measured": int(over)})
    mem = med["memory"]
    run_list = ", ".join(f"{rate(r['decode']):.2f}" + ("" if r["cold"] else "*") for r in runs)
    table.append((name, int(n), rep, run_list, rate(d), floor, gb_per_token,
                  sum(drive_rates), sum(ceilings), drive_rates, ceilings, mem, med["ids_xxh3"], over))

if not table:
    sys.exit(f"summarize_bench.py: no runs in {work}/runs")

with open(os.path.join(out, "results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(rows)

def model_text(model_dir):
    """The model in one sentence, from its config.json and safetensors headers."""
    try:
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        text = cfg.get("text_config", cfg)
        experts_bytes = total = per_expert = 0
        for shard in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
            with open(shard, "rb") as f:
                header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
            for name, t in header.items():
                if name == "__metadata__":
                    continue
                n = t["data_offsets"][1] - t["data_offsets"][0]
                total += n
                if ".experts." in name:
                    experts_bytes += n
                    if ".experts.0." in name and "layers.1." in name:
                        per_expert += n
        layers = text["num_hidden_layers"]
        return (f"Synthetic Kimi K3-shaped model (tools/make_synthetic_k3.py, {os.path.basename(model_dir)}: {layers} layers, "
                f"{layers - text.get('first_k_dense_replace', 1)} MoE layers x {text['num_experts']} MXFP4 experts of "
                f"{per_expert / 1e6:.3g} MB, top-{text['num_experts_per_token']}; {experts_bytes / 1e9:.3g} GB of routed "
                f"experts, {(total - experts_bytes) / 1e9:.3g} GB spine)")
    except (OSError, KeyError, ValueError, struct.error) as e:
        return f"Synthetic Kimi K3-shaped model ({model_dir}: not described: {e})"


def speedup_base(name):
    """The arm an arm's speedup is measured against: disk1 for disk arms, else the narrowest
    non-lookahead arm present (stripe1 in a full run)."""
    if name.startswith("disk"):
        return next((t for t in table if t[0] == "disk1"), None)
    plain = [t for t in table if not t[0].startswith("disk") and not t[0].endswith("lookahead")]
    return min(plain, key=lambda t: (t[1], t[2]), default=None)


under = [(t[0], max(t[7], t[4] * t[6]), t[8]) for t in table if t[13]]  # (arm, GB/s read, ceiling GB/s)
bases = sorted({speedup_base(t[0])[0] for t in table if speedup_base(t[0])})
not_cold = sorted(k for k, v in cold.items() if v != "1")
reason_file = os.path.join(work, "drop-cache.txt")
reason = open(reason_file).read().strip() if os.path.exists(reason_file) else ""
cold_text = ("every run cold (page cache dropped, bypass on)" if not not_cold else
             f"{len(not_cold)} of {len(cold)} runs NOT cold, marked * ({reason or 'the page cache could not be dropped'}; "
             f"expert reads still bypass the cache, the spine may have been cached)")
drives_text = ("Drives: the user's own, unthrottled (--drive): " + ", ".join(real_drives) if real_drives else
               f"Throttled drives: loop devices capped at {mbps} MB/s each by the blkio cgroup (scripts/drives.sh)")
disk_text = "; disk1: this machine's own disk (the work directory), unthrottled" if any(t[0] == "disk1" for t in table) else ""
if not any(not t[0].startswith("disk") for t in table):
    drives_text = "No throttled drives (--no-throttled)"
engine_names = {"psync": "fio (psync)", "io_uring": "fio (io_uring)", "builtin": "read_ceiling_bench (no fio; the engine's reader)"}
engine_text = " / ".join(engine_names.get(e, e) for e in sorted(engines))
md = [f"# Streaming benchmark (k3-public-bench/run-bench.sh)", "", os.environ.get("PROVENANCE", "(machine and commit not recorded)"), "",
      f"{model_text(os.environ.get('MODEL_DIR', ''))}, expert budget --cache-gb {cache}, "
      f"{tokens} decoded tokens per run after a 16-token prompt, {cold_text}. {drives_text}{disk_text}. Ceilings: {engine_text}, 1 MiB uncached "
      f"random reads, 8 in flight, each drive alone (k3-public-bench/fio-ceiling.sh). Decode tok/s: median of the runs "
      f"(all runs listed). "
      f"Floor = sum of the arm's drive ceilings / expert GB read per decoded token. Speedup: against "
      f"{' / '.join(bases) or 'no arm'} (the narrowest arm of each kind present).", "",
      "| arm | drives | layout | decode tok/s (median; runs) | floor tok/s | of floor | expert GB/token | drives' GB/s in decode | ceiling GB/s | of ceiling | speedup | peak RSS / spine + budget |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for (name, n, rep, run_list, r, floor, gbt, agg, ceil, per, ceils, mem, h, over) in table:
    layout = ("mirrored" if rep == "1" else "striped") + (", lookahead" if name.endswith("lookahead") else "")
    base = speedup_base(name)
    speedup = f"{r / base[4]:.2f}x vs {base[0]}" if base and base[4] > 0 else "-"
    if over:
        of_floor = of_ceiling = "ceiling under-measured"
    else:
        of_floor = f"{100 * r / floor:.0f}%" if floor not in (0, float("inf")) else "-"
        of_ceiling = f"{100 * agg / ceil:.0f}%" if ceil > 0 else "-"
    md.append(f"| {name} | {n} | {layout} | {r:.2f} ({run_list}) "
              f"| {floor:.2f} | {of_floor} | {gbt:.4f} | {agg:.3f} ({', '.join(f'{x:.3f}' for x in per)}) "
              f"| {ceil:.3f} ({', '.join(f'{x:.3f}' for x in ceils)}) | {of_ceiling} "
              f"| {speedup} | {mem['peak_rss'] / 1e9:.3f} / {(mem['spine'] + mem['budget']) / 1e9:.3f} GB |")
if under:
    md += ["", "Ceiling under-measured: " + "; ".join(f"{a} read {g:.3f} GB/s in decode, above its drives' measured ceiling "
                                                       f"{c:.3f} GB/s ({100 * g / c:.0f}%)" for a, g, c in under) +
           ". The ceiling, not the arm, is wrong there (fio-ceiling.sh on a drive that varies between runs or is shared); "
           "those arms' floor is a lower bound and their fractions are not given."]
if samples:
    md += ["", "Unthrottled drives, ceiling measured before and after the arms (the higher is used): " +
           "; ".join(f"{d}: {float(b):.3f} then {float(a):.3f} GB/s" for d, (b, a) in sorted(samples.items())) + "."]
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
if len(hashes) != 1:
    print("summarize_bench.py: the arms generated different ids: " + ", ".join(sorted(hashes)), file=sys.stderr)
    sys.exit(3)
