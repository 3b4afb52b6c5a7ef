"""Python digests equal the Rust CLI's for the same seeded problems: every option, dtype and
layout the CLI takes, through the public API with NumPy arrays."""

import numpy as np
import pytest

import detattn

from conftest import run_cli, seeded

# (flags for the CLI, which are also the problem's options)
PROBLEMS = [
    dict(batch=2, q_heads=4, q_len=33, head_dim=64, dtype="f32", seed=1),
    dict(batch=1, q_heads=8, kv_heads=2, q_len=17, kv_len=100, head_dim=80, dtype="f16", seed=2),
    dict(batch=2, q_heads=4, kv_heads=1, q_len=9, kv_len=70, head_dim=32, dtype="bf16", seed=3, causal=True),
    dict(batch=2, q_heads=4, kv_heads=2, q_len=5, kv_len=70, head_dim=64, dtype="f16", seed=4, causal=True,
         causal_align="top-left"),
    dict(batch=2, q_heads=2, q_len=40, kv_len=17, head_dim=16, dtype="bf16", seed=5, causal=True,
         causal_align="top-left", kv_lens=[17, 6]),
    dict(batch=3, q_heads=2, q_len=17, kv_len=100, head_dim=64, dtype="f32", seed=6, kv_lens=[100, 37, 0]),
    dict(batch=2, q_heads=2, q_len=17, kv_len=70, head_dim=8, dtype="f16", seed=7, mask="full"),
    dict(batch=2, q_heads=3, q_len=17, kv_len=70, head_dim=8, dtype="f32", seed=8, mask="shared",
         blank_rows_every=4),
    dict(batch=2, q_heads=2, q_len=20, head_dim=64, dtype="bf16", seed=9, mask="per-batch", causal=True),
    dict(batch=2, q_heads=4, kv_heads=2, q_len=6, kv_len=30, head_dim=3, dtype="f32", seed=10, mask="per-head",
         scale=0.3),
    dict(batch=1, q_heads=2, q_len=1, kv_len=1000, head_dim=128, dtype="f16", seed=11),
    dict(batch=1, q_heads=2, q_len=17, head_dim=64, dtype="bf16", seed=12, amp=126),
    dict(batch=1, q_heads=2, q_len=17, head_dim=64, dtype="f32", seed=13, amp=-120),
]


def _python_digest(flags, layout):
    f = dict(flags)
    dims = (
        f["batch"],
        f["q_heads"],
        f.get("kv_heads", f["q_heads"]),
        f["q_len"],
        f.get("kv_len", f["q_len"]),
        f["head_dim"],
    )
    x = seeded(dims, f["dtype"], f["seed"], mask=f.get("mask"), blank_rows_every=f.get("blank_rows_every"),
               amp=f.get("amp", 0), layout=layout)
    out = detattn.attention(
        x["q"],
        x["k"],
        x["v"],
        causal=f.get("causal", False),
        causal_align=f.get("causal_align", "bottom-right"),
        scale=f.get("scale"),
        attn_mask=x["mask"],
        kv_lens=f.get("kv_lens"),
        layout=layout,
        nonfinite=f.get("nonfinite", "reject"),
    )
    assert type(out) is np.ndarray and out.dtype == x["q"].dtype and out.flags.c_contiguous
    return detattn.digest(out, layout=layout)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("i", range(len(PROBLEMS)))
def test_same_digest_as_the_cli(cli, i, layout):
    flags = PROBLEMS[i]
    want = run_cli(cli, layout=layout, **flags)["digest"]
    assert _python_digest(flags, layout) == want


def test_propagate_poisons_the_same_rows_as_the_cli(cli):
    # amp 16 overflows f16 to ±inf in some elements: under `propagate` exactly the affected rows
    # are NaN, and the bits (NaN rows included) are the CLI's.
    flags = dict(batch=1, q_heads=2, q_len=9, kv_len=20, head_dim=8, dtype="f16", seed=14, amp=16,
                 nonfinite="propagate")
    r = run_cli(cli, **flags)
    assert r["nan_rows"] > 0
    assert _python_digest(flags, "bhsd") == r["digest"]
