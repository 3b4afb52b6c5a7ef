"""A Hugging Face Transformers attention backend: ``register()`` once, then
``AutoModelForCausalLM.from_config(cfg, attn_implementation="detattn")`` (or ``from_pretrained``)
runs every attention call — prefill and cached decode — through :func:`detattn.attention`.

It goes through Transformers' two registries, both needed:

- ``AttentionInterface.register(name, fn)``: the attention function the model's attention layers
  call, ``fn(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
  is_causal=None, **kwargs) -> (output [B, S, H, D], None)``, with ``query`` ``[B, Hq, Sq, D]``
  and ``key``/``value`` ``[B, Hkv, Skv, D]`` (the cache's, un-repeated: GQA is detattn's own);
- ``AttentionMaskInterface.register(name, sdpa_mask)``: without it Transformers builds no mask at
  all for an unknown implementation (padding would be silently ignored); with SDPA's mask builder
  the function receives what SDPA would: ``None`` where ``is_causal`` suffices (no padding; prefill
  with ``Sq == Skv`` or a one-token decode step), else a boolean ``[B, 1, Sq, Skv]`` mask
  (``True`` = attend), often a broadcast view, which detattn reads as it is.

The output is written by detattn straight into a ``[B, S, H, D]`` tensor (the layout the model
reshapes), through a ``[B, H, S, D]`` view of it: no copy on the way in or out.

What this promises is detattn's, for the attention calls only: the same bits for the same
q, k, v, whatever the batch around a sequence (on the ``exact`` path also CPU = GPU). The rest of
the model — projections and MLP matmuls (cuBLAS), norms, rotary embeddings, sampling — is
PyTorch's and promises nothing of the kind (docs/python.md).
"""

from __future__ import annotations

import functools

from ._core import attention

#: The registry name :func:`register` uses by default.
NAME = "detattn"


def attention_forward(
    module,
    query,
    key,
    value,
    attention_mask,
    dropout=0.0,
    scaling=None,
    is_causal=None,
    *,
    path="exact",
    nonfinite="reject",
    on_output=None,
    **kwargs,
):
    """The attention function Transformers calls (see the module docs). ``path``, ``nonfinite``
    and ``on_output`` (called with ``(module, output [B, S, H, D])`` after each call, e.g. to
    digest it) are bound by :func:`register`."""
    if dropout:
        raise ValueError(
            f"attention dropout {dropout} (the model is in training mode?): detattn has no dropout; "
            "call model.eval()"
        )
    for k in ("softcap", "s_aux", "sinks"):
        if kwargs.get(k) is not None:
            raise ValueError(f"detattn does not implement {k!r} (logit soft-capping, attention sinks)")
    if kwargs.get("output_attentions"):
        raise ValueError("detattn does not return attention weights (output_attentions=True)")
    torch = _torch()
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    # As SDPA's integration decides it: the causal flag only stands in for a mask that was not
    # built, and never for a single query row (which sees the whole cache).
    causal = bool(causal and attention_mask is None and query.shape[2] > 1)
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        raise ValueError(
            "the mask Transformers built is not boolean: register detattn with register(), which "
            "registers SDPA's boolean mask builder too"
        )
    b, hq, sq, d = query.shape
    out = torch.empty((b, sq, hq, d), dtype=query.dtype, device=query.device)
    attention(
        query,
        key,
        value,
        causal=causal,
        causal_align="top-left",
        scale=scaling,
        attn_mask=attention_mask,
        path=path,
        nonfinite=nonfinite,
        out=out.transpose(1, 2),
    )
    if on_output is not None:
        on_output(module, out)
    return out, None


def register(name: str = NAME, *, path="exact", nonfinite="reject", on_output=None) -> str:
    """Register detattn with Transformers under ``name`` (and SDPA's boolean mask builder under
    the same name); returns ``name``. Call it again to change the options."""
    from transformers import AttentionInterface  # noqa: PLC0415 (optional dependency)
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask  # noqa: PLC0415

    fn = functools.partial(attention_forward, path=path, nonfinite=nonfinite, on_output=on_output)
    functools.update_wrapper(fn, attention_forward)
    AttentionInterface.register(name, fn)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


def _torch():
    import torch  # noqa: PLC0415 (Transformers' models are torch models)

    return torch
