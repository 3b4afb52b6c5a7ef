"""The public entry points: :func:`attention`, :func:`attention_varlen`,
:func:`attention_with_kvcache`, the drop-in :func:`scaled_dot_product_attention` and
:func:`digest`. They check what only Python can see (array kinds, ranks, dtypes, devices),
build the tensors' descriptors without copying them, and let the library check the rest."""

from __future__ import annotations

import itertools

import numpy as np

from . import _native
from ._arrays import DTYPE_NAMES, ITEMSIZE, Arr, _torch, empty_like_kind, wrap

_LAYOUTS = ("bhsd", "bshd")
_FLOATS = ("f32", "f16", "bf16")


class NonFiniteError(ValueError):
    """An input holds a NaN or ±inf under ``nonfinite="reject"`` (the default): nothing was
    computed or written. :attr:`tensor` names the first of ``"q"``, ``"k"``, ``"v"`` that holds
    one. A subclass of ``ValueError``: non-finite input is invalid input under that policy."""

    def __init__(self, message: str, tensor: str):
        super().__init__(message)
        self.tensor = tensor


def _raise(err: _native.Error):
    """Re-raise a native error as the exception its kind promises, with the crate's message."""
    kind, message, tensor = err.args
    if kind == "nonfinite":
        raise NonFiniteError(message, tensor) from None
    if kind == "runtime":
        raise RuntimeError(message) from None
    raise ValueError(message) from None


def _call(fn, *args):
    try:
        return fn(*args)
    except _native.Error as e:
        _raise(e)


def _dtype_name(tag: str) -> str:
    return DTYPE_NAMES.get(tag, tag)


def _bhsd(a: Arr, layout: str, name: str):
    """``a``'s logical dims ``(B, H, S, D)`` and element strides ``(b, h, s)``, from ``layout``;
    D must be contiguous."""
    if len(a.shape) != 4:
        want = "[B, H, S, D]" if layout == "bhsd" else "[B, S, H, D]"
        raise ValueError(f"{name} must be 4-D {want} (layout {layout!r}), got shape {a.shape}")
    if layout == "bhsd":
        (b, h, s, d), (sb, sh, ss, sd) = a.shape, a.strides
    else:
        (b, s, h, d), (sb, ss, sh, sd) = a.shape, a.strides
    # (An empty tensor has no rows to read; the library reports its zero dimension by name.)
    if d > 1 and sd != 1 and 0 not in a.shape:
        raise ValueError(
            f"{name}'s last dimension (head_dim) must be contiguous (stride 1), got strides "
            f"{a.strides}: detattn reads rows of head_dim elements in place and never copies an "
            f"input; make it contiguous yourself if that is what you want"
        )
    return (b, h, s, d), (sb, sh, ss)


def _desc(a: Arr, strides):
    return (a.ptr, a.extent(), *strides)


def _mask(m, aq: Arr, dims):
    """The mask as the library takes it: a dense ``[B or 1, Hq or 1, Sq, Skv]`` boolean buffer on
    q's device. A mask already laid out so is read in place; a broadcast one (``[Sq, Skv]``,
    ``[B, 1, 1, Skv]``, an expanded view…) is first made dense in its own kind and device."""
    b, hq, sq, skv = dims
    am = wrap(m, "attn_mask")
    if am.dtype != "bool":
        raise ValueError(
            f"attn_mask must be boolean (True = take part in attention), got {_dtype_name(am.dtype)}: "
            "float (additive) masks are not supported (detattn selects masked keys, it never adds "
            "-inf); pass a boolean mask"
        )
    if am.device != aq.device:
        raise ValueError(f"attn_mask is on {am.device_name}, q on {aq.device_name}: put them on one device")
    nd = len(am.shape)
    if not 1 <= nd <= 4:
        raise ValueError(f"attn_mask must have 1 to 4 dimensions, got shape {am.shape}")
    shape = (1,) * (4 - nd) + am.shape
    strides = (0,) * (4 - nd) + am.strides
    target = (b, hq, sq, skv)
    if any(n not in (1, t) for n, t in zip(shape, target)):
        raise ValueError(
            f"attn_mask of shape {am.shape} does not broadcast to [B, Hq, Sq, Skv] = {list(target)}"
        )
    # A dimension of size B (Hq) whose stride is 0 holds one value for all: not "per batch".
    per_batch = b > 1 and shape[0] == b and strides[0] != 0
    per_head = hq > 1 and shape[1] == hq and strides[1] != 0
    bm, hm = (b if per_batch else 1), (hq if per_head else 1)
    dense = (
        shape[2] == sq
        and shape[3] == skv
        and (skv == 1 or strides[3] == 1)
        and (sq == 1 or strides[2] == skv)
        and (hm == 1 or strides[1] == sq * skv)
        and (bm == 1 or strides[0] == hm * sq * skv)
    )
    if not dense:
        x = am.obj
        if am.kind == "dlpack":
            if am.device[0] != "cpu":
                raise ValueError("a broadcast CUDA attn_mask must be a torch tensor (or pass it dense)")
            x = np.from_dlpack(x)
        x = x[(None,) * (4 - nd)]
        if am.kind == "torch":
            x = x.expand(*target)[:bm, :hm].contiguous()
        else:
            x = np.ascontiguousarray(np.broadcast_to(x, target)[:bm, :hm])
        am = wrap(x, "attn_mask")
    return (am.ptr, bm * hm * sq * skv), (per_batch, per_head), am


def _kv_lens(kv_lens, name="kv_lens"):
    """Public non-negative integers, one per sequence (key lengths, cumulative offsets), as a list;
    None stays None."""
    if kv_lens is None:
        return None
    vals = _host_ints(kv_lens, name, 1, "(one integer per sequence)")
    if any(v < 0 for v in vals):
        raise ValueError(f"{name} must be non-negative integers, got {vals}")
    return vals


def attention(
    q,
    k,
    v,
    *,
    causal=False,
    scale=None,
    attn_mask=None,
    kv_lens=None,
    layout="bhsd",
    path="exact",
    nonfinite="reject",
    out=None,
    causal_align="bottom-right",
    return_lse=False,
):
    """Scaled dot-product attention, forward: ``softmax(scale · q kᵀ) v`` with detattn's promises.

    ``q`` is ``[B, Hq, Sq, D]``, ``k`` and ``v`` are ``[B, Hkv, Skv, D]`` (``Hq`` a multiple of
    ``Hkv``: MHA, GQA, MQA), or ``[B, S, H, D]`` with ``layout="bshd"``. They may be NumPy arrays
    (computed on the CPU), torch tensors (CPU tensors on the CPU; CUDA tensors on their own GPU
    and on its *current* torch stream, asynchronously), or any object with ``__dlpack__``; float32,
    float16 or bfloat16, one dtype for all. Any strides work as long as the head dimension is
    contiguous: views into a fused QKV buffer, transposes of ``[B, S, H, D]`` — nothing is
    copied. The result is written into ``out`` (any such strided view, same kind, dtype and
    device) or into a new array of q's kind, contiguous in ``layout``, which is returned.

    Options: ``causal`` with ``causal_align`` ``"bottom-right"`` (the default: the last query row
    sees every key, as when decoding against a KV cache) or ``"top-left"`` (PyTorch's
    ``is_causal``: row ``i`` sees keys ``0..=i``); ``scale`` (default: the float32 nearest
    ``1/sqrt(D)``); ``attn_mask`` boolean, ``True`` = attend, broadcastable to ``[B, Hq, Sq, Skv]``;
    ``kv_lens`` per-batch key lengths; ``path`` ``"exact"`` (f32 arithmetic in the documented
    order: the same bits on the CPU and every GPU) or ``"tensorcore"`` (CUDA, f16/bf16, head_dim
    64/128/256: the same bits run to run on one GPU architecture); ``nonfinite`` ``"reject"``
    (NaN or ±inf in q, k or v raises :class:`NonFiniteError`, nothing is written) or
    ``"propagate"`` (exactly the affected rows become NaN).

    With ``return_lse=True`` the call returns ``(out, lse)``: ``lse`` a new float32 array of q's
    kind and device, ``[B, Hq, Sq]``, each query row's log-sum-exp of its scaled scores
    (FlashAttention's ``softmax_lse``, for merging partial attention): ``-inf`` for a row with no
    key to attend, NaN for a row poisoned under ``"propagate"``. Its bits on ``"exact"`` are the
    CPU's on every backend (docs/numerics.md §10); on ``"tensorcore"`` reproducible on one GPU
    architecture and within 1e-4·max(1, \|lse\|) of ``"exact"``'s.

    Errors: ``ValueError`` for invalid input, ``NonFiniteError`` (a ``ValueError``) for rejected
    non-finite input, ``RuntimeError`` for CUDA faults, with the library's messages; ``TypeError``
    for an object that is not an array. The GIL is released while computing.
    """
    if layout not in _LAYOUTS:
        raise ValueError(f"layout must be 'bhsd' or 'bshd', got {layout!r}")
    aq, ak, av = wrap(q, "q"), wrap(k, "k"), wrap(v, "v")
    return _run(
        aq, ak, av, causal, causal_align, scale, attn_mask, kv_lens, layout, path, nonfinite, out, return_lse
    )


def attention_varlen(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    *,
    causal=False,
    scale=None,
    path="exact",
    nonfinite="reject",
    out=None,
    causal_align="bottom-right",
    return_lse=False,
):
    """Attention over a variable-length (packed) batch, as FlashAttention's
    ``flash_attn_varlen_func``: ``q`` is ``[total_q, Hq, D]``, ``k`` and ``v`` ``[total_k, Hkv,
    D]``; sequence ``b`` owns query rows ``cu_seqlens_q[b]:cu_seqlens_q[b + 1]`` and keys
    ``cu_seqlens_k[b]:cu_seqlens_k[b + 1]`` (both start at 0 and end at the totals; a sequence may
    have no rows or no keys). Each sequence's rows get the bits that sequence gets alone
    (:func:`attention` on it with batch 1), whatever the other sequences — decode rows beside
    prefills (continuous batching). ``causal`` applies per sequence, in ``causal_align``
    (bottom-right by default: a sequence's last row sees all its keys). The offsets may be lists,
    NumPy arrays or torch tensors (a CUDA tensor is copied to the host: offsets are public).

    Returns ``[total_q, Hq, D]`` (or ``out``), and with ``return_lse=True`` also the float32
    log-sum-exp ``[Hq, total_q]`` (FlashAttention's varlen ``softmax_lse`` layout). The other
    options, devices, streams and errors are :func:`attention`'s; ``kv_lens`` and masks do not
    combine with a packed batch (the offsets say where each sequence ends).
    """
    aq, ak, av = wrap(q, "q"), wrap(k, "k"), wrap(v, "v")
    for name, a in (("q", aq), ("k", ak), ("v", av)):
        if len(a.shape) != 3:
            raise ValueError(f"{name} must be 3-D [total, H, D] (a packed batch), got shape {a.shape}")
    # (Checked here too, so that the messages name the 3-D shapes the caller passed.)
    if ak.shape != av.shape:
        raise ValueError(f"k and v must have the same shape, got {ak.shape} and {av.shape}")
    if ak.shape[2] != aq.shape[2]:
        raise ValueError(f"q and k must have the same head_dim: q {aq.shape}, k {ak.shape}")
    cu_q = _kv_lens(cu_seqlens_q, "cu_seqlens_q")
    cu_k = _kv_lens(cu_seqlens_k, "cu_seqlens_k")
    if cu_q is None or cu_k is None:
        raise ValueError("cu_seqlens_q and cu_seqlens_k are required")
    opts = (causal, causal_align, scale, path, nonfinite, out, return_lse)
    return _run_packed(aq, _batch_of_one(ak), _batch_of_one(av), cu_q, cu_k, *opts)


def _run_packed(
    aq, ak, av, cu_q, cu_k, causal, align, scale, path, nonfinite, out, return_lse, paged=None, names=("k", "v")
):
    """A packed batch: ``aq`` ``[total_q, Hq, D]`` run as the batch element of a varlen problem
    against ``ak``/``av`` (``[1, total_k, Hkv, D]``, or the pages of ``paged``); the result
    ``[total_q, Hq, D]`` (or ``out``) and the log-sum-exp ``[Hq, total_q]``."""
    ao = None
    if out is not None:
        ao = wrap(out, "out")
        want = (aq.shape[0], aq.shape[1], aq.shape[2])
        if ao.shape != want:
            raise ValueError(f"out must have shape {want} ([total_q, Hq, D]), got {ao.shape}")
        ao = _batch_of_one(ao)
    res = _run(
        _batch_of_one(aq),
        ak,
        av,
        causal,
        align,
        scale,
        None,
        None,
        "bshd",
        path,
        nonfinite,
        ao,
        return_lse,
        varlen=(cu_q, cu_k),
        paged=paged,
        names=names,
    )
    o, lse = res if return_lse else (res, None)
    # A new result is [1, total_q, Hq, D]: its batch element; a given `out` is the caller's own.
    o = out if out is not None else o[0]
    return (o, lse[0]) if return_lse else o


# The names the keys and values have in attention_with_kvcache's signature, for `_run`'s errors.
_CACHE_NAMES = ("k_cache", "v_cache")


def attention_with_kvcache(
    q,
    k_cache,
    v_cache,
    *,
    cache_seqlens,
    block_table=None,
    cu_seqlens_q=None,
    attn_mask=None,
    causal=False,
    scale=None,
    path="exact",
    nonfinite="reject",
    out=None,
    causal_align="bottom-right",
    return_lse=False,
):
    """Attention against a KV cache, as FlashAttention's ``flash_attn_with_kvcache``: ``q`` is
    ``[B, Sq, Hq, D]``; sequence ``b`` attends to its first ``cache_seqlens[b]`` keys. With
    ``block_table`` (integers, ``[B, max_pages]``) the cache is paged: ``k_cache`` and ``v_cache``
    are ``[num_pages, page_size, Hkv, D]`` (``page_size`` a power of two in 16..=256) and key ``j``
    of sequence ``b`` is row ``j % page_size`` of page ``block_table[b][j // page_size]``; only the
    first ``ceil(cache_seqlens[b] / page_size)`` entries of a row are read (the others may hold
    anything, e.g. -1). Without it the cache is contiguous, ``[B, Skv, Hkv, D]``.

    **The bits are those of the same keys laid out contiguously**: :func:`attention` on
    ``[B, S, H, D]`` tensors (``layout="bshd"``) with ``kv_lens=cache_seqlens`` — a paged cache is
    a layout. Its key length ``Skv`` (the last dimension of ``attn_mask``) is the cache's for a
    contiguous cache and ``max(cache_seqlens)`` (at least 1) for a paged one.

    ``cache_seqlens`` is an int (every sequence) or one integer per sequence; it and
    ``block_table`` may be lists, NumPy arrays or torch tensors (a CUDA tensor is copied to the
    host: lengths and page numbers are public, and the library plans the call from them). With
    ``cu_seqlens_q`` (FlashAttention 3's argument; needs ``block_table``) ``q`` is a packed batch
    ``[total_q, Hq, D]`` whose sequence ``b`` owns rows ``cu_seqlens_q[b]:cu_seqlens_q[b + 1]``:
    each sequence's rows are then the bits it gets alone, as in :func:`attention_varlen`.

    Returns ``[B, Sq, Hq, D]`` (packed: ``[total_q, Hq, D]``) or ``out``, and with
    ``return_lse=True`` also the float32 log-sum-exp ``[B, Hq, Sq]`` (packed: ``[Hq, total_q]``).
    The other options, devices, streams and errors are :func:`attention`'s (``attn_mask`` is
    detattn's own, broadcastable to ``[B, Hq, Sq, Skv]``; not with ``cu_seqlens_q``).

    Where it differs from ``flash_attn_with_kvcache``: the cache is read, never updated (no
    ``k``/``v`` to append, no rotary embedding); ``cache_seqlens`` is required; no
    ``cache_batch_idx``, ``cache_leftpad``, ``window_size``, ``softcap``, ``alibi_slopes`` or
    ``num_splits``; the page size is a power of two in 16..=256 (FlashAttention 2 wants a
    multiple of 256); the options are named ``scale`` and ``return_lse``, as everywhere in
    detattn, not ``softmax_scale`` and ``return_softmax_lse``.
    """
    aq, ak, av = wrap(q, "q"), wrap(k_cache, "k_cache"), wrap(v_cache, "v_cache")
    paged = block_table is not None
    for name, a in (("k_cache", ak), ("v_cache", av)):
        if len(a.shape) != 4:
            want = "[num_pages, page_size, Hkv, D] (a paged cache)" if paged else "[B, Skv, Hkv, D]"
            raise ValueError(f"{name} must be 4-D {want}, got shape {a.shape}")
    if ak.shape != av.shape:
        raise ValueError(f"k_cache and v_cache must have the same shape, got {ak.shape} and {av.shape}")
    packed = cu_seqlens_q is not None
    if len(aq.shape) != (3 if packed else 4):
        want = "3-D [total_q, Hq, D] (a packed batch: cu_seqlens_q)" if packed else "4-D [B, Sq, Hq, D]"
        raise ValueError(f"q must be {want}, got shape {aq.shape}")
    if aq.shape[-1] != ak.shape[-1]:
        raise ValueError(f"q and k_cache must have the same head_dim: q {aq.shape}, k_cache {ak.shape}")
    # (A q of another dtype is `_run`'s error; these name the caches as the caller passed them.)
    for name, a in (("k_cache", ak), ("v_cache", av)):
        if aq.dtype in _FLOATS and a.dtype != aq.dtype:
            raise ValueError(
                f"{name} has dtype {_dtype_name(a.dtype)} and q {_dtype_name(aq.dtype)}: q, k_cache and "
                "v_cache must have one dtype"
            )
    cu_q = _kv_lens(cu_seqlens_q, "cu_seqlens_q") if packed else None
    if packed and (not paged or attn_mask is not None):
        raise ValueError(
            "cu_seqlens_q takes a paged cache (block_table) and no attn_mask; for packed keys use "
            "attention_varlen"
        )
    if packed and len(cu_q) < 2:
        raise ValueError(f"cu_seqlens_q must have at least 2 entries (B + 1 for B ≥ 1 sequences), got {cu_q}")
    seqs = len(cu_q) - 1 if packed else aq.shape[0]
    lens = _cache_seqlens(cache_seqlens, seqs)
    if not paged:
        if ak.shape[0] != aq.shape[0]:
            raise ValueError(f"k_cache must have q's batch size: q {aq.shape}, k_cache {ak.shape}")
        if any(n > ak.shape[1] for n in lens):
            raise ValueError(f"cache_seqlens must be at most the cache's length Skv = {ak.shape[1]}, got {lens}")
        opts = (causal, causal_align, scale, attn_mask, lens, "bshd", path, nonfinite, out, return_lse)
        return _run(aq, ak, av, *opts, names=_CACHE_NAMES)
    table, max_pages = _block_table(block_table, seqs)
    opts = (causal, causal_align, scale)
    if packed:
        if not any(lens):
            raise ValueError("cache_seqlens must give a packed batch (cu_seqlens_q) at least one key")
        cu_k = [0, *itertools.accumulate(lens)]
        pages = {"kv_len": cu_k[-1], "block_table": table, "max_pages": max_pages}
        return _run_packed(
            aq, ak, av, cu_q, cu_k, *opts, path, nonfinite, out, return_lse, paged=pages, names=_CACHE_NAMES
        )
    pages = {"kv_len": max([1, *lens]), "block_table": table, "max_pages": max_pages}
    return _run(
        aq, ak, av, *opts, attn_mask, lens, "bshd", path, nonfinite, out, return_lse, paged=pages, names=_CACHE_NAMES
    )


_INTS = {f"{s}int{n}" for s in ("", "u") for n in (8, 16, 32, 64)}


def _host_ints(x, name, ndim, want):
    """A public integer array — a list, a NumPy array or a torch tensor (a CUDA one is copied to
    the host) — as nested lists of ints, after checking its rank and that it holds integers."""
    if hasattr(x, "dtype") and hasattr(x, "tolist"):
        dt = str(x.dtype).replace("torch.", "")
        shape = tuple(x.shape)
    else:
        try:
            a = np.asarray(x)
        except ValueError:  # a ragged list
            raise ValueError(f"{name} must be {ndim}-D {want}, got a ragged list") from None
        # (An empty list is float64 to NumPy; it holds no non-integer.)
        dt = "int64" if a.size == 0 else a.dtype.name
        shape, x = a.shape, a
    if dt not in _INTS:
        raise ValueError(f"{name} must hold integers (ints, or an integer array or tensor), got {dt}")
    if len(shape) != ndim:
        raise ValueError(f"{name} must be {ndim}-D {want}, got shape {shape}")
    return x.tolist()


def _cache_seqlens(x, seqs):
    """Each sequence's key length, from an int or one integer per sequence."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        lens = [int(x)] * seqs
    else:
        lens = _kv_lens(x, "cache_seqlens")
    if len(lens) != seqs:
        raise ValueError(f"cache_seqlens must have one entry per sequence ({seqs}), got {len(lens)}")
    return lens


def _block_table(x, seqs):
    """The block table as the library takes it: its entries row-major, and its columns."""
    rows = _host_ints(x, "block_table", 2, "[B, max_pages] (one row of page numbers per sequence)")
    if len(rows) != seqs:
        raise ValueError(f"block_table must have one row per sequence ({seqs}), got {len(rows)}")
    flat = [e for r in rows for e in r]
    if any(not -(2**31) <= e < 2**31 for e in flat):
        raise ValueError("block_table entries must fit in int32")
    return flat, len(rows[0]) if rows else 0


def _batch_of_one(a: Arr) -> Arr:
    """``a`` ([total, H, D]) seen as [1, total, H, D]: the packed batch element of a varlen
    problem (the same memory)."""
    return a.view((1, *a.shape), (0, *a.strides))


def _run(
    aq,
    ak,
    av,
    causal,
    align,
    scale,
    attn_mask,
    kv_lens,
    layout,
    path,
    nonfinite,
    out,
    return_lse=False,
    varlen=None,
    paged=None,
    names=("k", "v"),
):
    kn, vn = names  # what the caller's signature calls the keys and values, for the errors
    if aq.dtype not in _FLOATS:
        raise ValueError(f"q has dtype {_dtype_name(aq.dtype)}; detattn takes float32, float16 and bfloat16")
    for name, a in ((kn, ak), (vn, av)):
        if a.dtype != aq.dtype:
            raise ValueError(
                f"q, {kn} and {vn} must have one dtype: q is {_dtype_name(aq.dtype)}, {name} is {_dtype_name(a.dtype)}"
            )
        if a.device != aq.device:
            raise ValueError(f"q is on {aq.device_name}, {name} on {a.device_name}: put them on one device")
    (b, hq, sq, d), qs = _bhsd(aq, layout, "q")
    (bk, hkv, skv, dk), ks = _bhsd(ak, layout, kn)
    kv_dims, vs = _bhsd(av, layout, vn)
    if kv_dims != (bk, hkv, skv, dk):
        raise ValueError(f"{kn} and {vn} must have the same shape, got {ak.shape} and {av.shape}")
    cache = None
    if paged is not None:
        # K and V are the pages: the batch dimension is the page, the rows are a page's; the
        # problem's own key length is the caller's (attention_with_kvcache).
        cache = {"num_pages": bk, "page_size": skv, **{n: paged[n] for n in ("block_table", "max_pages")}}
        bk, skv = b, paged["kv_len"]
    if (bk, dk) != (b, d):
        raise ValueError(
            f"q and {kn} must have the same batch size and head_dim: q {aq.shape}, {kn} {ak.shape} (layout {layout!r})"
        )
    oshape = (b, hq, sq, d) if layout == "bhsd" else (b, sq, hq, d)
    if out is None:
        result = empty_like_kind(aq, oshape)
        ao = wrap(result, "out")
        ao.dtype = aq.dtype  # the same dtype as q (a raw bf16 buffer stays bf16)
    else:
        result = out
        ao = wrap(out, "out")  # (an Arr stays itself: attention_varlen's view of its `out`)
        if ao.shape != oshape:
            raise ValueError(f"out must have shape {oshape} (layout {layout!r}), got {ao.shape}")
        if ao.dtype != aq.dtype or ao.device != aq.device:
            raise ValueError(
                f"out must have q's dtype and device ({_dtype_name(aq.dtype)} on {aq.device_name}), "
                f"got {_dtype_name(ao.dtype)} on {ao.device_name}"
            )
        if ao.kind == "numpy" and not ao.obj.flags.writeable:
            raise ValueError("out is read-only")
    _, os_ = _bhsd(ao, layout, "out")
    lse, al = None, None
    if return_lse:
        lse = empty_like_kind(aq, (b, hq, sq), "f32")
        al = wrap(lse, "lse")
    mask, mask_layout, am = None, None, None
    if attn_mask is not None:
        mask, mask_layout, am = _mask(attn_mask, aq, (b, hq, sq, skv))
    problem = {
        "dims": (b, hq, hkv, sq, skv, d),
        "causal": bool(causal),
        "align": causal_align_name(align),
        "scale": None if scale is None else float(scale),
        "kv_lens": _kv_lens(kv_lens),
        "mask": mask_layout,
        "nonfinite": nonfinite,
        "varlen": varlen,
    }
    args = [path, aq.dtype, 0, problem, _desc(aq, qs), _desc(ak, ks), _desc(av, vs), mask, _desc(ao, os_)]
    args.append(None if al is None else (al.ptr, b * hq * sq))
    args.append(cache)
    if aq.device[0] == "cpu":
        _call(_native.run, "cpu", *args)
    elif aq.kind == "torch":
        torch = _torch()
        ordinal = aq.device[1]
        stream = torch.cuda.current_stream(aq.obj.device)
        args[2] = stream.cuda_stream
        # The caching allocator must not hand these tensors' memory to another stream before the
        # current one has run our kernels (a no-op for a tensor allocated on this stream).
        for a in (aq, ak, av, ao, am, al):
            if a is not None and a.kind == "torch":
                a.obj.record_stream(stream)
        # cudarc makes the device's primary context current on this thread; torch's current
        # device is restored on exit, so a multi-GPU program keeps its own.
        with torch.cuda.device(ordinal):
            _call(_native.run, f"cuda:{ordinal}", *args)
    else:
        # A non-torch CUDA array (CuPy, JAX, …): the legacy default stream, which its producer
        # ordered its work before (`__dlpack__(stream=1)`).
        _call(_native.run, f"cuda:{aq.device[1]}", *args)
    # Keep the DLPack capsules and the mask's dense copy alive until here.
    del aq, ak, av, ao, am, al
    return (result, lse) if return_lse else result


def causal_align_name(align) -> str:
    if align not in ("bottom-right", "top-left"):
        raise ValueError(f"causal_align must be 'bottom-right' or 'top-left', got {align!r}")
    return align


def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    *,
    path="exact",
    nonfinite="reject",
):
    """A drop-in for ``torch.nn.functional.scaled_dot_product_attention`` with detattn's promises.

    The same signature and semantics for what it takes: ``query`` ``[B, Hq, L, E]`` (or
    ``[Hq, L, E]``), ``key``/``value`` ``[B, Hkv, S, E]``; a boolean ``attn_mask`` (``True`` =
    take part) broadcastable to ``[B, Hq, L, S]``; ``is_causal`` with PyTorch's **top-left**
    alignment (row ``i`` sees keys ``0..=i``); ``scale`` (default ``1/sqrt(E)``); ``enable_gqa``.
    Where it cannot match it raises ``ValueError`` instead of silently differing: ``dropout_p >
    0``, a float (additive) mask, ``attn_mask`` together with ``is_causal``, a value head
    dimension other than E, more than 4 dimensions. Differences that remain, by design: the
    result agrees with PyTorch to rounding, not bit for bit (docs/python.md gives the bound); a
    row with no key to attend to is 0 where PyTorch gives NaN; NaN or ±inf in the inputs raises
    :class:`NonFiniteError` unless ``nonfinite="propagate"``.
    """
    if dropout_p != 0.0:
        raise ValueError(
            f"dropout_p must be 0.0, got {dropout_p}: detattn computes attention deterministically "
            "and has no dropout"
        )
    if attn_mask is not None and is_causal:
        raise ValueError("pass attn_mask or is_causal=True, not both (as torch's SDPA requires)")
    aq, ak, av = wrap(query, "query"), wrap(key, "key"), wrap(value, "value")
    ranks = {len(aq.shape), len(ak.shape), len(av.shape)}
    if len(ranks) != 1 or ranks.pop() not in (3, 4):
        raise ValueError(
            "query, key and value must all be 4-D [B, H, L, E] or all 3-D [H, L, E]; got shapes "
            f"{aq.shape}, {ak.shape}, {av.shape}"
        )
    three = len(aq.shape) == 3
    if three:
        if aq.kind == "dlpack":
            raise ValueError("3-D DLPack inputs are not supported; pass 4-D [B, H, L, E]")
        aq, ak, av = (wrap(a.obj[None], n) for a, n in ((aq, "query"), (ak, "key"), (av, "value")))
    if av.shape[-1] != aq.shape[-1]:
        raise ValueError(
            f"value's last dimension ({av.shape[-1]}) must equal query's ({aq.shape[-1]}): detattn "
            "computes outputs of the query's head dimension"
        )
    if ak.shape[-2] != av.shape[-2]:
        raise ValueError(f"key and value must have the same sequence length, got {ak.shape} and {av.shape}")
    if aq.shape[1] != ak.shape[1] and not enable_gqa:
        raise ValueError(
            f"query has {aq.shape[1]} heads and key {ak.shape[1]}: pass enable_gqa=True for grouped-query "
            "attention (as torch's SDPA requires)"
        )
    if ak.shape[1] != av.shape[1]:
        raise ValueError(f"key and value must have the same number of heads, got {ak.shape} and {av.shape}")
    mask = attn_mask
    if three and mask is not None and len(wrap(mask, "attn_mask").shape) == 4:
        raise ValueError("a 4-D attn_mask needs 4-D query, key and value")
    res = _run(aq, ak, av, is_causal, "top-left", scale, mask, None, "bhsd", path, nonfinite, None)
    return res[0] if three else res


def digest(out, *, path="exact", layout="bhsd") -> str:
    """The SHA-256 digest of the logical ``[B, H, S, D]`` output (lowercase hex), tagged with
    ``path``: equal to the Rust library's ``digest_of`` and the CLI's ``digest`` for the same bits,
    whatever the strides. A CUDA tensor is copied to the host first (the digest is a check, not the
    compute path)."""
    if layout not in _LAYOUTS:
        raise ValueError(f"layout must be 'bhsd' or 'bshd', got {layout!r}")
    a = wrap(out, "out")
    host = None
    if a.device[0] != "cpu":
        if a.kind != "torch":
            raise ValueError("digest of a non-torch device array: copy it to the host first")
        host = a.obj.detach().cpu()
        a = wrap(host, "out")
    if a.dtype not in _FLOATS:
        raise ValueError(f"out has dtype {_dtype_name(a.dtype)}; detattn outputs are float32, float16 or bfloat16")
    dims, strides = _bhsd(a, layout, "out")
    r = _call(_native.digest, path, a.dtype, list(dims), _desc(a, strides))
    del host
    return r


def itemsize(tag: str) -> int:
    return ITEMSIZE[tag]
