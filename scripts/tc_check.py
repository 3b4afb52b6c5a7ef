#!/usr/bin/env python3
"""GPU harness for the TensorCore kernels (kernels/tensorcore.cu): accuracy, determinism, speed.

Runs on the GPU machine (python3 with torch and cupy; no cargo). Loads the sm_90 cubin with
cupy.RawModule, launches the kernels on torch tensors, and checks:

  accuracy     relative L2 error against an f64 torch reference on many random problems (causal,
               kv_lens incl. 0, GQA/MQA, odd lengths), no NaN, every output element written (the
               output is poisoned with NaN first), rows that see no key exactly 0.
               Bound: 1e-2 for bf16, 2e-3 for f16.
  D1           repeated runs give identical bits.
  D2           each batch element alone (B=1) == its rows inside the batch, bit for bit.
  D3           decode (Sq=1, kv_lens=i+1 over the same cache) == row i of the causal prefill.
  D4           a query subset (shifted suffix for causal; a scattered gather otherwise) == those rows.
  speed        CUDA events, warm-up, median of >= 20, 4 rotated input sets (never zeros), next to
               torch SDPA flash and cuDNN on W1, W2, W2c, W3c; every variant in the cubin is timed.

Usage:  python3 scripts/tc_check.py [--cubin PATH] [--quick] [--skip-speed] [--out DIR]
Writes DIR/tc.json (DIR defaults to $OUT or /tmp) and prints a table last.
"""
import argparse
import datetime
import json
import math
import os
import random
import statistics
import sys
import time

import cupy as cp
import numpy as np
import torch
import torch.nn.functional as F
import warnings

warnings.filterwarnings("ignore", category=DeprecationWarning)  # cupy ExternalStream

TDT = {"f16": torch.float16, "bf16": torch.bfloat16}
BOUND = {"f16": 2e-3, "bf16": 1e-2}
POISON = {"f16": 0x7E00, "bf16": 0x7FC0}  # quiet NaN bit patterns


class Kernels:
    """The cubin's kernels. `variant`: '' = the shipped prefill family tc_fwd_*, 'dec' = the shipped decode
    family tc_dec_*, a letter = the tuning variant tcx_<letter>_* (a decode variant when its BM is 16)."""

    def __init__(self, path):
        self.mod = cp.RawModule(path=path)
        self.fns = {}
        self.cfgs = {}
        self.plant = False
        self.calls = 0

    def cfg(self, variant, d):
        key = (variant, d)
        if key not in self.cfgs:
            name = {"": f"tc_cfg_d{d}", "dec": f"tc_cfg_dec_d{d}"}.get(variant, f"tcx_cfg_{variant}_d{d}")
            ptr = self.mod.get_global(name)
            arr = cp.ndarray((4,), cp.int32, ptr)
            bm, nt, smem, bn = (int(x) for x in arr.get())
            self.cfgs[key] = dict(bm=bm, threads=nt, smem=smem, bn=bn)
        return self.cfgs[key]

    def has(self, variant, d):
        try:
            self.cfg(variant, d)
            return True
        except Exception:
            return False

    def fn(self, variant, dt, d, causal):
        name = {"": "tc_fwd", "dec": "tc_dec"}.get(variant, f"tcx_{variant}") + f"_{dt}_d{d}" + ("_causal" if causal else "")
        if name not in self.fns:
            f = self.mod.get_function(name)
            f.max_dynamic_shared_size_bytes = self.cfg(variant, d)["smem"]
            self.fns[name] = f
        return self.fns[name]

    def is_decode(self, variant, d):
        return self.cfg(variant, d)["bm"] == 16

    def launch(self, q, k, v, o, kv_lens, causal, scale=None, variant="", mask=None):
        self.prepare(q, k, v, o, kv_lens, causal, scale, variant, mask)()

    def prepare(self, q, k, v, o, kv_lens, causal, scale=None, variant="", mask=None):
        """Validate once and return a closure that only launches (for timing: a few us of host time)."""
        b, hq, sq, d = q.shape
        _, hkv, skv, _ = k.shape
        dt = "f16" if q.dtype == torch.float16 else "bf16"
        for t in (q, k, v, o):
            assert t.is_contiguous() and t.data_ptr() % 16 == 0 and t.dtype == q.dtype
        assert hq % hkv == 0 and o.shape == q.shape and v.shape == k.shape
        c = self.cfg(variant, d)
        f = self.fn(variant, dt, d, causal)
        if scale is None:
            scale = 1.0 / math.sqrt(d)
        if self.plant:  # --plant: a deliberate fault on every third launch, to see the checkers fail
            self.calls += 1
            if self.calls % 3 == 0:
                scale *= 1.05
        if mask is None:
            mptr, ms = 0, (0, 0, 0)
        else:  # bool [B|1, Hq|1, Sq, Skv], True = attend; broadcast dims get stride 0
            assert mask.dtype == torch.bool and mask.dim() == 4 and mask.stride(3) == 1
            mask = mask.expand(b, hq, sq, skv)
            mptr, ms = mask.data_ptr(), mask.stride()[:3]
        kl = np.uint64(0 if kv_lens is None else kv_lens.data_ptr())
        if self.is_decode(variant, d):
            assert (hq // hkv) * sq <= 16, "decode kernel: (Hq / Hkv) * Sq must be <= 16"
            grid = (1, hkv, b)
        else:
            grid = ((sq + c["bm"] - 1) // c["bm"], hq, b)
        stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        block, smem = (c["threads"], 1, 1), c["smem"]
        args = (np.uint64(q.data_ptr()), np.uint64(k.data_ptr()), np.uint64(v.data_ptr()),
                np.uint64(o.data_ptr()), kl, np.int32(b), np.int32(hq), np.int32(hkv), np.int32(sq),
                np.int32(skv), np.float32(scale), np.uint64(mptr), np.int64(ms[0]), np.int64(ms[1]),
                np.int64(ms[2]))

        def go():
            f(grid, block, args, shared_mem=smem, stream=stream)
        return go

    def run(self, q, k, v, kv_lens=None, causal=False, variant="", mask=None):
        dt = "f16" if q.dtype == torch.float16 else "bf16"
        o = torch.full(q.shape, POISON[dt], dtype=torch.int16, device=q.device).view(q.dtype)
        self.launch(q, k, v, o, kv_lens, causal, variant=variant, mask=mask)
        return o


def reference(q, k, v, kv_lens, causal, mask=None):
    """f64 reference; rows that see no key are 0."""
    b, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    g = hq // hkv
    q64, k64, v64 = q.double(), k.double(), v.double()
    k64 = k64.repeat_interleave(g, dim=1)
    v64 = v64.repeat_interleave(g, dim=1)
    s = (q64 @ k64.transpose(-1, -2)) / math.sqrt(d)
    lens = torch.full((b,), skv, device=q.device) if kv_lens is None else kv_lens.long()
    j = torch.arange(skv, device=q.device).view(1, 1, 1, skv)
    i = torch.arange(sq, device=q.device).view(1, 1, sq, 1)
    L = lens.view(b, 1, 1, 1)
    vis = j < L
    if causal:
        vis = vis & (j + sq <= i + L)
    if mask is not None:
        vis = vis & mask
    s = s.masked_fill(~vis, float("-inf"))
    p = torch.softmax(s, dim=-1)
    p = torch.nan_to_num(p, nan=0.0)  # fully masked rows: softmax of all -inf is NaN -> 0
    out = p @ v64
    return out, vis.expand(b, hq, sq, skv).any(dim=-1, keepdim=True)


def rand_mask(rng, gen, b, hq, sq, skv):
    """Random boolean mask, sometimes broadcast over batch or heads, with some rows fully masked."""
    mb = rng.choice([1, b])
    mh = rng.choice([1, hq])
    m = torch.rand(mb, mh, sq, skv, generator=gen, device="cuda") < rng.choice([0.3, 0.8, 0.97])
    dead = torch.rand(mb, mh, sq, 1, generator=gen, device="cuda") < 0.1
    return m & ~dead


def rand_problem(gen, b, hq, hkv, sq, skv, d, dt, lens=None, scale_in=1.0):
    q = (torch.randn(b, hq, sq, d, generator=gen, device="cuda") * scale_in).to(TDT[dt])
    k = (torch.randn(b, hkv, skv, d, generator=gen, device="cuda") * scale_in).to(TDT[dt])
    v = torch.randn(b, hkv, skv, d, generator=gen, device="cuda").to(TDT[dt])
    kl = None if lens is None else torch.tensor(lens, dtype=torch.int32, device="cuda")
    return q, k, v, kl


def bits(t):
    return t.view(torch.int16)


def same_bits(a, b):
    return bool(torch.equal(bits(a), bits(b)))


# ------------------------------------------------------------------------------------ accuracy

def check_accuracy(K, n, heads_dims, variant=""):
    rng = random.Random(1234)
    gen = torch.Generator(device="cuda").manual_seed(1234)
    worst = {}
    fails = []
    for t in range(n):
        d = rng.choice(heads_dims)
        dt = rng.choice(["f16", "bf16"])
        causal = rng.random() < 0.5
        hkv = rng.choice([1, 2, 3])
        hq = hkv * rng.choice([1, 2, 4])
        b = rng.choice([1, 2, 3])
        sq = rng.choice([1, 2, 7, 16, 63, 64, 65, 127, 128, 129, 200, 333, 512, 700])
        skv = rng.choice([1, 5, 31, 32, 64, 65, 100, 128, 255, 256, 400, 513, 900])
        use_lens = rng.random() < 0.5
        lens = [rng.choice([0, 1, rng.randint(0, skv), skv]) for _ in range(b)] if use_lens else None
        scale_in = rng.choice([1.0, 1.0, 3.0])  # 3.0: peaked softmax
        q, k, v, kl = rand_problem(gen, b, hq, hkv, sq, skv, d, dt, lens, scale_in)
        mask = rand_mask(rng, gen, b, hq, sq, skv) if rng.random() < 0.25 else None
        o = K.run(q, k, v, kl, causal, variant, mask)
        ref, any_vis = reference(q, k, v, kl, causal, mask)
        of = o.double()
        nan = bool(torch.isnan(of).any() or torch.isinf(of).any())
        masked_rows_zero = bool((of.masked_select(~any_vis.expand_as(of)) == 0).all())
        num = torch.linalg.vector_norm(of - ref).item()
        den = torch.linalg.vector_norm(ref).item()
        err = num / den if den > 0 else num
        key = f"{dt}_d{d}"
        worst[key] = max(worst.get(key, 0.0), err)
        ok = (not nan) and masked_rows_zero and err <= BOUND[dt]
        if not ok:
            fails.append(dict(t=t, dt=dt, d=d, b=b, hq=hq, hkv=hkv, sq=sq, skv=skv, causal=causal,
                              lens=lens, mask=mask is not None, err=err, nan=nan, masked_rows_zero=masked_rows_zero))
    return dict(n=n, worst=worst, fails=fails[:20], n_fail=len(fails))


def check_decode(K, n, dims):
    """Decode kernel (G * Sq <= 16 rows per block): accuracy, and the same bits as the prefill kernel."""
    rng = random.Random(77)
    gen = torch.Generator(device="cuda").manual_seed(77)
    worst, fails, ne = {}, [], 0
    for t in range(n):
        d = rng.choice(dims)
        dt = rng.choice(["f16", "bf16"])
        causal = rng.random() < 0.5
        hkv = rng.choice([1, 2, 5])
        g = rng.choice([1, 2, 4, 8, 16])
        sq = rng.choice([s for s in (1, 1, 1, 2, 3, 4, 16) if g * s <= 16])
        b = rng.choice([1, 2, 3])
        skv = rng.choice([1, 33, 64, 65, 300, 1000, 2049])
        lens = [rng.choice([0, 1, rng.randint(0, skv), skv]) for _ in range(b)] if rng.random() < 0.6 else None
        q, k, v, kl = rand_problem(gen, b, hkv * g, hkv, sq, skv, d, dt, lens)
        mask = rand_mask(rng, gen, b, hkv * g, sq, skv) if rng.random() < 0.25 else None
        o = K.run(q, k, v, kl, causal, "dec", mask)
        pre = K.run(q, k, v, kl, causal, "", mask)
        ref, any_vis = reference(q, k, v, kl, causal, mask)
        of = o.double()
        den = torch.linalg.vector_norm(ref).item()
        err = torch.linalg.vector_norm(of - ref).item() / (den if den > 0 else 1.0)
        key = f"{dt}_d{d}"
        worst[key] = max(worst.get(key, 0.0), err)
        same = same_bits(o, pre)
        ne += not same
        nan = bool(torch.isnan(of).any())
        zero = bool((of.masked_select(~any_vis.expand_as(of)) == 0).all())
        if nan or not zero or err > BOUND[dt] or not same:
            fails.append(dict(t=t, dt=dt, d=d, b=b, g=g, hkv=hkv, sq=sq, skv=skv, causal=causal, lens=lens,
                              mask=mask is not None,
                              err=err, nan=nan, zero=zero, same_as_prefill=same))
    return dict(n=n, worst=worst, n_fail=len(fails), not_same_as_prefill=ne, fails=fails[:20])


# --------------------------------------------------------------------------------- determinism

def check_determinism(K, d, dt, runs, variant=""):
    gen = torch.Generator(device="cuda").manual_seed(99 + d)
    res = {}
    # D1: repeated runs, causal GQA with ragged lengths.
    q, k, v, kl = rand_problem(gen, 2, 8, 2, 777, 777, d, dt, [777, 500])
    base = K.run(q, k, v, kl, True, variant)
    o = torch.empty_like(base)
    ok = True
    for _ in range(runs):
        K.launch(q, k, v, o, kl, True, variant=variant)
        ok &= same_bits(o, base)
    res["D1"] = dict(ok=bool(ok), runs=runs)
    # D5: another stream, with a large matrix product running concurrently on the default stream.
    s2 = torch.cuda.Stream()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    outs = []
    torch.cuda.synchronize()
    for _ in range(10):
        for _ in range(3):
            a @ a
        with torch.cuda.stream(s2):
            o2 = torch.empty_like(base)
            K.launch(q, k, v, o2, kl, True, variant=variant)
            outs.append(o2)
    torch.cuda.synchronize()
    res["D5"] = dict(ok=all(same_bits(x, base) for x in outs), runs=len(outs))
    # D2: batch 8 vs each element alone.
    for causal in (False, True):
        lens = [600, 1, 0, 333, 600, 17, 512, 599]
        q, k, v, kl = rand_problem(gen, 8, 4, 2, 300, 600, d, dt, lens)
        big = K.run(q, k, v, kl, causal, variant)
        ok = True
        for i in range(8):
            one = K.run(q[i:i + 1].contiguous(), k[i:i + 1].contiguous(), v[i:i + 1].contiguous(),
                        kl[i:i + 1].contiguous(), causal, variant)
            ok &= same_bits(one, big[i:i + 1])
        res[f"D2{'c' if causal else ''}"] = dict(ok=bool(ok))
    # D2 with a boolean mask (per batch element and head).
    lens = [600, 1, 0, 333, 600, 17, 512, 599]
    q, k, v, kl = rand_problem(gen, 8, 4, 2, 300, 600, d, dt, lens)
    mask = torch.rand(8, 4, 300, 600, generator=gen, device="cuda") < 0.7
    big = K.run(q, k, v, kl, True, variant, mask)
    ok = True
    for i in range(8):
        one = K.run(q[i:i + 1].contiguous(), k[i:i + 1].contiguous(), v[i:i + 1].contiguous(),
                    kl[i:i + 1].contiguous(), True, variant, mask[i:i + 1])
        ok &= same_bits(one, big[i:i + 1])
    res["D2m"] = dict(ok=bool(ok))
    # D3: decode row i (Sq=1, kv_lens=i+1 over the same cache) vs row i of the causal prefill.
    S = 300
    q, k, v, _ = rand_problem(gen, 1, 4, 2, S, S, d, dt)
    pre = K.run(q, k, v, None, True, variant)
    ok_nc, ok_c = True, True
    for i in range(S):
        qi = q[:, :, i:i + 1].contiguous()
        kl = torch.tensor([i + 1], dtype=torch.int32, device="cuda")
        dec = K.run(qi, k, v, kl, False, variant)
        ok_nc &= same_bits(dec, pre[:, :, i:i + 1])
        dec = K.run(qi, k, v, kl, True, variant)
        ok_c &= same_bits(dec, pre[:, :, i:i + 1])
    ok_dec = True
    if K.has("dec", d):  # the decode kernel, Sq = 1, G = 2 rows per block
        for i in range(S):
            kl = torch.tensor([i + 1], dtype=torch.int32, device="cuda")
            dec = K.run(q[:, :, i:i + 1].contiguous(), k, v, kl, False, "dec")
            ok_dec &= same_bits(dec, pre[:, :, i:i + 1])
    res["D3"] = dict(ok=bool(ok_nc and ok_c and ok_dec), rows=S, noncausal_decode=bool(ok_nc),
                     causal_decode=bool(ok_c), decode_kernel=bool(ok_dec))
    # D4: query subsets.
    q, k, v, kl = rand_problem(gen, 2, 4, 4, 520, 450, d, dt, [450, 230])
    full = K.run(q, k, v, kl, True, variant)
    ok = True
    for a in (1, 5, 37, 100, 129, 519):  # causal: a suffix keeps every row's visible keys
        sub = K.run(q[:, :, a:].contiguous(), k, v, kl, True, variant)
        ok &= same_bits(sub, full[:, :, a:])
    full_nc = K.run(q, k, v, kl, False, variant)
    g2 = torch.Generator().manual_seed(5)
    for _ in range(4):
        idx = torch.randperm(520, generator=g2)[:97].sort().values.cuda()
        sub = K.run(q[:, :, idx].contiguous(), k, v, kl, False, variant)
        ok &= same_bits(sub, full_nc[:, :, idx])
    res["D4"] = dict(ok=bool(ok))
    return res


# --------------------------------------------------------------------------------------- speed

WORKLOADS = [
    ("W1", (1, 16, 1024, 64), "f16", False),
    ("W2", (4, 16, 4096, 128), "bf16", False),
    ("W2c", (4, 16, 4096, 128), "bf16", True),
    ("W3c", (1, 16, 16384, 128), "bf16", True),
    ("X64", (4, 16, 4096, 64), "f16", False),  # not a headline workload: d64 at a size that fills the GPU
    ("X64c", (4, 16, 4096, 64), "bf16", True),
]


def median_us(fn, sets, warmup=5, iters=30, per_sample=10):
    """Median over `iters` samples of the time per launch, a sample being `per_sample` back-to-back
    launches between two events (inputs rotated): the queue runs ahead of the host, so the host's
    launch overhead (Python, ~10 us) stays out of the figure for the short workloads too."""
    for i in range(warmup):
        fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    ts = []
    for i in range(iters):
        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        st.record()
        for r in range(per_sample):
            fn(*sets[(i * per_sample + r) % len(sets)])
        en.record()
        en.synchronize()
        ts.append(st.elapsed_time(en) * 1000.0 / per_sample)
    return statistics.median(ts), min(ts), max(ts)


def host_us(fn, sets, n=200):
    """Host time per launch call (no synchronization): if it approaches the kernel time, the timing
    would measure the host, not the GPU."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    for i in range(n):
        fn(*sets[i % len(sets)])
    dt = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return dt


def speed(K, variants, quick):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    for wid, (b, h, s, d), dt, causal in WORKLOADS:
        gen = torch.Generator(device="cuda").manual_seed(7)
        sets = [[torch.randn(b, h, s, d, device="cuda", dtype=TDT[dt], generator=gen) for _ in range(3)]
                for _ in range(4)]
        outs = [torch.empty_like(x[0]) for x in sets]
        fl = 4 * b * h * s * s * d / (2 if causal else 1)
        row = dict(id=wid, shape=[b, h, s, d], dtype=dt, causal=causal, flops=fl)
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel([be]):
                    med, lo, hi = median_us(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), sets)
                row[name] = dict(us=med, min=lo, max=hi, tfs=fl / med / 1e6)
            except Exception as e:  # noqa: BLE001
                row[name] = dict(error=str(e)[:200])
        for var in variants:
            if not K.has(var, d) or K.is_decode(var, d):
                continue
            calls = {id(x[0]): K.prepare(*x, outs[i], None, causal, variant=var) for i, x in enumerate(sets)}
            med, lo, hi = median_us(lambda q, k, v: calls[id(q)](), sets)
            row["tc" + (f"_{var}" if var else "")] = dict(us=med, min=lo, max=hi, tfs=fl / med / 1e6)
        if wid == "W1":  # the shortest workload: say how much host time a launch costs
            calls = {id(x[0]): K.prepare(*x, outs[i], None, causal) for i, x in enumerate(sets)}
            row["host_us_tc"] = host_us(lambda q, k, v: calls[id(q)](), sets)
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                row["host_us_flash"] = host_us(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), sets)
            print(f"W1 host time per launch call: tc {row['host_us_tc']:.1f} us, "
                  f"flash {row['host_us_flash']:.1f} us", flush=True)
        rows.append(row)
        del sets, outs
        torch.cuda.empty_cache()
    # Decode: B=32, Hq=32, Hkv=8, Sq=1, Skv=8192, D=128 (through the prefill kernel; no split yet).
    b, hq, hkv, skv, d = 32, 32, 8, 8192, 128
    gen = torch.Generator(device="cuda").manual_seed(8)
    sets = [[torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16, generator=gen),
             torch.randn(b, hkv, skv, d, device="cuda", dtype=torch.bfloat16, generator=gen),
             torch.randn(b, hkv, skv, d, device="cuda", dtype=torch.bfloat16, generator=gen)] for _ in range(2)]
    out = torch.empty(b, hq, 1, d, device="cuda", dtype=torch.bfloat16)
    byts = 2 * (2 * b * hkv * skv * d + 2 * b * hq * d)
    row = dict(id="decode", shape=[b, hq, hkv, 1, skv, d], dtype="bf16", causal=False, bytes=byts)
    for var in ["", "dec"] + [x for x in variants if x and K.has(x, d) and K.is_decode(x, d)]:
        if not K.has(var, d):
            continue
        calls = {id(x[0]): K.prepare(*x, out, None, False, variant=var) for x in sets}
        med, lo, hi = median_us(lambda q, k, v: calls[id(q)](), sets)
        row["tc" + (f"_{var}" if var else "_prefill")] = dict(us=med, min=lo, max=hi, gbs=byts / med / 1e3)
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel([be]):
                med, lo, hi = median_us(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), sets)
            row[name] = dict(us=med, min=lo, max=hi, gbs=byts / med / 1e3)
        except Exception as e:  # noqa: BLE001
            row[name] = dict(error=str(e)[:200])
    rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cubin", default="kernels/cubin/tensorcore.sm_90.cubin")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--variants", default="")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--plant", action="store_true", help="perturb every third launch: every check must FAIL")
    args = ap.parse_args()
    t0 = time.time()
    K = Kernels(args.cubin)
    K.plant = args.plant
    dev = torch.cuda.get_device_name()
    report = dict(gpu=dev, date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  torch=torch.__version__, cupy=cp.__version__, cubin=args.cubin)
    print(f"# {dev}  {report['date']}  torch {torch.__version__}  cupy {cp.__version__}", flush=True)
    dims = [d for d in (64, 128, 256) if K.has("", d)]
    variants = [""] + [x for x in args.variants.split(",") if x]

    acc = check_accuracy(K, 60 if args.quick else 300, dims)
    report["accuracy"] = acc
    print(f"accuracy: {acc['n']} problems, {acc['n_fail']} failures, worst {json.dumps(acc['worst'])}", flush=True)
    for f in acc["fails"][:5]:
        print("  FAIL", f)
    for var in variants[1:]:
        dv = [d for d in dims if K.has(var, d)]
        if dv and K.is_decode(var, dv[0]):
            continue
        if dv:
            a = check_accuracy(K, 40, dv, var)
            report[f"accuracy_{var}"] = a
            print(f"accuracy variant {var}: {a['n_fail']} failures, worst {json.dumps(a['worst'])}", flush=True)

    if any(K.has("dec", d) for d in dims):
        dd = [d for d in dims if K.has("dec", d)]
        dec = check_decode(K, 60 if args.quick else 200, dd)
        report["decode"] = dec
        print(f"decode kernel: {dec['n']} problems, {dec['n_fail']} failures, "
              f"{dec['not_same_as_prefill']} not bit-identical to prefill, worst {json.dumps(dec['worst'])}", flush=True)
        for f in dec["fails"][:5]:
            print("  FAIL", f)
    det = {}
    for d in dims:
        for dt in ("f16", "bf16"):
            r = check_determinism(K, d, dt, 50 if args.quick else 200)
            det[f"{dt}_d{d}"] = r
            print(f"determinism {dt} d{d}: " + "  ".join(f"{k}={'ok' if v['ok'] else 'FAIL'}" for k, v in r.items()),
                  flush=True)
    report["determinism"] = det
    print(f"[{time.time() - t0:.0f}s]", flush=True)

    if not args.skip_speed:
        rows = speed(K, variants, args.quick)
        report["speed"] = rows
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tc.json"), "w") as f:
        json.dump(report, f, indent=1)
    if not args.skip_speed:
        print(f"\n{'id':6} {'impl':9} {'us':>10} {'TF/s':>7} {'vs flash':>9} {'vs cudnn':>9}")
        for r in rows:
            for key in [k for k in r if k == "flash" or k == "cudnn" or k.startswith("tc")]:
                m = r[key]
                if "error" in m:
                    print(f"{r['id']:6} {key:9} error: {m['error'][:60]}")
                    continue
                rate = m.get("tfs", m.get("gbs"))
                unit = "GB/s" if "gbs" in m else ""
                fr = r["flash"]["us"] / m["us"] if "us" in r.get("flash", {}) else float("nan")
                cr = r["cudnn"]["us"] / m["us"] if "us" in r.get("cudnn", {}) else float("nan")
                print(f"{r['id']:6} {key:9} {m['us']:10.1f} {rate:7.1f}{unit} {fr:9.2f} {cr:9.2f}")
    bad = acc["n_fail"] + report.get("decode", {}).get("n_fail", 0) + sum(not v["ok"] for r in det.values() for v in r.values())
    print(f"\nsummary: {'PASS' if bad == 0 else f'FAIL ({bad})'}  [{time.time() - t0:.0f}s]")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
