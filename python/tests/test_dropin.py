"""The SDPA drop-in against a NumPy float64 reference of torch's documented semantics
(``torch.nn.functional.scaled_dot_product_attention``): boolean masks broadcast, top-left causal,
GQA, scale, 3-D inputs; within the bound of docs/numerics.md §9."""

import numpy as np
import pytest

import detattn

from conftest import host, rand


def sdpa_reference(q, k, v, mask=None, is_causal=False, scale=None):
    """softmax(scale·QKᵀ + bias)V in float64, as torch documents it (GQA: each group of query
    heads reads one KV head); a row with no key is 0 here (torch gives NaN there)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    g = q.shape[-3] // k.shape[-3]
    k, v = np.repeat(k, g, axis=-3), np.repeat(v, g, axis=-3)
    L, S = q.shape[-2], k.shape[-2]
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * q @ np.swapaxes(k, -1, -2)
    valid = np.ones(s.shape, bool)
    if is_causal:
        valid &= np.tril(np.ones((L, S), bool))
    if mask is not None:
        valid &= np.broadcast_to(mask, s.shape)
    s = np.where(valid, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    p = np.where(valid, np.exp(s - m), 0)
    den = p.sum(-1, keepdims=True)
    return np.where(den > 0, (p @ v) / np.where(den > 0, den, 1), 0)


ULP = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}


def check(got, want, v, dt):
    # numerics.md §9: |o − ref| ≤ 1e-5·max|v| for D ≤ 256 and |scale·q·k| ≤ 16, plus half an ulp
    # of the output dtype for the final rounding (relative to the output's magnitude ≤ max|v|).
    vmax = float(np.abs(np.asarray(v, np.float64)).max())
    err = np.abs(np.asarray(got, np.float64) - want).max()
    assert err <= (1e-5 + ULP[dt]) * vmax, (err, vmax)


CASES = [
    # (B, Hq, Hkv, L, S, E), mask shape or None, is_causal, scale
    ((2, 4, 4, 9, 9, 16), None, True, None),
    ((2, 4, 4, 5, 70, 32), None, True, None),  # top-left: row i sees keys 0..=i of 70
    ((1, 2, 2, 40, 17, 8), None, True, 0.7),  # more queries than keys: rows ≥ 17 see all 17
    ((2, 8, 2, 7, 33, 64), None, False, None),  # GQA
    ((2, 4, 1, 7, 33, 64), (7, 33), False, None),  # MQA, one shared [L, S] mask
    ((2, 4, 2, 6, 20, 8), (2, 1, 1, 20), False, None),  # a padding mask [B, 1, 1, S]
    ((2, 4, 4, 6, 20, 8), (2, 4, 6, 20), False, 0.25),  # full mask
    ((1, 4, 4, 6, 20, 8), (4, 6, 20), False, None),  # 3-D mask: [H, L, S]
]


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: str(c[0]) + ("m" if c[1] else "") + ("c" if c[2] else ""))
def test_matches_the_reference(case, dt):
    (b, hq, hkv, L, S, e), mshape, causal, scale = case
    rng = np.random.default_rng(hash((case[0], dt)) % 2**32)
    q, k, v = rand((b, hq, L, e), dt, rng), rand((b, hkv, S, e), dt, rng), rand((b, hkv, S, e), dt, rng)
    mask = None if mshape is None else rng.uniform(size=mshape) < 0.75
    got = detattn.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale,
                                               enable_gqa=hq != hkv)
    assert got.shape == q.shape and got.dtype == q.dtype
    check(got, sdpa_reference(q, k, v, mask, causal, scale), v, dt)


def test_top_left_is_not_bottom_right():
    # With fewer queries than keys the two alignments differ: the drop-in must use torch's.
    rng = np.random.default_rng(3)
    q, k, v = rand((1, 2, 4, 8), "f32", rng), rand((1, 2, 10, 8), "f32", rng), rand((1, 2, 10, 8), "f32", rng)
    tl = detattn.scaled_dot_product_attention(q, k, v, is_causal=True)
    check(tl, sdpa_reference(q, k, v, is_causal=True), v, "f32")
    br = detattn.attention(q, k, v, causal=True)  # the library's default, a KV-cache alignment
    assert not np.allclose(tl, br)
    np.testing.assert_array_equal(tl, detattn.attention(q, k, v, causal=True, causal_align="top-left"))
    # Row 0 sees only key 0: its output is v[0] (up to the last bit of the division).
    np.testing.assert_allclose(tl[0, :, 0], v[0, :, 0], rtol=1e-6)


def test_three_dimensional_inputs():
    rng = np.random.default_rng(4)
    q, k, v = rand((3, 5, 8), "f32", rng), rand((3, 7, 8), "f32", rng), rand((3, 7, 8), "f32", rng)
    got = detattn.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert got.shape == (3, 5, 8)
    check(got, sdpa_reference(q, k, v, is_causal=True), v, "f32")


def test_a_row_with_no_key_is_zero_not_nan():
    # The one documented difference in value: torch gives NaN for a fully masked row.
    rng = np.random.default_rng(5)
    q, k, v = rand((1, 1, 3, 8), "f32", rng), rand((1, 1, 4, 8), "f32", rng), rand((1, 1, 4, 8), "f32", rng)
    mask = np.ones((3, 4), bool)
    mask[1] = False
    got = detattn.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert (got[0, 0, 1] == 0).all() and np.isfinite(got).all()
    check(got, sdpa_reference(q, k, v, mask), v, "f32")


def test_extreme_finite_values_give_no_nan():
    # f16 at ±65504: the scores must not overflow into inf − inf.
    q = np.full((1, 1, 2, 8), 65504, np.float16)
    k = np.full((1, 1, 3, 8), -65504, np.float16)
    v = np.full((1, 1, 3, 8), 65504, np.float16)
    got = detattn.scaled_dot_product_attention(q, k, v)
    assert np.isfinite(got).all()
