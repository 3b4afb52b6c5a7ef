#!/usr/bin/env python3
"""Independent Python reference of detattn's `Exact` path, written from the documents only.

It re-implements, with NumPy, bit for bit:

* the seeded input generator (`src/inputs.rs` module docs): SplitMix64, value and mask rules;
* the `Exact` algorithm of `docs/numerics.md` (sections 1-7) in IEEE binary32, round to nearest
  even, subnormals kept;
* the log-sum-exp output of section 10, and variable-length batches (section 1: each sequence
  computed alone; the packed output digested);
* the output digest (`src/digest.rs` module docs): SHA-256 over a canonical encoding;

and compares the digests of the golden problems (`src/golden.rs`) with the pinned digests in
`golden/exact.txt`.

Usage (Python >= 3.11, NumPy; see scripts/requirements-pyref.txt):

    python3 scripts/numerics_ref.py              # every golden case (~10 s)
    python3 scripts/numerics_ref.py --quick      # all but the two S=1000 cases (~1 s)
    python3 scripts/numerics_ref.py f32_d1 f16_d3   # named cases
    python3 scripts/numerics_ref.py --selftest   # check the emulated fma against exact rationals

Exit status 0 iff every case run matched.

Arithmetic model. NumPy float32 scalar/array add, subtract and multiply are single-rounded IEEE
binary32 operations (round to nearest even, subnormals kept; NumPy never contracts two ufuncs
into an fma). NumPy has no fma, so `fma32` emulates it exactly: the product of two binary32
values is exact in binary64 (24+24 <= 53 significand bits, exponents within range), the sum with
`c` is computed with an error-free TwoSum, the binary64 sum is re-rounded *to odd* using the
error term, and the round-to-odd binary64 value is rounded once to binary32 (round-to-odd with
53 >= 24+2 bits makes that second rounding correct: no double-rounding error).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import pathlib
import random
import struct
import sys
import time
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

F32 = np.float32
F64 = np.float64
U32 = np.uint32
I32 = np.int32

np.seterr(all="ignore")  # -FLT_MAX - FLT_MAX = -inf is part of the algorithm (numerics.md §4)


def f32bits(u: int) -> np.float32:
    """`f32(u)`: the binary32 value of a 32-bit pattern."""
    return np.array([u], dtype=U32).view(F32)[0]


# ---- constants (numerics.md, table at the top) ------------------------------------------------
FLT_MAX = f32bits(0x7F7FFFFF)
L2E = f32bits(0x3FB8AA3B)
SHIFTER = f32bits(0x4B400000)
LN2_HI = f32bits(0x3F317200)
LN2_LO = f32bits(0x35BFBE8E)
P7, P6, P5, P4, P3, P2 = (
    f32bits(b) for b in (0x39506967, 0x3AB743CE, 0x3C088908, 0x3D2AA9C1, 0x3E2AAAAA, 0x3F000000)
)
ZMIN = f32bits(0xC2A00000)
W = f32bits(0x32800000)
R1 = f32bits(0xBFF0F0F1)
R0 = f32bits(0x4034B4B5)
LOG_SPLIT = 0x3F2AAAAB
G = [f32bits(b) for b in (0xBF000000, 0x3EAAAA81, 0xBE7FFF42, 0x3E4CE8F9, 0xBE2AD3A8, 0x3E0F5F33,
                          0xBDF92F17, 0x3E0F68A7, 0xBE049899)]  # G0 .. G8
T = 64
ONE = F32(1.0)
ZERO = F32(0.0)

# ---- primitive operations ----------------------------------------------------------------------


def fma32(a, b, c) -> np.ndarray:
    """Binary32 fused multiply-add `a*b+c`, rounded once (RNE, subnormals kept). Vectorised.

    Exact for all finite binary32 operands: a*b is exact in binary64; TwoSum gives s + err ==
    a*b + c exactly; s is moved to the odd neighbour when inexact (round to odd); the final cast
    to binary32 then rounds correctly.
    """
    a64 = np.asarray(a, dtype=F32).astype(F64)
    b64 = np.asarray(b, dtype=F32).astype(F64)
    c64 = np.asarray(c, dtype=F32).astype(F64)
    p = a64 * b64
    s = np.asarray(p + c64)
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)
    fin = np.isfinite(s)
    even = (np.ascontiguousarray(s).view(np.int64) & 1) == 0
    fix = fin & (err != 0) & even
    if fix.any():
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return np.asarray(s).astype(F32)


def bits(x) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x, dtype=F32)).view(U32)


def from_bits(u) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(u, dtype=U32)).view(F32)


def fmax(a, b):  # IEEE maxNum (operands never NaN)
    return np.fmax(a, b)


def fmin(a, b):  # IEEE minNum
    return np.fmin(a, b)


def expfield(x) -> np.ndarray:
    """§2.1"""
    return ((bits(x) >> U32(23)) & U32(0xFF)).astype(I32)


def sanitize(x) -> np.ndarray:
    """§2.2: NaN and ±inf become +0."""
    return np.where(expfield(x) == 0xFF, ZERO, np.asarray(x, dtype=F32)).astype(F32)


def pow2(k) -> np.ndarray:
    """§2.4: f32((k + 127) << 23) for k in [-126, 127]."""
    k = np.asarray(k, dtype=I32)
    assert k.size == 0 or (k.min() >= -126 and k.max() <= 127)
    return from_bits(((k + 127) << 23).astype(U32))


def row_shift(r) -> np.ndarray:
    """§2.3 over the last axis: e = max(1, max_d expfield), shift = max(127 - e, -126)."""
    e = np.maximum(1, expfield(r).max(axis=-1))
    return np.maximum(127 - e, -126).astype(I32)


def exp32(z) -> np.ndarray:
    """§6, z in [-80, 0]."""
    z = np.asarray(z, dtype=F32)
    t = fma32(z, L2E, SHIFTER)
    nf = t - SHIFTER
    n = bits(t).astype(I32) - I32(0x4B400000)
    r = fma32(nf, -LN2_HI, z)
    r = fma32(nf, -LN2_LO, r)
    p = np.full(z.shape, P7, dtype=F32)
    for c in (P6, P5, P4, P3, P2, ONE, ONE):
        p = fma32(p, r, c)
    return (p * pow2(n)).astype(F32)


def clamp_z(z):
    """§4: clamp(z) = min(max(z, ZMIN), 0)."""
    return fmin(fmax(z, ZMIN), ZERO)


def recip32(l) -> np.ndarray:
    """§5 recip(l), l normal and positive."""
    bl = bits(l)
    e = (bl >> U32(23)).astype(I32)
    m = from_bits((bl & U32(0x007FFFFF)) | U32(0x3F000000))
    r = fma32(m, R1, R0)
    for _ in range(3):
        r = fma32(r, fma32(-m, r, ONE), r)
    return (r * from_bits(((253 - e) << 23).astype(U32))).astype(F32)


def div32(a, l) -> np.ndarray:
    """§5 div(a, l)."""
    r = recip32(l)
    q = fmin(fmax(a * r, -FLT_MAX), FLT_MAX)
    e = fma32(-q, l, a)
    return fma32(e, r, q)


def log_unweighted32(l) -> np.ndarray:
    """§10 ln(l) - ln(W) for normal positive l."""
    b = bits(l).astype(np.uint64)
    e = ((b - np.uint64(LOG_SPLIT)) & np.uint64(0xFF800000)).astype(np.uint32)  # mod 2^32
    mant = from_bits(((b - e.astype(np.uint64)) & np.uint64(0xFFFFFFFF)).astype(U32))
    f = (mant - ONE).astype(F32)
    k = e.view(I32) >> 23  # arithmetic shift
    p = np.full(f.shape, G[8], dtype=F32)
    for g in G[7::-1]:
        p = fma32(p, f, g)
    r = fma32(p, (f * f).astype(F32), f)
    kf = (k + 26).astype(F32)
    y = fma32(kf, LN2_LO, r)
    return fma32(kf, LN2_HI, y)


def lse32(m, l) -> np.ndarray:
    """§10 the log-sum-exp from the final m, l: m + log_unweighted(lsafe), -inf where l = 0."""
    m = np.asarray(m, dtype=F32)
    l = np.asarray(l, dtype=F32)
    lsafe = np.where(l > 0, l, ONE).astype(F32)
    return np.where(l > 0, (m + log_unweighted32(lsafe)).astype(F32), F32(-np.inf)).astype(F32)


# ---- seeded inputs (src/inputs.rs module docs) ------------------------------------------------

GOLDEN = 0x9E3779B97F4A7C15
MASK64 = (1 << 64) - 1


def splitmix64(seed: int, n: int, start: int = 0) -> np.ndarray:
    """Outputs start..start+n of SplitMix64 with initial state `seed` (state += GOLDEN first)."""
    i = np.arange(start + 1, start + n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(seed & MASK64) + i * np.uint64(GOLDEN)  # wraps mod 2^64
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


DT_P = {"f32": 24, "f16": 11, "bf16": 8}
DT_CODE = {"f32": 0, "f16": 1, "bf16": 2}


def values(r: np.ndarray, p: int, amp: int) -> np.ndarray:
    """((r >> (64 - p)) * 2^-(p-2) - 2) * 2^amp, exact in binary64 and in the dtype; as f32."""
    k = (r >> np.uint64(64 - p)).astype(F64)
    v = (k * 2.0 ** -(p - 2) - 2.0) * 2.0**amp
    v32 = v.astype(F32)
    assert np.array_equal(v32.astype(F64), v), "value not exact in f32"
    return v32


@dataclass
class Case:
    name: str
    dims: tuple  # (B, Hq, Hkv, Sq, Skv, D)
    dtype: str
    seed: int
    causal: bool = False
    top_left: bool = False  # causal alignment (numerics.md §1): j <= i instead of j + Sq <= i + L
    kv_lens: list | None = None
    mask: tuple | None = None  # (per_batch, per_head)
    blank_rows_every: int | None = None
    amp: int = 0
    scale: float | None = None
    page_size: int | None = None  # a paged cache: the same bits as contiguous K/V (a layout)
    seqlens: tuple | None = None  # varlen: (query lengths, key lengths); dims hold the totals
    lse: bool = False  # the digest is of the log-sum-exp, as an f32 [B, Hq, Sq, 1] tensor


FULL = (True, True)
SHARED = (False, False)
PER_BATCH = (True, False)

# Transcribed from src/golden.rs `cases()`, in the order of golden/exact.txt.
CASES = [
    Case("f32_mha", (2, 4, 4, 33, 33, 64), "f32", 1),
    Case("f16_mha", (2, 4, 4, 33, 33, 64), "f16", 2),
    Case("bf16_mha", (2, 4, 4, 33, 33, 64), "bf16", 3),
    Case("f32_causal_square", (1, 2, 2, 17, 17, 64), "f32", 4, causal=True),
    Case("f16_causal_decode_window", (2, 4, 4, 5, 70, 64), "f16", 5, causal=True),
    Case("bf16_causal_more_queries_than_keys", (1, 2, 2, 40, 17, 32), "bf16", 6, causal=True),
    Case("f32_gqa_d80", (1, 8, 2, 17, 100, 80), "f32", 7),
    Case("f16_gqa_causal_d128", (2, 8, 4, 33, 33, 128), "f16", 8, causal=True),
    Case("bf16_mqa", (1, 8, 1, 17, 65, 64), "bf16", 9),
    Case("f32_mqa_causal_d128", (1, 4, 1, 64, 64, 128), "f32", 10, causal=True),
    Case("f32_kv_lens_with_zero", (3, 2, 2, 17, 100, 64), "f32", 11, kv_lens=[100, 37, 0]),
    Case("bf16_kv_lens_causal", (3, 2, 2, 9, 80, 64), "bf16", 12, causal=True, kv_lens=[80, 9, 3]),
    Case("f16_mask_full", (2, 2, 2, 17, 70, 64), "f16", 13, mask=FULL),
    Case("f32_mask_shared_blank_rows", (2, 2, 2, 17, 70, 64), "f32", 14, mask=SHARED,
         blank_rows_every=4),
    Case("bf16_mask_per_batch_causal", (2, 2, 2, 20, 20, 64), "bf16", 15, causal=True,
         mask=PER_BATCH, blank_rows_every=7),
    Case("f32_decode_s1", (4, 4, 4, 1, 1000, 64), "f32", 16),
    Case("f16_s1000", (1, 2, 2, 1000, 1000, 64), "f16", 17),
    Case("bf16_s1000_causal", (1, 2, 1, 1000, 1000, 64), "bf16", 18, causal=True),
    Case("f32_d1", (1, 2, 2, 17, 17, 1), "f32", 19),
    Case("f16_d3", (1, 2, 2, 17, 33, 3), "f16", 20),
    Case("bf16_d80", (1, 2, 2, 33, 33, 80), "bf16", 21),
    Case("f32_d256", (1, 2, 2, 17, 130, 256), "f32", 22),
    Case("f16_d256_causal", (1, 2, 1, 64, 64, 256), "f16", 23, causal=True),
    Case("f32_d8192", (1, 1, 1, 3, 70, 8192), "f32", 24),
    Case("f32_scores_saturate", (1, 2, 2, 17, 17, 64), "f32", 25, amp=100),
    Case("bf16_near_max", (1, 2, 2, 17, 17, 64), "bf16", 26, amp=126),
    Case("f16_near_max", (1, 2, 2, 17, 17, 64), "f16", 27, amp=14),
    Case("f32_tiny_subnormal_products", (1, 2, 2, 17, 17, 64), "f32", 28, amp=-120),
    Case("f32_custom_scale", (1, 2, 2, 17, 33, 64), "f32", 29, scale=0.3),
    Case("f16_everything_d3_mqa", (2, 4, 1, 17, 40, 3), "f16", 30, causal=True, kv_lens=[40, 20],
         mask=FULL, blank_rows_every=5),
    Case("f16_top_left_fewer_queries", (2, 4, 2, 5, 70, 64), "f16", 31, causal=True, top_left=True),
    Case("bf16_top_left_more_queries_kv_lens", (2, 4, 4, 40, 33, 128), "bf16", 32, causal=True,
         top_left=True, kv_lens=[33, 12]),
    Case("f32_top_left_d80", (1, 2, 1, 17, 70, 80), "f32", 33, causal=True, top_left=True),
    Case("f32_kv_lens_with_zero_paged16", (3, 2, 2, 17, 100, 64), "f32", 11, kv_lens=[100, 37, 0],
         page_size=16),
    Case("bf16_kv_lens_causal_paged32", (3, 2, 2, 9, 80, 64), "bf16", 12, causal=True,
         kv_lens=[80, 9, 3], page_size=32),
    Case("f16_everything_d3_mqa_paged16", (2, 4, 1, 17, 40, 3), "f16", 30, causal=True,
         kv_lens=[40, 20], mask=FULL, blank_rows_every=5, page_size=16),
    Case("f32_decode_s1_paged256", (4, 4, 4, 1, 1000, 64), "f32", 16, page_size=256),
    Case("f32_varlen_mixed_causal", (1, 4, 2, 49, 127, 64), "f32", 40, causal=True,
         seqlens=([1, 7, 0, 40, 1], [70, 12, 5, 40, 0])),
    Case("bf16_varlen_top_left", (1, 2, 2, 55, 45, 80), "bf16", 41, causal=True, top_left=True,
         seqlens=([5, 33, 17], [9, 33, 3])),
    Case("f16_varlen_mqa_d3", (1, 4, 1, 23, 69, 3), "f16", 42, seqlens=([3, 0, 20], [0, 4, 65])),
    Case("f16_varlen_causal_paged64", (1, 4, 2, 32, 244, 128), "f16", 43, causal=True,
         seqlens=([1, 30, 1], [150, 30, 64]), page_size=64),
    Case("f32_lse_gqa_kv_lens_causal", (3, 4, 2, 9, 80, 64), "f32", 44, causal=True,
         kv_lens=[80, 9, 0], lse=True),
    Case("bf16_lse_mask_blank_rows", (2, 2, 2, 17, 70, 32), "bf16", 45, mask=SHARED,
         blank_rows_every=4, lse=True),
    Case("f16_lse_varlen_causal", (1, 2, 2, 28, 87, 64), "f16", 46, causal=True,
         seqlens=([1, 7, 0, 20], [70, 12, 5, 0]), lse=True),
]

# The large ones (seconds each), left out by --quick.
SLOW = {"f16_s1000", "bf16_s1000_causal"}


def generate(c: Case):
    """Q, K, V as exact f32 arrays, and the mask (or None): src/inputs.rs draw order."""
    B, Hq, Hkv, Sq, Skv, D = c.dims
    p = DT_P[c.dtype]
    nq, nk = B * Hq * Sq * D, B * Hkv * Skv * D
    mshape = None
    nm = 0
    if c.mask is not None:
        mshape = (B if c.mask[0] else 1, Hq if c.mask[1] else 1, Sq, Skv)
        nm = math.prod(mshape)
    r = splitmix64(c.seed, nq + 2 * nk + nm)
    q = values(r[:nq], p, c.amp).reshape(B, Hq, Sq, D)
    k = values(r[nq:nq + nk], p, c.amp).reshape(B, Hkv, Skv, D)
    v = values(r[nq + nk:nq + 2 * nk], p, c.amp).reshape(B, Hkv, Skv, D)
    mask = None
    if c.mask is not None:
        mask = ((r[nq + 2 * nk:] >> np.uint64(62)) != 0).reshape(mshape)
        n = c.blank_rows_every
        if n:
            i = np.arange(Sq)
            mask[:, :, (i % n) == n - 1, :] = False
    return q, k, v, mask


# ---- the Exact algorithm (numerics.md) ---------------------------------------------------------


def default_scale(D: int) -> np.float32:
    """§3: the f32 nearest to 1/sqrt(D), computed in f64."""
    return F32(1.0 / np.sqrt(F64(D)))


def attention_exact(q, k, v, mask, *, causal, kv_lens, scale, out_dtype, top_left=False,
                    with_lse=False):
    """The output `[B, Hq, Sq, D]` in `out_dtype` (f32 or f16 array; bf16 as uint16 bit patterns)
    and, with `with_lse`, the §10 log-sum-exp `[B, Hq, Sq]` (f32) as a second value.
    Inputs are finite (NonFinitePolicy::Reject has already passed), so no row is bad (§7)."""
    B, Hq, Sq, D = q.shape
    _, Hkv, Skv, _ = k.shape
    g = Hq // Hkv
    head = np.arange(Hq) // g  # §1: query head h reads KV head h / (Hq / Hkv)
    L = np.array(kv_lens if kv_lens is not None else [Skv] * B, dtype=np.int64)

    # §2 sanitise and per-row power-of-two shift (inputs are finite here; bad flags are all false)
    q = sanitize(q)
    k = sanitize(k)
    v = sanitize(v)
    sq = row_shift(q)  # [B, Hq, Sq]
    sk = row_shift(k)  # [B, Hkv, Skv]
    qp = (q * pow2(sq)[..., None]).astype(F32)
    kp = (k * pow2(sk)[..., None]).astype(F32)

    # §3 scores: one sequential fma chain per (query, key), in increasing d
    kx = kp[:, head]  # [B, Hq, Skv, D]
    s = np.zeros((B, Hq, Sq, Skv), dtype=F32)
    for d in range(D):
        s = fma32(qp[:, :, :, None, d], kx[:, :, None, :, d], s)
    u = -(sq[:, :, :, None] + sk[:, head][:, :, None, :])  # int32, in [-252, 252]
    a = u >> 1  # arithmetic shift
    b = u - a
    x = (((s * F32(scale)) * pow2(a)) * pow2(b)).astype(F32)
    x = fmin(fmax(x, -FLT_MAX), FLT_MAX)

    # §1 validity
    i = np.arange(Sq)[:, None]
    j = np.arange(Skv)[None, :]
    Lb = L[:, None, None, None]
    valid = np.broadcast_to(j < Lb, (B, Hq, Sq, Skv)).copy()
    if causal and top_left:
        valid &= j <= i
    elif causal:
        valid &= (j + Sq) <= (i + Lb)
    if mask is not None:
        valid &= np.broadcast_to(mask, (B, Hq, Sq, Skv))

    # §4 online softmax over fixed tiles of 64 keys
    vx = v[:, head]  # [B, Hq, Skv, D]
    m = np.full((B, Hq, Sq), -FLT_MAX, dtype=F32)
    l = np.zeros((B, Hq, Sq), dtype=F32)
    acc = np.zeros((B, Hq, Sq, D), dtype=F32)
    for t0 in range(0, Skv, T):
        t1 = min(t0 + T, Skv)  # keys at or past Skv are invalid: they are left out
        vt = valid[..., t0:t1]
        xm = np.where(vt, x[..., t0:t1], -FLT_MAX).astype(F32)
        mt = xm.max(axis=-1)
        mnew = (fmax(m, mt) + ZERO).astype(F32)
        alpha = exp32(clamp_z(m - mnew))
        pj = np.where(vt, exp32(clamp_z(xm - mnew[..., None])) * W, ZERO).astype(F32)
        l = (l * alpha).astype(F32)
        acc = (acc * alpha[..., None]).astype(F32)
        for jj in range(t1 - t0):
            l = (l + pj[..., jj]).astype(F32)
            acc = fma32(pj[..., jj, None], vx[:, :, None, t0 + jj, :], acc)
        m = mnew

    # §5 final division, zeros, saturation
    maxt = {"f32": FLT_MAX, "f16": F32(65504.0), "bf16": f32bits(0x7F7F0000)}[out_dtype]
    lsafe = np.where(l > 0, l, ONE).astype(F32)
    o = div32(acc, lsafe[..., None])
    o = (o + ZERO).astype(F32)
    o = fmin(fmax(o, -maxt), maxt).astype(F32)

    # §7 rounding to the output dtype
    if out_dtype == "f32":
        raw = o
    elif out_dtype == "f16":
        raw = o.astype(np.float16)  # IEEE conversion, round to nearest even
    else:
        bo = bits(o).astype(np.uint64)
        raw = ((bo + 0x7FFF + ((bo >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)).astype(
            np.uint16
        )
    if with_lse:
        return raw, lse32(m, l)
    return raw


# ---- digest (src/digest.rs module docs) --------------------------------------------------------


def digest(raw: np.ndarray, dtype: str, path: int = 0) -> str:
    h = hashlib.sha256(b"detattn\0" + struct.pack("<IBBH4Q", 1, path, DT_CODE[dtype], 0,
                                                  *raw.shape))
    h.update(np.ascontiguousarray(raw.astype(raw.dtype.newbyteorder("<"))).tobytes())
    return h.hexdigest()


def run_case(c: Case) -> str:
    # A paged case (`page_size`) has the contiguous problem's bits: numerics.md §1 defines the
    # result from the logical K and V rows only, so it is computed here as that problem.
    q, k, v, mask = generate(c)
    scale = F32(c.scale) if c.scale is not None else default_scale(c.dims[5])
    kw = dict(causal=c.causal, scale=scale, out_dtype=c.dtype, top_left=c.top_left,
              with_lse=True)
    if c.seqlens is None:
        raw, lse = attention_exact(q, k, v, mask, kv_lens=c.kv_lens, **kw)
    else:
        # A variable-length batch (numerics.md §1): each sequence is the problem of its own rows
        # alone (batch 1, its own query and key lengths); the outputs are packed in order.
        raws, lses = [], []
        cq = np.cumsum([0] + list(c.seqlens[0]))
        ck = np.cumsum([0] + list(c.seqlens[1]))
        for b in range(len(c.seqlens[0])):
            qs = q[:, :, cq[b]:cq[b + 1]]
            ks, vs = k[:, :, ck[b]:ck[b + 1]], v[:, :, ck[b]:ck[b + 1]]
            r, l = attention_exact(qs, ks, vs, None, kv_lens=None, **kw)
            raws.append(r)
            lses.append(l)
        raw, lse = np.concatenate(raws, axis=2), np.concatenate(lses, axis=2)
    if c.lse:
        return digest(lse[..., None].astype(F32), "f32")
    return digest(raw, c.dtype)


def load_snapshot(path: pathlib.Path) -> dict:
    # golden/exact.txt: a `key: value` header up to the line `---`, then `case digest` lines.
    body = path.read_text().split("\n---\n", 1)[1]
    return dict(line.split(" ", 1) for line in body.splitlines() if " " in line)


# ---- self-tests --------------------------------------------------------------------------------


def round_f32_exact(x: Fraction) -> float:
    """Round a rational to binary32, nearest even, with subnormals and overflow; as a float."""
    if x == 0:
        return 0.0
    sign = -1 if x < 0 else 1
    x = abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:
        e -= 1
    # now 2^e <= x < 2^(e+1)
    e = max(e, -126)
    quantum = Fraction(2) ** (e - 23)
    n = x / quantum
    fl = n.numerator // n.denominator
    rem = n - fl
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2 == 1):
        fl += 1
    val = fl * quantum
    if val >= Fraction(2) ** 128:
        return sign * math.inf
    return sign * float(val)


def selftest() -> bool:
    ok = True
    # SplitMix64 known answers (tests/data/splitmix64_kat.txt is seed 1234567).
    kat = pathlib.Path(__file__).resolve().parent.parent / "tests/data/splitmix64_kat.txt"
    if kat.exists():
        want = [int(t) for t in kat.read_text().split()]
        got = [int(t) for t in splitmix64(1234567, len(want))]
        print("splitmix64 KAT (seed 1234567):", "OK" if got == want else "FAIL")
        ok &= got == want
    # fma against exact rationals, on random and adversarial operands incl. subnormals.
    rng = random.Random(12345)

    def rnd32():
        kind = rng.random()
        if kind < 0.2:
            u = rng.getrandbits(23) | (rng.getrandbits(1) << 31)  # subnormal
        elif kind < 0.3:
            u = rng.getrandbits(32) & 0x807FFFFF | (rng.choice([1, 2, 3, 126, 127, 128, 250, 254]) << 23)
        else:
            u = rng.getrandbits(32)
            if (u >> 23) & 0xFF == 0xFF:
                u &= 0xFF7FFFFF
        return f32bits(u)

    n = 20000
    a = np.array([rnd32() for _ in range(n)], dtype=F32)
    b = np.array([rnd32() for _ in range(n)], dtype=F32)
    c = np.array([rnd32() for _ in range(n)], dtype=F32)
    # adversarial: c close to -a*b so the sum cancels or lands near a rounding midpoint
    for t in range(0, n, 3):
        c[t] = F32(-(F64(a[t]) * F64(b[t])))
        if t % 2:
            c[t] = np.nextafter(c[t], F32(np.inf))
    # midpoint cases: a*b = half an ulp of c
    for t in range(1, n, 7):
        c[t] = F32(1.0 + rng.getrandbits(23) * 2.0**-23) * F32(2.0 ** rng.randint(-100, 100))
        a[t] = F32(2.0 ** (rng.randint(-40, 0)))
        b[t] = F32(np.spacing(c[t]) / 2 / a[t]) * F32(rng.choice([1, -1, 1.5, -1.5, 0.75]))
    # double-rounding traps: a*b + c = (midpoint of two f32) - tiny, which binary64 rounds onto
    # the midpoint (a naive `float64(a)*b + c` then cast to f32 gets these wrong)
    for t in range(2, n, 11):
        e = rng.randint(-100, 100)
        cm = 1 + (2 * rng.getrandbits(22) + 1) * 2.0**-23  # odd significand
        sg = rng.choice([1.0, -1.0])
        c[t] = F32(sg * cm * 2.0**e)
        a[t] = F32(2.0 ** (e - 24) * (1 + 2.0**-23))
        b[t] = F32(sg * (1 - 2.0**-23))
    for arr in (a, b, c):
        arr[~np.isfinite(arr)] = ONE
    got = fma32(a, b, c)
    bad = 0
    for t in range(n):
        want = round_f32_exact(Fraction(float(a[t])) * Fraction(float(b[t])) + Fraction(float(c[t])))
        g = float(got[t])
        if not (g == want or (math.isnan(g) and math.isnan(want))) or (
            g == 0 and want == 0 and math.copysign(1, g) != math.copysign(1, want)
            and Fraction(float(a[t])) * Fraction(float(b[t])) + Fraction(float(c[t])) != 0
        ):
            bad += 1
            if bad < 5:
                print("fma mismatch", a[t], b[t], c[t], g, want)
    print(f"fma32 vs exact rationals on {n} operand triples:", "OK" if bad == 0 else f"{bad} FAIL")
    ok &= bad == 0
    # exp(0) == 1, recip/div spot checks
    e0 = exp32(np.array([0.0, -0.0], dtype=F32))
    print("exp(0) == 1:", "OK" if np.all(e0 == 1) else "FAIL")
    ok &= bool(np.all(e0 == 1))
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="*", help="golden case names (default: all of them)")
    ap.add_argument("--quick", action="store_true", help="skip the two S=1000 cases")
    ap.add_argument("--selftest", action="store_true", help="check fma32 and SplitMix64 only")
    ap.add_argument("--snapshot", type=pathlib.Path,
                    default=pathlib.Path(__file__).resolve().parent.parent
                    / "golden/exact.txt")
    args = ap.parse_args(argv)
    if args.selftest:
        return 0 if selftest() else 1
    pinned = load_snapshot(args.snapshot)
    by_name = {c.name: c for c in CASES}
    if args.cases:
        todo = [by_name[n] for n in args.cases]
    elif args.quick:
        todo = [c for c in CASES if c.name not in SLOW]
    else:
        todo = CASES
    t_all = time.perf_counter()
    n_ok = 0
    for c in todo:
        t0 = time.perf_counter()
        got = run_case(c)
        want = pinned.get(c.name, "").strip()
        ok = got == want
        n_ok += ok
        print(f"{'MATCH' if ok else 'MISMATCH':8} {c.name:36} {time.perf_counter() - t0:7.2f}s"
              + ("" if ok else f"\n         got  {got}\n         want {want}"), flush=True)
    print(f"{n_ok}/{len(todo)} matched in {time.perf_counter() - t_all:.1f}s")
    return 0 if n_ok == len(todo) else 1


if __name__ == "__main__":
    sys.exit(main())
