#!/usr/bin/env python3
"""The real Kimi K3 on one machine with several GPUs, one MPI rank per GPU (issue 40): a projection.

  project_gpu_hosts.py --deltafin BIN --comm-ms MS[,MS...] [--ranks-measured 2[,4...]]
      [--machine "2 x H200:2:147:250" ...] [--drive-gbps 28] [--copy-gbps 27.7]

Each --machine is NAME:GPUS:DEVICE_GB:HOST_GB (a GPU's budget, as --device-memory-gb, and the
host's memory). Two designs, for 1 GPU and for all of the machine's:

- as built (src/hosts): rank 0 holds the spine, the KV cache and its expert cache on its GPU and
  streams what its budget cannot hold from pinned host memory every token (its plan is `BIN
  inspect -m tests/fixtures/k3_real_config --device-memory-gb D --memory-gb H`, the code's own);
  every other rank gives its GPU to routed experts (expert_host_cache: all but 5 % and 256 MiB);
- spine split (not built): each GPU holds 1/N of the spine's layers and of the KV cache and runs
  them in turn (pipeline), the rest of its budget caching experts; N - 1 hidden-state hops a
  token, each taken as one measured exchange.

Expert e of a layer is rank e % N's (ExpertOwners::equal_shares). A token:

    t = spine_compute + spine_streamed / C + hops + 92 x (E[layer] + comm)
    layer = max(sum_r R_r / D, max_r R_r / C) + max_r c_r x slot / B,  R_r = c_r x (1 - hit_r) x slot

c_r: how many of the layer's 16 experts rank r owns (drawn without replacement from 896, averaged
over 200,000 draws with a fixed seed); hit_r: rank r's cache over its share (uniform routing);
D: the machine's drives (shared by all ranks), C: one GPU's host-to-device copy rate (each GPU its
own link), B: the expert op's rate. spine_compute is 85.9409 ms and B 1149 GB/s: both measured on
an H100 at K3's real per-layer shapes (k3-public-bench/results/cuda-k3-shapes.md, also taken for
the H200). comm: rank 0's wait for the network in one MoE layer's exchange, measured on the GPU
machine by run-gpu-hosts-bench.sh at --ranks-measured rank counts (--comm-ms, in the same order),
extended linearly in the number of other ranks beyond the last. Reads, copies and compute of one
layer overlap as the one-GPU projection of cuda-k3-shapes.md has them; the streamed spine's copies
are added, not overlapped (an upper bound).
"""
import argparse
import random
import re
import subprocess

SLOT = 17_547_264            # one MXFP4 expert, bytes
EXPERTS, TOP_K, MOE_LAYERS = 896, 16, 92
SPINE = 113_509_532_032      # bytes, the embedding table included
SPINE_MS = 85.9409           # a token's spine on an H100 (cuda-k3-shapes.md)
EXPERT_GBPS = 1149.0         # the expert op at one position on an H100
DRAWS = 200_000


def rank0_plan(deltafin, device_gb, host_gb):
    """Rank 0's device plan from `deltafin inspect`, in bytes: the spine resident and streamed, the
    expert cache, the KV cache and state, working memory, and a prefill pass's activations."""
    text = subprocess.run([deltafin, "inspect", "-m", "tests/fixtures/k3_real_config", "--device-memory-gb", str(device_gb),
                           "--memory-gb", str(host_gb)], check=True, capture_output=True, text=True).stdout
    device = re.search(r"^device .*?spine ([\d.]+) GB resident \+ ([\d.]+) GB streamed.*?experts ([\d.]+) GB, "
                       r"KV cache and state ([\d.]+) GB.*?working ([\d.]+) GB", text, re.M)
    activations = re.search(r"^prefill pass .*?activations ([\d.]+) GB", text, re.M)
    names = ("resident", "streamed", "cache", "kv", "working")
    plan = {name: float(v) * 1e9 for name, v in zip(names, device.groups())}
    plan["activations"] = float(activations.group(1)) * 1e9
    return plan


def expert_host_cache(budget):
    return max(0.0, budget - budget / 20 - (256 << 20))


def layer_ms(caches, drive_gbps, copy_gbps, rng_seed=1):
    """E[a MoE layer's expert time] in ms for ranks with these expert caches (bytes), owners e % N."""
    n = len(caches)
    share = [(EXPERTS // n + (r < EXPERTS % n)) * MOE_LAYERS * SLOT for r in range(n)]
    miss = [1 - min(1.0, caches[r] / share[r]) for r in range(n)]
    rng = random.Random(rng_seed)
    total = 0.0
    for _ in range(DRAWS):
        counts = [0] * n
        for e in rng.sample(range(EXPERTS), TOP_K):
            counts[e % n] += 1
        reads = [counts[r] * miss[r] * SLOT for r in range(n)]
        io = max(sum(reads) / (drive_gbps * 1e9), max(reads) / (copy_gbps * 1e9))
        total += io + max(counts) * SLOT / (EXPERT_GBPS * 1e9)
    return 1000 * total / DRAWS, [1 - m for m in miss]


def comm_ms(ranks, measured):
    """Rank 0's network wait in a layer at `ranks` ranks, from the measured (ranks, ms) points."""
    if ranks == 1:
        return 0.0
    points = sorted(measured)
    for r, ms in points:
        if r == ranks:
            return ms
    if len(points) == 1:
        return points[0][1] * (ranks - 1) / (points[0][0] - 1)
    (r0, m0), (r1, m1) = points[-2], points[-1]
    return m1 + (m1 - m0) / (r1 - r0) * (ranks - r1)


def project(deltafin, gpus, device_gb, host_gb, design, measured, drive_gbps, copy_gbps):
    budget = device_gb * 1e9
    plan = rank0_plan(deltafin, device_gb, host_gb)
    if design == "as built" or gpus == 1:
        streamed = plan["streamed"]
        caches = [plan["cache"]] + [expert_host_cache(budget)] * (gpus - 1)
        hops = 0.0
    else:  # spine split: a GPU's part of the spine and KV cache, its working memory and a prefill pass's share
        part = (SPINE + plan["kv"] + plan["activations"]) / gpus + plan["working"]
        if part > budget:
            return None
        caches = [budget - part] * gpus
        streamed = 0.0
        hops = (gpus - 1) * comm_ms(2, measured)
    experts, hits = layer_ms(caches, drive_gbps, copy_gbps)
    net = comm_ms(gpus, measured)
    spine_copy = streamed / (copy_gbps * 1e9) * 1000
    token = SPINE_MS + spine_copy + hops + MOE_LAYERS * (experts + net)
    return dict(token=token, experts=experts, net=net, spine_copy=spine_copy, hops=hops, caches=caches, hits=hits)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--deltafin", default="build/deltafin")
    p.add_argument("--comm-ms", required=True, help="measured network ms a MoE layer, comma-separated")
    p.add_argument("--ranks-measured", default="2", help="the rank counts of --comm-ms, comma-separated")
    p.add_argument("--machine", action="append", default=[])
    p.add_argument("--drive-gbps", type=float, default=28.0)
    p.add_argument("--copy-gbps", type=float, default=27.7)
    a = p.parse_args()
    measured = list(zip(map(int, a.ranks_measured.split(",")), map(float, a.comm_ms.split(","))))
    machines = a.machine or ["2 x H200:2:147:250", "8 x H100:8:83:540"]
    print(f"Drives {a.drive_gbps:g} GB/s (shared by the machine's GPUs), host-to-device copies {a.copy_gbps:g} GB/s a GPU, "
          f"network a MoE layer measured at {', '.join(f'{r} ranks: {ms:g} ms' for r, ms in measured)}.")
    print()
    print("| machine | design | GPUs | spine | expert cache a GPU, GB | hit rate (rank 0, others) | "
          "streamed spine ms | experts ms a layer | network ms a layer | ms a token | tok/s | x 1 GPU |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for spec in machines:
        name, gpus, device_gb, host_gb = spec.split(":")
        gpus, device_gb, host_gb = int(gpus), float(device_gb), float(host_gb)
        one = project(a.deltafin, 1, device_gb, host_gb, "as built", measured, a.drive_gbps, a.copy_gbps)
        rows = [("one GPU", 1, one)]
        for design in ("as built", "spine split"):
            rows.append((design, gpus, project(a.deltafin, gpus, device_gb, host_gb, design, measured, a.drive_gbps,
                                               a.copy_gbps)))
        for design, n, r in rows:
            if r is None:
                print(f"| {name} | {design} | {n} | does not fit | | | | | | | | |")
                continue
            spine = "rank 0" if design != "spine split" else f"1/{n} a GPU"
            cache = f"{r['caches'][0] / 1e9:.1f}" + (f", {r['caches'][1] / 1e9:.1f}" if n > 1 else "")
            hits = f"{100 * r['hits'][0]:.1f} %" + (f", {100 * r['hits'][1]:.1f} %" if n > 1 else "")
            print(f"| {name} | {design} | {n} | {spine} | {cache} | {hits} | {r['spine_copy']:.0f} | {r['experts']:.3f} | "
                  f"{r['net']:.3f} | {r['token']:.0f} | {1000 / r['token']:.3f} | {one['token'] / r['token']:.2f} |")


if __name__ == "__main__":
    main()
