#!/usr/bin/env python3
"""The CUDA benchmark report (scripts/gpu-test.sh writes its inputs into REPORT_DIR): the expert
op against the read ceiling (expert-bench.log), decode steps of the K3-shaped model cold and warm
(k3-cold.json, k3-warm.json, with DELTAFIN_DEVICE_PROFILE=1 device times), the disk's O_DIRECT
read rate (disk-ceiling.log), the CPU's greedy ids on the same model (k3-cpu.json), and the
projection for the full Kimi K3 from those measurements, with its formula. Markdown on OUT.

Usage: summarize_cuda_bench.py REPORT_DIR OUT.md
"""
import json
import os
import re
import sys

K3_MOE_LAYERS, K3_LAYERS, K3_TOP_K, K3_EXPERT = 92, 93, 16, 17_547_264
K3_EXPERTS_PER_LAYER = 896


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    rd, out = sys.argv[1], sys.argv[2]
    lines = ["# CUDA at Kimi K3's real shapes", ""]
    gpu = open(os.path.join(rd, "gpu-report.md")).read().split("| step |")[0] if os.path.exists(
        os.path.join(rd, "gpu-report.md")) else ""
    lines += [gpu.strip(), ""]

    bench = open(os.path.join(rd, "expert-bench.log")).read()
    ceiling = float(re.search(r"read ceiling .*?: (\d+) GB/s", bench).group(1))
    rows = re.findall(r"^\| (\d+) \| ([\d.]+) \| (\d+) \| ([\d.]+) \| (\d+) \| (\d+) % \|$", bench, re.M)
    gbs = {int(r[0]): float(r[4]) for r in rows}
    lines += ["## (a) The expert op against the read ceiling (measured)", "",
              "`build-cuda/cuda_expert_bench 9 128`: 128 MXFP4 experts of 17,547,264 B in VRAM, top-16 per position,",
              "fresh random routing per call; median of 9 calls, the whole op (slot lists, gate/up, down, combine).", "",
              bench[bench.index("read ceiling"):].strip(), ""]

    cold, warm = load(os.path.join(rd, "k3-cold.json")), load(os.path.join(rd, "k3-warm.json"))
    moe = cold["speculative"]["moe_layers"]
    layers = moe + 1

    def split(r):
        t = r["decode"]["tokens"]  # tokens produced; a step is a target pass (the same without speculation)
        steps = r["decode"].get("passes", t)
        d = r["device"]
        per_moe = lambda v: v / steps / moe * 1e3
        return dict(tok_s=t / r["decode"]["seconds"], step_ms=r["decode"]["seconds"] / steps * 1e3,
                    spine=d["decode_spine_seconds"] / steps / layers * 1e3, expert=per_moe(d["decode_expert_seconds"]),
                    copy=per_moe(d["decode_upload_seconds"]), wait=per_moe(r["experts"]["decode_io_wait_seconds"]),
                    gb=r["decode"]["expert_bytes"] / t / 1e9, copy_gb=d["decode_upload_bytes"] / t / 1e9)

    c, w = split(cold), split(warm)
    disk = open(os.path.join(rd, "disk-ceiling.log")).read().strip()
    m = re.search(r"([\d.]+) ([GM])B/s", disk)
    disk_gbs = float(m.group(1)) / (1000 if m.group(2) == "M" else 1) if m else float("nan")
    lines += ["## (b) One decode step per layer (measured)", "",
              f"The K3-shaped model: {layers} layers ({moe} MoE), 128 experts top-16, real per-layer shapes "
              "(`tools/make_synthetic_k3.py --preset k3`). 8 decode tokens; cold: `--cache-gb 0.6` (every token's "
              "experts are read from disk and copied), warm: `--cache-gb 12` after a 64-token prompt (every expert in "
              "VRAM). Device times from event pairs around each op (`DELTAFIN_DEVICE_PROFILE=1`); read wait is the "
              "compute thread blocked on an expert; copies run on the readers' threads, inside the read wait.", "",
              f"Disk (O_DIRECT sequential read, dd): {disk}", "",
              "| arm | tok/s | ms a step | spine ms a layer | expert kernels ms a MoE layer | H2D copy ms a MoE layer | "
              "read wait ms a MoE layer | GB read a token | GB copied a token |", "|---|---|---|---|---|---|---|---|---|"]
    for name, s in (("cold", c), ("warm (experts in VRAM)", w)):
        lines.append(f"| {name} | {s['tok_s']:.2f} | {s['step_ms']:.1f} | {s['spine']:.3f} | {s['expert']:.3f} | "
                     f"{s['copy']:.3f} | {s['wait']:.3f} | {s['gb']:.3f} | {s['copy_gb']:.3f} |")
    cpu_path = os.path.join(rd, "k3-cpu.json")
    if os.path.exists(cpu_path):
        lines += ["", f"Greedy ids, CUDA cold {cold['ids']}; CPU {load(cpu_path)['ids']}: "
                      f"{'identical' if load(cpu_path)['ids'] == cold['ids'] else 'DIFFERENT'}."]

    # (c) projection
    expert_gb = K3_TOP_K * K3_EXPERT / 1e9  # a MoE layer's experts per token
    e_ms = expert_gb / (gbs[1] / 1e3) if 1 in gbs else float("nan")  # ms at the measured 1-position rate
    copy_gbs = (c["copy_gb"] / (c["copy"] * moe / 1e3)) if c["copy"] > 0 else float("nan")
    lines += ["", "## (c) Projection for the full Kimi K3 on one H200 (projected, from the figures above)", "",
              f"Per token: {K3_MOE_LAYERS} MoE layers x {K3_TOP_K} x {K3_EXPERT:,} B = "
              f"{K3_MOE_LAYERS * expert_gb:.1f} GB of routed experts; the 111 GB BF16 spine stays in VRAM, which leaves "
              f"~25 GB of the 141 GB for the expert cache: {25e9 / K3_EXPERT:.0f} of the "
              f"{K3_MOE_LAYERS * K3_EXPERTS_PER_LAYER} experts, so the hit rate h is near {25e9 / K3_EXPERT / (K3_MOE_LAYERS * K3_EXPERTS_PER_LAYER):.3f} "
              "under uniform routing (taken as 0).", "",
              "Layers run one after another (a layer's experts are known only after its router), so",
              "", "    t_token = 93 * s + 92 * (max(R / (D * 7 GB/s), R / C) + R / B)", "",
              f"with R = {expert_gb:.4f} GB a MoE layer's experts, s the spine time a layer (measured above, at the "
              f"model's real per-layer shapes: {w['spine']:.3f} ms warm), C the host-to-device copy rate "
              f"(measured in the cold run: {copy_gbs:.1f} GB/s), B the expert op's rate ({gbs.get(1, float('nan')):.0f} GB/s "
              "measured at 1 position), D the drives at 7 GB/s each; reads and copies overlap (copies run as records "
              "arrive), compute does not overlap the next layer's reads.", "",
              "| drives | read ms a layer | copy ms a layer | expert ms a layer | spine ms a layer | s a token | tok/s |",
              "|---|---|---|---|---|---|---|"]
    for d in (1, 4):
        r_ms = expert_gb / (7 * d) * 1e3
        cp_ms = expert_gb / copy_gbs * 1e3
        t = (K3_LAYERS * w["spine"] + K3_MOE_LAYERS * (max(r_ms, cp_ms) + e_ms)) / 1e3
        lines.append(f"| {d} x 7 GB/s | {r_ms:.1f} | {cp_ms:.2f} | {e_ms:.3f} | {w['spine']:.3f} | {t:.3f} | {1 / t:.2f} |")
    lines += ["", "The drives bound it: the GPU's work for a token (spine and experts) is a few percent of the read time."]
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
