#!/usr/bin/env python3
"""k3-public-bench/summarize_hosts_bench.py on made-up runs (CTest bench_summarize_hosts): the
median run of an arm, the floor from every host's drive ceilings and the bytes per token, the
speedup against the recorded 1-host arm, the bytes on rank 0's link, and the per-host receipt where the stats have one (and a
dash where they do not). Python stdlib only."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUMMARIZE = os.path.join(ROOT, "k3-public-bench", "summarize_hosts_bench.py")


def stats(tokens, seconds, expert_gb_per_token, hosts=None):
    s = {"decode": {"tokens": tokens, "seconds": seconds, "expert_bytes": expert_gb_per_token * 1e9 * tokens},
         "prefill": {"tokens": 12, "seconds": 3 - seconds if hosts else 1.0},
         "spine": {"decode_bytes_read": 0.01e9 * tokens}}
    if hosts is not None:
        s["hosts"] = hosts
    return s


def row(tmp, mode, budget, ceilings, runs, links=()):
    with open(os.path.join(tmp, "ceilings.txt"), "w") as f:
        f.write("".join(f"{host} {gbps}\n" for host, gbps in ceilings))
    paths = []
    for i, s in enumerate(runs):
        paths.append(os.path.join(tmp, f"stats-{i}.json"))
        json.dump(s, open(paths[-1], "w"))
        if i < len(links):
            open(paths[-1] + ".link", "w").write(f"{links[i]}\n")
        elif os.path.exists(paths[-1] + ".link"):
            os.remove(paths[-1] + ".link")
    p = subprocess.run([sys.executable, SUMMARIZE, mode, os.path.join(tmp, "base"), budget,
                        os.path.join(tmp, "ceilings.txt")] + paths, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return [c.strip() for c in p.stdout.strip().strip("|").split("|")]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        # 1 host, two drives of 0.15 GB/s; runs at 2, 3 and 4 tok/s: the median is 3
        one = row(tmp, "--record-base", "0", [(0, 0.15), (0, 0.15)],
                  [stats(12, 6.0, 0.09), stats(12, 4.0, 0.09), stats(12, 3.0, 0.09)])
        assert one[:4] == ["default", "3", "3.000", "1.00"], one
        # floor: 0.30 GB/s over 0.10 GB per token = 3.0 tok/s; the median run is at 100 %
        assert one[6:8] == ["3.000", "100 %"], one
        assert one[8:10] == ["-", "-"], one
        # 2 hosts at 5.7 tok/s: 1.90x the recorded 1-host arm; the receipt per host
        hosts = [{"rank": 0, "name": "deltafin-host0", "expert_bytes_read": 0.54e9, "drive_busy_seconds": 1.8,
                  "round_trips": 0},
                 {"rank": 1, "name": "deltafin-host1", "expert_bytes_read": 0.54e9, "drive_busy_seconds": 2.0,
                  "round_trips": 108, "network_seconds": 0.21, "stall_seconds": 0.05, "bytes_to": 108 * 8300,
                  "bytes_from": 108 * 66000}]
        two = row(tmp, "--base", "0.5", [(0, 0.15), (0, 0.15), (1, 0.15), (1, 0.15)],
                  [stats(12, 12 / 5.7, 0.09, hosts)], links=[21_500_000])
        assert two[:4] == ["0.5", "1", "5.700", "1.90"], two
        assert two[6:8] == ["6.000", "95 %"], two
        assert two[8] == "21.5", two
        # the network's share of the whole run (decode 12 / 5.7 s + prefill 0.895 s = 3 s)
        assert two[9] == ("deltafin-host0: 0.540 GB at 0.300 GB/s; deltafin-host1: 0.540 GB at 0.270 GB/s, network 0.210 s (7 %), "
                          "rank 0 waited 0.050 s, 108 round trips of 8.3 KB + 66.0 KB"), two
    # no base recorded: a dash, not a crash
    with tempfile.TemporaryDirectory() as tmp:
        r = row(tmp, "--base", "0", [(0, 0.15)], [stats(12, 4.0, 0.09)])
        assert r[3] == "-", r
    print("summarize_hosts_bench: ok")


if __name__ == "__main__":
    main()
