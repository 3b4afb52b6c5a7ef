#!/usr/bin/env python3
"""detattn next to PyTorch SDPA, in one command, on one GPU (docs/design.md §9).

Usage (on the GPU machine):
    python3 scripts/gpu_compare.py BIN OUT.json [--quick] [--only W1,W2,...] [--paths exact,tensorcore]
                                   [--per-sample N] [--warmup N] [--iters N] [--rotate N] [--timeout S]

What it measures, each on the same shapes and with the same protocol for both libraries:
  (a) the Exact path (`detattn bench --path exact`) in f32 and in the anchor dtype, against SDPA
      efficient in f32 (the like-for-like f32 kernel), flash and cuDNN in the anchor dtype;
  (b) the TensorCore path (`--path tensorcore`) on W1 f16, W2/W2c/W3c/W4 bf16 and W5 f16 (issue 13's
      prefill set), against SDPA flash and cuDNN, with TF/s;
  (c) decode (B=32 Hq=32 Hkv=8 Sq=1 Skv=8192 D=128 bf16) and dec1 (B=1, Skv=32768): both paths
      in bf16 against SDPA flash and cuDNN, in GB/s of the bytes a call must move (Q, K, V read once + O written once) against the
      device-to-device copy ceiling measured in this command (read + write bytes of a 1 GiB copy,
      as the anchors did). SDPA gets the real GQA problem through `enable_gqa=True`, so it reads
      the same 8-head KV cache detattn reads; a backend that refuses that is timed with K and V
      repeated to 32 heads (4x the K/V reads) and the row says "kv repeated". Each decode row also
      times a device copy that moves the row's bytes (read + write), by the rows' protocol: what a
      plain copy reaches at that size, where the launch latency weighs more than at 1 GiB.
  (d) the decode grid of issue 11 (`--only grid`): B in {1, 2, 8, 32} x Skv in {8192, 32768, 131072} x
      Hkv in {1, 8}, Hq = 4 Hkv (G = 4, the decode kernel), D = 128 bf16, as (c) in one compact table.
      `detattn bench` generates its inputs on the host, so caches above `--max-cache-gb` (default
      1.2 GB) are listed as not measured rather than generated for minutes.
  (e) the KV-cache interfaces (`--only paged,varlen`): the decode workload with K and V in shuffled
      pages of 16 and 256 rows (the device entry of paged caches: the used rows gathered, then the
      decode) against our contiguous run and SDPA's on the contiguous cache; a causal varlen prefill
      batch of 8 sequences (`--seqlens-q/-k`) against SDPA called once per sequence.
Workloads: W1, W2, W2c, W3c (the anchors), W4 (GQA 32/8, causal), W5 (D 64 f16, causal), decode (B=32) and dec1 (B=1, Skv=32768), the grid ids
g<B>_s<Skv/1024>k_h<Hkv>; `--only` picks some (`grid` = all grid ids), `--quick` = W1,W2. The decodes
b<B>_s8k (B 2, 4, 8, 12; otherwise as decode, in table (c)) run only when asked (`--only batches`).
`--paths` picks the Exact and/or the TensorCore rows (default both).

Protocol (both libraries): `--warmup` untimed launches, then `--iters` samples (>= 20), each
sample `--per-sample` launches back to back between one pair of CUDA events, synchronised; the
time per launch is the sample / N; median over samples; `--rotate` input sets (never zeros:
randn for SDPA, detattn's seeded generator) cycled so that one does not sit in L2.
`--per-sample 1` (the default) is the anchors' protocol (the anchors of docs/design.md §9: one call
per event pair); 10 was the earlier Python harness's (docs/tensorcore.md, "Measured"), which hides
the host's launch overhead on short problems.

Robust by design: a backend that refuses a shape, a detattn call that fails (a typed error, e.g.
a path this build does not time) or runs past `--timeout` is reported in its row, never fatal.
Prints one line per measurement as it goes, then markdown tables last (GPU, date UTC, torch);
writes everything to OUT.json. Ratios are time(detattn) / time(SDPA): > 1 means detattn is slower.
"""
import argparse
import datetime
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench_cli import bench_json

# id -> (B, Hq, Hkv, Sq, Skv, D), anchor dtype, causal
WORKLOADS = {
    "W1": ((1, 16, 16, 1024, 1024, 64), "f16", False),
    "W2": ((4, 16, 16, 4096, 4096, 128), "bf16", False),
    "W2c": ((4, 16, 16, 4096, 4096, 128), "bf16", True),
    "W3c": ((1, 16, 16, 16384, 16384, 128), "bf16", True),
    "W4": ((8, 32, 8, 2048, 2048, 128), "bf16", True),
    "W5": ((2, 16, 16, 8192, 8192, 64), "f16", True),
    "decode": ((32, 32, 8, 1, 8192, 128), "bf16", False),
    "dec1": ((1, 32, 8, 1, 32768, 128), "bf16", False),
}
GRID = []
for _b in (1, 2, 8, 32):
    for _s in (8192, 32768, 131072):
        for _h in (1, 8):
            GRID.append(f"g{_b}_s{_s // 1024}k_h{_h}")
            WORKLOADS[GRID[-1]] = ((_b, 4 * _h, _h, 1, _s, 128), "bf16", False)
# (e) the KV-cache interfaces: a paged decode (the decode workload's cache in shuffled pages of
# each size, through the device entry's gather) and a varlen prefill batch (q = k lengths per
# sequence, causal). Not in WORKLOADS: their rows have their own shape and their own table.
PAGED = ((32, 32, 8, 1, 8192, 128), "bf16", (16, 256))
VARLEN = ((128, 512, 1024, 2048, 300, 4000, 64, 1500), 32, 8, 128, "bf16")
KVCACHE = ["paged", "varlen"]
PREFILL = ["W1", "W2", "W2c", "W3c", "W4", "W5"]
# Decodes between dec1 and decode (Hq 32, Hkv 8, Skv 8192, bf16; `--only batches`, not in the default
# run): the batch sizes around the Exact path's change of values kernel (DEC_WIDE_MIN_BLOCKS in
# src/cuda/exact.rs: 96 KV heads), where 2026-11-28's narrow kernel gained at B2/B4 and lost 9 % at B8
# (docs/perf.md).
BATCHES = []
for _b in (2, 4, 8, 12):
    BATCHES.append(f"b{_b}_s8k")
    WORKLOADS[BATCHES[-1]] = ((_b, 32, 8, 1, 8192, 128), "bf16", False)
DECODE = ["decode", "dec1"] + BATCHES + GRID
TORCH_DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
ELEM_BYTES = {"f32": 4, "f16": 2, "bf16": 2}
SDPA = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin", help="the detattn binary (.carry/bin/detattn on the GPU machine)")
    ap.add_argument("out", help="JSON output path")
    ap.add_argument("--quick", action="store_true", help="W1 and W2 only")
    ap.add_argument("--only", help="comma-separated workloads: " + ",".join(list(WORKLOADS) + KVCACHE))
    ap.add_argument("--paths", default="exact,tensorcore", help="exact and/or tensorcore (default both)")
    ap.add_argument("--per-sample", type=int, default=1, help="launches per event pair (default 1)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30, help="timed samples (>= 20)")
    ap.add_argument("--rotate", type=int, default=4, help="input sets cycled (>= 4)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per detattn call")
    ap.add_argument("--max-cache-gb", type=float, default=1.2, help="grid: largest K+V cache measured")
    a = ap.parse_args()
    if a.per_sample < 1:
        ap.error("--per-sample must be >= 1")
    if a.iters < 20:
        ap.error("--iters must be >= 20 (docs/design.md §9)")
    if a.rotate < 4:
        ap.error("--rotate must be >= 4 (inputs must not sit in L2)")
    ids = [w for w in WORKLOADS if w not in BATCHES]
    if a.quick:
        ids = ["W1", "W2"]
    if a.only:
        want = [w.strip() for w in a.only.split(",") if w.strip()]
        want = [g for w in want for g in (GRID if w == "grid" else BATCHES if w == "batches" else [w])]
        known = list(WORKLOADS) + KVCACHE
        bad = [w for w in want if w not in known]
        if bad:
            ap.error(f"unknown workload(s) {bad}; expected some of {known}")
        ids = [w for w in known if w in want]
    paths = {p.strip() for p in a.paths.split(",") if p.strip()}
    if not paths or paths - {"exact", "tensorcore"}:
        ap.error("--paths takes exact and/or tensorcore")
    a.ids, a.path_set = ids, paths
    return a


def flops(shape, causal):
    b, hq, _, sq, skv, d = shape
    f = 4 * b * hq * sq * skv * d
    return f / 2 if causal and sq == skv else f


def bytes_moved(shape, dt):
    """Q, K, V read once + O written once, in the dtype (what `detattn bench` counts too)."""
    b, hq, hkv, sq, skv, d = shape
    return (2 * b * hq * sq * d + 2 * b * hkv * skv * d) * ELEM_BYTES[dt]


def timed(fn, nsets, A):
    """Median µs per launch: warm-up, then A.iters samples of A.per_sample launches per event pair."""
    for i in range(A.warmup):
        fn(i % nsets)
    torch.cuda.synchronize()
    ts, i = [], 0
    for _ in range(A.iters):
        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        st.record()
        for _ in range(A.per_sample):
            fn(i % nsets)
            i += 1
        en.record()
        en.synchronize()
        ts.append(st.elapsed_time(en) * 1000.0 / A.per_sample)
    return statistics.median(ts)


def copy_ceiling(A):
    """TB/s of a 1 GiB device-to-device copy, counting read + write bytes (as the anchors did): one
    buffer pair, 3 warm-up copies, the median of 20, one copy a sample, whatever A asks of the rows."""
    nbytes = 2 * 1024 * 1024 * 1024
    us = same_bytes_copy(nbytes, argparse.Namespace(warmup=3, iters=20, per_sample=1, rotate=1))
    return nbytes / us / 1e6


def same_bytes_copy(nbytes, A):
    """µs of a device-to-device copy moving `nbytes` (read + write: nbytes / 2 each way), by the
    protocol of the rows (A's warm-up, samples, launches a sample, rotated buffers): what a plain
    copy reaches at a decode's size, where the launch latency weighs more than at 1 GiB."""
    n = max(int(nbytes // 8), 1)  # f32 elements per direction
    sets = [(torch.randn(n, device="cuda", dtype=torch.float32), torch.empty(n, device="cuda", dtype=torch.float32))
            for _ in range(A.rotate)]
    try:
        return timed(lambda i: sets[i][1].copy_(sets[i][0]), len(sets), A)
    finally:
        del sets
        torch.cuda.empty_cache()


def time_sdpa(backend, shape, dt, causal, A):
    """(µs per launch, how GQA was given) or raises (a backend that refuses the shape)."""
    b, hq, hkv, sq, skv, d = shape
    g = torch.Generator(device="cuda").manual_seed(0)
    tdt = TORCH_DT[dt]
    sets = [(torch.randn(b, hq, sq, d, device="cuda", dtype=tdt, generator=g),
             torch.randn(b, hkv, skv, d, device="cuda", dtype=tdt, generator=g),
             torch.randn(b, hkv, skv, d, device="cuda", dtype=tdt, generator=g)) for _ in range(A.rotate)]
    try:
        with sdpa_kernel([SDPA[backend]]):
            if hq == hkv:
                how = "mha"
                call = lambda i: F.scaled_dot_product_attention(*sets[i], is_causal=causal)  # noqa: E731
                call(0)
            else:
                try:
                    how = "enable_gqa"
                    call = lambda i: F.scaled_dot_product_attention(*sets[i], is_causal=causal, enable_gqa=True)  # noqa: E731
                    call(0)
                except Exception as ex:  # noqa: BLE001  refused (or an old torch): repeat K and V
                    how = f"kv repeated (enable_gqa refused: {str(ex).splitlines()[0][:60]})"
                    r = hq // hkv
                    sets = [(q, k.repeat_interleave(r, dim=1), v.repeat_interleave(r, dim=1)) for q, k, v in sets]
                    call = lambda i: F.scaled_dot_product_attention(*sets[i], is_causal=causal)  # noqa: E731
                    call(0)
            torch.cuda.synchronize()
            us = timed(call, len(sets), A)
    finally:
        del sets
        torch.cuda.empty_cache()
    return us, how


def shape_args(shape):
    b, hq, hkv, sq, skv, d = shape
    return ["--batch", str(b), "--q-heads", str(hq), "--kv-heads", str(hkv), "--q-len", str(sq),
            "--kv-len", str(skv), "--head-dim", str(d)]


def time_detattn(path, shape, dt, causal, A, problem=None):
    """(µs per launch, the bench's JSON) or raises RuntimeError with the CLI's message. `problem`:
    the CLI's problem arguments, instead of `shape`'s (a varlen batch, a paged cache)."""
    args = ["--backend", "cuda", "--path", path, *(problem or shape_args(shape)), "--dtype", dt,
            "--warmup", str(A.warmup), "--iters", str(A.iters), "--rotate", str(A.rotate),
            "--per-sample", str(A.per_sample), *(["--causal"] if causal else [])]
    j, err = bench_json(A.bin, args, timeout=A.timeout)
    if j is None:
        raise RuntimeError(err)
    if j.get("per_sample", 1) != A.per_sample:
        raise RuntimeError(f"the binary timed {j.get('per_sample')} launches per sample, not {A.per_sample}")
    return float(j["median_us"]), j


def time_sdpa_sequences(backend, lens, hq, hkv, d, dt, A):
    """µs of SDPA over a varlen batch as a caller without varlen runs it: one causal call per
    sequence (its own length), all of a batch's calls between one event pair."""
    g = torch.Generator(device="cuda").manual_seed(0)
    tdt = TORCH_DT[dt]
    sets = [[(torch.randn(1, hq, n, d, device="cuda", dtype=tdt, generator=g),
              torch.randn(1, hkv, n, d, device="cuda", dtype=tdt, generator=g),
              torch.randn(1, hkv, n, d, device="cuda", dtype=tdt, generator=g)) for n in lens]
            for _ in range(A.rotate)]
    try:
        with sdpa_kernel([SDPA[backend]]):
            def call(i):
                for q, k, v in sets[i]:
                    F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=hq != hkv)
            call(0)
            torch.cuda.synchronize()
            return timed(call, len(sets), A)
    finally:
        del sets
        torch.cuda.empty_cache()


def kvcache_rows(A, res):
    """(e): the paged decode against our contiguous run and SDPA's, and the varlen batch against
    SDPA run per sequence; rows into res["kvcache"]."""
    paths = [p for p in ("tensorcore", "exact") if p in A.path_set]
    out = res.setdefault("kvcache", {})
    if "paged" in A.ids:
        shape, dt, sizes = PAGED
        row = out["paged"] = {"shape": list(shape), "dtype": dt, "bytes": bytes_moved(shape, dt),
                              "page_sizes": list(sizes), "detattn": {}, "sdpa": {}}
        print(f"paged B,Hq,Hkv,Sq,Skv,D={shape} {dt}, pages of {sizes} rows", flush=True)
        for be in ("flash", "cudnn"):
            v = measure(f"SDPA {be} {dt} (contiguous)", lambda be=be: time_sdpa(be, shape, dt, False, A),
                        row["sdpa"], be)
            if v:
                row["sdpa"][be] = v[0]
        for path in paths:
            for ps in (None, *sizes):
                key = f"{path}_{'contiguous' if ps is None else f'paged{ps}'}"
                extra = [] if ps is None else ["--page-size", str(ps)]
                v = measure(f"detattn {key}", lambda ps=ps, extra=extra, path=path: time_detattn(
                    path, shape, dt, False, A, problem=shape_args(shape) + extra), row["detattn"], key)
                if v:
                    row["detattn"][key] = v[0]
                    if ps is not None:
                        row.setdefault("read", {})[key] = v[1].get("paged_read")
    if "varlen" in A.ids:
        lens, hq, hkv, d, dt = VARLEN
        seqs = ",".join(map(str, lens))
        row = out["varlen"] = {"lens": list(lens), "heads": [hq, hkv], "head_dim": d, "dtype": dt,
                               "flops": sum(2 * hq * n * n * d for n in lens), "detattn": {}, "sdpa": {}}
        print(f"varlen causal, {len(lens)} sequences of {list(lens)} rows = keys, Hq {hq} Hkv {hkv} "
              f"D {d} {dt}", flush=True)
        for be in ("flash", "cudnn"):
            v = measure(f"SDPA {be} per sequence", lambda be=be: time_sdpa_sequences(be, lens, hq, hkv, d, dt, A),
                        row["sdpa"], be)
            if v:
                row["sdpa"][be] = v
        prob = ["--q-heads", str(hq), "--kv-heads", str(hkv), "--head-dim", str(d), "--seqlens-q", seqs,
                "--seqlens-k", seqs]
        for path in paths:
            v = measure(f"detattn {path} varlen", lambda path=path: time_detattn(path, None, dt, True, A, prob),
                        row["detattn"], path)
            if v:
                row["detattn"][path] = v[0]


def print_kvcache(res):
    kv = res.get("kvcache", {})
    if "paged" in kv:
        r = kv["paged"]
        ceil = res.get("copy_TBps")
        print(f"\n#### (e) Paged decode (B,Hq,Hkv,Sq,Skv,D = {tuple(r['shape'])}, {r['dtype']}; the device "
              "entry of paged caches, `run_device_paged`)\n")
        print("| who | µs | GB/s (Q, K, V, O once) | of copy ceiling | this / our contiguous | this / cuDNN "
              "| how the pages are read |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        cudnn = us_of(r["sdpa"].get("cudnn"))
        for key, v in list(r["detattn"].items()) + [(f"SDPA {k} (contiguous)", x) for k, x in r["sdpa"].items()]:
            us = us_of(v)
            gbs = r["bytes"] / us / 1e3 if us else None
            frac = f"{gbs / (ceil * 1e3):.0%}" if gbs and ceil else ""
            path = key.split("_")[0]
            base = us_of(r["detattn"].get(f"{path}_contiguous"))
            print(f"| {key} | {cell(v)} | {f'{gbs:.0f}' if gbs else ''} | {frac} | "
                  f"{fmt_ratio(us, base) if base else ''} | {fmt_ratio(us, cudnn)} | "
                  f"{r.get('read', {}).get(key) or ''} |")
    if "varlen" in kv:
        r = kv["varlen"]
        print(f"\n#### (e) Varlen prefill batch (causal, sequences {r['lens']}, Hq {r['heads'][0]} Hkv "
              f"{r['heads'][1]} D {r['head_dim']}, {r['dtype']}; SDPA: one call per sequence)\n")
        print("| who | µs | TF/s | this / SDPA flash | this / SDPA cuDNN |")
        print("| --- | --- | --- | --- | --- |")
        fl, cu = us_of(r["sdpa"].get("flash")), us_of(r["sdpa"].get("cudnn"))
        for key, v in [(f"detattn {k}", x) for k, x in r["detattn"].items()] + \
                [(f"SDPA {k} per sequence", x) for k, x in r["sdpa"].items()]:
            us = us_of(v)
            tf = f"{r['flops'] / us / 1e6:.1f}" if us else ""
            print(f"| {key} | {cell(v)} | {tf} | {fmt_ratio(us, fl)} | {fmt_ratio(us, cu)} |")


def measure(label, fn, row, key):
    """Run one measurement; a failure goes into the row as text, never stops the command."""
    t0 = time.time()
    try:
        val = fn()
    except Exception as ex:  # noqa: BLE001
        row[key] = f"error: {str(ex).strip()[:240]}"
        print(f"  {label:<34} {row[key]}", flush=True)
        return None
    row[key] = val
    us = val[0] if isinstance(val, tuple) else val
    print(f"  {label:<34} {us:12.1f} µs   ({time.time() - t0:.1f} s)", flush=True)
    return val


def us_of(v):
    return v if isinstance(v, float) else None


def main():
    A = parse_args()
    dev = torch.cuda.get_device_name()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    proto = (f"{A.warmup} warm-up, median of {A.iters} samples of {A.per_sample} launch(es) per CUDA-event pair, "
             f"{A.rotate} rotated input sets")
    print(f"device: {dev}; torch {torch.__version__}; {date}\nprotocol: {proto}", flush=True)
    res = {"device": dev, "torch": torch.__version__, "date_utc": date, "per_sample": A.per_sample,
           "warmup": A.warmup, "iters": A.iters, "rotate": A.rotate, "workloads": A.ids,
           "paths": sorted(A.path_set), "rows": []}
    if any(w in A.ids for w in DECODE + ["paged"]):
        res["copy_TBps"] = copy_ceiling(A)
        print(f"copy ceiling (1 GiB d2d, read + write bytes): {res['copy_TBps']:.3f} TB/s", flush=True)

    for wid in A.ids:
        if wid in KVCACHE:
            continue
        shape, dt, causal = WORKLOADS[wid]
        row = {"id": wid, "shape": list(shape), "dtype": dt, "causal": causal,
               "flops": flops(shape, causal), "bytes": bytes_moved(shape, dt), "sdpa": {}, "gqa": {},
               "detattn": {}}
        decode = wid in DECODE
        print(f"{wid} B,Hq,Hkv,Sq,Skv,D={shape} {dt}{' causal' if causal else ''}", flush=True)
        cache = 2 * shape[0] * shape[2] * shape[4] * shape[5] * ELEM_BYTES[dt]
        if wid in GRID and cache > A.max_cache_gb * 1e9:
            row["skipped"] = f"cache {cache / 1e9:.1f} GB > --max-cache-gb {A.max_cache_gb}"
            print(f"  not measured: {row['skipped']}", flush=True)
            res["rows"].append(row)
            continue
        for be in ("flash", "cudnn"):
            v = measure(f"SDPA {be} {dt}", lambda be=be: time_sdpa(be, shape, dt, causal, A), row["sdpa"], f"{be}_{dt}")
            if v:
                row["sdpa"][f"{be}_{dt}"], row["gqa"][f"{be}_{dt}"] = v
        if "exact" in A.path_set and not decode:
            v = measure("SDPA efficient f32", lambda: time_sdpa("efficient", shape, "f32", causal, A),
                        row["sdpa"], "efficient_f32")
            if v:
                row["sdpa"]["efficient_f32"], row["gqa"]["efficient_f32"] = v
            for our in ("f32", dt):
                v = measure(f"detattn exact {our}", lambda our=our: time_detattn("exact", shape, our, causal, A),
                            row["detattn"], f"exact_{our}")
                if v:
                    row["detattn"][f"exact_{our}"] = v[0]
        if "exact" in A.path_set and decode:
            v = measure(f"detattn exact {dt}", lambda: time_detattn("exact", shape, dt, causal, A),
                        row["detattn"], f"exact_{dt}")
            if v:
                row["detattn"][f"exact_{dt}"] = v[0]
        if decode:
            measure("copy of the same bytes", lambda: same_bytes_copy(row["bytes"], A), row, "copy_same_bytes")
        if "tensorcore" in A.path_set:
            v = measure(f"detattn tensorcore {dt}", lambda: time_detattn("tensorcore", shape, dt, causal, A),
                        row["detattn"], f"tensorcore_{dt}")
            if v:
                row["detattn"][f"tensorcore_{dt}"] = v[0]
                if abs(v[1].get("bytes", row["bytes"]) - row["bytes"]) > 0.5:
                    print(f"  note: detattn counts {v[1]['bytes']} bytes, this script {row['bytes']}", flush=True)
        res["rows"].append(row)
        with open(A.out, "w") as fh:  # after every workload: a later failure keeps what was measured
            json.dump(res, fh, indent=1)

    if any(w in A.ids for w in KVCACHE):
        kvcache_rows(A, res)
        with open(A.out, "w") as fh:
            json.dump(res, fh, indent=1)
    print_tables(res, A, proto)
    print_kvcache(res)
    with open(A.out, "w") as fh:
        json.dump(res, fh, indent=1)


def fmt_ratio(us, ref):
    return f"{us / ref:.2f}x" if us and ref else "n/a"


def cell(v):
    return f"{v:,.1f}".replace(",", " ") if isinstance(v, float) else "" if v is None else str(v)


def section(rows, ids, title, header):
    """Print a table's title, header and separator; yield (id, row, dtype) of the ids measured."""
    print(f"\n#### {title}\n")
    print(header)
    print("|" + " --- |" * (header.count("|") - 1))
    for w in ids:
        if w in rows:
            yield w, rows[w], rows[w]["dtype"]


def print_tables(res, A, proto):
    print()
    print(f"### detattn vs PyTorch SDPA — {res['device']}, {res['date_utc']}, torch {res['torch']}")
    print()
    print(f"Protocol: {proto}; µs per launch. Ratios = detattn time / SDPA time (> 1: detattn slower).")
    if "copy_TBps" in res:
        print(f"Copy ceiling measured in this command: {res['copy_TBps']:.3f} TB/s (1 GiB d2d, read + write).")
    rows = {r["id"]: r for r in res["rows"]}
    if "exact" in A.path_set and any(w in rows for w in PREFILL):
        for w, r, dt in section(rows, PREFILL, "(a) Exact path",
                                "| id | detattn dtype | detattn µs | TF/s | SDPA eff f32 µs | vs eff f32 | "
                                "flash µs | vs flash | cuDNN µs | vs cuDNN |"):
            eff, fl, cu = (us_of(r["sdpa"].get(k)) for k in ("efficient_f32", f"flash_{dt}", f"cudnn_{dt}"))
            for our in ("f32", dt):
                v = r["detattn"].get(f"exact_{our}")
                us = us_of(v)
                tf = f"{r['flops'] / us / 1e6:.1f}" if us else ""
                print(f"| {w} | {our} | {cell(v)} | {tf} | {cell(r['sdpa'].get('efficient_f32'))} | "
                      f"{fmt_ratio(us, eff)} | {cell(r['sdpa'].get(f'flash_{dt}'))} | {fmt_ratio(us, fl)} | "
                      f"{cell(r['sdpa'].get(f'cudnn_{dt}'))} | {fmt_ratio(us, cu)} |")
    if "tensorcore" in A.path_set and any(w in rows for w in PREFILL):
        for w, r, dt in section(rows, PREFILL, "(b) TensorCore path",
                                "| id | dtype | detattn µs | TF/s | flash µs | TF/s | vs flash | cuDNN µs | TF/s | "
                                "vs cuDNN |"):
            v = r["detattn"].get(f"tensorcore_{dt}")
            us = us_of(v)
            fl, cu = us_of(r["sdpa"].get(f"flash_{dt}")), us_of(r["sdpa"].get(f"cudnn_{dt}"))
            tf = lambda x: f"{r['flops'] / x / 1e6:.1f}" if x else ""  # noqa: E731
            print(f"| {w} | {dt} | {cell(v)} | {tf(us)} | {cell(r['sdpa'].get(f'flash_{dt}'))} | {tf(fl)} | "
                  f"{fmt_ratio(us, fl)} | {cell(r['sdpa'].get(f'cudnn_{dt}'))} | {tf(cu)} | {fmt_ratio(us, cu)} |")
    if any(w in rows for w in GRID):
        ceil = res.get("copy_TBps")
        for w, r, dt in section(rows, GRID, "(d) Decode grid (Hq = 4 Hkv, Sq 1, D 128, bf16; GB/s of K + V + Q + O bytes)",
                                "| B | Skv | Hkv | K+V MB | detattn tc µs | GB/s | of ceiling | cuDNN µs | tc / cuDNN | "
                                "flash µs | tc / flash | same-bytes copy µs | of ceiling | tc / copy |"):
            b, _, h, _, sk, d = r["shape"]
            mb = 2 * b * h * sk * d * ELEM_BYTES[dt] / 1e6
            if "skipped" in r:
                print(f"| {b} | {sk} | {h} | {mb:.0f} | not measured: {r['skipped']} | | | | | | | | | |")
                continue
            v = r["detattn"].get(f"tensorcore_{dt}")
            us = us_of(v)
            gbs = r["bytes"] / us / 1e3 if us else None
            frac = f"{gbs / (ceil * 1e3):.0%}" if gbs and ceil else ""
            cu, fl = us_of(r["sdpa"].get(f"cudnn_{dt}")), us_of(r["sdpa"].get(f"flash_{dt}"))
            cp = us_of(r.get("copy_same_bytes"))
            cfrac = f"{r['bytes'] / cp / 1e3 / (ceil * 1e3):.0%}" if cp and ceil else ""
            print(f"| {b} | {sk} | {h} | {mb:.0f} | {cell(v)} | {f'{gbs:.0f}' if gbs else ''} | {frac} | "
                  f"{cell(r['sdpa'].get(f'cudnn_{dt}'))} | {fmt_ratio(us, cu)} | "
                  f"{cell(r['sdpa'].get(f'flash_{dt}'))} | {fmt_ratio(us, fl)} | "
                  f"{cell(r.get('copy_same_bytes'))} | {cfrac} | {fmt_ratio(us, cp)} |")
    for w in DECODE:
        if w not in rows or w in GRID:
            continue
        r, dt = rows[w], rows[w]["dtype"]
        ceil = res.get("copy_TBps")
        print(f"\n#### (c) Decode {w} (B,Hq,Hkv,Sq,Skv,D = {tuple(r['shape'])}, {dt}; "
              f"{r['bytes'] / 1e9:.3f} GB moved: Q, K, V read once + O written once)\n")
        print("| who | µs | GB/s | of copy ceiling | this / cuDNN | how GQA is given |")
        print("| --- | --- | --- | --- | --- | --- |")
        cudnn = us_of(r["sdpa"].get(f"cudnn_{dt}"))
        entries = [(f"detattn {path}", r["detattn"].get(f"{path}_{dt}"), "native (kv_heads)")
                   for path in ("tensorcore", "exact") if f"{path}_{dt}" in r["detattn"]]
        entries += [(f"SDPA {be}", r["sdpa"].get(f"{be}_{dt}"), r["gqa"].get(f"{be}_{dt}", ""))
                    for be in ("flash", "cudnn")]
        entries.append(("copy of the same bytes", r.get("copy_same_bytes"), "(read + write = the row's bytes)"))
        for who, v, how in entries:
            us = us_of(v)
            gbs = r["bytes"] / us / 1e3 if us else None
            frac = f"{gbs / (ceil * 1e3):.0%}" if gbs and ceil else ""
            print(f"| {who} | {cell(v)} | {f'{gbs:.0f}' if gbs else ''} | {frac} | "
                  f"{fmt_ratio(us, cudnn)} | {how} |")
    if ceil_note := res.get("copy_TBps"):
        print(f"\nCopy ceiling {ceil_note * 1e3:.0f} GB/s counts read + write bytes; decode bytes count "
              "each byte once, so a kernel near the ceiling can exceed it.")


if __name__ == "__main__":
    main()
