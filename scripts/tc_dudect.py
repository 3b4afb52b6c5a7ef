#!/usr/bin/env python3
"""dudect-style timing test of the TensorCore kernels (DESIGN.md §5), on the GPU machine.

For each kernel configuration, the launch time (CUDA events around one launch) is measured for
inputs of several classes, in random interleaved order: random (the reference), zeros, subnormals,
huge finite values, NaN, and one-hot peaked scores. Welch's t between the random class and each
other class must stay below 4.5 in absolute value. Reported twice: on all measurements and on those
under the pooled 90th percentile (dudect's crop, which removes interrupts and other outliers).
Power and clock side channels are out of scope (DESIGN.md §5).

Usage:  python3 scripts/tc_dudect.py [--cubin PATH] [--n N] [--out DIR]   (N measurements per class)
"""
import argparse
import json
import math
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tc_check import TDT, Kernels  # noqa: E402


def classes(b, h, s, d, dt, gen):
    tdt = TDT[dt]
    tiny = 1e-6 if dt == "f16" else 1e-39  # subnormal in f16 / bf16
    big = 3e4 if dt == "f16" else 1e18

    def rnd():
        return torch.randn(b, h, s, d, generator=gen, device="cuda")
    out = {}
    out["random"] = [rnd().to(tdt) for _ in range(3)]
    out["zeros"] = [torch.zeros(b, h, s, d, device="cuda", dtype=tdt) for _ in range(3)]
    out["subnormal"] = [(torch.sign(rnd()) * tiny).to(tdt) for _ in range(3)]
    out["huge"] = [(torch.sign(rnd()) * big).to(tdt) for _ in range(2)] + [rnd().to(tdt)]
    out["nan"] = [torch.full((b, h, s, d), float("nan"), device="cuda", dtype=tdt) for _ in range(3)]
    k = rnd()
    out["peaked"] = [(k * 8).to(tdt), k.to(tdt), rnd().to(tdt)]  # q = 8k: each row peaks on its own key
    return out


def welch(a, b):
    na, nb = len(a), len(b)
    ma, mb = sum(a) / na, sum(b) / nb
    va = sum((x - ma) ** 2 for x in a) / (na - 1)
    vb = sum((x - mb) ** 2 for x in b) / (nb - 1)
    return (ma - mb) / math.sqrt(va / na + vb / nb + 1e-30)


def run_config(K, name, shape, dt, causal, n, gen):
    b, h, s, d = shape
    cls = classes(b, h, s, d, dt, gen)
    out = torch.empty(b, h, s, d, device="cuda", dtype=TDT[dt])
    calls = {c: K.prepare(*x, out, None, causal) for c, x in cls.items()}
    names = list(cls)
    for c in names * 20:  # warm-up
        calls[c]()
    torch.cuda.synchronize()
    order = [c for c in names for _ in range(n)]
    random.Random(1).shuffle(order)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(256)]
    times = {c: [] for c in names}
    for i0 in range(0, len(order), 256):
        chunk = order[i0:i0 + 256]
        for (st, en), c in zip(ev, chunk):
            st.record()
            calls[c]()
            en.record()
        torch.cuda.synchronize()
        for (st, en), c in zip(ev, chunk):
            times[c].append(st.elapsed_time(en) * 1000.0)
    pooled = sorted(x for v in times.values() for x in v)
    crop = pooled[int(0.9 * len(pooled))]
    res = dict(config=name, shape=list(shape), dtype=dt, causal=causal, n=n,
               median_us={c: sorted(v)[len(v) // 2] for c, v in times.items()}, t={}, t_cropped={})
    for c in names[1:]:
        res["t"][c] = welch(times["random"], times[c])
        a = [x for x in times["random"] if x <= crop]
        bb = [x for x in times[c] if x <= crop]
        res["t_cropped"][c] = welch(a, bb)
    res["ok"] = all(abs(t) < 4.5 for t in list(res["t"].values()) + list(res["t_cropped"].values()))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cubin", default="kernels/cubin/tensorcore.sm_90.cubin")
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    args = ap.parse_args()
    K = Kernels(args.cubin)
    gen = torch.Generator(device="cuda").manual_seed(3)
    configs = [("fwd f16 d64", (1, 8, 256, 64), "f16", False),
               ("fwd bf16 d128 causal", (1, 8, 512, 128), "bf16", True)]
    results = []
    print(f"# {torch.cuda.get_device_name()}  n={args.n} per class")
    for name, shape, dt, causal in configs:
        r = run_config(K, name, shape, dt, causal, args.n, gen)
        results.append(r)
        print(f"{name:22} median us " + " ".join(f"{c}={v:.2f}" for c, v in r["median_us"].items()))
        print(f"{'':22} t        " + " ".join(f"{c}={v:+.2f}" for c, v in r["t"].items()))
        print(f"{'':22} t (crop) " + " ".join(f"{c}={v:+.2f}" for c, v in r["t_cropped"].items())
              + f"   {'PASS' if r['ok'] else 'FAIL'}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tc_dudect.json"), "w") as f:
        json.dump(results, f, indent=1)
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
