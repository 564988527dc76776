#!/usr/bin/env python3
"""The GPU hosts benchmark's Python parts (CTest bench_gpu_hosts, issue 40), Python stdlib only:
k3-public-bench/summarize_gpu_hosts.py on made-up runs (identity cells, medians, the ratio to one
rank, a MoE layer's wait, network, round trip and bytes from the decode's host figures, the exit
status when a check differs), and k3-public-bench/project_gpu_hosts.py's arithmetic (a layer's
expert time at the bounds worked by hand, the network's extension past the measured rank counts,
and rank 0's plan read from `deltafin inspect`).
  gpu_hosts_bench_test.py [DELTAFIN_BINARY]"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "k3-public-bench")


def stats(tokens, seconds, host=None):
    s = {"decode": {"tokens": tokens, "seconds": seconds}}
    if host:
        s["hosts"] = [{"rank": 0, "name": "a"}, dict(host, rank=1, name="a")]
    return s


def summarize(tmp):
    p = subprocess.run([sys.executable, os.path.join(BENCH, "summarize_gpu_hosts.py"), tmp, os.path.join(tmp, "config.json")],
                       capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def test_summary():
    with tempfile.TemporaryDirectory() as tmp:
        open(os.path.join(tmp, "machine.txt"), "w").write("machine line\n")
        json.dump({"num_hidden_layers": 5, "first_k_dense_replace": 1}, open(os.path.join(tmp, "config.json"), "w"))
        rows = [("default", 2, "ids", "same"), ("default", 2, "logits", "same"), ("k3_tiny", 4, "golden", "same"),
                ("k3-shaped-resident", 2, "decode ids, run 1", "same"), ("k3-shaped-resident", 2, "decode ids, run 2", "same")]
        open(os.path.join(tmp, "identity.txt"), "w").write("".join(f"{m}\t{n}\t{c}\t{r}\n" for m, n, c, r in rows))
        host = {"decode_round_trips": 32, "decode_stall_seconds": 0.032, "decode_network_seconds": 0.016,
                "decode_round_trip_seconds": 0.064, "decode_bytes_to": 32 * 15000, "decode_bytes_from": 32 * 115000}
        for r, seconds in enumerate((0.8, 1.0, 1.2)):  # 1 rank: 10, 8, 6.67 tok/s
            json.dump(stats(8, seconds), open(os.path.join(tmp, f"k3-resident-1-{r + 1}.json"), "w"))
        for r, seconds in enumerate((1.6, 2.0)):  # 2 ranks: 5, 4 tok/s; median 4.5
            json.dump(stats(8, seconds, host), open(os.path.join(tmp, f"k3-resident-2-{r + 1}.json"), "w"))
        rc, out, err = summarize(tmp)
        assert rc == 0, err
        lines = out.splitlines()
        assert lines[0] == "machine line"
        assert "| default | 2 | identical | identical |  |  |" in lines
        assert "| k3_tiny | 4 |  |  | identical |  |" in lines
        assert "| k3-shaped-resident | 2 |  |  |  | 2 of 2 identical |" in lines
        assert "(4 MoE layers)" in out
        one = next(l for l in lines if l.startswith("| resident | 1 |"))
        assert one == "| resident | 1 | 3 | 8.00 | 125.00 | 1.00 | 31.250 | - | - | - | - |", one
        two = next(l for l in lines if l.startswith("| resident | 2 |"))
        # 4.5 tok/s: 222.22 ms, 0.5625 of one rank, 55.556 ms a MoE layer; 1 ms waited a layer, 0.5 network, 2 round trip.
        assert two == "| resident | 2 | 2 | 4.50 | 222.22 | 0.56 | 55.556 | 1.000 | 0.500 | 2.000 | 15.0, 115.0 |", two
        # A check that differs: named in its cell, exit 1.
        open(os.path.join(tmp, "identity.txt"), "a").write("k2_tiny\t2\tlogits\tdiffers\n")
        rc, out, err = summarize(tmp)
        assert rc == 1 and "**differs**" in out, out


def test_projection(binary):
    spec = importlib.util.spec_from_file_location("project_gpu_hosts", os.path.join(BENCH, "project_gpu_hosts.py"))
    p = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(p)
    p.DRAWS = 2000
    slot, b = p.SLOT, p.EXPERT_GBPS * 1e9
    # One rank, nothing cached: 16 experts read over the slower of the drives and the copy link, then run.
    ms, hits = p.layer_ms([0.0], 28.0, 27.7)
    assert abs(ms - 1000 * (16 * slot / 27.7e9 + 16 * slot / b)) < 1e-9 and hits == [0.0]
    # Every expert cached on 2 ranks: only compute, on the busier rank (8 to 16 of the 16).
    share = 448 * p.MOE_LAYERS * slot
    ms, hits = p.layer_ms([share, share], 28.0, 27.7)
    assert hits == [1.0, 1.0]
    assert 1000 * 8 * slot / b < ms < 1000 * 16 * slot / b
    # The network: measured points, then a line through the last two.
    assert p.comm_ms(1, [(2, 0.5)]) == 0.0
    assert p.comm_ms(3, [(2, 0.5)]) == 1.0
    assert abs(p.comm_ms(8, [(2, 0.5), (4, 0.7)]) - 1.1) < 1e-12
    if binary:  # rank 0's plan, read from the code's own: K3's whole spine resident on an H200's budget
        cwd = os.getcwd()
        os.chdir(ROOT)
        try:
            plan = p.rank0_plan(binary, 147, 250)
            resident, streamed, cache = plan["resident"], plan["streamed"], plan["cache"]
        finally:
            os.chdir(cwd)
        assert abs(resident - p.SPINE) < 1e3 and streamed == 0 and 20e9 < cache < 30e9, (resident, streamed, cache)


if __name__ == "__main__":
    test_summary()
    test_projection(sys.argv[1] if len(sys.argv) > 1 else None)
    print("gpu hosts bench: ok")
