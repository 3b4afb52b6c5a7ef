"""Any object with ``__dlpack__``: read in place through the capsule, the same bits as NumPy."""

import numpy as np

import detattn

from conftest import seeded


class OnlyDlpack:
    """Exposes nothing but the DLPack protocol (like an array of another library)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_dlpack_inputs_and_output():
    x = seeded((2, 4, 2, 9, 40, 16), "f16", 3, mask="full")
    want = detattn.attention(x["q"], x["k"], x["v"], causal=True, attn_mask=x["mask"])
    got = detattn.attention(OnlyDlpack(x["q"]), OnlyDlpack(x["k"]), OnlyDlpack(x["v"]), causal=True,
                            attn_mask=OnlyDlpack(x["mask"]))
    # Host memory comes back as NumPy (the package cannot construct an unknown array type).
    assert type(got) is np.ndarray and got.tobytes() == want.tobytes()
    out = np.zeros_like(want)
    r = detattn.attention(OnlyDlpack(x["q"]), OnlyDlpack(x["k"]), OnlyDlpack(x["v"]), causal=True,
                          attn_mask=x["mask"], out=OnlyDlpack(out))
    assert isinstance(r, OnlyDlpack) and out.tobytes() == want.tobytes()


def test_dlpack_strided_views():
    x = seeded((1, 2, 2, 5, 12, 8), "f32", 4)
    t = lambda a: np.ascontiguousarray(a.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = t(x["q"]), t(x["k"]), t(x["v"])
    assert not q.flags.c_contiguous
    got = detattn.attention(OnlyDlpack(q), OnlyDlpack(k), OnlyDlpack(v))
    assert got.tobytes() == detattn.attention(x["q"], x["k"], x["v"]).tobytes()
