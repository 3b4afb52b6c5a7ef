"""Layouts and strides: every way of laying out the same logical tensors gives the same bits,
views are read in place (no copy of an input), and only the output's rows are written."""

import tracemalloc

import numpy as np
import pytest

import detattn

from conftest import host, seeded

DIMS = (2, 4, 2, 9, 70, 16)  # B, Hq, Hkv, Sq, Skv, D


@pytest.fixture(params=["f32", "f16", "bf16"])
def problem(request):
    dt = request.param
    x = seeded(DIMS, dt, 21, mask="per-head")
    want = detattn.attention(x["q"], x["k"], x["v"], causal=True, attn_mask=x["mask"])
    return x, want


def same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_bshd_is_the_same_bits(problem):
    x, want = problem
    t = lambda a: np.ascontiguousarray(a.transpose(0, 2, 1, 3))  # noqa: E731
    out = detattn.attention(t(x["q"]), t(x["k"]), t(x["v"]), causal=True, attn_mask=x["mask"], layout="bshd")
    assert out.shape == (2, 9, 4, 16)
    assert same_bits(np.ascontiguousarray(out.transpose(0, 2, 1, 3)), want)
    assert detattn.digest(out, layout="bshd") == detattn.digest(want)


def test_views_into_a_fused_qkv_buffer(problem):
    # One [B, S, 3·H, D] buffer (as a fused projection gives) with q, k and v as views of it:
    # self-attention shape, so use Sq = Skv.
    x, _ = problem
    b, hq, hkv, sq, _, d = DIMS
    dt = x["q"].dtype
    fused = np.zeros((b, sq, hq + 2 * hkv, d), dt)
    fused[:, :, :hq] = x["q"].transpose(0, 2, 1, 3)
    fused[:, :, hq : hq + hkv] = x["k"][:, :, :sq].transpose(0, 2, 1, 3)
    fused[:, :, hq + hkv :] = x["v"][:, :, :sq].transpose(0, 2, 1, 3)
    q, k, v = fused[:, :, :hq], fused[:, :, hq : hq + hkv], fused[:, :, hq + hkv :]
    assert not q.flags.c_contiguous
    got = detattn.attention(q, k, v, causal=True, layout="bshd")
    contiguous = detattn.attention(*(np.ascontiguousarray(a) for a in (q, k, v)), causal=True, layout="bshd")
    assert same_bits(got, contiguous)
    # The same views seen as [B, H, S, D] (transposes, no copies) with layout bhsd.
    t = lambda a: a.transpose(0, 2, 1, 3)  # noqa: E731
    got_bhsd = detattn.attention(t(q), t(k), t(v), causal=True)
    assert same_bits(np.ascontiguousarray(t(got)), got_bhsd)


def test_strided_output_writes_only_its_rows(problem):
    x, want = problem
    b, hq, _, sq, _, d = DIMS
    # Each row padded by 3 elements and every head by one spare row; the gaps keep a sentinel.
    buf = np.full((b, hq, sq + 1, d + 3), 9, x["q"].dtype)
    out = buf[:, :, :sq, :d]
    r = detattn.attention(x["q"], x["k"], x["v"], causal=True, attn_mask=x["mask"], out=out)
    assert r is out
    assert same_bits(np.ascontiguousarray(out), want)
    assert (buf[:, :, :, d:] == 9).all() and (buf[:, :, sq:, :] == 9).all()
    assert detattn.digest(out) == detattn.digest(want)


def test_broadcast_inputs_read_the_same_rows():
    # A stride of 0 reads one K/V row set for every batch element (inputs may repeat rows).
    x = seeded((1, 2, 2, 5, 30, 8), "f32", 3)
    kb = np.broadcast_to(x["k"], (3, 2, 30, 8))
    vb = np.broadcast_to(x["v"], (3, 2, 30, 8))
    qb = np.ascontiguousarray(np.broadcast_to(x["q"], (3, 2, 5, 8)))
    got = detattn.attention(qb, kb, vb)
    want = detattn.attention(qb, np.ascontiguousarray(kb), np.ascontiguousarray(vb))
    assert same_bits(got, want)
    assert all(same_bits(got[i : i + 1], got[:1]) for i in range(3))


def test_inputs_are_not_copied():
    # NumPy reports its allocations to tracemalloc: a call with `out` given must allocate nothing
    # of the inputs' size on the Python side (the library's own work buffers are Rust's, not
    # NumPy's, and are not counted; they are not copies of the inputs either, but f32 working
    # rows). 8 MiB of input, strided views included.
    b, h, s, d = 2, 8, 512, 64
    rng = np.random.default_rng(0)
    fused = rng.uniform(-1, 1, (b, s, 3 * h, d)).astype(np.float32)
    q, k, v = (fused[:, :, i * h : (i + 1) * h].transpose(0, 2, 1, 3) for i in range(3))
    out = np.empty((b, h, s, d), np.float32)
    detattn.attention(q, k, v, out=out)  # warm up: engines, imports
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    detattn.attention(q, k, v, out=out, causal=True)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    assert peak < 64 * 1024, f"{peak} bytes allocated by Python during the call (the input is {q.nbytes})"


def test_a_broadcast_mask_equals_its_dense_copy():
    x = seeded((2, 3, 3, 6, 20, 8), "f16", 5)
    rng = np.random.default_rng(1)
    pad = rng.uniform(size=(2, 1, 1, 20)) < 0.8  # [B, 1, 1, Skv]: a padding mask
    dense = np.ascontiguousarray(np.broadcast_to(pad, (2, 3, 6, 20)))
    a = detattn.attention(x["q"], x["k"], x["v"], attn_mask=pad)
    b = detattn.attention(x["q"], x["k"], x["v"], attn_mask=dense)
    assert same_bits(a, b)
    shared = rng.uniform(size=(6, 20)) < 0.7
    a = detattn.attention(x["q"], x["k"], x["v"], attn_mask=shared)
    b = detattn.attention(x["q"], x["k"], x["v"], attn_mask=np.ascontiguousarray(np.broadcast_to(shared, (2, 3, 6, 20))))
    assert same_bits(a, b)


def test_bf16_needs_no_ml_dtypes_on_torch_free_machines_only_for_the_api():
    # bf16 NumPy arrays come from ml_dtypes; the result keeps that dtype.
    x = seeded((1, 2, 2, 3, 5, 8), "bf16", 9)
    out = detattn.attention(x["q"], x["k"], x["v"])
    assert out.dtype == x["q"].dtype and out.dtype.name == "bfloat16"
