#!/usr/bin/env python3
"""detattn next to PyTorch SDPA, in one command, on one GPU (DESIGN.md §8).

For each headline workload it times PyTorch SDPA (flash, cuDNN, efficient; and efficient in f32)
and detattn (`detattn bench --backend cuda --json`, which times its kernel with CUDA events) on the
same shapes, with the same protocol: warm-up, >= 20 timed launches, median, inputs rotated so that
they do not sit in L2, never zeros. Prints a table of times, TF/s and ratios; writes JSON.

Usage (on the GPU machine):  python3 scripts/gpu_compare.py BIN OUT.json [--quick]
"""
import json
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BIN, OUT = sys.argv[1], sys.argv[2]
QUICK = "--quick" in sys.argv
WARMUP, ITERS, ROTATE = 5, 30, 4

# id, (B, Hq, S, D), dtype of the SDPA anchors, causal
WORKLOADS = [
    ("W1", (1, 16, 1024, 64), "f16", False),
    ("W2", (4, 16, 4096, 128), "bf16", False),
    ("W2c", (4, 16, 4096, 128), "bf16", True),
    ("W3c", (1, 16, 16384, 128), "bf16", True),
]
TORCH_DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
SDPA = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION}


def flops(b, h, s, d, causal):
    f = 4 * b * h * s * s * d
    return f / 2 if causal else f


def time_sdpa(backend, shape, dt, causal):
    b, h, s, d = shape
    g = torch.Generator(device="cuda").manual_seed(0)
    sets = [[torch.randn(b, h, s, d, device="cuda", dtype=dt, generator=g) for _ in range(3)]
            for _ in range(ROTATE)]
    with sdpa_kernel([SDPA[backend]]):
        for i in range(WARMUP):
            F.scaled_dot_product_attention(*sets[i % ROTATE], is_causal=causal)
        torch.cuda.synchronize()
        ts = []
        for i in range(ITERS):
            st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            st.record()
            F.scaled_dot_product_attention(*sets[i % ROTATE], is_causal=causal)
            en.record()
            en.synchronize()
            ts.append(st.elapsed_time(en) * 1000.0)
    del sets
    torch.cuda.empty_cache()
    return statistics.median(ts)


def time_detattn(shape, dtype, causal):
    b, h, s, d = shape
    cmd = [BIN, "bench", "--backend", "cuda", "--batch", str(b), "--q-heads", str(h), "--kv-heads",
           str(h), "--q-len", str(s), "--kv-len", str(s), "--head-dim", str(d), "--dtype", dtype,
           "--warmup", str(WARMUP), "--iters", str(ITERS), "--rotate", str(ROTATE), "--json"]
    if causal:
        cmd.append("--causal")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=550)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[:300]}")
    return float(json.loads(r.stdout)["median_us"])


def main():
    dev = torch.cuda.get_device_name()
    print(f"device: {dev}; torch {torch.__version__}", flush=True)
    rows = []
    for wid, shape, dt, causal in WORKLOADS:
        if QUICK and wid not in ("W1", "W2"):
            continue
        f = flops(*shape, causal)
        r = {"id": wid, "shape": shape, "causal": causal, "sdpa": {}, "detattn": {}}
        for be in ("flash", "cudnn", "efficient"):
            try:
                r["sdpa"][f"{be}_{dt}"] = time_sdpa(be, shape, TORCH_DT[dt], causal)
            except Exception as ex:  # a backend that refuses a shape is reported, not fatal
                r["sdpa"][f"{be}_{dt}"] = f"error: {str(ex)[:80]}"
        try:
            r["sdpa"]["efficient_f32"] = time_sdpa("efficient", shape, torch.float32, causal)
        except Exception as ex:
            r["sdpa"]["efficient_f32"] = f"error: {str(ex)[:80]}"
        for our_dt in ("f32", dt):
            try:
                r["detattn"][f"exact_{our_dt}"] = time_detattn(shape, our_dt, causal)
            except Exception as ex:
                r["detattn"][f"exact_{our_dt}"] = f"error: {str(ex)[:200]}"
        rows.append(r)
        print(json.dumps(r), flush=True)

    print("\n| id | variant | µs | TF/s | vs SDPA eff f32 | vs flash | vs cuDNN |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        f = flops(*r["shape"], r["causal"])
        ref = {k: v for k, v in r["sdpa"].items() if isinstance(v, float)}
        dt = [k for k in r["sdpa"] if k.startswith("flash_")][0].split("_")[1]
        for name, us in list(r["sdpa"].items()) + [("detattn " + k, v) for k, v in r["detattn"].items()]:
            if not isinstance(us, float):
                print(f"| {r['id']} | {name} | {us} | | | | |")
                continue

            def ratio(key):
                # ratio > 1 means detattn (or this row) is slower than the reference
                return f"{us / ref[key]:.2f}x" if key in ref else "n/a"
            print(f"| {r['id']} | {name} | {us:.1f} | {f / us / 1e6:.1f} | {ratio('efficient_f32')} | "
                  f"{ratio('flash_' + dt)} | {ratio('cudnn_' + dt)} |")
    with open(OUT, "w") as fh:
        json.dump({"device": dev, "torch": torch.__version__, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
