"""Every invalid input is the documented exception with the library's message, before any work
and without touching the output."""

import re

import numpy as np
import pytest

import detattn
from detattn import NonFiniteError


def qkv(b=1, hq=2, hkv=2, sq=3, skv=5, d=4, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.uniform(-2, 2, (b, hq, sq, d)).astype(dtype)
    k = rng.uniform(-2, 2, (b, hkv, skv, d)).astype(dtype)
    v = rng.uniform(-2, 2, (b, hkv, skv, d)).astype(dtype)
    return q, k, v


def raises(exc, match, fn, *a, **kw):
    with pytest.raises(exc, match=match) as e:
        fn(*a, **kw)
    assert type(e.value) is exc, type(e.value)
    return e.value


# The crate's own messages (src/error.rs), carried unchanged.
def test_problem_errors_carry_the_crate_messages():
    q, k, v = qkv(hq=3)
    raises(ValueError, re.escape("q_heads (3) must be a multiple of kv_heads (2)"), detattn.attention, q, k, v)
    q, k, v = qkv(b=2)
    raises(ValueError, re.escape("kv_lens[1] must be in 0..=5 (the kv_len of the K/V tensors), got 6"),
           detattn.attention, q, k, v, kv_lens=[5, 6])
    raises(ValueError, re.escape("kv_lens must have one entry per batch element: expected 2, got 1"),
           detattn.attention, q, k, v, kv_lens=[5])
    raises(ValueError, "kv_lens must be non-negative integers", detattn.attention, q, k, v, kv_lens=[5, -1])
    # Lengths are integers by type, as every integer argument of the package: 5.0 is refused too.
    raises(ValueError, "kv_lens must hold integers", detattn.attention, q, k, v, kv_lens=[5.0, 3.0])
    raises(ValueError, "kv_lens must be 1-D", detattn.attention, q, k, v, kv_lens=[[5, 3]])
    for s in (0.0, -1.0, float("nan"), float("inf")):
        raises(ValueError, "scale must be finite and > 0", detattn.attention, q, k, v, scale=s)
    q, k, v = qkv(d=8193)
    raises(ValueError, re.escape("head_dim must be in 1..=8192, got 8193"), detattn.attention, q, k, v)
    q, k, v = qkv(b=0)
    raises(ValueError, re.escape("batch must be in 1..=16777216, got 0"), detattn.attention, q, k, v)
    q, k, v = qkv()
    raises(ValueError, "the tensorcore path is not available on the cpu backend", detattn.attention, q, k, v,
           path="tensorcore")
    raises(ValueError, 'unknown path "fast"', detattn.attention, q, k, v, path="fast")
    raises(ValueError, "nonfinite must be 'reject' or 'propagate'", detattn.attention, q, k, v, nonfinite="ignore")
    raises(ValueError, "causal_align must be", detattn.attention, q, k, v, causal=True, causal_align="left")
    raises(ValueError, "layout must be 'bhsd' or 'bshd'", detattn.attention, q, k, v, layout="sbhd")


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_nonfinite_is_rejected_naming_the_tensor_and_writes_nothing(which):
    x = dict(zip("qkv", qkv(b=2, sq=4, skv=70)))
    x[which][1, 0, 2, 3] = np.inf if which == "v" else np.nan
    out = np.full((2, 2, 4, 4), 7.0, np.float32)
    e = raises(NonFiniteError, f"^{which} holds a NaN or infinity \\(policy: reject; nothing was computed or written\\)$",
               detattn.attention, x["q"], x["k"], x["v"], out=out)
    assert e.tensor == which and isinstance(e, ValueError)
    assert (out == 7.0).all()


def test_propagate_poisons_rows_not_the_call():
    q, k, v = qkv(sq=4, skv=6)
    q[0, 1, 2, 0] = np.nan
    out = detattn.attention(q, k, v, nonfinite="propagate")
    nan_rows = np.isnan(out).any(axis=-1)
    assert nan_rows[0, 1, 2] and nan_rows.sum() == 1 and np.isnan(out[0, 1, 2]).all()


def test_what_only_python_sees():
    q, k, v = qkv()
    raises(TypeError, "q must be a NumPy array, a torch tensor or an object with __dlpack__", detattn.attention,
           q.tolist(), k, v)
    raises(ValueError, "q has dtype float64; detattn takes float32, float16 and bfloat16", detattn.attention,
           q.astype(np.float64), k, v)
    raises(ValueError, "q, k and v must have one dtype: q is float32, k is float16", detattn.attention,
           q, k.astype(np.float16), v)
    raises(ValueError, re.escape("q must be 4-D [B, H, S, D] (layout 'bhsd'), got shape (2, 3, 4)"),
           detattn.attention, q[0], k, v)
    raises(ValueError, "k and v must have the same shape", detattn.attention, q, k, v[:, :, :4])
    raises(ValueError, "q and k must have the same batch size and head_dim", detattn.attention, q, k[..., :3],
           v[..., :3])
    # A transposed head dimension is not read in place, and is not silently copied either.
    qt = np.ascontiguousarray(q.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    raises(ValueError, "last dimension \\(head_dim\\) must be contiguous", detattn.attention, qt, k, v)
    raises(ValueError, "non-negative strides", detattn.attention, q[:, :, ::-1], k, v)


def test_output_errors_leave_it_untouched():
    q, k, v = qkv(sq=4)
    raises(ValueError, re.escape("out must have shape (1, 2, 4, 4)"), detattn.attention, q, k, v,
           out=np.zeros((1, 2, 3, 4), np.float32))
    raises(ValueError, "out must have q's dtype and device", detattn.attention, q, k, v,
           out=np.zeros((1, 2, 4, 4), np.float16))
    ro = np.zeros((1, 2, 4, 4), np.float32)
    ro.flags.writeable = False
    raises(ValueError, "out is read-only", detattn.attention, q, k, v, out=ro)
    # Rows that share memory: the library's own check (src/error.rs OutputOverlap).
    base = np.full((1, 2, 1, 4), 5.0, np.float32)
    overlapping = np.broadcast_to(base, (1, 2, 4, 4))
    overlapping = np.lib.stride_tricks.as_strided(base, (1, 2, 4, 4), (32, 16, 0, 4), writeable=True)
    raises(ValueError, "out's rows overlap", detattn.attention, q, k, v, out=overlapping)
    assert (base == 5.0).all()
    # The output may not share bytes with an input.
    raises(ValueError, "out overlaps q in memory", detattn.attention, q, k, v, out=q)
    fused = np.zeros((1, 2, 10, 4), np.float32)
    raises(ValueError, "out overlaps k in memory", detattn.attention, q, fused[:, :, :5], fused[:, :, :5],
           out=fused[:, :, 5:9])


def test_misaligned_host_data_is_an_error_not_a_crash():
    q, k, v = qkv()
    raw = np.zeros(q.nbytes + 4, np.uint8)
    odd = raw[2 : 2 + q.nbytes].view(np.float32).reshape(q.shape)  # 2-byte aligned float32s
    raises(ValueError, "not aligned to its element size", detattn.attention, odd, k, v)


def test_mask_errors():
    q, k, v = qkv(b=2, sq=3, skv=5)
    raises(ValueError, "attn_mask must be boolean .*float \\(additive\\) masks are not supported",
           detattn.attention, q, k, v, attn_mask=np.zeros((3, 5), np.float32))
    raises(ValueError, re.escape("attn_mask of shape (3, 4) does not broadcast to [B, Hq, Sq, Skv] = [2, 2, 3, 5]"),
           detattn.attention, q, k, v, attn_mask=np.ones((3, 4), bool))
    raises(ValueError, "attn_mask must have 1 to 4 dimensions", detattn.attention, q, k, v,
           attn_mask=np.ones((1, 2, 2, 3, 5), bool))


def test_dropin_refuses_what_it_cannot_match():
    q, k, v = qkv(hq=4, hkv=2)
    sdpa = detattn.scaled_dot_product_attention
    raises(ValueError, "dropout_p must be 0.0, got 0.1", sdpa, q, k, v, dropout_p=0.1, enable_gqa=True)
    raises(ValueError, "attn_mask must be boolean", sdpa, q, k, v, attn_mask=np.zeros((3, 5), np.float32),
           enable_gqa=True)
    raises(ValueError, "pass attn_mask or is_causal=True, not both", sdpa, q, k, v,
           attn_mask=np.ones((3, 5), bool), is_causal=True, enable_gqa=True)
    raises(ValueError, "pass enable_gqa=True", sdpa, q, k, v)
    raises(ValueError, "value's last dimension \\(3\\) must equal query's \\(4\\)", sdpa, q, k, v[..., :3],
           enable_gqa=True)
    raises(ValueError, "must all be 4-D", sdpa, q[None], k[None], v[None], enable_gqa=True)


def test_a_cuda_array_without_a_driver_says_so():
    # A DLPack producer claiming a CUDA device: on a machine without a driver the CUDA backend
    # cannot open, and the error says why (RuntimeError, the library's NoCudaDriver message).
    if detattn.info()["driver"] is not None:
        pytest.skip("this machine has a CUDA driver")

    class FakeCuda:
        def __init__(self, a):
            self.a = a

        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

    q, k, v = qkv()
    out = FakeCuda(np.zeros_like(q))
    raises(RuntimeError, "^no CUDA driver: libcuda.so could not be loaded", detattn.attention, FakeCuda(q),
           FakeCuda(k), FakeCuda(v), out=out)
    raises(ValueError, "cannot allocate device memory for a non-torch CUDA array", detattn.attention,
           FakeCuda(q), FakeCuda(k), FakeCuda(v))
