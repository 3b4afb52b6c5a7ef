"""Arrays in, raw descriptors out: the one place that knows NumPy, torch and DLPack.

Every array the package accepts becomes an :class:`Arr`: where its element ``(0, …, 0)`` is, its
shape, its strides **in elements**, its dtype tag (``f32``, ``f16``, ``bf16``, ``bool``) and its
device (``("cpu", 0)`` or ``("cuda", n)``). Nothing is copied to make one: a view stays a view.
The native layer checks the descriptors against the problem (extents, alignment, overlap,
device allocations) with the library's own checks.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np

# torch dtypes and NumPy dtype names we take, and their tags.
_NUMPY_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "bool": "bool"}
_TORCH_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "bool": "bool"}
# Itemsize of each tag.
ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2, "bool": 1}
# Readable names for messages.
DTYPE_NAMES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "bool": "bool"}


class Arr:
    """One array as the native layer sees it (see the module docs)."""

    __slots__ = ("kind", "obj", "ptr", "shape", "strides", "dtype", "device", "keep")

    def __init__(self, kind, obj, ptr, shape, strides, dtype, device, keep=None):
        self.kind = kind  # "numpy", "torch" or "dlpack"
        self.obj = obj  # the caller's object (or the view made of it)
        self.ptr = int(ptr)
        self.shape = tuple(map(int, shape))
        # A dimension of size 1 is never stepped over: its stride is irrelevant (and may be
        # anything, even negative, in the producer); 0 keeps the extent arithmetic honest.
        self.strides = tuple([0 if n == 1 else int(s) for n, s in zip(self.shape, strides)])
        self.dtype = dtype
        self.device = device
        self.keep = keep  # what must stay alive while the descriptor is used (a DLPack capsule)

    @property
    def device_name(self) -> str:
        kind, n = self.device
        return "cpu" if kind == "cpu" else f"cuda:{n}"

    def extent(self) -> int:
        """Elements from ``ptr`` up to one past the last element the view reaches."""
        if 0 in self.shape:
            return 0
        return 1 + sum([(n - 1) * s for n, s in zip(self.shape, self.strides)])

    def view(self, shape, strides) -> "Arr":
        """The same memory seen with other dims and element strides (a packed batch as a batch of
        one, a layout's dims reordered): nothing is copied."""
        return Arr(self.kind, self.obj, self.ptr, shape, strides, self.dtype, self.device, self.keep)


def _torch():
    # torch is never imported by the package: if the caller has a torch tensor, torch is loaded.
    return sys.modules.get("torch")


def is_torch(x) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def wrap(x, name: str) -> Arr:
    """The :class:`Arr` of ``x`` (a NumPy array, a torch tensor, or an object with ``__dlpack__``).
    ``TypeError`` for anything else; ``ValueError`` for an array the package cannot read in place
    (a dtype it does not take is reported by the caller, which knows what it expects)."""
    if isinstance(x, Arr):
        return x
    if is_torch(x):
        return _wrap_torch(x, name)
    if isinstance(x, np.ndarray):
        return _wrap_numpy(x, name)
    if hasattr(x, "__dlpack__"):
        return _wrap_dlpack(x, name)
    raise TypeError(
        f"{name} must be a NumPy array, a torch tensor or an object with __dlpack__, "
        f"got {type(x).__module__}.{type(x).__qualname__}"
    )


# A dtype's tag by the dtype object itself (NumPy computes `dtype.name` anew at every access,
# which made it a tenth of a call's Python time): filled as dtypes are met.
_NUMPY_TAG_OF = {}
_TORCH_TAG_OF = {}


def _numpy_tag(dt) -> str:
    tag = _NUMPY_TAG_OF.get(dt)
    if tag is None:
        tag = _NUMPY_TAG_OF[dt] = _NUMPY_DTYPES.get(dt.name, dt.name)
    return tag


def _wrap_numpy(x: np.ndarray, name: str) -> Arr:
    dt = x.dtype
    tag = _numpy_tag(dt)
    itemsize = dt.itemsize
    strides = []
    for n, s in zip(x.shape, x.strides):
        if n > 1 and (s < 0 or s % itemsize):
            raise ValueError(
                f"{name} has byte strides {x.strides}: detattn needs non-negative strides that "
                f"are whole elements ({itemsize} bytes); pass np.ascontiguousarray({name})"
            )
        strides.append(s // itemsize if n > 1 else 0)
    ptr = x.__array_interface__["data"][0]
    return Arr("numpy", x, ptr, x.shape, strides, tag, ("cpu", 0))


def host_raw(x: np.ndarray, tag: str) -> Arr:
    """A host array whose bytes are elements of ``tag`` whatever NumPy calls them (bf16 held as
    uint16 when ml_dtypes is not installed). For the self-test and the tests."""
    a = _wrap_numpy(x, "array")
    a.dtype = tag
    return a


def _wrap_torch(x, name: str) -> Arr:
    t = _torch()
    if x.requires_grad and t.is_grad_enabled():
        raise ValueError(
            f"{name} requires grad: detattn computes the forward pass only and records no "
            "autograd graph; call it under torch.no_grad() or torch.inference_mode(), or pass "
            f"{name}.detach()"
        )
    dev = x.device
    if dev.type == "cpu":
        device = ("cpu", 0)
    elif dev.type == "cuda":
        device = ("cuda", dev.index if dev.index is not None else t.cuda.current_device())
    else:
        raise ValueError(f"{name} is on device {dev}; detattn runs on the CPU and on CUDA GPUs")
    tag = _TORCH_TAG_OF.get(x.dtype)
    if tag is None:
        n = str(x.dtype).replace("torch.", "")
        tag = _TORCH_TAG_OF[x.dtype] = _TORCH_DTYPES.get(n, n)
    shape, strides = x.shape, x.stride()
    if any(s < 0 for n, s in zip(shape, strides) if n > 1):
        raise ValueError(f"{name} has negative strides {strides}")
    return Arr("torch", x, x.data_ptr(), shape, strides, tag, device)


# --- DLPack (the legacy, unversioned capsule every producer offers) --------------------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

# DLPack device types: CPU, CUDA, CUDA pinned host memory (host-addressable).
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST = 1, 2, 3
# (type code, bits) of the dtypes we take: float, bfloat, bool.
_DL_DTYPES = {(2, 32): "f32", (2, 16): "f16", (4, 16): "bf16", (6, 8): "bool", (1, 8): "u8"}


def dlpack_device(x):
    dev_type, dev_id = x.__dlpack_device__()
    if dev_type in (_DL_CPU, _DL_CUDA_HOST):
        return ("cpu", 0)
    if dev_type == _DL_CUDA:
        return ("cuda", int(dev_id))
    raise ValueError(f"a DLPack device of type {dev_type} is not supported (CPU and CUDA are)")


def _wrap_dlpack(x, name: str) -> Arr:
    device = dlpack_device(x) if hasattr(x, "__dlpack_device__") else ("cpu", 0)
    # CUDA producers order their pending work before the stream we name: 1 is the legacy default
    # stream, the one the package runs on for non-torch CUDA arrays (native stream handle 0).
    capsule = x.__dlpack__(stream=1) if device[0] == "cuda" else x.__dlpack__()
    addr = _capsule_pointer(capsule, b"dltensor")
    t = _DLManagedTensor.from_address(addr).dl_tensor
    if t.dtype.lanes != 1:
        raise ValueError(f"{name} has vector lanes ({t.dtype.lanes}); detattn takes scalar elements")
    tag = _DL_DTYPES.get((t.dtype.code, t.dtype.bits), f"dlpack code {t.dtype.code}/{t.dtype.bits} bits")
    shape = [t.shape[i] for i in range(t.ndim)]
    if t.strides:
        strides = [t.strides[i] for i in range(t.ndim)]
    else:  # NULL strides: compact row-major
        strides, acc = [], 1
        for n in reversed(shape):
            strides.insert(0, acc)
            acc *= n
    if any(s < 0 for n, s in zip(shape, strides) if n > 1):
        raise ValueError(f"{name} has negative strides {strides}")
    ptr = (t.data or 0) + t.byte_offset
    # The capsule stays referenced for as long as the descriptor is used; not renaming it leaves
    # the producer's memory in the producer's hands (its capsule destructor frees it).
    return Arr("dlpack", x, ptr, shape, strides, tag, device, keep=capsule)


# --- allocation -------------------------------------------------------------------------------


def empty_like_kind(a: Arr, shape, dtype=None):
    """A new uninitialised array of ``a``'s kind and device, contiguous in ``shape``, of ``a``'s
    dtype or the tag ``dtype`` (``"f32"``: the log-sum-exp): what the package returns when no
    ``out`` is given."""
    if dtype == "f32":
        if a.kind == "torch":
            return _torch().empty(shape, dtype=_torch().float32, device=a.obj.device)
        if a.device[0] == "cpu":
            return np.empty(shape, dtype=np.float32)
        raise ValueError(
            "detattn cannot allocate device memory for a non-torch CUDA array: return_lse needs "
            "torch tensors on a GPU"
        )
    if a.kind == "torch":
        return _torch().empty(shape, dtype=a.obj.dtype, device=a.obj.device)
    if a.kind == "numpy":
        return np.empty(shape, dtype=a.obj.dtype)
    # DLPack: host memory comes back as NumPy; device memory needs an allocator we do not have.
    if a.device[0] == "cpu":
        if a.dtype == "bf16":
            dt = numpy_bf16()
            if dt is None:
                raise ValueError("a bfloat16 DLPack array needs ml_dtypes for the output; pass out=")
        else:
            dt = {"f32": np.float32, "f16": np.float16}[a.dtype]
        return np.empty(shape, dtype=dt)
    raise ValueError(
        "detattn cannot allocate device memory for a non-torch CUDA array: pass out= (an array of "
        "the same kind, shape and dtype), or use torch tensors"
    )


def numpy_bf16():
    """NumPy's bfloat16 dtype from ml_dtypes, if it is installed (NumPy has none of its own)."""
    try:
        import ml_dtypes  # noqa: PLC0415 (optional)
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)
