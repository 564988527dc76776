#!/usr/bin/env python3
"""The routing-trace tools (CTest routing_tools): tools/routing_trace.py writes and reads back every
event kind byte for byte; tools/routing_stats.py gives the hand-computed answers on a hand-made
trace (overlap, distinct experts over a window, skew, LRU and pinned hits); each kind of malformed
trace is refused with one line naming the file and the byte offset, exit 1; the engine's own traces
(tests/fuzz/routing-trace-corpus) read and write back; tools/make_k3_trace.py
is deterministic for a seed and its trace lands on the fitted K3 figures. Python stdlib only."""
import json
import os
import struct
import stat
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(ROOT, "tools")
sys.path.insert(0, TOOLS)
import routing_stats  # noqa: E402
from routing_trace import (DECODE, FORMAT, PREFILL, VERIFY, Pass, Rewind, Trace, TraceError, TraceWriter,  # noqa: E402
                           encode_header, encode_pass, parse_trace, read_trace, write_trace)

HEADER = {"format": FORMAT, "version": 1, "model": "hand", "layers": 3, "moe_layers": [1, 2], "experts": 8, "top_k": 2,
          "record_bytes": 1000, "slot_bytes": 4096, "source": "synthetic", "label": "hand-made"}


def hand_trace():
    """Layer 1 routes 0 1 | 1 2 | 2 3 (prefill), 3 4 (decode), 4 5 | 5 6 (verify, 6 rejected), 5 0 (decode);
    layer 2 routes 4 5 | 4 5 | 6 7, 6 7, 7 0 | 0 1, 1 2."""
    return Trace(dict(HEADER), [
        Pass(PREFILL, 0, 3, [[(0, 1), (1, 2), (2, 3)], [(4, 5), (4, 5), (6, 7)]]),
        Pass(DECODE, 3, 1, [[(3, 4)], [(6, 7)]]),
        Pass(VERIFY, 4, 2, [[(4, 5), (5, 6)], [(7, 0), (0, 1)]]),
        Rewind(5),
        Pass(DECODE, 5, 1, [[(5, 0)], [(1, 2)]]),
    ])


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def run_tool(name, *args):
    p = subprocess.run([sys.executable, os.path.join(TOOLS, name), *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


class Temp(unittest.TestCase):
    def setUp(self):
        self._dir = tempfile.TemporaryDirectory()
        self.dir = self._dir.name

    def tearDown(self):
        self._dir.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)


class RoundTrip(Temp):
    def test_every_event_kind_round_trips_byte_for_byte(self):
        path, copy = self.path("a.trace"), self.path("b.trace")
        write_trace(path, hand_trace())
        trace = read_trace(path)
        self.assertEqual(trace.header, HEADER)
        self.assertEqual(trace.events, hand_trace().events)
        write_trace(copy, trace)
        self.assertEqual(read_bytes(path), read_bytes(copy))
        self.assertFalse(os.path.exists(path + ".tmp"))

    def test_a_decode_token_costs_what_the_format_says(self):
        one = encode_pass(HEADER, DECODE, 7, [[(1, 2)], [(3, 4)]])
        self.assertEqual(len(one), 14 + 2 * (3 + 2 * 2))
        self.assertEqual(one[:17], b"P" + struct.pack("<BqI", 1, 7, 1) + b"L" + struct.pack("<H", 1))

    def test_the_writer_refuses_what_the_reader_would(self):
        for routes in ([[(1, 1)], [(3, 4)]], [[(1, 8)], [(3, 4)]], [[(1, 2, 3)], [(3, 4)]], [[(1, 2)]]):
            with self.assertRaises(ValueError):
                encode_pass(HEADER, DECODE, 0, routes)
        with self.assertRaises(ValueError):
            encode_header({**HEADER, "top_k": 9})

    def test_a_failed_write_leaves_no_file(self):
        path = self.path("c.trace")
        with self.assertRaises(ValueError):
            with TraceWriter(path, HEADER) as w:
                w.write_pass(DECODE, 0, [[(1, 1)], [(3, 4)]])
        self.assertEqual(os.listdir(self.dir), [])


class EngineTraces(Temp):
    """Traces `deltafin run --record-routing` wrote (the fuzz corpus): read, and written back with the
    same event bytes."""

    def test_engine_traces_read_and_write_back(self):
        corpus = os.path.join(ROOT, "tests", "fuzz", "routing-trace-corpus")
        names = sorted(n for n in os.listdir(corpus) if n.endswith(".trace"))
        self.assertTrue(names)
        for name in names:
            original = read_bytes(os.path.join(corpus, name))
            trace = parse_trace(original, name)
            self.assertEqual(trace.header["source"], "recorded")
            copy = self.path(name)
            write_trace(copy, trace)
            written = read_bytes(copy)
            skip_original, skip_written = (12 + struct.unpack_from("<I", b, 8)[0] for b in (original, written))
            self.assertEqual(original[skip_original:], written[skip_written:], name)
            self.assertEqual(read_trace(copy).header, trace.header)


class HandMadeStats(unittest.TestCase):
    """Answers computed by hand from hand_trace()'s docstring."""

    @classmethod
    def setUpClass(cls):
        cls.s = routing_stats.trace_stats(hand_trace(), window=3, fractions=(0.25, 0.5))
        cls.l1, cls.l2 = cls.s["layers"]

    def test_kept_positions_drop_the_rejected_draft(self):
        kept = routing_stats.committed_positions(hand_trace())
        self.assertEqual([(p, k) for p, k, _ in kept], [(0, 0), (1, 0), (2, 0), (3, 1), (4, 2), (5, 1)])
        self.assertEqual(kept[5][2], [(5, 0), (1, 2)])
        self.assertEqual(self.s["routed_positions"], {"prefill": 3, "decode": 2, "verify": 2})

    def test_overlap(self):
        # prefill pairs (0,1) (1,2); generated pairs (2,3) (3,4) (4,5)
        self.assertEqual(self.s["pairs"], {"decode": 3, "prefill": 2})
        self.assertEqual(self.l1["overlap"], {"decode": 0.5, "prefill": 0.5})
        # layer 2: {4,5}&{4,5} = 2, {4,5}&{6,7} = 0; {6,7}&{6,7} = 2, {6,7}&{7,0} = 1, {7,0}&{1,2} = 0
        self.assertEqual(self.l2["overlap"], {"decode": 0.5, "prefill": 0.5})

    def test_distinct_over_a_window(self):
        # windows at 0 (prefill), 1 (mixed), 2 and 3 (the prompt's last position, then generated)
        self.assertEqual(self.s["windows"], {"all": 4, "decode": 2, "prefill": 1})
        self.assertEqual(self.l1["distinct"], {"all": 4.0, "decode": 4.0, "prefill": 4.0})
        # layer 2: {4,5,6,7}=4 | {4,5,6,7}=4 | {6,7,0}=3 | {6,7,0,1,2}=5
        self.assertEqual(self.l2["distinct"], {"all": 4.0, "decode": 4.0, "prefill": 4.0})
        self.assertAlmostEqual(self.s["independent_uniform"]["distinct"], 8 * (1 - 0.75 ** 3))

    def test_skew(self):
        # layer 1 counts over every routed position (the rejected draft's too): 0..4 twice, 5 three times, 6 once
        self.assertEqual(self.l1["counts"], [2, 2, 2, 2, 2, 3, 1, 0])
        self.assertAlmostEqual(self.l1["top10_share"], 3 / 14)
        self.assertAlmostEqual(self.l1["top20_share"], 5 / 14)
        # sorted 0 1 2 2 2 2 2 3: sum of rank * count = 2 + 6 + 8 + 10 + 12 + 14 + 24 = 76
        self.assertAlmostEqual(self.l1["gini"], 2 * 76 / (8 * 14) - 9 / 8)
        self.assertAlmostEqual(routing_stats.gini([4, 0, 0, 0]), 0.75)
        self.assertAlmostEqual(routing_stats.gini([3, 3, 3]), 0.0)
        self.assertAlmostEqual(routing_stats.normalized_entropy([5, 5, 5, 5]), 1.0)
        self.assertAlmostEqual(routing_stats.normalized_entropy([1, 1, 0, 0]), 0.5)

    def test_caches(self):
        # layer 1's requests per pass: [0 1 2 3] [3 4] [4 5 6] [5 0]; capacity 2 (0.25 of 8)
        lru2 = self.l1["cache"][0]
        self.assertEqual((lru2["capacity"], lru2["requests"]), (2, 11))
        self.assertEqual(lru2["lru_hits"], 3)  # 3, 4, 5
        self.assertEqual(lru2["pinned_hits"], 4)  # pinned {5, 0} (most used, then lowest id): 0; 5; 5 0
        self.assertEqual(routing_stats.lru_hits([[1, 2], [2, 3], [1]], 2), (1, 5))


class StatsCommand(Temp):
    def test_table_and_json(self):
        trace, out = self.path("hand.trace"), self.path("stats.json")
        write_trace(trace, hand_trace())
        code, table, err = run_tool("routing_stats.py", trace, "--window", "3", "--json", out)
        self.assertEqual((code, err), (0, ""))
        self.assertIn("mean", table)
        self.assertIn("uniform", table)
        with open(out) as f:
            (s,) = json.load(f)["traces"]
        self.assertEqual(s["file"], trace)
        self.assertEqual(s["summary"]["overlap"], {"decode": 0.5, "prefill": 0.5})
        self.assertEqual([l["layer"] for l in s["layers"]], [1, 2])

    def test_outputs_that_are_not_regular_files_are_written_in_place(self):
        # A FIFO (as /dev/stdout or a pipe) is written into, never replaced by a file; "-" is stdout.
        trace, fifo = self.path("hand.trace"), self.path("fifo")
        write_trace(trace, hand_trace())
        os.mkfifo(fifo)
        reader = subprocess.Popen(["cat", fifo], stdout=subprocess.PIPE, text=True)
        code, _, err = run_tool("routing_stats.py", trace, "--json", fifo)
        piped = reader.communicate(timeout=60)[0]
        self.assertEqual((code, err), (0, ""))
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))
        self.assertEqual(len(json.loads(piped)["traces"]), 1)
        code, out, err = run_tool("routing_stats.py", trace, "--brief", "--json", "-")
        self.assertEqual((code, err), (0, ""))
        self.assertIn('"traces"', out)
        self.assertEqual([n for n in os.listdir(self.dir) if n.startswith(".")], [])  # no temporary left


class Malformed(Temp):
    """Each malformed trace: exit 1, one line on stderr naming the file and the byte offset."""

    def refuse(self, data, offset, phrase):
        path = self.path("bad.trace")
        with open(path, "wb") as f:
            f.write(data)
        code, out, err = run_tool("routing_stats.py", path)
        self.assertEqual(code, 1, err)
        self.assertEqual(out, "")
        self.assertEqual(err.count("\n"), 1, err)
        self.assertTrue(err.startswith(f"{path}: byte {offset}: "), err)
        self.assertIn(phrase, err)

    def test_malformed_traces(self):
        header = encode_header(HEADER)
        h = len(header)
        decode = encode_pass(HEADER, DECODE, 0, [[(1, 2)], [(3, 4)]])
        layer2 = h + 14 + 7  # the second L event: after P (tag + 13 bytes) and L 1 (tag, layer, 2 ids)

        def with_header(**keys):
            body = json.dumps({**HEADER, **keys}).encode()
            return b"DFROUTE1" + struct.pack("<I", len(body)) + body + b"E"

        self.refuse(b"DFROUTE", 0, "too short")
        self.refuse(b"GGUF" + bytes(20), 0, "not a routing trace")
        self.refuse(b"DFROUTE1" + struct.pack("<I", 400) + b"{}", 8, "runs past the end")
        self.refuse(b"DFROUTE1" + struct.pack("<I", 5) + b'{"a"}E', 16, "header JSON")
        self.refuse(with_header(version=2), 12, "'version'")
        self.refuse(with_header(top_k=9), 12, "'top_k'")
        self.refuse(with_header(moe_layers=[2, 1]), 12, "ascending")
        self.refuse(with_header(moe_layers=[1, 3]), 12, "outside 0..2")
        self.refuse(with_header(source="measured"), 12, "'source'")
        without = dict(HEADER)
        del without["label"]
        body = json.dumps(without).encode()
        self.refuse(b"DFROUTE1" + struct.pack("<I", len(body)) + body + b"E", 12, "'label' is missing")
        self.refuse(header, h, "without its E event")
        self.refuse(header + decode, h + len(decode), "without its E event")
        self.refuse(header + decode + b"E\0", h + len(decode) + 1, "1 bytes after the E event")
        self.refuse(header + b"X", h, "unknown event tag")
        self.refuse(header + b"P" + struct.pack("<BqI", 1, 0, 2), h, "decode pass over 2 positions")
        self.refuse(header + b"P" + struct.pack("<BqI", 3, 0, 1), h, "pass kind 3")
        self.refuse(header + b"P" + struct.pack("<BqI", 0, 0, 0), h, "0 positions")
        self.refuse(header + b"P" + struct.pack("<Bq", 0, 0), h, "truncated P event")
        self.refuse(header + b"L" + struct.pack("<H", 1), h, "outside a pass")
        self.refuse(header + decode[:layer2 - h] + decode[:14] + b"E", layer2, "before the pass")
        self.refuse(header + decode.replace(b"L\x02\x00", b"L\x01\x00") + b"E", layer2, "expected MoE layer 2")
        self.refuse(header + decode[:-2] + struct.pack("<H", 8) + b"E", layer2 + 5, "expert id 8 out of range")
        self.refuse(header + decode[:-2] + struct.pack("<H", 3) + b"E", layer2 + 3, "an expert chosen twice")
        self.refuse(header + decode[:-1], layer2, "truncated L event")
        self.refuse(header + decode[:layer2 - h] + b"R" + bytes(8) + b"E", layer2, "R event inside the pass")
        self.refuse(header + decode + b"R" + struct.pack("<q", 2) + b"E", h + len(decode), "outside 0..1")
        self.refuse(header + decode[:layer2 - h] + b"E", layer2, "E event inside the pass")

    def test_unreadable_file_and_bad_flags(self):
        missing = self.path("missing.trace")
        code, _, err = run_tool("routing_stats.py", missing)
        self.assertEqual((code, err.count("\n")), (1, 1))
        self.assertTrue(err.startswith(f"{missing}: cannot read"), err)
        for tool, args, phrase in (("routing_stats.py", ["--window", "0", missing], "--window"),
                                   ("routing_stats.py", ["--cache-fractions", "0.1,2", missing], "--cache-fractions"),
                                   ("make_k3_trace.py", ["--working-set", "8", "--out", missing], "--working-set"),
                                   ("make_k3_trace.py", ["--stickiness", "1.5", "--out", missing], "--stickiness"),
                                   ("make_k3_trace.py", [], "--out")):
            code, _, err = run_tool(tool, *args)
            self.assertEqual((code, err.count("\n")), (1, 1), err)
            self.assertIn(phrase, err)


class K3Generator(Temp):
    def generate(self, name, *args):
        path = self.path(name)
        code, _, err = run_tool("make_k3_trace.py", "--out", path, *args)
        self.assertEqual(code, 0, err)
        return path

    def test_deterministic_for_a_seed_and_a_longer_trace_extends_a_shorter(self):
        a = read_bytes(self.generate("a", "--tokens", "6", "--seed", "5"))
        b = read_bytes(self.generate("b", "--tokens", "6", "--seed", "5"))
        c = read_bytes(self.generate("c", "--tokens", "6", "--seed", "6"))
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)
        short = read_trace(self.generate("short", "--tokens", "3", "--prompt", "0"))
        long = read_trace(self.generate("long", "--tokens", "6", "--prompt", "0"))
        self.assertEqual(short.events, long.events[:3])

    def test_k3_shape_and_the_fitted_figures(self):
        path = self.generate("k3.trace", "--tokens", "96", "--prompt", "1")
        trace = read_trace(path)
        h = trace.header
        self.assertEqual((h["layers"], h["moe_layers"], h["experts"], h["top_k"]), (93, list(range(1, 93)), 896, 16))
        self.assertEqual((h["record_bytes"], h["slot_bytes"]), (17547264, 17547264))
        self.assertEqual(h["source"], "synthetic")
        self.assertIn("MODEL of Kimi K3 routing, not a measurement", h["label"])
        self.assertIn("--working-set 52 --drift 0.08 --stickiness 0.036", h["label"])
        self.assertEqual(os.path.getsize(path), 12 + len(json.dumps(h, sort_keys=True, separators=(",", ":")))
                         + 97 * (14 + 92 * (3 + 2 * 16)) + 1)
        s = routing_stats.trace_stats(trace)["summary"]
        self.assertAlmostEqual(s["overlap"]["decode"], 0.30, delta=0.02)
        self.assertAlmostEqual(s["distinct"]["decode"], 65, delta=3)


if __name__ == "__main__":
    unittest.main(verbosity=1)
