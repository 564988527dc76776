#!/usr/bin/env python3
"""k3-public-bench/summarize_bench.py on made-up runs (CTest bench_summarize): the speedup column
compares with the narrowest arm present (no 0.00x when stripe1 was not run), an arm that read
faster than its drives' measured ceiling is flagged instead of shown at 180% of the floor, the
before/after ceiling samples of an unthrottled drive are listed, and different ids across arms
exit 3. Python stdlib only."""
import csv
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUMMARIZE = os.path.join(ROOT, "k3-public-bench", "summarize_bench.py")


def stats(drive_rates, ids="736fa05e0f0a0a15", tokens=48, seconds=10.0):
    """A run's --stats-json: drive_rates {path: GB/s in decode}; experts read = what the drives read."""
    total = sum(drive_rates.values()) * seconds * 1e9
    return {"decode": {"tokens": tokens, "seconds": seconds, "expert_bytes": total},
            "prefill": {"tokens": 16, "seconds": 2.0},
            "drives": [{"path": p, "decode_bytes": r * seconds * 1e9} for p, r in drive_rates.items()],
            "memory": {"peak_rss": 1.3e9, "spine": 0.75e9, "budget": 0.5e9}, "ids_xxh3": ids}


def summarize(arms, ceilings, runs):
    """Writes a work directory, runs summarize_bench.py; returns (exit status, results.md, csv rows)."""
    with tempfile.TemporaryDirectory() as tmp:
        work, out = os.path.join(tmp, "work"), os.path.join(tmp, "out")
        os.makedirs(os.path.join(work, "runs"))
        os.makedirs(out)
        with open(os.path.join(work, "ceilings.txt"), "w") as f:
            f.write("".join("\t".join(fields) + "\n" for fields in ceilings))
        with open(os.path.join(work, "runs", "cold.txt"), "w") as f:
            for name, s in runs.items():
                json.dump(s, open(os.path.join(work, "runs", name + ".json"), "w"))
                f.write(f"{name} 1\n")
        p = subprocess.run([sys.executable, SUMMARIZE, work, out, "150", "0.5", "48"], input="".join(a + "\n" for a in arms),
                           capture_output=True, text=True, env={**os.environ, "MODEL_DIR": tmp})
        md = open(os.path.join(out, "results.md")).read() if os.path.exists(os.path.join(out, "results.md")) else p.stderr
        rows = list(csv.DictReader(open(os.path.join(out, "results.csv")))) if os.path.exists(os.path.join(out, "results.csv")) else []
        return p.returncode, md, rows


def row(md, arm):
    return next((line for line in md.splitlines() if line.startswith(f"| {arm} |")), " | " * 12).split(" | ")


failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


# Without stripe1: stripe2 and mirror2 against stripe2 (the narrowest); the disk arm against disk1.
ceil = [("/d0/x.bin", "0.150", "psync"), ("/d1/x.bin", "0.150", "psync"), ("/w/disk0/x.bin", "1.200", "io_uring")]
rc, md, rows = summarize(["stripe2|m|p|2|0", "mirror2|m|p|2|1", "disk1|m||1|0"], ceil, {
    "stripe2.0": stats({"/d0/x.bin": 0.14, "/d1/x.bin": 0.14}),
    "mirror2.0": stats({"/d0/x.bin": 0.147, "/d1/x.bin": 0.147}, seconds=10 / 1.05),
    "disk1.0": stats({"/w/disk0/x.bin": 0.9})})
check(rc == 0, f"exit status {rc}: {md}")
check("0.00x" not in md, "a 0.00x speedup without stripe1")
check(row(md, "mirror2")[10].startswith("1.05x vs stripe2"), "mirror2's speedup is not against stripe2: " + row(md, "mirror2")[10])
check(row(md, "disk1")[10].startswith("1.00x vs disk1"), "disk1's speedup is not against itself")
check("under-measured" not in md, "flagged a ceiling that was not under-measured")
check(row(md, "stripe2")[5] == "93%", "stripe2's fraction of the floor: " + row(md, "stripe2")[5])

# The disk arm read 2.2 GB/s from a drive measured at 1.2: flagged, no 183% anywhere.
# (Its directory has a space in its name, as a macOS volume may.)
rc, md, rows = summarize(["stripe1|m|p|1|0", "disk1|m||1|0"],
                         [("/d0/x.bin", "0.150", "psync"), ("/Volumes/My SSD/x.bin", "1.200", "io_uring", "1.100,1.200")], {
    "stripe1.0": stats({"/d0/x.bin": 0.149}),
    "disk1.0": stats({"/Volumes/My SSD/x.bin": 2.2})})
check(rc == 0, f"exit status {rc}")
check(row(md, "disk1")[5] == "ceiling under-measured" and row(md, "disk1")[9] == "ceiling under-measured",
      "the disk arm above its ceiling is not flagged: " + " | ".join(row(md, "disk1")))
check("183%" not in row(md, "disk1"), "a fraction above 100% is shown")
check("disk1 read 2.200 GB/s" in md, "no note on the under-measured ceiling")
check("/Volumes/My SSD: 1.100 then 1.200 GB/s" in md, "the before/after samples are not listed")
check([r["ceiling_under_measured"] for r in rows] == ["0", "1"], "the CSV's ceiling_under_measured column: " + str(rows))
check(row(md, "stripe1")[10].startswith("1.00x vs stripe1"), "stripe1's speedup")

# Arms that generated different ids: the tables are written and the exit status is 3.
rc, md, rows = summarize(["stripe1|m|p|1|0", "disk1|m||1|0"], [("/d0/x.bin", "0.150", "psync"), ("/w/disk0/x.bin", "1.2", "io_uring")], {
    "stripe1.0": stats({"/d0/x.bin": 0.149}, ids="aaaa"), "disk1.0": stats({"/w/disk0/x.bin": 1.0}, ids="bbbb")})
check(rc == 3, f"different ids exit {rc}, not 3")
check("DIFFER: aaaa, bbbb" in md, "different ids not reported in the table")

for f in failures:
    print("FAIL:", f)
print("summarize_bench_test:", "ok" if not failures else f"{len(failures)} failures")
sys.exit(1 if failures else 0)
