"""The seeded input generator of detattn, re-implemented in NumPy from its documented contract
(the module docs of ``src/inputs.rs``), not from the Rust code, so that the golden problems'
inputs can be regenerated in Python and the two implementations check each other:

- SplitMix64: the state starts at the seed; each draw adds ``0x9E3779B97F4A7C15`` and then mixes
  with ``0xBF58476D1CE4E5B9`` and ``0x94D049BB133111EB`` (shifts 30, 27, 31).
- Draw order: every element of Q, then K, then V (row-major ``[B, H, S, D]``), then the mask
  (row-major ``[B or 1, Hq or 1, Sq, Skv]``).
- A value from draw ``r`` for a dtype of ``p`` significand bits (f32 24, f16 11, bf16 8):
  ``((r >> (64 − p)) · 2^−(p−2) − 2) · 2^amp`` — exact in the dtype.
- A mask entry attends iff ``r >> 62 != 0``; with ``blank_rows_every = n`` the rows with
  ``i % n == n − 1`` attend nowhere (their draws are still taken).

:func:`paginate` places K and V into a paged cache as the crate's ``inputs::paginate`` does (its
docs: sequence by sequence, a seeded Fisher–Yates shuffle of the pages, the canonical NaN in every
row no sequence uses).
"""

from __future__ import annotations

import numpy as np

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_BITS = {"f32": 24, "f16": 11, "bf16": 8}


def splitmix64(seed: int, n: int, start: int = 0) -> np.ndarray:
    """Draws ``start .. start + n`` of SplitMix64 from ``seed`` (uint64; NumPy's uint64 arithmetic
    wraps modulo 2⁶⁴, as the generator does). Draw ``i`` mixes ``seed + (i + 1)·γ``."""
    i = np.arange(start + 1, start + n + 1, dtype=np.uint64)
    z = np.uint64(seed) + i * _GAMMA
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def values(r: np.ndarray, dtype: str, amp: int = 0) -> np.ndarray:
    """The values of draws ``r`` in ``dtype``: float32 and float16 arrays; bf16 as the uint16 bit
    patterns (NumPy has no bfloat16; :func:`as_bf16` views them with ml_dtypes)."""
    p = _BITS[dtype]
    grid = (r >> np.uint64(64 - p)).astype(np.float64) * 2.0 ** -(p - 2) - 2.0
    with np.errstate(over="ignore"):
        # Evaluated exactly in f64, rounded to f32, then to the dtype: the library's order.
        x = (grid * 2.0**amp).astype(np.float32)
    if dtype == "f32":
        return x
    if dtype == "f16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16)
    # bf16, round to nearest even on the f32 bits (numerics.md §7's rule).
    b = x.view(np.uint32).astype(np.uint64)
    return (((b + 0x7FFF + ((b >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)) & np.uint64(0xFFFF)).astype(
        np.uint16
    )


def as_bf16(bits: np.ndarray) -> np.ndarray:
    """uint16 bit patterns viewed as ml_dtypes' bfloat16 (needs ml_dtypes)."""
    import ml_dtypes  # noqa: PLC0415 (optional dependency)

    return bits.view(ml_dtypes.bfloat16)


def generate(dims, dtype, seed, *, amp=0, mask=None, blank_rows_every=None):
    """The inputs of a problem of ``dims = (B, Hq, Hkv, Sq, Skv, D)`` in ``dtype`` (``"f32"``,
    ``"f16"``, ``"bf16"``) from ``seed``: a dict with ``q`` ``[B, Hq, Sq, D]``, ``k`` and ``v``
    ``[B, Hkv, Skv, D]`` (contiguous; bf16 as uint16 bits, see :func:`values`) and ``mask`` (a
    bool array ``[B or 1, Hq or 1, Sq, Skv]`` when ``mask = (per_batch, per_head)`` is given, else
    None)."""
    b, hq, hkv, sq, skv, d = dims
    nq, nkv = b * hq * sq * d, b * hkv * skv * d
    r = splitmix64(seed, nq + 2 * nkv)
    vals = values(r, dtype, amp)
    out = {
        "q": vals[:nq].reshape(b, hq, sq, d),
        "k": vals[nq : nq + nkv].reshape(b, hkv, skv, d),
        "v": vals[nq + nkv :].reshape(b, hkv, skv, d),
        "mask": None,
    }
    if mask is not None:
        per_batch, per_head = mask
        bm, hm = (b if per_batch else 1), (hq if per_head else 1)
        m = (splitmix64(seed, bm * hm * sq * skv, start=nq + 2 * nkv) >> np.uint64(62)) != 0
        m = m.reshape(bm, hm, sq, skv)
        if blank_rows_every:
            n = blank_rows_every
            m[:, :, np.arange(sq) % n == n - 1, :] = False
        out["mask"] = m
    return out


# The canonical NaN's bits (the crate's `Element::canonical_nan`), by NumPy dtype name (bf16 held as
# uint16 bits, as `values` gives it, or as ml_dtypes' bfloat16).
_NAN_BITS = {"float32": (np.uint32, 0x7FC00000), "float16": (np.uint16, 0x7E00), "uint16": (np.uint16, 0x7FC0),
             "bfloat16": (np.uint16, 0x7FC0)}


def paginate(k, v, page_size, seed, *, kv_lens=None, cu_seqlens_k=None):
    """K and V (contiguous ``[B, Hkv, Skv, D]``, as :func:`generate` gives them) placed into a
    paged cache as the crate's ``inputs::paginate`` places them: sequence by sequence,
    ``ceil(L / page_size)`` pages each, plus one page no sequence uses; logical page ``n`` is
    physical page ``perm[n]``, ``perm`` a Fisher–Yates shuffle driven by SplitMix64(``seed``) (for
    ``i`` from ``n − 1`` down to 1, swap ``i`` with draw ``% (i + 1)``); every row no sequence uses
    holds the canonical NaN (a call must never read it). The sequences: batch element ``b`` with
    its first ``kv_lens[b]`` keys (default all), or with ``cu_seqlens_k`` the sequences of a
    packed ``[1, Hkv, total, D]`` batch. Returns ``(k_pages, v_pages, block_table)``: pages
    ``[num_pages, page_size, Hkv, D]`` and an int32 ``[sequences, max_pages]`` table, -1 where a
    sequence uses no page."""
    b, hkv, skv, d = k.shape
    if cu_seqlens_k is not None:
        cu = [int(x) for x in cu_seqlens_k]
        seqs = [(0, cu[i], cu[i + 1] - cu[i]) for i in range(len(cu) - 1)]
    else:
        lens = [skv] * b if kv_lens is None else [int(x) for x in kv_lens]
        seqs = [(i, 0, lens[i]) for i in range(b)]
    used = [-(-n // page_size) for _, _, n in seqs]
    n = sum(used) + 1
    perm = list(range(n))
    for draw, i in zip(splitmix64(seed, n - 1), range(n - 1, 0, -1)):
        j = int(draw % np.uint64(i + 1))
        perm[i], perm[j] = perm[j], perm[i]
    uint, nan = _NAN_BITS[k.dtype.name]
    pages = []
    for x in (k, v):
        p = np.empty((n, page_size, hkv, d), x.dtype)
        p.view(uint)[...] = nan
        pages.append(p)
    table = np.full((len(seqs), max(used + [1])), -1, np.int32)
    nxt = 0
    for s, (bb, k0, length) in enumerate(seqs):
        for page in range(used[s]):
            phys = perm[nxt]
            nxt += 1
            table[s, page] = phys
            j0 = k0 + page * page_size
            rows = min(page_size, length - page * page_size)
            for p, x in zip(pages, (k, v)):
                p[phys, :rows] = x[bb, :, j0 : j0 + rows].transpose(1, 0, 2)
    return pages[0], pages[1], table
