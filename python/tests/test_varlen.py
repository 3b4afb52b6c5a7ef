"""``attention_varlen`` on the CPU: a packed batch (``flash_attn_varlen_func``'s layout) gives each
sequence the bits of that sequence run alone through ``attention`` (batch 1, its own rows and
keys), whatever the other sequences — decode rows beside prefills, sequences without rows or
keys, GQA, both causal alignments, the log-sum-exp ``[Hq, total_q]`` — and bad offsets are the
library's typed errors."""

import numpy as np
import pytest

import detattn

from conftest import rand


def u8(a):
    return np.ascontiguousarray(a).view(np.uint8)


CASES = [
    # (Hq, Hkv, D), query lengths, key lengths, dtype, causal, align
    ((4, 2, 32), [1, 7, 0, 20], [70, 12, 5, 0], "f16", True, "bottom-right"),
    ((2, 2, 64), [1, 1, 1], [300, 1, 65], "bf16", False, "bottom-right"),  # decode rows only
    ((8, 1, 16), [5, 40, 3], [5, 40, 130], "f32", True, "top-left"),
    ((3, 3, 8), [0, 9], [4, 9], "f32", False, "bottom-right"),  # a sequence without rows
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[3]}-{len(c[1])}seq-{c[5]}")
def test_each_sequence_gets_its_bits_alone(case):
    (hq, hkv, d), lq, lk, dt, causal, align = case
    rng = np.random.default_rng(len(lq) * 100 + d)
    tq, tk = sum(lq), sum(lk)
    q, k, v = rand((tq, hq, d), dt, rng), rand((tk, hkv, d), dt, rng), rand((tk, hkv, d), dt, rng)
    cq, ck = [0, *np.cumsum(lq).tolist()], [0, *np.cumsum(lk).tolist()]
    out, lse = detattn.attention_varlen(q, k, v, cq, ck, causal=causal, causal_align=align, return_lse=True)
    plain = detattn.attention_varlen(q, k, v, np.array(cq), np.array(ck), causal=causal, causal_align=align)
    assert out.shape == (tq, hq, d) and lse.shape == (hq, tq) and lse.dtype == np.float32
    assert np.array_equal(u8(out), u8(plain))
    for b in range(len(lq)):
        rows, keys = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        if lq[b] == 0:
            continue
        if lk[b] == 0:
            # No key: the rows are zeros and the log-sum-exp −inf (numerics.md §5, §10).
            assert not np.asarray(out[rows], np.float32).any()
            assert np.all(lse[:, rows] == -np.inf)
            continue
        # Alone: [1, S, H, D] views of the sequence's own rows and keys.
        o1, l1 = detattn.attention(
            q[None, rows], k[None, keys], v[None, keys], layout="bshd", causal=causal, causal_align=align,
            return_lse=True,
        )
        assert np.array_equal(u8(out[rows]), u8(o1[0])), b
        assert np.array_equal(lse[:, rows].view(np.uint32), l1[0].view(np.uint32)), b


def test_out_is_written_in_place():
    rng = np.random.default_rng(3)
    q, k, v = rand((9, 2, 16), "f32", rng), rand((30, 2, 16), "f32", rng), rand((30, 2, 16), "f32", rng)
    out = np.full((9, 2, 16), 7.0, np.float32)
    got = detattn.attention_varlen(q, k, v, [0, 4, 9], [0, 10, 30], out=out)
    assert got is out
    assert np.array_equal(out, detattn.attention_varlen(q, k, v, [0, 4, 9], [0, 10, 30]))


def test_bad_offsets_and_shapes_are_errors():
    rng = np.random.default_rng(4)
    q, k, v = rand((9, 2, 16), "f32", rng), rand((30, 2, 16), "f32", rng), rand((30, 2, 16), "f32", rng)
    with pytest.raises(ValueError, match="cu_seqlens"):
        detattn.attention_varlen(q, k, v, [0, 4, 8], [0, 10, 30])  # does not end at total_q
    with pytest.raises(ValueError, match="cu_seqlens"):
        detattn.attention_varlen(q, k, v, [0, 4, 9], [0, 10])  # two sequences of q, one of k
    with pytest.raises(ValueError, match="cu_seqlens_q must hold integers .*float64"):
        detattn.attention_varlen(q, k, v, [0, 4.5, 9], [0, 10, 30])
    with pytest.raises(ValueError, match="cu_seqlens_k must be non-negative integers"):
        detattn.attention_varlen(q, k, v, [0, 9], [-1, 30])
    with pytest.raises(ValueError, match="3-D"):
        detattn.attention_varlen(q[None], k, v, [0, 9], [0, 30])
    with pytest.raises(ValueError, match=r"same head_dim: q \(9, 2, 16\), k \(30, 2, 8\)"):
        detattn.attention_varlen(q, k[..., :8], v[..., :8], [0, 9], [0, 30])
    with pytest.raises(ValueError, match="k and v must have the same shape"):
        detattn.attention_varlen(q, k, v[:20], [0, 9], [0, 30])
    with pytest.raises(ValueError, match="out must have shape"):
        detattn.attention_varlen(q, k, v, [0, 9], [0, 30], out=np.empty((9, 2, 15), np.float32))
