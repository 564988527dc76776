"""Reader and writer of routing traces (docs/routing-traces.md, version 1): the header JSON and the
P (pass), L (one MoE layer's ids), R (rewind) and E (end) events. The reader is strict: anything
the format does not allow raises TraceError whose message is one line naming the file and the
byte offset. Python standard library only."""
import json
import os
import struct

MAGIC = b"DFROUTE1"
FORMAT = "deltafin-routing-trace"
VERSION = 1
PREFILL, DECODE, VERIFY = 0, 1, 2
KIND_NAMES = {PREFILL: "prefill", DECODE: "decode", VERIFY: "verify"}
SOURCES = ("recorded", "synthetic")
MAX_HEADER = 1 << 20  # a header past 1 MiB is not a routing trace

_PASS = struct.Struct("<BqI")
_LAYER = struct.Struct("<H")
_REWIND = struct.Struct("<q")


class TraceError(Exception):
    """A malformed trace; str() is one line: 'FILE: byte N: what is wrong'."""


class Pass:
    """One forward pass: kind (PREFILL, DECODE, VERIFY), positions start..start+n-1, and per MoE
    layer (header order) a list of n tuples of top_k expert ids, position-major."""

    __slots__ = ("kind", "start", "n", "routes")

    def __init__(self, kind, start, n, routes):
        self.kind, self.start, self.n, self.routes = kind, start, n, routes

    def __eq__(self, other):
        return isinstance(other, Pass) and (self.kind, self.start, self.n, self.routes) == (other.kind, other.start, other.n, other.routes)

    def __repr__(self):
        return f"Pass({KIND_NAMES.get(self.kind, self.kind)}, start={self.start}, n={self.n})"


class Rewind:
    """Positions >= position were dropped (rejected draft tokens)."""

    __slots__ = ("position",)

    def __init__(self, position):
        self.position = position

    def __eq__(self, other):
        return isinstance(other, Rewind) and self.position == other.position

    def __repr__(self):
        return f"Rewind({self.position})"


class Trace:
    def __init__(self, header, events):
        self.header, self.events = header, events

    def passes(self):
        return [e for e in self.events if isinstance(e, Pass)]


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def header_problem(h):
    """What is wrong with header dict h (one phrase), or None."""
    if not isinstance(h, dict):
        return "the header is not a JSON object"
    required = ("format", "version", "model", "layers", "moe_layers", "experts", "top_k", "record_bytes",
                "slot_bytes", "source", "label")
    for key in required:
        if key not in h:
            return f"header key '{key}' is missing"
    if h["format"] != FORMAT:
        return f"header key 'format' is {h['format']!r}, not {FORMAT!r}"
    if not _is_int(h["version"]) or h["version"] != VERSION:
        return f"header key 'version' is {h['version']!r}; this reader knows version {VERSION}"
    for key in ("model", "label"):
        if not isinstance(h[key], str):
            return f"header key '{key}' must be a string"
    if h["source"] not in SOURCES:
        return f"header key 'source' is {h['source']!r}, not one of {', '.join(SOURCES)}"
    for key, low, high in (("layers", 1, 65536), ("experts", 1, 65536), ("top_k", 1, 65536),
                           ("record_bytes", 0, 1 << 62), ("slot_bytes", 0, 1 << 62)):
        if not _is_int(h[key]) or not low <= h[key] <= high:
            return f"header key '{key}' must be an integer in {low}..{high}"
    if h["top_k"] > h["experts"]:
        return f"header key 'top_k' ({h['top_k']}) exceeds 'experts' ({h['experts']})"
    if h["slot_bytes"] < h["record_bytes"]:
        return f"header key 'slot_bytes' ({h['slot_bytes']}) is less than 'record_bytes' ({h['record_bytes']})"
    moe = h["moe_layers"]
    if not isinstance(moe, list) or not moe or not all(_is_int(l) for l in moe):
        return "header key 'moe_layers' must be a non-empty list of integers"
    if any(b <= a for a, b in zip(moe, moe[1:])):
        return "header key 'moe_layers' must be strictly ascending"
    if moe[0] < 0 or moe[-1] >= h["layers"]:
        return f"header key 'moe_layers' holds a layer outside 0..{h['layers'] - 1}"
    return None


def parse_trace(data, path="<trace>"):
    """Trace from the bytes of a file; raises TraceError naming path and the byte offset."""

    def fail(offset, what):
        raise TraceError(f"{path}: byte {offset}: {what}")

    if len(data) < 12:
        fail(0, f"too short for a routing trace ({len(data)} bytes; magic and header length need 12)")
    if data[:8] != MAGIC:
        fail(0, f"not a routing trace (magic {data[:8]!r}, expected {MAGIC!r})")
    (hlen,) = struct.unpack_from("<I", data, 8)
    if hlen > MAX_HEADER or 12 + hlen > len(data):
        fail(8, f"header length {hlen} runs past the end of the file ({len(data)} bytes)" if hlen <= MAX_HEADER
             else f"header length {hlen} is over the limit of {MAX_HEADER}")
    try:
        header = json.loads(data[12:12 + hlen].decode("utf-8"))
    except UnicodeDecodeError as e:
        fail(12 + e.start, "the header is not UTF-8")
    except json.JSONDecodeError as e:
        fail(12 + len(data[12:12 + hlen].decode("utf-8")[:e.pos].encode("utf-8")), f"header JSON: {e.msg}")
    problem = header_problem(header)
    if problem:
        fail(12, problem)

    moe, experts, top_k = header["moe_layers"], header["experts"], header["top_k"]
    events = []
    off, end = 12 + hlen, len(data)
    current = None  # the pass whose L events are being read
    next_position = 0  # one past the last position routed so far (after rewinds)
    while True:
        if off >= end:
            fail(off, "the trace ends without its E event (truncated?)")
        tag, at = data[off:off + 1], off
        off += 1
        if tag == b"P":
            if current is not None:
                fail(at, f"P event before the pass at position {current.start} has all its L events "
                     f"({len(current.routes)} of {len(moe)})")
            if off + _PASS.size > end:
                fail(at, f"truncated P event ({end - off} of {_PASS.size} payload bytes)")
            kind, start, n = _PASS.unpack_from(data, off)
            off += _PASS.size
            if kind not in KIND_NAMES:
                fail(at, f"P event with pass kind {kind} (0 prefill, 1 decode, 2 verify)")
            if start < 0:
                fail(at, f"P event with negative start position {start}")
            if n < 1:
                fail(at, "P event over 0 positions")
            if kind == DECODE and n != 1:
                fail(at, f"decode pass over {n} positions (a decode pass has one)")
            current = Pass(kind, start, n, [])
        elif tag == b"L":
            if current is None:
                fail(at, "L event outside a pass (no P event before it)")
            if off + _LAYER.size > end:
                fail(at, "truncated L event (no layer number)")
            (layer,) = _LAYER.unpack_from(data, off)
            off += _LAYER.size
            want = moe[len(current.routes)]
            if layer != want:
                fail(at, f"L event for layer {layer}, expected MoE layer {want} (one L per MoE layer, in layer order)")
            count = current.n * top_k
            if off + 2 * count > end:
                fail(at, f"truncated L event for layer {layer} ({end - off} of {2 * count} id bytes)")
            ids = struct.unpack_from(f"<{count}H", data, off)
            routes = []
            for p in range(current.n):
                chosen = ids[p * top_k:(p + 1) * top_k]
                for i, e in enumerate(chosen):
                    if e >= experts:
                        fail(off + 2 * (p * top_k + i), f"layer {layer}, position {current.start + p}: expert id {e} "
                             f"out of range (experts {experts})")
                if len(set(chosen)) != top_k:
                    fail(off + 2 * p * top_k, f"layer {layer}, position {current.start + p}: an expert chosen twice {list(chosen)}")
                routes.append(chosen)
            off += 2 * count
            current.routes.append(routes)
            if len(current.routes) == len(moe):
                events.append(current)
                next_position = max(next_position, current.start + current.n)
                current = None
        elif tag == b"R":
            if current is not None:
                fail(at, f"R event inside the pass at position {current.start} (after {len(current.routes)} of {len(moe)} L events)")
            if off + _REWIND.size > end:
                fail(at, "truncated R event")
            (position,) = _REWIND.unpack_from(data, off)
            off += _REWIND.size
            if not 0 <= position <= next_position:
                fail(at, f"R event to position {position}, outside 0..{next_position} (the positions routed so far)")
            events.append(Rewind(position))
            next_position = position
        elif tag == b"E":
            if current is not None:
                fail(at, f"E event inside the pass at position {current.start} (after {len(current.routes)} of {len(moe)} L events)")
            if off != end:
                fail(off, f"{end - off} bytes after the E event")
            return Trace(header, events)
        else:
            fail(at, f"unknown event tag {tag!r} (P, L, R or E)")


def read_trace(path):
    """Trace from a file; TraceError (one line naming the file) when it is unreadable or malformed."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None
    return parse_trace(data, path)


def encode_header(header):
    problem = header_problem(header)
    if problem:
        raise ValueError(problem)
    body = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return MAGIC + struct.pack("<I", len(body)) + body


def encode_pass(header, kind, start, routes):
    """Bytes of one pass: routes per MoE layer (header order), each a list of positions' id lists."""
    moe, experts, top_k = header["moe_layers"], header["experts"], header["top_k"]
    if kind not in KIND_NAMES or start < 0:
        raise ValueError(f"bad pass kind {kind} or start {start}")
    if len(routes) != len(moe):
        raise ValueError(f"a pass needs ids for {len(moe)} MoE layers, got {len(routes)}")
    n = len(routes[0])
    if n < 1 or (kind == DECODE and n != 1):
        raise ValueError(f"a {KIND_NAMES[kind]} pass over {n} positions")
    out = [b"P", _PASS.pack(kind, start, n)]
    for layer, positions in zip(moe, routes):
        if len(positions) != n:
            raise ValueError(f"layer {layer}: {len(positions)} positions, the pass has {n}")
        flat = []
        for chosen in positions:
            if len(chosen) != top_k or len(set(chosen)) != top_k or not all(0 <= e < experts for e in chosen):
                raise ValueError(f"layer {layer}: {list(chosen)} is not {top_k} distinct ids below {experts}")
            flat.extend(chosen)
        out += [b"L", _LAYER.pack(layer), struct.pack(f"<{len(flat)}H", *flat)]
    return b"".join(out)


class OutputFile:
    """An output file as the engine writes one (src/util/atomic_file.hpp): "-" is stdout; an
    existing device, FIFO or socket (/dev/stdout, a pipe) is written in place, never replaced;
    anything else is written to a temporary beside the path (beside a symlink's target: the link
    stays a link) and renamed over it on commit(), so it appears whole or not at all."""

    def __init__(self, path, mode="wb"):
        import stat
        import tempfile
        self.path, self._tmp = path, None
        if path == "-":
            self.file = os.fdopen(os.dup(1), mode)
            return
        try:
            in_place = not stat.S_ISREG(os.stat(path).st_mode)
        except FileNotFoundError:
            in_place = False
        if in_place:
            self.file = open(path, mode)
            return
        target = os.path.realpath(path)
        fd, self._tmp = tempfile.mkstemp(prefix="." + os.path.basename(target) + ".", dir=os.path.dirname(target))
        self._target = target
        self.file = os.fdopen(fd, mode)

    def commit(self):
        self.file.close()
        if self._tmp:
            os.chmod(self._tmp, 0o644)
            os.replace(self._tmp, self._target)

    def abandon(self):
        self.file.close()
        if self._tmp:
            os.unlink(self._tmp)


class TraceWriter:
    """Writes a trace through an OutputFile, committed on close(); as a context manager, an
    exception leaves no file behind."""

    def __init__(self, path, header):
        self.path, self.header = path, dict(header)
        self._out = OutputFile(path)
        self._file = self._out.file
        self._file.write(encode_header(self.header))

    def write_pass(self, kind, start, routes):
        self._file.write(encode_pass(self.header, kind, start, routes))

    def write_rewind(self, position):
        self._file.write(b"R" + _REWIND.pack(position))

    def close(self):
        self._file.write(b"E")
        self._out.commit()

    def abandon(self):
        self._out.abandon()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abandon()


def write_trace(path, trace):
    """Writes a whole Trace (header and Pass/Rewind events)."""
    with TraceWriter(path, trace.header) as w:
        for e in trace.events:
            if isinstance(e, Pass):
                w.write_pass(e.kind, e.start, e.routes)
            else:
                w.write_rewind(e.position)


def main(argv=None):
    """`routing_trace.py TRACE... [--dump]`: checks each trace and prints its header and event
    counts (--dump: every event as a line); a malformed trace prints one line and exits 1."""
    import argparse
    import sys

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            sys.exit(f"routing_trace.py: {message}")

    ap = Parser(description=main.__doc__)
    ap.add_argument("traces", nargs="+", metavar="TRACE")
    ap.add_argument("--dump", action="store_true", help="print every event")
    args = ap.parse_args(argv)
    for path in args.traces:
        try:
            trace = read_trace(path)
        except TraceError as e:
            print(e, file=sys.stderr)
            return 1
        h, passes = trace.header, trace.passes()
        kinds = {name: sum(p.n for p in passes if p.kind == k) for k, name in KIND_NAMES.items()}
        rewinds = len(trace.events) - len(passes)
        print(f"{path}: {h['source']} trace of {h['model']} ({h['label']}): {len(h['moe_layers'])} MoE layers of "
              f"{h['layers']}, {h['experts']} experts top-{h['top_k']}, record {h['record_bytes']} B, slot "
              f"{h['slot_bytes']} B; {len(passes)} passes, positions " +
              ", ".join(f"{n} {name}" for name, n in kinds.items()) + f", {rewinds} rewinds")
        if args.dump:
            for e in trace.events:
                if isinstance(e, Rewind):
                    print(f"R {e.position}")
                    continue
                print(f"P {KIND_NAMES[e.kind]} {e.start} {e.n}")
                for layer, positions in zip(h["moe_layers"], e.routes):
                    print(f"  L {layer}: " + " | ".join(" ".join(map(str, ids)) for ids in positions))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
