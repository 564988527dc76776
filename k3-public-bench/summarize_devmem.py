#!/usr/bin/env python3
"""The device-budget runs of scripts/gpu-test.sh (step k3-device-budget): the K3-shaped model with
its spine resident (k3-devmem-resident.json) and streamed through device memory
(k3-devmem-*.json, --device-memory-gb below the spine), all with DELTAFIN_DEVICE_PROFILE=1. Per
run: the plan (spine streamed, held in host memory), decode seconds a token, the bytes copied to
the device a decode token (streamed spine + experts) and the copy rate measured on the copy
stream, and the decode time a token beyond the resident run's set beside the streamed spine's
bytes at that rate. Markdown on stdout.

Usage: summarize_devmem.py REPORT_DIR
"""
import glob
import json
import os
import sys


def per_token(run, key):
    tokens = max(1, run["decode"]["tokens"])
    return run[key[0]][key[1]] / tokens


def main():
    rd = sys.argv[1]
    runs = {}
    for path in sorted(glob.glob(os.path.join(rd, "k3-devmem-*.json"))):
        with open(path) as f:
            runs[os.path.basename(path)[len("k3-devmem-"):-len(".json")]] = json.load(f)
    if "resident" not in runs:
        sys.exit("summarize_devmem.py: no k3-devmem-resident.json in " + rd)
    base = per_token(runs["resident"], ("decode", "seconds"))
    print("# The K3-shaped model with a device budget below its spine\n")
    print("| run | spine streamed GB | held in host GB | decode s/token | copied GB/token | copy rate GB/s "
          "| s/token beyond resident | streamed spine at the copy rate, s | ids |")
    print("|---|---|---|---|---|---|---|---|---|")
    ids = runs["resident"]["ids"]
    for name, r in runs.items():
        m, d = r["memory"], r["device"]
        s = per_token(r, ("decode", "seconds"))
        copied = per_token(r, ("device", "decode_upload_bytes")) / 1e9
        rate = d["decode_upload_bytes"] / d["decode_upload_seconds"] / 1e9 if d["decode_upload_seconds"] else 0
        spine = m["spine_streamed"] / 1e9
        print(f"| {name} | {spine:.3f} | {m['spine_host'] / 1e9:.3f} | {s:.4f} | {copied:.3f} | {rate:.2f} | "
              f"{s - base:+.4f} | {spine / rate if rate else 0:.4f} | {'same' if r['ids'] == ids else 'DIFFERENT'} |")
    print("\nThe copy rate is bytes over the summed durations of the copies (host-timed, each waited for), so "
          "copies that overlapped count their time twice: a lower bound on the rate PCIe gave.")


if __name__ == "__main__":
    main()
