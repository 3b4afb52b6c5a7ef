//! `detattn._native`: the Rust half of the Python package. The Python half (`python/detattn/`)
//! turns NumPy arrays, torch tensors and DLPack capsules into raw tensor descriptors — an address,
//! a length in elements and element strides — and this module hands them to the library's entry
//! points: [`detattn::Engine::run_cache`] for host memory and
//! [`detattn::cuda::CudaBackend::run_device_raw`] (with a paged KV cache
//! [`detattn::cuda::CudaBackend::run_device_raw_paged`]) for device memory, on the caller's
//! stream.
//!
//! What this layer adds to the library, and nothing more:
//! - the descriptors become slices (host) or raw device tensors, after the checks that make that
//!   sound: alignment, and no overlap between the outputs (the output, the log-sum-exp) and any
//!   input or each other (a `&mut` next to a `&` of the same bytes would be undefined behaviour;
//!   the device entry point requires it too);
//! - the library's typed errors become one Python exception, `_native.Error((kind, message,
//!   tensor))`, which the Python half re-raises as `ValueError`, `RuntimeError` or
//!   `detattn.NonFiniteError`, carrying the crate's message unchanged;
//! - every computation runs with the GIL released (`Python::detach`);
//! - engines are opened once per (backend, path) and shared by every thread (an `Engine` is
//!   `Send + Sync`; the library's entry points take `&self`).
//!
//! The only `unsafe` is in [`host`] (raw host addresses to slices) and in [`run`]'s calls of
//! `run_device_raw` and `run_device_raw_paged`, each after the checks its contract names.

use detattn::cuda::{DeviceRepr, RawDeviceOut, RawDeviceQkv, RawDeviceTensor, ValidAsZeroBits};
use detattn::{
    Backend, CausalAlign, DType, Element, Engine, KvCache, Layout, MaskLayout, NonFinitePolicy,
    PagedCache, Path, Problem, QkvCache, Shape, Tensor, TensorMut, bf16, f16,
};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

create_exception!(
    _native,
    Error,
    PyException,
    "A detattn error: args are (kind, message, tensor); kind is 'value', 'nonfinite' or 'runtime'."
);

/// Why a call failed, before it becomes a Python exception.
#[derive(Debug)]
struct Failure {
    kind: &'static str,
    message: String,
    tensor: Option<String>,
}

impl Failure {
    fn value(message: impl Into<String>) -> Self {
        Failure {
            kind: "value",
            message: message.into(),
            tensor: None,
        }
    }
}

impl From<detattn::Error> for Failure {
    fn from(e: detattn::Error) -> Self {
        let (kind, tensor) = match &e {
            detattn::Error::NonFinite { tensor } => ("nonfinite", Some(tensor.to_string())),
            // What the caller passed: shapes, options, layouts, dtypes, devices.
            e if e.is_caller_error() => ("value", None),
            // The machine: driver, GPU, memory, kernel faults, thread pools.
            _ => ("runtime", None),
        };
        Failure {
            kind,
            message: e.to_string(),
            tensor,
        }
    }
}

impl From<Failure> for PyErr {
    fn from(f: Failure) -> PyErr {
        Error::new_err((f.kind, f.message, f.tensor))
    }
}

type Res<T> = Result<T, Failure>;

// ---------------------------------------------------------------------------------------------
// Engines

/// One engine per (backend, path), opened on first use and shared by every thread. A failed open
/// is not remembered: the next call tries again (a driver may appear, memory may free up).
type Engines = Mutex<HashMap<(Backend, Path), Arc<Engine>>>;

fn engine(backend: Backend, path: Path) -> Res<Arc<Engine>> {
    static ENGINES: OnceLock<Engines> = OnceLock::new();
    let map = ENGINES.get_or_init(Default::default);
    // A poisoned lock only means another thread panicked while opening an engine; the map itself
    // is still consistent (an insert is the last step).
    let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = m.get(&(backend, path)) {
        return Ok(e.clone());
    }
    let e = Arc::new(Engine::new(backend, path)?);
    m.insert((backend, path), e.clone());
    Ok(e)
}

fn parse_backend(s: &str) -> Res<Backend> {
    s.parse::<Backend>().map_err(Failure::value)
}

fn parse_path(s: &str) -> Res<Path> {
    s.parse::<Path>().map_err(Failure::value)
}

fn parse_dtype(s: &str) -> Res<DType> {
    s.parse::<DType>().map_err(Failure::value)
}

// ---------------------------------------------------------------------------------------------
// Descriptors

/// A tensor as the Python half describes it: the address of element `(0, 0, 0, 0)`, the number of
/// elements from there that the tensor may reach (its layout's extent, or more), and the element
/// strides of batch, head and row (D is contiguous).
type Desc = (u64, usize, usize, usize, usize);

fn layout_of(d: &Desc) -> Layout {
    Layout {
        offset: 0,
        batch_stride: d.2,
        head_stride: d.3,
        seq_stride: d.4,
    }
}

/// The byte range `[start, end)` a descriptor's buffer covers.
fn span(d: &Desc, elem: usize) -> (u64, u64) {
    (
        d.0,
        d.0.saturating_add((d.1 as u64).saturating_mul(elem as u64)),
    )
}

/// An output's bytes (`name`, its span) must not overlap any other buffer's of the call (q, k,
/// v, mask, the other output): the host path would hold a `&mut` and a `&` of the same bytes, and
/// the device entry point's contract forbids it. Checked on the buffers' whole spans, so it is
/// conservative for interleaved views.
fn check_no_overlap(name: &str, (o0, o1): (u64, u64), others: &[(&str, (u64, u64))]) -> Res<()> {
    for (other, (a0, a1)) in others {
        if o0 < *a1 && *a0 < o1 {
            return Err(Failure::value(format!(
                "{name} overlaps {other} in memory ({name} spans {o0:#x}..{o1:#x}, {other} \
                 {a0:#x}..{a1:#x}): each output must be a buffer of its own"
            )));
        }
    }
    Ok(())
}

mod host {
    //! Raw host addresses from Python to slices: the module's one use of `unsafe` on host memory.
    #![allow(unsafe_code)]
    use super::{Failure, Res};

    /// `len` elements of `T` at `ptr`, after checking that the address is usable for a slice
    /// (non-null, aligned for `T`).
    ///
    /// # Safety
    /// `ptr..ptr + len·size_of::<T>()` is readable host memory holding initialised `T`s that stays
    /// allocated, and is not written by anyone, for `'a` (the Python half keeps the owning
    /// objects alive for the whole call; concurrent writes from another Python thread while a
    /// call runs are the caller's race, as with any array library that releases the GIL).
    pub(super) unsafe fn slice<'a, T>(name: &str, ptr: u64, len: usize) -> Res<&'a [T]> {
        check(name, ptr, std::mem::align_of::<T>())?;
        // SAFETY: non-null and aligned (checked above); the rest is the caller's contract.
        Ok(unsafe { std::slice::from_raw_parts(ptr as usize as *const T, len) })
    }

    /// As [`slice`], writable.
    ///
    /// # Safety
    /// As [`slice`], and the memory is writable and not referenced by any other slice alive at the
    /// same time (the caller has checked it overlaps no input).
    pub(super) unsafe fn slice_mut<'a, T>(name: &str, ptr: u64, len: usize) -> Res<&'a mut [T]> {
        check(name, ptr, std::mem::align_of::<T>())?;
        // SAFETY: non-null and aligned (checked above); the rest is the caller's contract.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr as usize as *mut T, len) })
    }

    fn check(name: &str, ptr: u64, align: usize) -> Res<()> {
        if ptr == 0 {
            return Err(Failure::value(format!("{name} has a null data pointer")));
        }
        if !(ptr as usize).is_multiple_of(align) {
            return Err(Failure::value(format!(
                "{name}'s data address {ptr:#x} is not aligned to its element size ({align} bytes)"
            )));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The problem

/// The problem's options as Python passes them (a dict with these keys).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct ProblemArgs {
    /// (B, Hq, Hkv, Sq, Skv, D).
    dims: (usize, usize, usize, usize, usize, usize),
    causal: bool,
    /// "bottom-right" or "top-left".
    align: String,
    scale: Option<f64>,
    kv_lens: Option<Vec<usize>>,
    /// (per_batch, per_head) of the mask, if there is one.
    mask: Option<(bool, bool)>,
    /// "reject" or "propagate".
    nonfinite: String,
    /// (cu_seqlens_q, cu_seqlens_k) of a variable-length batch (dims then `(1, Hq, Hkv,
    /// total_q, total_k, D)`), if it is one.
    varlen: Option<(Vec<usize>, Vec<usize>)>,
}

fn problem(a: &ProblemArgs) -> Res<Problem> {
    let (b, hq, hkv, sq, skv, d) = a.dims;
    let align = match a.align.as_str() {
        "bottom-right" => CausalAlign::BottomRight,
        "top-left" => CausalAlign::TopLeft,
        s => {
            return Err(Failure::value(format!(
                "causal_align must be 'bottom-right' or 'top-left', got {s:?}"
            )));
        }
    };
    let policy = match a.nonfinite.as_str() {
        "reject" => NonFinitePolicy::Reject,
        "propagate" => NonFinitePolicy::Propagate,
        s => {
            return Err(Failure::value(format!(
                "nonfinite must be 'reject' or 'propagate', got {s:?}"
            )));
        }
    };
    let mut pb = Problem::builder(Shape::new(b, hq, hkv, sq, skv, d))
        .causal(a.causal)
        .causal_align(align)
        .nonfinite(policy);
    if let Some(s) = a.scale {
        // The library's scale is an f32: the Python float is rounded to the nearest one (a
        // non-finite or non-positive value stays so and is the library's typed error).
        pb = pb.scale(s as f32);
    }
    if let Some(l) = &a.kv_lens {
        pb = pb.kv_lens(l.clone());
    }
    if let Some((per_batch, per_head)) = a.mask {
        pb = pb.mask(MaskLayout {
            per_batch,
            per_head,
        });
    }
    if let Some((q, k)) = &a.varlen {
        pb = pb.varlen(q.clone(), k.clone());
    }
    Ok(pb.build()?)
}

/// A paged KV cache's description beside its two page tensors (the `k` and `v` descriptors, the
/// page being their batch index), as Python passes it (a dict with these keys).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct PagedArgs {
    num_pages: usize,
    page_size: usize,
    /// `[sequences, max_pages]`, row-major.
    block_table: Vec<i32>,
    max_pages: usize,
}

// ---------------------------------------------------------------------------------------------
// Running

/// Compute attention. `backend` is `cpu` (host memory) or `cuda:N` (device memory of GPU N, run
/// on `stream`, a raw `CUstream` handle: 0 is the legacy default stream). `mask` is the address
/// and length in bytes of a dense `[Bm, Hm, Sq, Skv]` boolean mask (one byte per entry, nonzero =
/// attend) in the same memory as the tensors. `lse`, if given, is the address and length (f32
/// entries) of a contiguous `[B, Hq, Sq]` float32 buffer in the same memory, for each query row's
/// log-sum-exp. `paged`, if given, makes `k` and `v` the pages of a paged KV cache
/// ([`PagedArgs`]). Writes only the output's rows (and the log-sum-exp); on error writes nothing.
/// Releases the GIL while it computes.
#[pyfunction]
#[pyo3(signature = (backend, path, dtype, stream, problem, q, k, v, mask, out, lse=None, paged=None))]
#[allow(clippy::too_many_arguments)]
fn run(
    py: Python<'_>,
    backend: &str,
    path: &str,
    dtype: &str,
    stream: u64,
    problem: ProblemArgs,
    q: Desc,
    k: Desc,
    v: Desc,
    mask: Option<(u64, usize)>,
    out: Desc,
    lse: Option<(u64, usize)>,
    paged: Option<PagedArgs>,
) -> PyResult<()> {
    let backend = parse_backend(backend)?;
    let path = parse_path(path)?;
    let dtype = parse_dtype(dtype)?;
    let p = self::problem(&problem)?;
    let call = Call {
        backend,
        path,
        stream,
        q,
        k,
        v,
        mask,
        out,
        lse,
        paged,
    };
    py.detach(|| match dtype {
        DType::F32 => call.run::<f32>(&p),
        DType::F16 => call.run::<f16>(&p),
        DType::Bf16 => call.run::<bf16>(&p),
    })?;
    Ok(())
}

/// One call's descriptors (plain numbers: they cross into the GIL-free closure).
struct Call {
    backend: Backend,
    path: Path,
    stream: u64,
    q: Desc,
    k: Desc,
    v: Desc,
    mask: Option<(u64, usize)>,
    out: Desc,
    /// The log-sum-exp's address and f32 entries, if asked.
    lse: Option<(u64, usize)>,
    /// `k` and `v` are the pages of this paged cache, if given.
    paged: Option<PagedArgs>,
}

impl Call {
    /// The paged cache of pages `k` and `v` (host tensors or raw device ones), if the call has one.
    fn cache<X>(&self, k: X, v: X) -> Option<PagedCache<'_, X>> {
        self.paged.as_ref().map(|c| PagedCache {
            k,
            v,
            num_pages: c.num_pages,
            page_size: c.page_size,
            block_table: &c.block_table,
            max_pages: c.max_pages,
        })
    }

    fn run<T: Element + DeviceRepr + ValidAsZeroBits>(&self, p: &Problem) -> Res<()> {
        let elem = std::mem::size_of::<T>();
        let mut inputs = vec![
            ("q", span(&self.q, elem)),
            ("k", span(&self.k, elem)),
            ("v", span(&self.v, elem)),
        ];
        if let Some((ptr, len)) = self.mask {
            inputs.push(("mask", (ptr, ptr.saturating_add(len as u64))));
        }
        let out = span(&self.out, elem);
        check_no_overlap("out", out, &inputs)?;
        if let Some((ptr, len)) = self.lse {
            let lse = (ptr, ptr.saturating_add(4 * len as u64));
            inputs.push(("out", out));
            check_no_overlap("lse", lse, &inputs)?;
        }
        match self.backend {
            Backend::Cpu => self.run_host::<T>(p),
            Backend::Cuda(_) => self.run_device::<T>(p),
            Backend::Auto => Err(Failure::value(
                "the binding names its backend (cpu or cuda:N) from where the tensors live",
            )),
        }
    }

    fn run_host<T: Element>(&self, p: &Problem) -> Res<()> {
        let e = engine(Backend::Cpu, self.path)?;
        // SAFETY (all four, and the log-sum-exp below): the Python half passes the address of
        // element (0, 0, 0, 0) of a live array and the elements it may reach from there, and keeps
        // the array alive for the call; the outputs overlap no input nor each other (checked in
        // `Call::run`).
        let (q, k, v, out) = unsafe {
            (
                host::slice::<T>("q", self.q.0, self.q.1)?,
                host::slice::<T>("k", self.k.0, self.k.1)?,
                host::slice::<T>("v", self.v.0, self.v.1)?,
                host::slice_mut::<T>("out", self.out.0, self.out.1)?,
            )
        };
        // The mask is read as bytes and copied into `bool`s: a byte other than 0 or 1 behind a
        // `&[bool]` would be undefined behaviour, and NumPy can view any byte as a bool.
        let mask: Option<Vec<bool>> = match self.mask {
            // SAFETY: as above; `u8` has no invalid values and alignment 1.
            Some((ptr, len)) => Some(
                unsafe { host::slice::<u8>("mask", ptr, len)? }
                    .iter()
                    .map(|&b| b != 0)
                    .collect(),
            ),
            None => None,
        };
        let lse = match self.lse {
            // SAFETY: as above.
            Some((ptr, len)) => Some(unsafe { host::slice_mut::<f32>("lse", ptr, len)? }),
            None => None,
        };
        let (k, v) = (
            Tensor::new(k, layout_of(&self.k)),
            Tensor::new(v, layout_of(&self.v)),
        );
        let x = QkvCache {
            q: Tensor::new(q, layout_of(&self.q)),
            kv: self
                .cache(k, v)
                .map_or(KvCache::Tensors { k, v }, KvCache::Paged),
            mask: mask.as_deref(),
        };
        e.run_cache(p, &x, TensorMut::new(out, layout_of(&self.out)), lse)?;
        Ok(())
    }

    fn run_device<T: Element + DeviceRepr + ValidAsZeroBits>(&self, p: &Problem) -> Res<()> {
        let e = engine(self.backend, Path::Exact)?;
        let Some(cuda) = e.cuda() else {
            return Err(Failure::value(format!(
                "{} is not a CUDA backend",
                self.backend
            )));
        };
        let raw = |d: &Desc| RawDeviceTensor {
            ptr: d.0,
            len: d.1,
            layout: layout_of(d),
        };
        let x = RawDeviceQkv {
            q: raw(&self.q),
            k: raw(&self.k),
            v: raw(&self.v),
            mask: self.mask,
        };
        let out = RawDeviceOut {
            out: raw(&self.out),
            lse: self.lse,
        };
        #[allow(unsafe_code)]
        let r = match self.cache(x.k, x.v) {
            // SAFETY: `stream` is the caller's current stream of this very device (the Python
            // half takes it from torch for the tensors' device, and opens the engine of that
            // ordinal), or 0; torch's primary context is the one cudarc opens. The Python half
            // keeps every tensor referenced for the call and records them on `stream`
            // (`Tensor.record_stream`), so the caching allocator reuses their memory only after
            // the stream has run this work; the inputs are not written by this call; the outputs
            // overlap no input nor each other (checked in `Call::run`). The library checks each
            // address against its allocation and device.
            None => unsafe { cuda.run_device_raw::<T>(self.path, self.stream, p, &x, &out) },
            // SAFETY: as above; the pages are inputs like k and v (kept, recorded and checked the
            // same way).
            Some(c) => unsafe {
                cuda.run_device_raw_paged::<T>(self.path, self.stream, p, &x.q, &c, x.mask, &out)
            },
        };
        r?;
        Ok(())
    }
}

/// The digest of the logical `[B, H, S, D]` output in host memory at `t` (any layout), tagged
/// with `path`: the same bytes `detattn::digest_of` hashes for the crate and the CLI.
#[pyfunction]
fn digest(py: Python<'_>, path: &str, dtype: &str, dims: [usize; 4], t: Desc) -> PyResult<String> {
    let path = parse_path(path)?;
    let dtype = parse_dtype(dtype)?;
    let [b, h, s, d] = dims;
    // `digest_of` reads the output's dims from a problem; this one has them (kv_len is unused).
    let p = Problem::builder(Shape::new(b, h, h, s, 1, d))
        .build()
        .map_err(Failure::from)?;
    fn typed<T: Element>(path: Path, p: &Problem, t: &Desc) -> Res<String> {
        // SAFETY: as in `Call::run_host`: a live host array the Python half keeps alive.
        #[allow(unsafe_code)]
        let data = unsafe { host::slice::<T>("out", t.0, t.1)? };
        Ok(detattn::digest_of(path, p, &Tensor::new(data, layout_of(t)))?.to_string())
    }
    let r = py.detach(|| match dtype {
        DType::F32 => typed::<f32>(path, &p, &t),
        DType::F16 => typed::<f16>(path, &p, &t),
        DType::Bf16 => typed::<bf16>(path, &p, &t),
    })?;
    Ok(r)
}

// ---------------------------------------------------------------------------------------------
// Golden problems, engines, probe

/// The golden problems (`detattn::golden::cases`), as dicts: name, dims, dtype, causal, align,
/// kv_lens, mask (per_batch, per_head) or None, scale or None, seed, amp, blank_rows_every,
/// tensorcore, lse (the digest is of the log-sum-exp), seqlens (the sequences' query and key
/// lengths of a variable-length batch, or None), paged (K and V in a paged cache) and its
/// page_size (or None), cache_features (a paged cache or a variable-length batch).
#[pyfunction]
fn golden_cases(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let list = PyList::empty(py);
    for c in detattn::golden::cases() {
        let d = PyDict::new(py);
        d.set_item("name", c.name)?;
        d.set_item("dims", c.dims)?;
        d.set_item("dtype", c.dtype.name())?;
        d.set_item("causal", c.causal)?;
        d.set_item("align", c.align.name())?;
        d.set_item("kv_lens", c.kv_lens.map(<[usize]>::to_vec))?;
        d.set_item("mask", c.mask.map(|m| (m.per_batch, m.per_head)))?;
        d.set_item("scale", c.scale)?;
        d.set_item("seed", c.inputs.seed)?;
        d.set_item("amp", c.inputs.amp)?;
        d.set_item("blank_rows_every", c.inputs.blank_rows_every)?;
        d.set_item("tensorcore", c.runs_on(Path::TensorCore))?;
        d.set_item("lse", c.asks_lse())?;
        d.set_item("seqlens", c.seqlens.map(|(q, k)| (q.to_vec(), k.to_vec())))?;
        d.set_item("paged", c.page_size.is_some())?;
        d.set_item("page_size", c.page_size)?;
        // Paged KV cache or variable-length batch: the package takes them through
        // attention_with_kvcache and attention_varlen.
        d.set_item(
            "cache_features",
            c.page_size.is_some() || c.seqlens.is_some(),
        )?;
        list.append(d)?;
    }
    Ok(list)
}

/// The golden data files compiled into the library: `(file, parsed or None, error or None)`;
/// parsed is a dict of path, architecture, contract, recorded and digests (a list of
/// `(case, hex)` in file order).
#[pyfunction]
fn golden_files(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let list = PyList::empty(py);
    for (file, text) in detattn::golden::FILES {
        match detattn::golden::parse(text) {
            Ok(f) => {
                let d = PyDict::new(py);
                d.set_item("path", f.path.name())?;
                d.set_item("architecture", f.architecture)?;
                d.set_item("contract", f.contract)?;
                d.set_item("recorded", f.recorded)?;
                d.set_item("digests", f.digests)?;
                list.append((file, Some(d), None::<String>))?;
            }
            Err(e) => list.append((file, None::<Bound<'_, PyDict>>, Some(e)))?,
        }
    }
    Ok(list)
}

/// Run golden case `name` with the library's own generator and host entry point on `backend`
/// and `path` (what `detattn selftest` does), and return its digest. The Python self-test uses
/// it for a GPU when no CUDA-capable torch is installed to feed the GPU device tensors.
#[pyfunction]
fn golden_native(py: Python<'_>, name: &str, backend: &str, path: &str) -> PyResult<String> {
    let backend = parse_backend(backend)?;
    let path = parse_path(path)?;
    let Some(case) = detattn::golden::cases()
        .into_iter()
        .find(|c| c.name == name)
    else {
        return Err(Failure::value(format!("no golden case named {name:?}")).into());
    };
    let d = py.detach(|| -> Res<String> {
        let e = engine(backend, path)?;
        Ok(case.digest_on(&e)?.to_string())
    })?;
    Ok(d)
}

/// Open (once) the engine of `backend` and `path` and describe it: `(description, architecture)`
/// (`sm_90`, or `any` for the CPU). Errors as opening it does (no driver, unsupported GPU, a
/// cubin failing its hash).
#[pyfunction]
fn open_engine(py: Python<'_>, backend: &str, path: &str) -> PyResult<(String, String)> {
    let backend = parse_backend(backend)?;
    let path = parse_path(path)?;
    let r = py.detach(|| -> Res<(String, String)> {
        let e = engine(backend, path)?;
        let arch = e.cuda().map_or("any", |c| c.arch());
        Ok((e.describe(), arch.to_string()))
    })?;
    Ok(r)
}

/// What the machine offers: the CUDA driver, GPUs and embedded cubins (`detattn::cuda::probe`),
/// the CPU kernel's instruction set and thread count, and the versions.
#[pyfunction]
fn probe(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let pr = py.detach(detattn::cuda::probe);
    let d = PyDict::new(py);
    d.set_item("version", env!("CARGO_PKG_VERSION"))?;
    d.set_item("contract_version", detattn::CONTRACT_VERSION)?;
    d.set_item("digest_version", detattn::DIGEST_VERSION)?;
    d.set_item("cpu_instruction_set", detattn::cpu::instruction_set())?;
    d.set_item(
        "cpu_threads",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    )?;
    match &pr.driver {
        Ok(v) => {
            d.set_item("driver", *v)?;
            d.set_item("driver_error", None::<String>)?;
        }
        Err(e) => {
            d.set_item("driver", None::<i32>)?;
            d.set_item("driver_error", e)?;
        }
    }
    let devices = PyList::empty(py);
    for g in &pr.devices {
        let x = PyDict::new(py);
        x.set_item("ordinal", g.ordinal)?;
        x.set_item("name", &g.name)?;
        x.set_item("arch", format!("sm_{}{}", g.major, g.minor))?;
        x.set_item("supported", g.supported)?;
        devices.append(x)?;
    }
    d.set_item("devices", devices)?;
    let cubins = PyList::empty(py);
    for c in &pr.cubins {
        let x = PyDict::new(py);
        x.set_item("file", &c.file)?;
        x.set_item("arch", &c.arch)?;
        x.set_item("sha256", &c.sha256)?;
        x.set_item("verified", c.verified)?;
        x.set_item("loads_from", &c.loads_from)?;
        cubins.append(x)?;
    }
    d.set_item("cubins", cubins)?;
    d.set_item("archs", detattn::cuda::ARCHS.to_vec())?;
    d.set_item("archs_run", detattn::cuda::ARCHS_RUN.to_vec())?;
    d.set_item("override_capable", detattn::cuda::OVERRIDE_CAPABLE)?;
    Ok(d)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Error", m.py().get_type::<Error>())?;
    m.add("CONTRACT_VERSION", detattn::CONTRACT_VERSION)?;
    m.add("DIGEST_VERSION", detattn::DIGEST_VERSION)?;
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(digest, m)?)?;
    m.add_function(wrap_pyfunction!(golden_cases, m)?)?;
    m.add_function(wrap_pyfunction!(golden_files, m)?)?;
    m.add_function(wrap_pyfunction!(golden_native, m)?)?;
    m.add_function(wrap_pyfunction!(open_engine, m)?)?;
    m.add_function(wrap_pyfunction!(probe, m)?)?;
    Ok(())
}
