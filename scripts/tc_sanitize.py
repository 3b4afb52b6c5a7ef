#!/usr/bin/env python3
"""Small launches of the TensorCore kernels for compute-sanitizer (memcheck, racecheck, initcheck,
synccheck), with cupy only (no torch, so the tool's start-up stays short). On the GPU machine:

    compute-sanitizer --tool racecheck --error-exitcode 9 python3 scripts/tc_sanitize.py [--only d128]

Each kernel runs on a ragged problem: 2 batch elements with key lengths (Skv, 77), GQA 2:1, Sq not a
multiple of the tile, causal kernels with Sq > L for some rows (fully masked rows), and once with a
boolean mask. The output is compared with nothing here (scripts/tc_check.py does that); the point
is the tools' verdict. Exit 0 when every launch returned without a CUDA error.
"""
import argparse
import math

import cupy as cp
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cubin", default="kernels/cubin/tensorcore.sm_90.cubin")
    ap.add_argument("--only", default="", help="substring of the kernel names to run")
    args = ap.parse_args()
    mod = cp.RawModule(path=args.cubin)
    rs = cp.random.RandomState(1)
    n = 0
    for fam in ("fwd", "dec"):
        for d in (64, 128, 256):
            cfg = cp.ndarray((4,), cp.int32, mod.get_global(f"tc_cfg_{'dec_' if fam == 'dec' else ''}d{d}")).get()
            bm, nt, smem = int(cfg[0]), int(cfg[1]), int(cfg[2])
            for dt, cdt in (("f16", cp.float16), ("bf16", None)):
                for causal in (False, True):
                    name = f"tc_{fam}_{dt}_d{d}" + ("_causal" if causal else "")
                    if args.only not in name:
                        continue
                    f = mod.get_function(name)
                    f.max_dynamic_shared_size_bytes = smem
                    b, hkv, g = 2, 1, 2
                    hq = hkv * g
                    sq, skv = (3, 150) if fam == "dec" else (130, 100)
                    def rnd(*shape):
                        x = rs.standard_normal(shape, dtype=cp.float32)
                        if cdt is not None:
                            return x.astype(cdt)
                        # bf16: the upper 16 bits of the f32 pattern (truncation is fine for a sanitizer run)
                        return (x.view(cp.uint32) >> 16).astype(cp.uint16)
                    q, k, v = rnd(b, hq, sq, d), rnd(b, hkv, skv, d), rnd(b, hkv, skv, d)
                    o = cp.empty_like(q)
                    lens = cp.asarray([skv, 77], dtype=cp.int32)
                    mask = (rs.random_sample((b, hq, sq, skv)) < 0.7).astype(cp.uint8)
                    grid = (1, hkv, b) if fam == "dec" else ((sq + bm - 1) // bm, hq, b)
                    for m in (None, mask):
                        mp = np.uint64(0 if m is None else m.data.ptr)
                        st = (0, 0, 0) if m is None else tuple(s // m.itemsize for s in m.strides[:3])
                        f(grid, (nt, 1, 1),
                          (np.uint64(q.data.ptr), np.uint64(k.data.ptr), np.uint64(v.data.ptr),
                           np.uint64(o.data.ptr), np.uint64(lens.data.ptr), np.int32(b), np.int32(hq),
                           np.int32(hkv), np.int32(sq), np.int32(skv), np.float32(1 / math.sqrt(d)), mp,
                           np.int64(st[0]), np.int64(st[1]), np.int64(st[2])),
                          shared_mem=smem)
                        cp.cuda.runtime.deviceSynchronize()
                        n += 1
    print(f"tc_sanitize: {n} launches, no CUDA error")


if __name__ == "__main__":
    main()
