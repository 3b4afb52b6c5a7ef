#!/usr/bin/env python3
"""GPU checks of the Python package, on a machine with a CUDA GPU, PyTorch and Transformers (the
device machine: torch 2.11, transformers 5.17). Each check prints PASS or FAIL with its numbers;
a summary table comes last; everything is also written to $OUT/python-gpu.json (or --out).

  python3 scripts/python-gpu.py [--cli PATH_TO_detattn] [--only NAME,...] [--out DIR]

Checks (docs/python.md says what each stands for):
  env         GPU, driver, torch, transformers, detattn.info()
  selftest    detattn.selftest(): golden problems on the CPU and the GPU (torch CUDA tensors through
              the package) against the recorded digests; and the library's own host route on the
              GPU (what `detattn selftest` runs) giving the same digest for every case
  cli         seeded problems as torch CUDA tensors: digests equal to `detattn run --backend cuda`
              (the Rust CLI), both paths, both layouts
  nocopy      strided views (a fused QKV buffer) are read in place: torch allocates exactly the
              output (or nothing, with out=) during the call
  stream      ordering on a non-default torch stream: inputs written behind a long kernel on that
              stream are the ones read; the call does not wait (propagate) and the result is
              consumed on the stream
  dropin      detattn.scaled_dot_product_attention vs F.scaled_dot_product_attention and a float64
              reference, within docs/numerics.md §9's bound (tensorcore: docs/tensorcore.md's)
  threads     8 Python threads, each on its own stream: the same bits as one call
  varlen      attention_varlen on torch CUDA tensors: each sequence the bits it gets alone
  lse         return_lse=True on torch CUDA tensors: on exact the CPU's log-sum-exp bits, on
              tensorcore within 1e-4·max(1, |lse|) of them (the same −inf rows); the output unmoved
  paged       attention_with_kvcache on torch CUDA tensors (shuffled pages, int32 CUDA block table
              and lengths): the bits of the contiguous call on the GPU (both paths) and of the CPU's
              (exact), output and log-sum-exp; a packed batch (cu_seqlens_q) against attention_varlen
  hf          Transformers: a random Llama-style model with attn_implementation="detattn": prefill and
              cached decode through detattn; 20 generations give the same tokens and attention digests;
              a sequence's attention outputs alone and inside a padded batch
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import traceback

import numpy as np
import torch

import detattn
from detattn.inputs import generate, paginate

RESULTS = []


def record(name, ok, detail, data=None):
    RESULTS.append({"check": name, "ok": ok, "detail": detail, "data": data})
    print(f"[{'PASS' if ok else 'FAIL'}] {name}: {detail}", flush=True)


def check(fn):
    def run(args):
        t0 = time.perf_counter()
        try:
            fn(args)
        except Exception as e:  # noqa: BLE001 (a crash is that check's FAIL; the others still run)
            record(fn.__name__, False, f"crashed: {type(e).__name__}: {e}", traceback.format_exc())
        print(f"      ({fn.__name__}: {time.perf_counter() - t0:.1f} s)", flush=True)

    run.__name__ = fn.__name__
    return run


DEV = torch.device("cuda:0")
TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def to_host(a, tag):
    """A host array from detattn.inputs (bf16 as uint16 bits) as a torch CPU tensor."""
    a = np.ascontiguousarray(a)
    if tag == "bf16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def to_dev(a, tag):
    """The same as a torch CUDA tensor."""
    return to_host(a, tag).to(DEV)


def bits(t):
    t = t.detach().contiguous().cpu()
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32).numpy().tobytes()


# ------------------------------------------------------------------------------------------------


@check
def env(args):
    info = detattn.info()
    p = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                       capture_output=True, text=True)
    try:
        import transformers

        tv = transformers.__version__
    except ImportError:
        tv = None
    d = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": p.stdout.strip(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "transformers": tv,
        "python": sys.version.split()[0],
        "detattn": detattn.__version__,
        "driver": info["driver"],
        "devices": info["devices"],
        "cubins_verified": all(c["verified"] for c in info["cubins"]),
    }
    ok = bool(info["devices"]) and info["devices"][0]["supported"] and d["cubins_verified"]
    record("env", ok, f"{d['gpu']} | {d['date']} | torch {d['torch']} (CUDA {d['torch_cuda']}) | "
           f"transformers {tv} | driver {info['driver']} | Python {d['python']}", d)


@check
def selftest(args):
    report = detattn.selftest("all")
    print(report, flush=True)
    # Cases whose golden digest is missing from the library's files (the report names them) are
    # a library gap, listed here with the digests computed; anything else that is not OK fails.
    gaps, bad = [], []
    for r in report.reports:
        for c in r["cases"]:
            if c["status"] == "ok":
                continue
            if c["status"] == "error" and "no golden digest recorded" in c.get("detail", ""):
                gaps.append((r["backend"], c["case"], c["detail"]))
            else:
                bad.append((r["backend"], c["case"], c["status"], c.get("detail")))
    routes = {r["backend"]: r["route"] for r in report.reports}
    # The library's own host route on the GPU (generator, upload, kernel: `detattn selftest`'s
    # code path) must give the same digest as the package's torch route, for every case (varlen
    # through attention_varlen, paged through attention_with_kvcache).
    cases = detattn._native.golden_cases()
    diffs = []
    py_digests = {}
    for path in ("exact", "tensorcore"):
        for c in cases:
            if path == "tensorcore" and not c["tensorcore"]:
                continue
            native = detattn._native.golden_native(c["name"], "cuda:0", path)
            from detattn._selftest import _run_case

            mine = _run_case(c, path, "cuda:0", torch)
            py_digests[f"{path}/{c['name']}"] = mine
            if mine != native:
                diffs.append((path, c["name"], native, mine))
    other_failures = [f for f in report.failures if "has no digest for" not in f]
    ok = not bad and not diffs and not other_failures and report.gpus_checked >= 1
    record(
        "selftest",
        ok,
        f"{sum(len(r['cases']) for r in report.reports)} case runs on {list(routes)}; not OK: {len(bad)}; "
        f"missing golden digests (library gap): {len(gaps)}; torch route vs library host route on the GPU: "
        f"{len(py_digests) - len(diffs)}/{len(py_digests)} equal; failures {report.failures}",
        {"report": str(report), "gaps": gaps, "bad": bad, "diffs": diffs, "routes": routes,
         "digests": py_digests},
    )


CLI_PROBLEMS = [
    dict(batch=2, q_heads=8, kv_heads=2, q_len=33, kv_len=100, head_dim=64, dtype="f16", seed=101, causal=True),
    dict(batch=2, q_heads=4, q_len=40, kv_len=17, head_dim=128, dtype="bf16", seed=102, causal=True,
         causal_align="top-left", kv_lens=[17, 5]),
    dict(batch=3, q_heads=4, kv_heads=1, q_len=1, kv_len=700, head_dim=128, dtype="bf16", seed=103,
         kv_lens=[700, 300, 0]),
    dict(batch=2, q_heads=4, q_len=17, kv_len=70, head_dim=64, dtype="f16", seed=104, mask="per-batch",
         blank_rows_every=5),
    dict(batch=1, q_heads=2, q_len=65, kv_len=130, head_dim=80, dtype="f32", seed=105, causal=True),
    dict(batch=2, q_heads=4, kv_heads=2, q_len=9, kv_len=33, head_dim=3, dtype="f32", seed=106, mask="full",
         scale=0.3),
]
MASKS = {"full": (True, True), "shared": (False, False), "per-batch": (True, False), "per-head": (False, True)}


def cli_digest(cli, flags):
    a = [cli, "run", "--backend", "cuda:0", "--json"]
    for k, v in flags.items():
        n = "--" + k.replace("_", "-")
        if v is True:
            a.append(n)
        elif v is not None:
            a += [n, ",".join(map(str, v)) if isinstance(v, list) else str(v)]
    r = subprocess.run(a, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(a)}: {r.stderr or r.stdout}")
    return json.loads(r.stdout)


def py_digest(f, layout):
    dims = (f["batch"], f["q_heads"], f.get("kv_heads", f["q_heads"]), f["q_len"], f.get("kv_len", f["q_len"]),
            f["head_dim"])
    tag = f["dtype"]
    x = generate(dims, tag, f["seed"], mask=MASKS.get(f.get("mask")), blank_rows_every=f.get("blank_rows_every"))
    q, k, v = (to_dev(x[n], tag) for n in ("q", "k", "v"))
    if layout == "bshd":
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    mask = None if x["mask"] is None else torch.from_numpy(x["mask"]).to(DEV)
    out = detattn.attention(q, k, v, causal=f.get("causal", False), causal_align=f.get("causal_align", "bottom-right"),
                            scale=f.get("scale"), attn_mask=mask, kv_lens=f.get("kv_lens"), layout=layout,
                            path=f.get("path", "exact"))
    assert out.is_cuda and out.dtype == q.dtype
    return detattn.digest(out, layout=layout, path=f.get("path", "exact"))


@check
def cli(args):
    if not args.cli:
        record("cli", False, "no CLI given (--cli)")
        return
    rows, bad = [], []
    for f in CLI_PROBLEMS:
        paths = ["exact"]
        if f["dtype"] != "f32" and f["head_dim"] in (64, 128, 256):
            paths.append("tensorcore")
        for path in paths:
            for layout in ("bhsd", "bshd"):
                ff = dict(f, path=path)
                want = cli_digest(args.cli, dict(ff, layout=layout))
                got = py_digest(ff, layout)
                rows.append((f["seed"], path, layout, want["backend"], want["digest"] == got))
                if want["digest"] != got:
                    bad.append((f, path, layout, want["digest"], got))
    record("cli", not bad and bool(rows), f"{sum(r[-1] for r in rows)}/{len(rows)} torch-CUDA digests equal to "
           f"`detattn run --backend cuda:0` ({rows[0][3] if rows else '-'}), exact and tensorcore, bhsd and bshd",
           {"rows": rows, "bad": bad})


@check
def nocopy(args):
    # [B, S, 3·H, D] from one fused projection; q, k, v are bshd views of it (non-contiguous).
    b, s, h, d = 4, 2048, 16, 128
    fused = torch.randn(b, s, 3 * h, d, device=DEV, dtype=torch.bfloat16)
    q, k, v = fused[:, :, :h], fused[:, :, h : 2 * h], fused[:, :, 2 * h :]
    assert not q.is_contiguous()
    detattn.attention(q, k, v, layout="bshd", causal=True)  # warm up (engine, modules)
    torch.cuda.synchronize()
    rows = {}
    for path in ("exact", "tensorcore"):
        for given_out in (False, True):
            out = torch.empty(b, s, h, d, device=DEV, dtype=torch.bfloat16) if given_out else None
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            m0 = torch.cuda.memory_allocated()
            r = detattn.attention(q, k, v, layout="bshd", causal=True, path=path, out=out,
                                  nonfinite="propagate")
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - m0
            rows[(path, given_out)] = (peak, r.numel() * r.element_size())
    # The same bits as from contiguous copies of the views.
    ref = detattn.attention(q.contiguous(), k.contiguous(), v.contiguous(), layout="bshd", causal=True)
    same = bits(ref) == bits(detattn.attention(q, k, v, layout="bshd", causal=True))
    in_bytes = 3 * q.numel() * q.element_size()
    ok = same and all((peak == 0) if given else (peak == nbytes) for (p, given), (peak, nbytes) in rows.items())
    record("nocopy", ok, "torch bytes allocated during a call on bshd views of a fused QKV buffer "
           f"({in_bytes / 2**20:.0f} MiB of input): "
           + ", ".join(f"{p} out={'given' if g else 'new'}: {pk} B (output {nb} B)" for (p, g), (pk, nb) in rows.items())
           + f"; bits equal to contiguous copies: {same}", {str(k_): v_ for k_, v_ in rows.items()})


@check
def stream(args):
    b, h, s, d = 2, 8, 1024, 64
    src = [torch.randn(b, h, s, d, device=DEV, dtype=torch.float16) for _ in range(3)]
    torch.cuda.synchronize()
    want = bits(detattn.attention(*src, causal=True))
    rows = []
    for policy in ("propagate", "reject"):
        st = torch.cuda.Stream()
        with torch.cuda.stream(st):
            q, k, v = (torch.zeros_like(t) for t in src)
            torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time on the stream, before the inputs exist
            for dst, x in zip((q, k, v), src):
                dst.copy_(x)
            t0 = time.perf_counter()
            out = detattn.attention(q, k, v, causal=True, nonfinite=policy)
            returned = time.perf_counter() - t0
            consumed = out.clone()  # consumed on the same stream, without a synchronisation
            pending = not st.query()
        st.synchronize()
        rows.append((policy, bits(consumed) == want, returned, pending))
    ok = all(r[1] for r in rows) and rows[0][3]
    record("stream", ok, "; ".join(
        f"{p}: result on a non-default stream equal to the reference {eq}, call returned in {ret * 1e3:.1f} ms, "
        f"stream still busy after the call {pend}" for p, eq, ret, pend in rows), rows)
    # Informational (not a pass condition): the same on torch's default stream, which is the legacy
    # default stream the library's own allocations and uploads use. Correct either way; whether
    # the call waits for earlier work there is what this measures.
    st = torch.cuda.default_stream()
    with torch.cuda.stream(st):
        q, k, v = (torch.zeros_like(t) for t in src)
        torch.cuda._sleep(200_000_000)
        for dst, x in zip((q, k, v), src):
            dst.copy_(x)
        t0 = time.perf_counter()
        out = detattn.attention(q, k, v, causal=True, nonfinite="propagate")
        returned = time.perf_counter() - t0
        consumed = out.clone()
    torch.cuda.synchronize()
    record("stream_default", bits(consumed) == want,
           f"(informational) on torch's default stream behind a 0.1 s kernel: result equal {bits(consumed) == want}, "
           f"call returned in {returned * 1e3:.1f} ms (propagate)", returned)


def ref64(q, k, v, mask=None, causal=False, scale=None):
    q, k, v = (t.double() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    sc = (1 / q.shape[-1] ** 0.5) if scale is None else scale
    s = sc * q @ k.transpose(-1, -2)
    valid = torch.ones_like(s, dtype=torch.bool)
    if causal:
        valid &= torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril()
    if mask is not None:
        valid &= mask
    s = s.masked_fill(~valid, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return p @ v


ULP = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


@check
def dropin(args):
    import torch.nn.functional as F

    rows, bad = [], []
    cases = [
        ((2, 8, 8, 512, 512, 64), None, True),
        ((2, 8, 2, 33, 700, 128), None, False),
        ((2, 8, 2, 64, 300, 128), "pad", False),
        ((1, 4, 4, 40, 300, 64), None, True),  # fewer queries than keys: top-left
        ((2, 4, 1, 1, 4096, 128), None, False),  # decode, MQA
    ]
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        for (b, hq, hkv, L, S, e), m, causal in cases:
            g = torch.Generator(device=DEV).manual_seed(L * 31 + S)
            q = (torch.rand(b, hq, L, e, device=DEV, generator=g) * 4 - 2).to(dt)
            k = (torch.rand(b, hkv, S, e, device=DEV, generator=g) * 4 - 2).to(dt)
            v = (torch.rand(b, hkv, S, e, device=DEV, generator=g) * 4 - 2).to(dt)
            mask = None
            if m == "pad":
                lens = torch.tensor([S, S // 3], device=DEV)
                mask = (torch.arange(S, device=DEV)[None, :] < lens[:, None])[:, None, None, :]
            theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=hq != hkv)
            ours = detattn.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                        enable_gqa=hq != hkv)
            ref = ref64(q, k, v, mask, causal)
            vmax = v.double().abs().max().item()
            err_ours = (ours.double() - ref).abs().max().item() / vmax
            err_theirs = (theirs.double() - ref).abs().max().item() / vmax
            diff = (ours.double() - theirs.double()).abs().max().item() / vmax
            bound = 1e-5 + ULP[dt]
            row = dict(dtype=str(dt), shape=(b, hq, hkv, L, S, e), mask=m, causal=causal, err_detattn=err_ours,
                       err_torch=err_theirs, detattn_vs_torch=diff, bound=bound, ok=err_ours <= bound)
            rows.append(row)
            if not row["ok"]:
                bad.append(row)
            # tensorcore through the drop-in: docs/tensorcore.md's relative L2 bound.
            if dt != torch.float32 and e in (64, 128, 256):
                tc = detattn.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                          enable_gqa=hq != hkv, path="tensorcore")
                rel = ((tc.double() - ref).norm() / ref.norm()).item()
                lim = 1e-2 if dt == torch.bfloat16 else 2e-3
                r2 = dict(row, path="tensorcore", rel_l2=rel, bound=lim, ok=rel <= lim)
                rows.append(r2)
                if not r2["ok"]:
                    bad.append(r2)
    worst = max(r["detattn_vs_torch"] for r in rows if "path" not in r)
    record("dropin", not bad, f"{len(rows) - len(bad)}/{len(rows)} within bound (exact: |o-ref64| <= (1e-5 + "
           f"ulp)*max|v|; tensorcore: rel L2 1e-2 bf16, 2e-3 f16); largest |detattn - torch SDPA| = "
           f"{worst:.2e}*max|v|", {"rows": rows})


@check
def threads(args):
    x = [torch.randn(4, 8, 257, 128, device=DEV, dtype=torch.bfloat16) for _ in range(3)]
    torch.cuda.synchronize()
    want = {p: bits(detattn.attention(*x, causal=True, path=p)) for p in ("exact", "tensorcore")}
    got, errors = [], []

    def work(i):
        try:
            st = torch.cuda.Stream()
            with torch.cuda.stream(st):
                for rep in range(10):
                    p = ("exact", "tensorcore")[(i + rep) % 2]
                    o = detattn.attention(*x, causal=True, path=p, nonfinite="propagate" if rep % 3 else "reject")
                    st.synchronize()
                    got.append(bits(o) == want[p])
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    record("threads", all(got) and len(got) == 80 and not errors,
           f"{sum(got)}/80 calls from 8 threads on 8 streams bit-identical to one call; errors {errors}")


@check
def lse(args):
    """`return_lse=True` on torch CUDA tensors (the raw device entry point with the log-sum-exp):
    on "exact" the bits of the same call on NumPy host arrays (the CPU: numerics.md §10), on
    "tensorcore" within 1e-4·max(1, |lse|) of those with the same −inf and NaN rows; the output
    bits equal a call without it; every problem on a non-default stream."""
    rng = np.random.default_rng(5)
    cases = [
        # (B, Hq, Hkv, Sq, Skv, D), dtype, causal, kv_lens
        ((2, 8, 2, 1, 5000, 128), "bf16", False, [5000, 2100]),  # a split TensorCore decode
        ((3, 4, 4, 70, 300, 64), "f16", True, [300, 0, 71]),  # a batch element without keys
        ((1, 16, 16, 257, 257, 128), "bf16", True, None),
        ((2, 4, 1, 9, 40, 256), "f16", False, None),
    ]
    bad, lines = [], []
    st = torch.cuda.Stream()
    for dims, tag, causal, kv_lens in cases:
        b, hq, hkv, sq, skv, d = dims
        # torch CPU tensors: the CPU engine (no ml_dtypes needed for bf16 on the host).
        host = [
            torch.from_numpy(rng.uniform(-1.5, 1.5, (b, h, s_, d)).astype(np.float32)).to(TORCH_DTYPES[tag])
            for h, s_ in ((hq, sq), (hkv, skv), (hkv, skv))
        ]
        dev = [t.to(DEV) for t in host]
        _, want = detattn.attention(*host, causal=causal, kv_lens=kv_lens, return_lse=True)
        want = want.numpy()
        for path in ("exact", "tensorcore"):
            with torch.cuda.stream(st):
                o, l = detattn.attention(*dev, causal=causal, kv_lens=kv_lens, path=path, return_lse=True)
                o2 = detattn.attention(*dev, causal=causal, kv_lens=kv_lens, path=path)
            st.synchronize()
            got = l.cpu().numpy()
            ok = l.dtype == torch.float32 and tuple(l.shape) == (b, hq, sq) and bits(o) == bits(o2)
            if path == "exact":
                ok = ok and got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes()
                err = 0.0
            else:
                same = np.array_equal(np.isneginf(got), np.isneginf(want)) and np.array_equal(
                    np.isnan(got), np.isnan(want)
                )
                fin = np.isfinite(want)
                err = float((np.abs(got[fin] - want[fin]) / np.maximum(1, np.abs(want[fin]))).max())
                ok = ok and same and err <= 1e-4
            lines.append(f"{path} {tag} {'x'.join(map(str, dims))}: {'ok' if ok else 'BAD'} (rel {err:.1e})")
            if not ok:
                bad.append(lines[-1])
    record("lse", not bad, "; ".join(lines))


@check
def varlen(args):
    """`attention_varlen` on torch CUDA tensors (packed [total, H, D], int32 CUDA offsets as
    FlashAttention takes them): each sequence's rows and log-sum-exp equal that sequence run
    alone through `attention` on the GPU, bit for bit, both paths; on "exact" also the CPU's."""
    rng = np.random.default_rng(9)
    cases = [
        # (Hq, Hkv, D), query lengths, key lengths, dtype, causal
        ((8, 2, 128), [1, 1, 300, 0, 1], [4500, 70, 300, 12, 0], "bf16", True),  # decode + prefill
        ((4, 4, 64), [33, 1, 7], [33, 2100, 64], "f16", False),
    ]
    bad, lines = [], []
    for (hq, hkv, d), lq, lk, tag, causal in cases:
        tq, tk = sum(lq), sum(lk)
        mk = lambda s_, h: torch.from_numpy(rng.uniform(-1.5, 1.5, (s_, h, d)).astype(np.float32)).to(  # noqa: E731
            TORCH_DTYPES[tag]
        )
        host = [mk(tq, hq), mk(tk, hkv), mk(tk, hkv)]
        dev = [t.to(DEV) for t in host]
        cq = torch.tensor([0, *np.cumsum(lq).tolist()], dtype=torch.int32, device=DEV)
        ck = torch.tensor([0, *np.cumsum(lk).tolist()], dtype=torch.int32, device=DEV)
        for path in ("exact", "tensorcore"):
            o, l = detattn.attention_varlen(*dev, cq, ck, causal=causal, path=path, return_lse=True)
            ok, n = True, 0
            for b in range(len(lq)):
                r0, r1, k0, k1 = int(cq[b]), int(cq[b + 1]), int(ck[b]), int(ck[b + 1])
                if r1 == r0 or k1 == k0:
                    continue
                o1, l1 = detattn.attention(
                    dev[0][None, r0:r1], dev[1][None, k0:k1], dev[2][None, k0:k1], layout="bshd",
                    causal=causal, path=path, return_lse=True,
                )
                ok = ok and bits(o[r0:r1]) == bits(o1[0]) and bits(l[:, r0:r1]) == bits(l1[0])
                n += 1
            if path == "exact":
                hc, hl = detattn.attention_varlen(*host, cq.cpu(), ck.cpu(), causal=causal, return_lse=True)
                ok = ok and bits(o) == bits(hc) and bits(l) == bits(hl)
            lines.append(f"{path} {tag} {len(lq)} sequences: {'ok' if ok else 'BAD'} ({n} alone)")
            if not ok:
                bad.append(lines[-1])
    record("varlen", not bad, "; ".join(lines))


@check
def paged(args):
    """`attention_with_kvcache` on torch CUDA tensors: K and V in a paged cache in shuffled pages
    (detattn.inputs.paginate: the rows no sequence uses hold NaN, so a read of one is a
    NonFiniteError under the default "reject"), the block table and lengths int32 CUDA tensors as
    FlashAttention takes them, on a non-default stream. Output and log-sum-exp must equal, bit for
    bit, `attention` on the same keys contiguous ([B, S, H, D], kv_lens) on the GPU, both paths
    (the first case is a TensorCore decode, which reads the pages through the table; the others
    gather them), and on "exact" the CPU's (torch CPU tensors). A packed batch (cu_seqlens_q)
    against attention_varlen likewise."""
    cases = [
        # (B, Hq, Hkv, Sq, D), key lengths, page size, dtype, causal
        ((4, 8, 2, 1, 128), [4500, 2100, 0, 1], 16, "bf16", False),
        ((3, 4, 4, 7, 64), [300, 17, 256], 256, "f16", True),
        ((2, 4, 1, 33, 256), [33, 700], 64, "f16", True),
        ((2, 2, 2, 5, 80), [90, 5], 32, "f32", False),
    ]
    bad, lines = [], []
    st = torch.cuda.Stream()
    for i, ((b, hq, hkv, sq, d), lens, page, tag, causal) in enumerate(cases):
        x = generate((b, hq, hkv, sq, max(lens), d), tag, 300 + i)
        q = x["q"].transpose(0, 2, 1, 3)  # [B, Sq, Hq, D]
        kp, vp, table = paginate(x["k"], x["v"], page, 400 + i, kv_lens=lens)
        k, v = (x[n].transpose(0, 2, 1, 3) for n in ("k", "v"))  # contiguous keys, [B, Skv, Hkv, D]
        dev = [to_dev(a, tag) for a in (q, kp, vp)]
        ctg = [to_dev(a, tag) for a in (q, k, v)]
        lens_dev = torch.tensor(lens, dtype=torch.int32, device=DEV)
        table_dev = torch.from_numpy(table).to(DEV)
        cpu = detattn.attention(*(to_host(a, tag) for a in (q, k, v)), layout="bshd", kv_lens=lens, causal=causal,
                                return_lse=True)
        for path in ("exact", "tensorcore"):
            if path == "tensorcore" and (tag == "f32" or d not in (64, 128, 256)):
                continue
            with torch.cuda.stream(st):
                o, l = detattn.attention_with_kvcache(*dev, cache_seqlens=lens_dev, block_table=table_dev,
                                                      causal=causal, path=path, return_lse=True)
                co, cl = detattn.attention(*ctg, layout="bshd", kv_lens=lens, causal=causal, path=path,
                                           return_lse=True)
            st.synchronize()
            ok = bits(o) == bits(co) and bits(l) == bits(cl)
            if path == "exact":
                ok = ok and bits(o) == bits(cpu[0]) and bits(l) == bits(cpu[1])
            lines.append(f"{path} {tag} B{b} Hq{hq}/{hkv} Sq{sq} D{d} page {page}: {'ok' if ok else 'BAD'}")
            if not ok:
                bad.append(lines[-1])
    # A packed batch against a paged cache: decode rows beside a prefill, as attention_varlen.
    lq, lk, d, tag = [1, 30, 0, 1], [150, 30, 5, 64], 128, "f16"
    cq = [0, *np.cumsum(lq).tolist()]
    ck = [0, *np.cumsum(lk).tolist()]
    x = generate((1, 4, 2, sum(lq), sum(lk), d), tag, 310)
    q, k, v = (x[n][0].transpose(1, 0, 2) for n in ("q", "k", "v"))  # [total, H, D]
    kp, vp, table = paginate(x["k"], x["v"], 64, 410, cu_seqlens_k=ck)
    i32 = lambda a: torch.tensor(a, dtype=torch.int32, device=DEV)  # noqa: E731
    for path in ("exact", "tensorcore"):
        with torch.cuda.stream(st):
            o, l = detattn.attention_with_kvcache(
                *(to_dev(a, tag) for a in (q, kp, vp)), cache_seqlens=i32(lk), block_table=i32(table),
                cu_seqlens_q=i32(cq), causal=True, path=path, return_lse=True,
            )
            vo, vl = detattn.attention_varlen(*(to_dev(a, tag) for a in (q, k, v)), cq, ck, causal=True, path=path,
                                              return_lse=True)
        st.synchronize()
        ok = bits(o) == bits(vo) and bits(l) == bits(vl)
        if path == "exact":
            ho, hl = detattn.attention_varlen(*(to_host(a, tag) for a in (q, k, v)), cq, ck, causal=True,
                                              return_lse=True)
            ok = ok and bits(o) == bits(ho) and bits(l) == bits(hl)
        lines.append(f"{path} packed {len(lq)} sequences: {'ok' if ok else 'BAD'}")
        if not ok:
            bad.append(lines[-1])
    record("paged", not bad, "; ".join(lines))


@check
def hf(args):
    import transformers
    from transformers import AttentionInterface, AutoModelForCausalLM, LlamaConfig

    import detattn.hf as dhf

    calls = []  # (layer, q_len, kv_len, digest) of every attention call, per run

    def wrapper(module, query, key, value, attention_mask, *a, **kw):
        out, w = dhf.attention_forward(module, query, key, value, attention_mask, *a, **kw)
        calls.append(dict(layer=module.layer_idx, sq=query.shape[2], skv=key.shape[2],
                          q=query.detach().clone(), k=key.detach().clone(), v=value.detach().clone(),
                          mask=None if attention_mask is None else attention_mask.detach().clone(),
                          out=out.detach().clone(), kw=dict(kw)))
        return out, w

    name = dhf.register()
    AttentionInterface.register(name, wrapper)  # the same function, recording its calls
    cfg = LlamaConfig(vocab_size=512, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=2, head_dim=64, max_position_embeddings=512)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="detattn")
    model = model.to(device=DEV, dtype=torch.bfloat16).eval()
    impl = model.config._attn_implementation
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(0, 512, (1, 21), generator=g).to(DEV)
    runs = []
    for _ in range(20):
        calls.clear()
        with torch.no_grad():
            toks = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=16,
                                  do_sample=False, pad_token_id=0)
        h = hashlib.sha256()
        for c in calls:
            h.update(detattn.digest(c["out"], layout="bshd").encode())
        runs.append((toks[0].tolist(), h.hexdigest(), sum(c["sq"] > 1 for c in calls),
                     sum(c["sq"] == 1 for c in calls), max(c["skv"] for c in calls)))
    same_tokens = len({tuple(r[0]) for r in runs}) == 1
    same_digests = len({r[1] for r in runs}) == 1
    prefill, decode, maxkv = runs[0][2], runs[0][3], runs[0][4]
    record("hf_generate", impl == "detattn" and same_tokens and same_digests and prefill > 0 and decode > 0,
           f"transformers {transformers.__version__}, attn_implementation={impl!r}, Llama 4 layers, GQA 8/2, "
           f"D=64, bf16: 20 greedy generations of 16 tokens: identical tokens {same_tokens}, identical attention "
           f"digests {same_digests} ({runs[0][1][:16]}…); per run {prefill} prefill and {decode} cached-decode "
           f"attention calls through detattn (KV up to {maxkv}); tokens {runs[0][0][-16:]}",
           {"runs": [(r[1], r[2], r[3]) for r in runs], "tokens": runs[0][0]})

    # A sequence alone and inside a padded batch (prefill), right and left padding.
    a_ids = torch.randint(0, 512, (1, 11), generator=g).to(DEV)
    b_ids = torch.randint(0, 512, (1, 23), generator=g).to(DEV)

    def forward(ids, am):
        # Positions count the sequence's own tokens (as generate() does), so that a left-padded
        # sequence gets the rotary positions it has alone.
        calls.clear()
        pos = (am.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            model(input_ids=ids, attention_mask=am, position_ids=pos, use_cache=False)
        return list(calls)

    alone = forward(a_ids, torch.ones_like(a_ids))
    rows = []
    for side in ("right", "left"):
        pad = b_ids.shape[1] - a_ids.shape[1]
        ids = torch.zeros(2, b_ids.shape[1], dtype=torch.long, device=DEV)
        am = torch.zeros_like(ids)
        sl = slice(0, 11) if side == "right" else slice(pad, pad + 11)
        ids[0, sl], am[0, sl] = a_ids[0], 1
        ids[1], am[1] = b_ids[0], 1
        batch = forward(ids, am)
        for la, lb in zip(alone, batch):
            same_in = all(bits(la[n][0, :, :, :]) == bits(lb[n][0, :, sl, :]) for n in ("q", "k", "v"))
            same_out = bits(la["out"][0]) == bits(lb["out"][0, sl])
            # Replay: the batched call with row 0's q, k, v replaced by the alone run's, so that
            # only the attention is compared (the projections' matmuls are PyTorch's).
            q2, k2, v2 = lb["q"].clone(), lb["k"].clone(), lb["v"].clone()
            q2[0, :, sl], k2[0, :, sl], v2[0, :, sl] = la["q"][0], la["k"][0], la["v"][0]
            mod = model.model.layers[la["layer"]].self_attn
            with torch.no_grad():
                o2, _ = dhf.attention_forward(mod, q2, k2, v2, lb["mask"], **lb["kw"])
            replay = bits(la["out"][0]) == bits(o2[0, sl])
            rows.append(dict(side=side, layer=la["layer"], inputs_equal=same_in, outputs_equal=same_out,
                             replay_equal=replay, mask=None if lb["mask"] is None else tuple(lb["mask"].shape)))
    replay_ok = all(r["replay_equal"] for r in rows)
    e2e = [(r["side"], r["layer"], r["inputs_equal"], r["outputs_equal"]) for r in rows]
    consistent = all(r["outputs_equal"] for r in rows if r["inputs_equal"])
    record("hf_batch_alone", replay_ok and consistent,
           f"attention outputs of an 11-token sequence alone vs in a 2-sequence batch padded to 23 (right and left "
           f"padding, 4 layers): with the same q/k/v bits {sum(r['replay_equal'] for r in rows)}/{len(rows)} "
           f"bit-identical; end to end (q/k/v from the model's own projections in each run) "
           f"(side, layer, inputs equal, outputs equal) = {e2e}", rows)

    # Cached decode, alone and in a left-padded batch (generate() pads on the left): every decode
    # step's attention rows of the sequence, end to end and with the same q, k, v (replay). All
    # keys stay inside the first 64-key tile here (11 + 12 pad + 8 new), where left padding keeps
    # the bits (docs/python.md).
    model.generation_config.eos_token_id = None
    def gen(ids, am):
        calls.clear()
        with torch.no_grad():
            t = model.generate(ids, attention_mask=am, max_new_tokens=8, do_sample=False,
                               pad_token_id=0)
        return t, [c for c in calls if c["sq"] == 1]
    pad = b_ids.shape[1] - a_ids.shape[1]
    ids = torch.zeros(2, b_ids.shape[1], dtype=torch.long, device=DEV)
    am = torch.zeros_like(ids)
    ids[0, pad:], am[0, pad:] = a_ids[0], 1
    ids[1], am[1] = b_ids[0], 1
    ta, da = gen(a_ids, torch.ones_like(a_ids))
    tb, db = gen(ids, am)
    same_tokens = ta[0, -8:].tolist() == tb[0, -8:].tolist()
    drows = []
    for ca, cb in zip(da, db):
        same_in = bits(ca["q"][0]) == bits(cb["q"][0]) and all(
            bits(ca[n][0]) == bits(cb[n][0, :, pad:]) for n in ("k", "v"))
        same_out = bits(ca["out"][0]) == bits(cb["out"][0])
        q2, k2, v2 = cb["q"].clone(), cb["k"].clone(), cb["v"].clone()
        q2[0], k2[0, :, pad:], v2[0, :, pad:] = ca["q"][0], ca["k"][0], ca["v"][0]
        mod = model.model.layers[ca["layer"]].self_attn
        with torch.no_grad():
            o2, _ = dhf.attention_forward(mod, q2, k2, v2, cb["mask"], **cb["kw"])
        drows.append(dict(layer=ca["layer"], skv=(ca["skv"], cb["skv"]), inputs_equal=same_in,
                          outputs_equal=same_out, replay_equal=bits(ca["out"][0]) == bits(o2[0]),
                          mask=None if cb["mask"] is None else tuple(cb["mask"].shape)))
    ok = len(drows) == len(da) == len(db) > 0 and all(r["replay_equal"] for r in drows) and all(
        r["outputs_equal"] for r in drows if r["inputs_equal"])
    record("hf_decode_batch_alone", ok,
           f"{len(drows)} cached-decode attention calls of the 11-token sequence alone vs in a left-padded batch "
           f"of 2: with the same q/k/v {sum(r['replay_equal'] for r in drows)}/{len(drows)} bit-identical; end "
           f"to end inputs equal in {sum(r['inputs_equal'] for r in drows)}, outputs equal in "
           f"{sum(r['outputs_equal'] for r in drows)}; generated tokens equal {same_tokens}", drows)


CHECKS = [env, selftest, cli, nocopy, stream, dropin, threads, lse, varlen, paged, hf]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=None, help="the detattn binary (the cli check)")
    ap.add_argument("--only", default=None, help="comma-separated checks: " + ",".join(c.__name__ for c in CHECKS))
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="where python-gpu.json goes")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    for c in CHECKS:
        if only is None or c.__name__ in only:
            c(args)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "python-gpu.json"), "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)
    print("\nsummary")
    for r in RESULTS:
        print(f"  {'PASS' if r['ok'] else 'FAIL'}  {r['check']:<15} {r['detail'][:300]}")
    print(f"{sum(r['ok'] for r in RESULTS)}/{len(RESULTS)} checks passed")
    return 0 if all(r["ok"] for r in RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
