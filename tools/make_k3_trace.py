#!/usr/bin/env python3
"""A Kimi K3-scale synthetic routing trace: a MODEL of routing for projections, never a
measurement (its header says source "synthetic" and carries every parameter in its label).

K3's shape (docs/kimi-k3.md, src/weights/k3_config.cpp): 93 decoder layers, layer 0 a dense MLP
(first_k_dense_replace 1, moe_layer_freq 1) and layers 1..92 MoE; 896 routed experts, top-16.
One routed expert is three MXFP4 projections in the 3584-wide latent space (routed_expert_hidden_size)
at width 3072 (moe_intermediate_size): w1 and w3 [3072, 3584], w2 [3584, 3072], each packed
[rows, cols/2] + E8M0 scales [rows, cols/32], parts 64-byte aligned (src/weights/expert_record.cpp):
17,547,264 bytes a record, the same rounded to the store's 4 KiB slot.

The model, per MoE layer: expert popularity is Zipf with exponent s (--skew) over a per-layer random
permutation of the experts; the context uses a working set of M experts (--working-set) drawn by
popularity, each member replaced by a popularity draw with probability d a position (--drift); each
position keeps each of the previous position's experts with probability q (--stickiness) and draws
the rest uniformly from the working set, without replacement. M and q are fitted (--fit) to the
published K3 figures: consecutive tokens share ~30 % of their experts, and a 1-token prompt plus 8
generated tokens touch ~65 distinct experts a layer (independent uniform routing: 1.8 % and 134).
s and d are assumptions the figures do not fix: the defaults (s 0: no expert popular across
contexts; d 0.08: about the fastest turnover the figures allow) are the least favourable to a cache
that the figures permit (docs/routing-traces.md, "A K3-scale model of routing"). Zipf popularity
and stickiness alone cannot give both figures. Layers are independent, each with its own random
stream, so a trace is deterministic for a seed and a longer trace extends a shorter one.

Usage: python3 tools/make_k3_trace.py --out FILE [--tokens N] [--prompt P] [--seed S]
           [--skew s] [--working-set M] [--drift d] [--stickiness q]
       python3 tools/make_k3_trace.py --fit [--drift d] [--seed S] [--sequences N]: the search
           table (M, the q that gives 30 % overlap, the overlap and the distinct count over 9)
Python standard library only."""
import argparse
import bisect
import itertools
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from routing_trace import DECODE, FORMAT, PREFILL, VERSION, TraceWriter  # noqa: E402

LAYERS = 93
MOE_LAYERS = list(range(1, LAYERS))  # first_k_dense_replace 1: layer 0 dense
EXPERTS, TOP_K = 896, 16
LATENT, MOE_INTER = 3584, 3072  # routed_expert_hidden_size, moe_intermediate_size
SLOT_ALIGNMENT = 4096

TARGET_OVERLAP = 0.30  # consecutive tokens share ~30 % of their experts
TARGET_DISTINCT = 65.0  # distinct experts a layer over a 1-token prompt + 8 generated tokens
TARGET_WINDOW = 9
# Assumed (the two figures do not fix them): popularity skew and working-set drift.
DEFAULT_SKEW = 0.0
DEFAULT_DRIFT = 0.08
# Fitted at that drift by --fit (docs/routing-traces.md shows the table).
DEFAULT_WORKING_SET = 52
DEFAULT_STICKINESS = 0.036


def round_up(n, alignment):
    return (n + alignment - 1) // alignment * alignment


def mxfp4_record_bytes(latent=LATENT, inter=MOE_INTER):
    """Bytes of one routed expert record: w1, w3 [inter, latent] and w2 [latent, inter], each
    packed nibbles [rows, cols/2] then E8M0 scales [rows, cols/32], every part 64-byte aligned."""
    cursor = payload = 0
    for rows, cols in ((inter, latent), (inter, latent), (latent, inter)):
        for nbytes in (rows * cols // 2, rows * cols // 32):
            payload = cursor + nbytes
            cursor = round_up(payload, 64)
    return payload


class LayerRouter:
    """The model's routing of one MoE layer. Popularity: Zipf with exponent `skew` over a random
    permutation of the experts. A working set of `working_set` experts, drawn by popularity, is what
    the current context uses; each position, each member is replaced (by a popularity draw) with
    probability `drift`. A position keeps each of the previous position's experts with probability
    `stickiness` and draws the rest uniformly from the working set, without replacement. So the
    short-range statistics (overlap, distinct over a few positions) depend on the working set and the
    stickiness alone; skew and drift shape the long run (which experts recur, how fast the set moves)."""

    def __init__(self, rng, experts, top_k, skew, stickiness, working_set, drift, permute=True):
        self.rng, self.top_k, self.skew, self.stickiness, self.drift = rng, top_k, skew, stickiness, drift
        self.experts = list(range(experts))
        if permute:  # Fisher-Yates on rng.random() alone, so the stream is the same on every Python 3
            for i in range(experts - 1, 0, -1):
                j = int(rng.random() * (i + 1))
                self.experts[i], self.experts[j] = self.experts[j], self.experts[i]
        self.cumulative = list(itertools.accumulate((rank + 1) ** -skew for rank in range(experts)))
        self.working_set = working_set
        self.start_context()

    def start_context(self):
        """A fresh context: a new working set and no previous position."""
        self.members = self.popular(self.working_set)
        self.previous = None

    def popular(self, n, exclude=()):
        """n distinct experts by popularity, none of `exclude`: a weighted draw without replacement."""
        if n == 1 and len(exclude) <= len(self.experts) // 2:  # rejecting repeats is cheap here
            have = set(exclude)
            while True:
                r = bisect.bisect_right(self.cumulative, self.rng.random() * self.cumulative[-1])
                e = self.experts[min(r, len(self.experts) - 1)]
                if e not in have:
                    return [e]
        # Efraimidis-Spirakis: the n largest u^(1/weight), as log(u) * rank^skew
        excluded = set(exclude)
        keys = [(math.log(1.0 - self.rng.random()) * (rank + 1) ** self.skew, e)
                for rank, e in enumerate(self.experts) if e not in excluded]
        keys.sort(reverse=True)
        return [e for _, e in keys[:n]]

    def advance_working_set(self):
        if self.working_set == len(self.experts):
            return  # every expert is a member: nothing to replace
        for i in range(self.working_set):
            if self.rng.random() < self.drift:
                self.members[i] = self.popular(1, exclude=self.members)[0]

    def route(self):
        """The next position's top_k experts: kept ones first, then draws from the working set."""
        if self.previous is None:
            chosen = []
        else:
            self.advance_working_set()
            chosen = [e for e in self.previous if self.rng.random() < self.stickiness]
        have = set(chosen)
        members = self.members
        while len(chosen) < self.top_k:
            e = members[int(self.rng.random() * len(members))]
            if e not in have:
                have.add(e)
                chosen.append(e)
        self.previous = chosen
        return tuple(chosen)


def layer_rng(seed, layer):
    return random.Random(f"make_k3_trace:{seed}:{layer}")


def header(args):
    record = mxfp4_record_bytes()
    label = (f"MODEL of Kimi K3 routing, not a measurement: make_k3_trace.py --tokens {args.tokens} --prompt "
             f"{args.prompt} --seed {args.seed} --skew {args.skew:g} --working-set {args.working_set} --drift "
             f"{args.drift:g} --stickiness {args.stickiness:g} (per layer: Zipf popularity with exponent skew over a "
             f"random permutation; a working set of that many experts drawn by popularity, each member replaced with "
             f"probability drift a position; each of the previous position's experts kept with probability "
             f"stickiness, the rest drawn uniformly from the working set; the default working set {DEFAULT_WORKING_SET} and "
             f"stickiness {DEFAULT_STICKINESS:g} are fitted at drift {DEFAULT_DRIFT:g} to the published K3 figures, "
             f"{TARGET_OVERLAP:.0%} consecutive-token overlap and {TARGET_DISTINCT:g} distinct experts over "
             f"{TARGET_WINDOW} positions; skew and drift are assumptions)")
    return {"format": FORMAT, "version": VERSION, "model": "make_k3_trace (Kimi K3 shape)", "layers": LAYERS,
            "moe_layers": MOE_LAYERS, "experts": EXPERTS, "top_k": TOP_K, "record_bytes": record,
            "slot_bytes": round_up(record, SLOT_ALIGNMENT), "source": "synthetic", "label": label}


def write_trace(args):
    routers = [LayerRouter(layer_rng(args.seed, l), EXPERTS, TOP_K, args.skew, args.stickiness, args.working_set,
                           args.drift) for l in MOE_LAYERS]
    with TraceWriter(args.out, header(args)) as w:
        if args.prompt:
            w.write_pass(PREFILL, 0, [[r.route() for _ in range(args.prompt)] for r in routers])
        for t in range(args.tokens):
            w.write_pass(DECODE, args.prompt + t, [[r.route()] for r in routers])


def simulate(skew, stickiness, working_set, drift, sequences, seed, window=TARGET_WINDOW, experts=EXPERTS, top_k=TOP_K):
    """(mean consecutive overlap, mean distinct over the window) of `sequences` fresh contexts of
    `window` positions (by symmetry, the permutation changes nothing)."""
    router = LayerRouter(random.Random(f"make_k3_trace:fit:{seed}"), experts, top_k, skew, stickiness, working_set,
                         drift, permute=False)
    overlap = distinct = 0
    for _ in range(sequences):
        router.start_context()
        seen, last = set(), None
        for _ in range(window):
            chosen = router.route()
            if last is not None:
                overlap += len(last.intersection(chosen))
            last = set(chosen)
            seen |= last
        distinct += len(seen)
    return overlap / (sequences * (window - 1) * top_k), distinct / sequences


def stickiness_for_overlap(skew, working_set, drift, sequences, seed, steps=10):
    """The q in [0, 1] whose simulated overlap is TARGET_OVERLAP (bisection), with its stats; q None
    when even q = 0 overlaps more (a working set that small or a popularity that skewed)."""
    def run(q):
        return simulate(skew, q, working_set, drift, sequences, seed)

    stats = run(0.0)
    if stats[0] > TARGET_OVERLAP:
        return None, stats
    low, high = 0.0, 1.0
    for _ in range(steps):
        mid = (low + high) / 2
        if run(mid)[0] < TARGET_OVERLAP:
            low = mid
        else:
            high = mid
    q = round((low + high) / 2, 3)
    return q, run(q)


def print_row(first, q, stats):
    overlap, distinct = stats
    print(f"| {first} | {'-' if q is None else format(q, '.3f')} | {overlap:.1%} | {distinct:.1f} |", flush=True)


def fit(args):
    """Prints the search: for each working-set size (a grid, then an integer bisection) the
    stickiness giving the target overlap, and the distinct count over the window that follows."""
    print(f"K3 routing model: {EXPERTS} experts top-{TOP_K}; targets: overlap {TARGET_OVERLAP:.0%}, "
          f"{TARGET_DISTINCT:g} distinct experts over {TARGET_WINDOW} positions; {args.sequences} fresh contexts "
          f"of {TARGET_WINDOW} positions a row, seed {args.seed}")
    print(f"independent uniform routing: overlap {TOP_K / EXPERTS:.1%}, distinct "
          f"{EXPERTS * (1 - (1 - TOP_K / EXPERTS) ** TARGET_WINDOW):.1f}")
    print(f"Working set of M experts, --drift {args.drift:g} (the skew changes nothing here: draws are uniform in the set)")
    print("| working set M | stickiness q for the overlap | overlap | distinct over 9 |")
    print("| ---: | ---: | ---: | ---: |")
    results = {}

    def row(m):
        q, stats = stickiness_for_overlap(args.skew, m, args.drift, args.sequences, args.seed)
        print_row(m, q, stats)
        results[m] = (q, stats[1])
        return q, stats[1]

    low = high = None
    for m in (32, 48, 64, 96, 128, 192, 256, 384, 512, EXPERTS):
        q, distinct = row(m)
        if q is None:
            low = m
        elif distinct < TARGET_DISTINCT:
            low = m
        else:
            high = m
            break
    if high is None or low is None:
        print(f"no working set in the grid brackets {TARGET_DISTINCT:g} distinct experts at {TARGET_OVERLAP:.0%} overlap")
        return 1
    while high - low > 1:
        mid = (low + high) // 2
        q, distinct = row(mid)
        if q is None or distinct < TARGET_DISTINCT:
            low = mid
        else:
            high = mid
    best = min((m for m in (low, high) if results.get(m, (None,))[0] is not None),
               key=lambda m: abs(results[m][1] - TARGET_DISTINCT))
    q, distinct = results[best]
    print(f"fitted: --working-set {best} --stickiness {q:.3f} at --drift {args.drift:g} (distinct {distinct:.1f}); "
          f"the defaults: --working-set {DEFAULT_WORKING_SET} --stickiness {DEFAULT_STICKINESS} at --drift {DEFAULT_DRIFT}")
    return 0


class Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.exit(f"make_k3_trace.py: {message}")


def number(kind, low, high, name):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            v = None
        if v is None or not low <= v <= high:
            raise argparse.ArgumentTypeError(f"{name} {text!r}: must be {kind.__name__} in {low}..{high}")
        return v
    return parse


def main(argv=None):
    ap = Parser(description="A K3-scale synthetic routing trace (a model, not a measurement).")
    ap.add_argument("--out", metavar="FILE", help="the trace to write")
    ap.add_argument("--tokens", type=number(int, 0, 10 ** 7, "--tokens"), default=64, help="decode tokens (default 64)")
    ap.add_argument("--prompt", type=number(int, 0, 10 ** 6, "--prompt"), default=1,
                    help="prompt positions, as one prefill pass (default 1)")
    ap.add_argument("--seed", type=number(int, 0, 2 ** 63, "--seed"), default=1)
    ap.add_argument("--skew", type=number(float, 0.0, 10.0, "--skew"), default=DEFAULT_SKEW,
                    help=f"Zipf exponent of expert popularity (default {DEFAULT_SKEW}, assumed)")
    ap.add_argument("--working-set", type=number(int, TOP_K, EXPERTS, "--working-set"), default=DEFAULT_WORKING_SET,
                    help=f"experts a layer's context draws from (default {DEFAULT_WORKING_SET}, fitted)")
    ap.add_argument("--drift", type=number(float, 0.0, 1.0, "--drift"), default=DEFAULT_DRIFT,
                    help=f"probability a working-set member is replaced each position (default {DEFAULT_DRIFT}, assumed)")
    ap.add_argument("--stickiness", type=number(float, 0.0, 1.0, "--stickiness"), default=DEFAULT_STICKINESS,
                    help=f"probability each previous expert is kept (default {DEFAULT_STICKINESS}, fitted)")
    ap.add_argument("--fit", action="store_true", help="print the fit of --working-set and --stickiness to the K3 figures")
    ap.add_argument("--sequences", type=number(int, 1, 10 ** 6, "--sequences"), default=1000,
                    help="fresh contexts of 9 positions per fit row (default 1000)")
    args = ap.parse_args(argv)
    if args.fit:
        return fit(args)
    if not args.out:
        ap.error("--out FILE is required (or --fit)")
    if args.tokens + args.prompt == 0:
        ap.error("--tokens and --prompt are both 0: nothing to route")
    try:
        write_trace(args)
    except OSError as e:
        print(f"{args.out}: cannot write: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
