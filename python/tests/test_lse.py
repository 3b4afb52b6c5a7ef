"""``attention(..., return_lse=True)`` on the CPU: each query row's log-sum-exp has the bits of
docs/numerics.md §10 as ``scripts/numerics_ref.py`` computes them (an independent re-implementation
written from that page, not from the Rust code), asking for it changes no output bit, a row with
no key is −inf, a row poisoned under ``"propagate"`` is NaN, and a bad call writes nothing."""

import importlib.util
import sys

import numpy as np
import pytest

import detattn

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("numerics_ref", ROOT / "scripts" / "numerics_ref.py")
ref = importlib.util.module_from_spec(_spec)
sys.modules["numerics_ref"] = ref  # its dataclasses look their module up there
_spec.loader.exec_module(ref)


def rand(shape, rng, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def as_dtype(x, dt):
    """f32 values rounded to `dt` (the inputs the call gets) and those values back in f32 (what
    the reference reads: the widening is exact)."""
    if dt == "f32":
        return x, x
    if dt == "f16":
        y = x.astype(np.float16)
    else:
        import ml_dtypes

        y = x.astype(ml_dtypes.bfloat16)
    return y, y.astype(np.float32)


def bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


# (B, Hq, Hkv, Sq, Skv, D), dtype, causal, top-left, kv_lens, mask shape or None
CASES = [
    ((2, 4, 2, 5, 70, 16), "f32", False, False, None, None),
    ((3, 4, 2, 9, 80, 32), "f32", True, False, [80, 9, 0], None),  # a batch element without keys
    ((2, 2, 2, 17, 70, 32), "bf16", False, False, None, (1, 1, 17, 70)),
    ((1, 8, 1, 1, 200, 64), "f16", False, False, [131], None),  # MQA decode across key tiles
    ((2, 2, 1, 12, 12, 8), "bf16", True, True, None, (2, 1, 12, 12)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[1]}-{'x'.join(map(str, c[0]))}")
def test_lse_bits_equal_the_independent_reference(case):
    dims, dt, causal, top_left, kv_lens, mshape = case
    b, hq, hkv, sq, skv, d = dims
    rng = np.random.default_rng(sum(dims))
    q, q32 = as_dtype(rand((b, hq, sq, d), rng), dt)
    k, k32 = as_dtype(rand((b, hkv, skv, d), rng), dt)
    v, v32 = as_dtype(rand((b, hkv, skv, d), rng), dt)
    mask = None
    if mshape is not None:
        mask = rng.uniform(size=mshape) < 0.7
        mask[..., 0, :] = False  # a row that attends to nothing: −inf
    align = "top-left" if top_left else "bottom-right"
    out, lse = detattn.attention(
        q, k, v, causal=causal, causal_align=align, attn_mask=mask, kv_lens=kv_lens, return_lse=True
    )
    plain = detattn.attention(q, k, v, causal=causal, causal_align=align, attn_mask=mask, kv_lens=kv_lens)
    assert isinstance(lse, np.ndarray) and lse.dtype == np.float32 and lse.shape == (b, hq, sq)
    assert np.array_equal(np.asarray(out).view(np.uint8), np.asarray(plain).view(np.uint8))
    _, want = ref.attention_exact(
        q32,
        k32,
        v32,
        mask,
        causal=causal,
        top_left=top_left,
        kv_lens=kv_lens,
        scale=ref.default_scale(d),
        out_dtype=dt,
        with_lse=True,
    )
    assert np.array_equal(bits(lse), bits(want)), np.argwhere(bits(lse) != bits(want))[:5]
    # The structure the values must have, whatever the reference: −inf exactly where a row has no
    # valid key, finite elsewhere.
    if kv_lens is not None and 0 in kv_lens:
        assert np.all(lse[kv_lens.index(0)] == -np.inf)
    if mask is not None:
        assert np.all(lse[..., 0] == -np.inf)
    assert np.isfinite(lse).sum() > lse.size // 2


def test_lse_with_bshd_inputs_is_still_one_value_a_row_bhs():
    rng = np.random.default_rng(7)
    q, k, v = rand((2, 6, 3, 32), rng), rand((2, 40, 3, 32), rng), rand((2, 40, 3, 32), rng)
    _, lse = detattn.attention(q, k, v, layout="bshd", return_lse=True)
    t = lambda a: np.ascontiguousarray(a.transpose(0, 2, 1, 3))  # noqa: E731
    _, lse_bhsd = detattn.attention(t(q), t(k), t(v), return_lse=True)
    assert lse.shape == (2, 3, 6)
    assert np.array_equal(bits(lse), bits(lse_bhsd))


def test_a_poisoned_row_gets_nan_under_propagate():
    rng = np.random.default_rng(11)
    q, k, v = rand((1, 2, 4, 16), rng), rand((1, 2, 30, 16), rng), rand((1, 2, 30, 16), rng)
    q[0, 1, 2, 5] = np.nan
    _, lse = detattn.attention(q, k, v, nonfinite="propagate", return_lse=True)
    assert np.isnan(lse[0, 1, 2]) and bits(lse[0, 1, 2]) == 0x7FC00000
    assert np.isfinite(np.delete(lse.reshape(-1), 1 * 4 + 2)).all()


def test_rejected_input_raises_and_returns_no_lse():
    rng = np.random.default_rng(12)
    q, k, v = rand((1, 2, 4, 16), rng), rand((1, 2, 30, 16), rng), rand((1, 2, 30, 16), rng)
    k[0, 0, 3, 0] = np.inf
    with pytest.raises(detattn.NonFiniteError):
        detattn.attention(q, k, v, return_lse=True)


def test_without_return_lse_the_result_is_the_array_alone():
    rng = np.random.default_rng(13)
    q, k, v = rand((1, 1, 2, 8), rng), rand((1, 1, 3, 8), rng), rand((1, 1, 3, 8), rng)
    assert isinstance(detattn.attention(q, k, v), np.ndarray)
    assert isinstance(detattn.attention(q, k, v, return_lse=False), np.ndarray)
