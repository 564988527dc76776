#!/usr/bin/env python3
"""Routing statistics of routing traces (docs/routing-traces.md, "Statistics"): per trace and per
MoE layer, and averaged over the layers,
  - popularity skew: the share of all selections taken by the top 10 % and top 20 % of the layer's
    experts, the Gini coefficient and the normalised entropy (entropy / log(experts)) of expert use;
  - consecutive-token overlap |S_t & S_t+1| / top_k, for generated positions (decode and verify
    passes) and for prefill positions separately;
  - distinct experts a layer touches over W consecutive positions (default 9: the published Kimi K3
    figure, a 1-token prompt plus 8 generated tokens), next to independent uniform routing's
    E * (1 - (1 - k/E)^W);
  - hit rates of two simple per-layer caches of c experts, c a fraction of the layer's experts:
    LRU, and a pinned set of the c most used experts of this same trace (in-sample, an upper
    bound for pinning); k3-public-bench/cache_sim is the real policy tool.
Usage: python3 tools/routing_stats.py TRACE... [--window W] [--cache-fractions F,F,...]
           [--json FILE] [--brief]
A malformed trace or a bad flag prints one line and exits 1. Python standard library only."""
import argparse
import collections
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from routing_trace import KIND_NAMES, PREFILL, OutputFile, Pass, TraceError, read_trace  # noqa: E402

DEFAULT_WINDOW = 9
DEFAULT_FRACTIONS = (0.05, 0.10, 0.25, 0.50)


def top_share(counts, fraction):
    """(share of the selections taken by the most used round(fraction * E) experts, that number)."""
    n = max(1, round(fraction * len(counts)))
    total = sum(counts)
    return (sum(sorted(counts, reverse=True)[:n]) / total if total else 0.0), n


def gini(counts):
    """Gini coefficient of the counts (0: every expert used equally; -> 1: one expert takes all)."""
    xs, n = sorted(counts), len(counts)
    total = sum(xs)
    if not total or n < 2:
        return 0.0
    return 2 * sum((i + 1) * x for i, x in enumerate(xs)) / (n * total) - (n + 1) / n


def normalized_entropy(counts):
    """Entropy of the usage distribution / log(number of experts): 1 for uniform use."""
    total, n = sum(counts), len(counts)
    if not total or n < 2:
        return 1.0
    return -sum(c / total * math.log(c / total) for c in counts if c) / math.log(n)


def independent_distinct(experts, top_k, window):
    """Expected distinct experts over `window` positions when each routes top_k of `experts` uniformly
    and independently."""
    return experts * (1 - (1 - top_k / experts) ** window)


def committed_positions(trace):
    """The positions the run kept, in order: [(position, kind, [ids per MoE layer])]. A rewind drops
    the positions at and after its own; a pass replaces any positions at and after its start."""
    kept = []  # ascending by position
    for e in trace.events:
        cut = e.start if isinstance(e, Pass) else e.position
        while kept and kept[-1][0] >= cut:
            kept.pop()
        if isinstance(e, Pass):
            kept += [(e.start + i, e.kind, [layer[i] for layer in e.routes]) for i in range(e.n)]
    return kept


def lru_hits(pass_requests, capacity):
    """(hits, requests) of an LRU cache of `capacity` experts over the per-pass request lists."""
    cache, hits, requests = collections.OrderedDict(), 0, 0
    for wanted in pass_requests:
        for e in wanted:
            requests += 1
            if e in cache:
                hits += 1
                cache.move_to_end(e)
            else:
                cache[e] = True
                if len(cache) > capacity:
                    cache.popitem(last=False)
    return hits, requests


def mean(xs):
    return sum(xs) / len(xs) if xs else None


def trace_stats(trace, window=DEFAULT_WINDOW, fractions=DEFAULT_FRACTIONS):
    """Everything routing_stats reports for one trace, as a JSON-ready dict."""
    h = trace.header
    moe, experts, top_k = h["moe_layers"], h["experts"], h["top_k"]
    passes = trace.passes()
    kept = committed_positions(trace)
    sizes = {}  # capacity -> the first fraction giving it (small layers round several to one size)
    for f in fractions:
        sizes.setdefault(max(1, round(f * experts)), f)
    capacities, fractions = list(sizes), list(sizes.values())

    # Consecutive pairs and windows over the kept positions, by the kind of the later position.
    index = {p: i for i, (p, _, _) in enumerate(kept)}
    pairs = {"decode": [], "prefill": []}
    for i, (p, kind, _) in enumerate(kept):
        if p - 1 in index:
            pairs["prefill" if kind == PREFILL else "decode"].append((index[p - 1], i))
    windows = {"all": [], "decode": [], "prefill": []}
    for i in range(len(kept) - window + 1):
        if kept[i + window - 1][0] - kept[i][0] != window - 1:
            continue  # a gap in the positions
        windows["all"].append(i)
        kinds = [kind for _, kind, _ in kept[i:i + window]]
        if all(k != PREFILL for k in kinds[1:]):
            windows["decode"].append(i)
        elif all(k == PREFILL for k in kinds):
            windows["prefill"].append(i)

    layers = []
    for li, layer in enumerate(moe):
        counts = [0] * experts
        requests = []  # per pass: the distinct experts it needs, in order of first use
        for ps in passes:
            wanted = {}
            for ids in ps.routes[li]:
                for e in ids:
                    counts[e] += 1
                    wanted.setdefault(e, None)
            requests.append(list(wanted))
        sets = [set(ids[li]) for _, _, ids in kept]
        overlap = {cat: mean([len(sets[a] & sets[b]) / top_k for a, b in ps]) for cat, ps in pairs.items()}
        distinct = {cat: mean([len(set().union(*sets[i:i + window])) for i in starts]) for cat, starts in windows.items()}
        top10, n10 = top_share(counts, 0.10)
        top20, n20 = top_share(counts, 0.20)
        ranked = sorted(range(experts), key=lambda e: (-counts[e], e))
        total_requests = sum(len(r) for r in requests)
        cache = []
        for f, c in zip(fractions, capacities):
            hits, _ = lru_hits(requests, c)
            pinned = set(ranked[:c])
            pinned_hits = sum(1 for r in requests for e in r if e in pinned)
            cache.append({"fraction": f, "capacity": c, "requests": total_requests, "lru_hits": hits,
                          "pinned_hits": pinned_hits})
        layers.append({"layer": layer, "selections": sum(counts), "experts_used": sum(1 for c in counts if c),
                       "top10_share": top10, "top10_experts": n10, "top20_share": top20, "top20_experts": n20,
                       "gini": gini(counts), "entropy": normalized_entropy(counts),
                       "overlap": overlap, "distinct": distinct, "cache": cache, "counts": counts})

    def layer_mean(get):
        values = [v for v in (get(l) for l in layers) if v is not None]
        return mean(values)

    summary = {key: layer_mean(lambda l, key=key: l[key]) for key in ("top10_share", "top20_share", "gini", "entropy")}
    summary.update({f"{key}_min": min(l[key] for l in layers) for key in ("top10_share", "gini", "entropy")})
    summary.update({f"{key}_max": max(l[key] for l in layers) for key in ("top10_share", "gini", "entropy")})
    summary["overlap"] = {cat: layer_mean(lambda l, cat=cat: l["overlap"][cat]) for cat in pairs}
    summary["distinct"] = {cat: layer_mean(lambda l, cat=cat: l["distinct"][cat]) for cat in windows}
    summary["cache"] = []
    for j, (f, c) in enumerate(zip(fractions, capacities)):
        req = sum(l["cache"][j]["requests"] for l in layers)
        summary["cache"].append({"fraction": f, "capacity": c, "requests": req,
                                 "lru_hit_rate": sum(l["cache"][j]["lru_hits"] for l in layers) / req if req else None,
                                 "pinned_hit_rate": sum(l["cache"][j]["pinned_hits"] for l in layers) / req if req else None})
    for l in layers:
        for entry in l["cache"]:
            entry["lru_hit_rate"] = entry["lru_hits"] / entry["requests"] if entry["requests"] else None
            entry["pinned_hit_rate"] = entry["pinned_hits"] / entry["requests"] if entry["requests"] else None

    kinds = {name: sum(p.n for p in passes if p.kind == k) for k, name in KIND_NAMES.items()}
    return {
        "header": h,
        "window": window,
        "passes": len(passes),
        "rewinds": len(trace.events) - len(passes),
        "routed_positions": kinds,
        "kept_positions": len(kept),
        "pairs": {cat: len(ps) for cat, ps in pairs.items()},
        "windows": {cat: len(s) for cat, s in windows.items()},
        "independent_uniform": {"top10_share": max(1, round(0.1 * experts)) / experts,
                                "top20_share": max(1, round(0.2 * experts)) / experts, "gini": 0.0, "entropy": 1.0,
                                "overlap": top_k / experts, "distinct": independent_distinct(experts, top_k, window)},
        "summary": summary,
        "layers": layers,
    }


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def print_table(path, s, brief, out=sys.stdout):
    h, w = s["header"], s["window"]
    kinds = s["routed_positions"]
    print(f"{path}: {h['source']} trace of {h['model']}" + (f" ({h['label']})" if h["label"] else ""), file=out)
    print(f"  {len(h['moe_layers'])} MoE layers, {h['experts']} experts top-{h['top_k']}; routed positions "
          + ", ".join(f"{n} {k}" for k, n in kinds.items()) + f"; {s['rewinds']} rewinds; {s['kept_positions']} kept; "
          f"pairs {s['pairs']['decode']} decode / {s['pairs']['prefill']} prefill; "
          f"{w}-position windows {s['windows']['decode']} decode / {s['windows']['prefill']} prefill / {s['windows']['all']} all",
          file=out)
    caps = [c["capacity"] for c in s["summary"]["cache"]]
    cols = (["layer", "top10%", "top20%", "gini", "entropy", "ovl dec", "ovl pre", f"dist{w} dec", f"dist{w} pre", f"dist{w} all"]
            + [f"LRU {c}" for c in caps] + [f"pin {c}" for c in caps])
    widths = [max(7, len(c)) for c in cols]
    print("  " + " ".join(c.rjust(wd) for c, wd in zip(cols, widths)), file=out)

    def row(name, d, cache_key):
        values = [name, fmt(d["top10_share"], ".1%"), fmt(d["top20_share"], ".1%"), fmt(d["gini"], ".3f"),
                  fmt(d["entropy"], ".3f"), fmt(d["overlap"]["decode"], ".1%"), fmt(d["overlap"]["prefill"], ".1%"),
                  fmt(d["distinct"]["decode"], ".1f"), fmt(d["distinct"]["prefill"], ".1f"), fmt(d["distinct"]["all"], ".1f")]
        values += [fmt(c[f"lru_{cache_key}"], ".1%") for c in d["cache"]]
        values += [fmt(c[f"pinned_{cache_key}"], ".1%") for c in d["cache"]]
        print("  " + " ".join(v.rjust(wd) for v, wd in zip(values, widths)), file=out)

    if not brief:
        for l in s["layers"]:
            row(str(l["layer"]), l, "hit_rate")
    row("mean", s["summary"], "hit_rate")
    u = s["independent_uniform"]
    values = ["uniform", fmt(u["top10_share"], ".1%"), fmt(u["top20_share"], ".1%"), fmt(u["gini"], ".3f"),
              fmt(u["entropy"], ".3f"), fmt(u["overlap"], ".1%"), fmt(u["overlap"], ".1%"), fmt(u["distinct"], ".1f"),
              fmt(u["distinct"], ".1f"), fmt(u["distinct"], ".1f")]
    print("  " + " ".join(v.rjust(wd) for v, wd in zip(values, widths))
          + "   (independent uniform routing, expected)", file=out)
    print("  top10%/top20%: share of selections taken by the most used 10/20 % of a layer's experts "
          f"({s['layers'][0]['top10_experts']}/{s['layers'][0]['top20_experts']}); ovl: |S_t & S_t+1|/top_k; "
          f"dist{w}: distinct experts over {w} consecutive positions; LRU c / pin c: hit rate of a per-layer LRU "
          "cache / pinned set (this trace's most used) of c experts, per pass", file=out)


class Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.exit(f"routing_stats.py: {message}")


def parse_fractions(text):
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--cache-fractions {text!r}: not a comma-separated list of numbers")
    if not values or not all(0 < v <= 1 for v in values):
        raise argparse.ArgumentTypeError(f"--cache-fractions {text!r}: each fraction must be in (0, 1]")
    return values


def positive_int(text):
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"--window {text!r}: must be a positive integer")
    return v


def main(argv=None):
    ap = Parser(description="Routing statistics of routing traces (docs/routing-traces.md).")
    ap.add_argument("traces", nargs="+", metavar="TRACE")
    ap.add_argument("--window", type=positive_int, default=DEFAULT_WINDOW,
                    help=f"positions per distinct-experts window (default {DEFAULT_WINDOW})")
    ap.add_argument("--cache-fractions", type=parse_fractions, default=DEFAULT_FRACTIONS,
                    help="cache sizes as fractions of a layer's experts (default 0.05,0.1,0.25,0.5)")
    ap.add_argument("--json", metavar="FILE", help="write every statistic (and per-layer expert counts) here")
    ap.add_argument("--brief", action="store_true", help="print only the mean over layers, not every layer")
    args = ap.parse_args(argv)
    results = []
    for path in args.traces:
        try:
            trace = read_trace(path)
        except TraceError as e:
            print(e, file=sys.stderr)
            return 1
        s = trace_stats(trace, args.window, args.cache_fractions)
        print_table(path, s, args.brief)
        results.append({"file": path, **s})
    if args.json:
        try:
            out = OutputFile(args.json, "w")
            json.dump({"traces": results}, out.file, indent=1)
            out.file.write("\n")
            out.commit()
        except OSError as e:
            print(f"{args.json}: cannot write: {e.strerror or e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
