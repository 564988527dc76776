#!/usr/bin/env bash
# Charts of a multi-drive benchmark run: plot.sh RESULTS.csv OUTDIR writes
#   OUTDIR/drive-bandwidth.png  each drive's read GB/s during decode against its read ceiling, per arm
#   OUTDIR/decode-scaling.png   decode tok/s against drive count, with linear scaling from 1 drive
# (gnuplot, pngcairo or png terminal; python3 for the CSV). RESULTS.csv has a header line and one
# row per (arm, drive); the per-arm columns repeat on each of the arm's rows:
#   arm                  name of the configuration, unique per run (e.g. stripe4); disk* arms (an
#                        unthrottled local disk) and *lookahead arms appear in the bandwidth chart only
#   drives               number of drives the arm reads from
#   replicate            0: each expert piece on one drive (striped); 1: every drive holds all
#   cache_gb             expert cache budget, GB (1e9 bytes)
#   decode_tok_s         measured decode rate, tokens/s
#   floor_tok_s          decode rate the drives alone sustain with every expert read missing the
#                        cache: sum of the arm's drive_ceiling_gbps / expert_gb_per_token
#   expert_gb_per_token  expert bytes read from the drives per decoded token, GB
#   drive_index          0 .. drives-1
#   drive_gbps           this drive's measured read rate during decode, GB/s
#   drive_ceiling_gbps   this drive's ceiling from fio-ceiling.sh (fio or its fallback), GB/s
#   prefill_tok_s        measured prefill rate, tokens/s
#   ids_xxh3             xxh3 of the generated token ids (warns unless the same in every arm)
#   cold                 1: the page cache was dropped before every run of the arm; 0: not
#                        (k3-public-bench/drop-cache.sh was not permitted)
#   ceiling_under_measured  1: the arm's drives read faster in decode than their measured
#                        ceilings (the ceiling is wrong there; its bars say so instead of a %)
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: plot.sh RESULTS.csv OUTDIR" >&2; exit 2; }
[ -f "$1" ] || { echo "plot.sh: no file $1" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot not installed (scripts/setup.sh)" >&2; exit 1; }
mkdir -p "$2"
term=png
if gnuplot -e 'set terminal pngcairo' 2>/dev/null; then term=pngcairo; fi

python3 - "$1" "$2" "$term" <<'EOF' | gnuplot
import csv, sys
from collections import OrderedDict
path, out, term = sys.argv[1:]
arms = OrderedDict()
for r in csv.DictReader(open(path)):
    a = arms.setdefault(r["arm"], {**r, "rows": []})
    a["rows"].append(r)
if not arms: sys.exit("plot.sh: no rows in " + path)
if len({a["ids_xxh3"] for a in arms.values()}) > 1:
    print("plot.sh: warning: arms generated different token ids", file=sys.stderr)
f = lambda a, k: float(a[k])
kind = lambda a: ("replicated" if int(a["replicate"]) else "striped") + ", cache %g GB" % f(a, "cache_gb")
font = "font ',11'" if term == "pngcairo" else ""

# (a) per-drive bars: wide pale box = ceiling, narrow box = measured, % of ceiling above
x, bars, tics = 0, [], []
for name, a in arms.items():
    first = x
    for r in sorted(a["rows"], key=lambda r: int(r["drive_index"])):
        bars.append((x, f(r, "drive_ceiling_gbps"), f(r, "drive_gbps"), r["drive_index"], r.get("ceiling_under_measured") == "1"))
        x += 1
    tics.append('"%s\\n%s" %g' % (name, kind(a).replace("cache ", ""), (first + x - 1) / 2))
    x += 1.5
top = max(max(b[1], b[2]) for b in bars) * 1.2
print(f"set terminal {term} size {max(800, int(70 * x) + 200)},520 {font}")
print(f"set output '{out}/drive-bandwidth.png'")
print("$bars << EOD")
for b in bars: print("%g %g %g d%s %s" % (b[0], b[1], b[2], b[3], "ceiling?" if b[4] else "%.0f%%" % (100 * b[2] / b[1] if b[1] else 0)))
print("EOD")
print(f"""set title "Per-drive read rate during decode against the drive's read ceiling"
set ylabel 'GB/s'; set yrange [0:{top}]; set xrange [-0.75:{x - 0.75}]
set xtics ({", ".join(tics)}) scale 0; set grid ytics; set key top left
set style fill solid 1.0 noborder; set bmargin 5
plot $bars using 1:2:(0.8) with boxes lc rgb '#d0d0d0' title 'ceiling (fio-ceiling.sh)', \\
     '' using 1:3:(0.5) with boxes lc rgb '#1f77b4' title 'measured', \\
     '' using 1:(0):4 with labels offset 0,0.6 font ',8' tc rgb 'white' notitle, \\
     '' using 1:(($3 > $2 ? $3 : $2)):5 with labels offset 0,0.8 font ',9' notitle
unset xtics; unset xrange; unset bmargin""")

# (b) decode tok/s against drives, one series per (replicate, cache); dashed: linear scaling from
# the 1-drive arm of that cache size (striped and replicated are the same thing on one drive).
# Arms named disk* (this machine's own, unthrottled disk) are not part of the scaling series.
series, base = OrderedDict(), {}
scaling = [a for a in arms.values() if not a["arm"].startswith("disk") and not a["arm"].endswith("lookahead")]
for a in sorted(scaling, key=lambda a: (f(a, "cache_gb"), int(a["replicate"]), int(a["drives"]))):
    series.setdefault(kind(a), []).append(a)
    if int(a["drives"]) == 1: base.setdefault(f(a, "cache_gb"), f(a, "decode_tok_s"))
counts = sorted({int(a["drives"]) for a in scaling})
print(f"set terminal {term} size 800,560 {font}")
print(f"set output '{out}/decode-scaling.png'")
print("$linear << EOD")
for cache, t1 in base.items(): print("\n".join(f"{n} {t1 * n}" for n in counts) + "\n\n")
print("EOD")
plots = [f"$linear index {i} using 1:2 with lines lc rgb 'gray30' lw 1.5 dt {i + 2} title 'linear from 1 drive, cache {c:g} GB'"
         for i, c in enumerate(base)]
for i, (label, arms_s) in enumerate(series.items()):
    print(f"$s{i} << EOD")
    for a in arms_s: print(a["drives"], a["decode_tok_s"], a["floor_tok_s"])
    print("EOD")
    plots.append(f"$s{i} using 1:2 with linespoints lt {i + 1} pt 7 lw 2 title '{label}'")
    plots.append(f"$s{i} using 1:3 with points lt {i + 1} pt 6 ps 1.3 title '  I/O floor (no cache hits)'")
print(f"""set title 'Decode rate against drive count'
set xlabel 'drives'; set ylabel 'decode tokens/s'; set xtics ({", ".join(map(str, counts))})
set xrange [{counts[0] - 0.5}:{counts[-1] + 0.5}]; set yrange [0:*]; set key top left Left reverse; set grid
plot {", ".join(plots)}""")
EOF
echo "plot.sh: wrote $2/drive-bandwidth.png $2/decode-scaling.png"
