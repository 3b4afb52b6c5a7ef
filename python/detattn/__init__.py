"""detattn: attention whose outputs are bitwise reproducible, whose running time does not depend
on the values, and which never produces NaN from valid input — from Python.

- :func:`attention` — NumPy arrays (CPU), torch tensors (CPU, or CUDA on the tensors' own GPU and
  current stream, without copying them), anything with ``__dlpack__``.
- :func:`attention_varlen` — a variable-length (packed) batch, as ``flash_attn_varlen_func``: each
  sequence gets the bits it gets alone.
- :func:`attention_with_kvcache` — a KV cache, contiguous or paged (a block table), as
  ``flash_attn_with_kvcache``: the bits of the same keys laid out contiguously.
- :func:`scaled_dot_product_attention` — a drop-in for ``torch.nn.functional``'s, with PyTorch's
  top-left causal alignment; it raises where it cannot match (dropout, float masks).
- :func:`digest` — the SHA-256 of an output, equal to the Rust library's and the CLI's.
- :func:`selftest` — the golden problems on the CPU and every GPU against the recorded digests.
- :func:`info` — versions, the CPU kernel, the CUDA driver, GPUs and embedded kernels.
- :mod:`detattn.hf` — a Hugging Face Transformers attention backend (``register()``).
- :mod:`detattn.inputs` — the documented seeded input generator.

What is promised, and what is not, is in docs/python.md of the repository.
"""

from . import _native
from ._core import (
    NonFiniteError,
    attention,
    attention_varlen,
    attention_with_kvcache,
    digest,
    scaled_dot_product_attention,
)
from ._selftest import SelftestReport, selftest

__version__ = _native.VERSION
#: The version of the numerics contract (docs/numerics.md) whose bits the ``exact`` path gives.
CONTRACT_VERSION = _native.CONTRACT_VERSION
#: The version of the digest encoding.
DIGEST_VERSION = _native.DIGEST_VERSION

__all__ = [
    "CONTRACT_VERSION",
    "DIGEST_VERSION",
    "NonFiniteError",
    "SelftestReport",
    "attention",
    "attention_varlen",
    "attention_with_kvcache",
    "digest",
    "info",
    "scaled_dot_product_attention",
    "selftest",
]


def info() -> dict:
    """What this installation offers: versions, the CPU kernel's instruction set and thread count,
    the CUDA driver (or why there is none), the GPUs and whether detattn has kernels for them, and
    the embedded cubins with their SHA-256 and whether the embedded bytes match it."""
    d = dict(_native.probe())
    if d["driver"] is not None:
        v = d["driver"]
        d["driver"] = f"{v // 1000}.{(v % 1000) // 10} ({v})"
    return d
