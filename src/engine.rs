//! Choosing where and how to compute: a backend (CPU, a CUDA GPU, or whichever is usable) and a
//! path (`Exact` or `TensorCore`); then the host entry points, which check the tensors in the
//! crate's one order (`tensor::check_call`) before handing them to the backend.

use crate::cpu::CpuBackend;
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::path::Path;
use crate::problem::Problem;
#[cfg(feature = "cuda")]
use crate::tensor::Tensor;
use crate::tensor::{
    Fit, KvCache, Layout, Operand, Operands, Paging, Qkv, QkvCache, TensorMut, check_cache_call,
    check_call,
};
use std::fmt;

/// Where to compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The CPU reference, always available.
    Cpu,
    /// The CUDA GPU with this ordinal.
    Cuda(usize),
    /// GPU 0 if a CUDA driver and a supported GPU are present, else the CPU.
    Auto,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Cpu => f.write_str("cpu"),
            Backend::Cuda(i) => write!(f, "cuda:{i}"),
            Backend::Auto => f.write_str("auto"),
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "cpu" => Ok(Backend::Cpu),
            "auto" => Ok(Backend::Auto),
            "cuda" => Ok(Backend::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Backend::Cuda)
                .ok_or_else(|| {
                    format!("unknown backend {s:?}: expected cpu, cuda, cuda:N or auto")
                }),
        }
    }
}

enum Inner {
    Cpu(CpuBackend),
    #[cfg(feature = "cuda")]
    // Boxed: the CUDA backend holds a context, streams and modules; the CPU variant is small.
    Cuda(Box<crate::cuda::CudaBackend>),
}

/// A resolved backend and path, ready to run problems.
pub struct Engine {
    inner: Inner,
    path: Path,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("backend", &self.describe())
            .field("path", &self.path)
            .finish()
    }
}

impl Engine {
    /// Resolve `backend` and check that it offers `path`.
    ///
    /// `Backend::Auto` never fails for lack of a GPU: it falls back to the CPU (and
    /// [`describe`](Engine::describe) says which it took). `Backend::Cuda(n)` fails with
    /// [`Error::NoCudaDriver`] or [`Error::UnsupportedGpu`] instead of falling back.
    pub fn new(backend: Backend, path: Path) -> Result<Engine> {
        let inner = match backend {
            Backend::Cpu => Inner::Cpu(CpuBackend::new()),
            Backend::Cuda(ordinal) => cuda_backend(ordinal)?,
            Backend::Auto => match cuda_backend(0) {
                Ok(inner) => inner,
                Err(_) => Inner::Cpu(CpuBackend::new()),
            },
        };
        let engine = Engine { inner, path };
        engine.check_path()?;
        Ok(engine)
    }

    /// The CPU `Exact` engine on rayon's global pool.
    pub fn cpu() -> Engine {
        Engine {
            inner: Inner::Cpu(CpuBackend::new()),
            path: Path::Exact,
        }
    }

    /// The CPU `Exact` engine on a private pool of `threads` threads, in
    /// `1..=`[`crate::cpu::MAX_THREADS`] ([`Error::DimensionOutOfRange`] otherwise).
    pub fn cpu_with_threads(threads: usize) -> Result<Engine> {
        Ok(Engine {
            inner: Inner::Cpu(CpuBackend::with_threads(threads)?),
            path: Path::Exact,
        })
    }

    fn check_path(&self) -> Result<()> {
        match (self.path, &self.inner) {
            (Path::Exact, _) => Ok(()),
            (Path::TensorCore, Inner::Cpu(_)) => Err(Error::PathUnavailable {
                path: Path::TensorCore,
                backend: "cpu".into(),
                reason: "tensor cores are a GPU feature; the exact path runs on the CPU",
            }),
            // Loads and verifies the TensorCore cubin now, so that a bad one fails here.
            #[cfg(feature = "cuda")]
            (Path::TensorCore, Inner::Cuda(c)) => c.load_path(Path::TensorCore),
        }
    }

    /// The path this engine runs.
    pub fn path(&self) -> Path {
        self.path
    }

    /// Whether this engine runs on a GPU.
    pub fn is_gpu(&self) -> bool {
        !matches!(self.inner, Inner::Cpu(_))
    }

    /// A one-line description of the backend (`cpu (2 threads, avx512)`: the threads and the CPU
    /// kernel's instruction set; `cuda:0 NVIDIA H100 … sm_90`).
    pub fn describe(&self) -> String {
        match &self.inner {
            Inner::Cpu(c) => format!(
                "cpu ({} threads, {})",
                c.threads(),
                crate::cpu::instruction_set()
            ),
            #[cfg(feature = "cuda")]
            Inner::Cuda(c) => c.describe(),
        }
    }

    /// Compute attention on contiguous `[B, H, S, D]` slices and return the output (contiguous
    /// `[B, Hq, Sq, D]`, in the input dtype).
    ///
    /// Guarantees (see the crate docs for the full contract): on the `Exact` path the bits are
    /// those of docs/numerics.md on every backend; every invalid argument is an [`Error`] returned
    /// before any work. Each slice must hold exactly its tensor ([`Error::TensorLength`]).
    pub fn run<T: Element>(
        &self,
        problem: &Problem,
        q: &[T],
        k: &[T],
        v: &[T],
        mask: Option<&[bool]>,
    ) -> Result<Vec<T>> {
        let n = problem.shape().q_elems();
        let x = Qkv::bhsd(problem, q, k, v, mask);
        self.check(problem, &x, n, Fit::Exact)?;
        let mut out = vec![T::default(); n];
        let s = problem.shape();
        let layout = Layout::bhsd(s.q_heads, s.q_len, s.head_dim);
        self.dispatch(problem, &x, TensorMut::new(&mut out, layout))?;
        Ok(out)
    }

    /// Compute attention on contiguous slices into `out` (`[B, Hq, Sq, D]`, exactly that many
    /// elements). On error `out` is left untouched.
    pub fn run_into<T: Element>(
        &self,
        problem: &Problem,
        q: &[T],
        k: &[T],
        v: &[T],
        mask: Option<&[bool]>,
        out: &mut [T],
    ) -> Result<()> {
        let s = problem.shape();
        let layout = Layout::bhsd(s.q_heads, s.q_len, s.head_dim);
        let x = Qkv::bhsd(problem, q, k, v, mask);
        self.check(problem, &x, out.len(), Fit::Exact)?;
        self.dispatch(problem, &x, TensorMut::new(out, layout))
    }

    /// Compute attention on tensors of any layout (`[B, H, S, D]`, `[B, S, H, D]`, views into
    /// larger or fused buffers: [`crate::Layout`]) into the rows of `out`, which may have its own
    /// layout. The output bits are those of the same problem in contiguous `[B, H, S, D]`: the
    /// layouts move data, never change it. Checked first: each tensor's layout against its buffer
    /// ([`Error::TensorExtent`]) and the output's rows for overlap ([`Error::OutputOverlap`]).
    /// On error `out` is left untouched; otherwise only its rows are written.
    pub fn run_tensors<T: Element>(
        &self,
        problem: &Problem,
        inputs: &Qkv<'_, T>,
        out: TensorMut<'_, T>,
    ) -> Result<()> {
        let ops = Operands {
            out: (&out).into(),
            ..operands(inputs)
        };
        check_call(problem, &ops, Fit::AtLeast)?;
        self.dispatch(problem, inputs, out)
    }

    /// Compute attention with K and V as tensors or a paged cache ([`KvCache`]), into the rows of
    /// `out` (any layout), and, when `lse` is given, each query row's log-sum-exp of its scaled
    /// scores (docs/numerics.md §10) into it: one f32 per row, `[B, Hq, Sq]` row-major (for a
    /// variable-length problem `[Hq, total_q]`, as FlashAttention's `softmax_lse`).
    ///
    /// The output bits are those of the same problem with contiguous K and V: a paged cache is a
    /// layout. Checked first, in the crate's one order (`tensor::check_call`): the tensors'
    /// extents; for a paged cache the page size ([`Error::PageSize`]), the pages' extents, the
    /// block table's length ([`Error::TensorLength`]), each sequence's key length against its
    /// row of the table ([`Error::CacheCapacity`]) and the entries it uses
    /// ([`Error::BlockTableEntry`]); the mask; the output; `lse`'s length. On error nothing is
    /// written. A GPU engine runs paged caches (gathered into the tensors they stand for on the
    /// host, then uploaded) and variable-length problems, and writes the log-sum-exp on both
    /// paths: on `Exact` the CPU's bits, on `TensorCore` the bits of
    /// docs/tensorcore-numerics.md §10 (close to `Exact`'s, not equal).
    pub fn run_cache<T: Element>(
        &self,
        problem: &Problem,
        inputs: &QkvCache<'_, T>,
        out: TensorMut<'_, T>,
        lse: Option<&mut [f32]>,
    ) -> Result<()> {
        let (k, v, paging) = match &inputs.kv {
            KvCache::Tensors { k, v } => (k.into(), v.into(), None),
            KvCache::Paged(c) => ((&c.k).into(), (&c.v).into(), Some(Paging::from(c))),
        };
        let ops = Operands {
            q: (&inputs.q).into(),
            k,
            v,
            mask: inputs.mask.map(<[bool]>::len),
            out: (&out).into(),
        };
        check_cache_call(
            problem,
            &ops,
            paging,
            lse.as_deref().map(<[f32]>::len),
            Fit::AtLeast,
        )?;
        match &self.inner {
            Inner::Cpu(c) => c.run(problem, inputs, out, lse),
            #[cfg(feature = "cuda")]
            Inner::Cuda(c) => {
                // A paged cache reaches the GPU's host entry as the tensors it stands for (the
                // rows it reads, gathered on the host before the upload): a layout, so the same
                // bits; the device entry points take tensors only.
                let gathered;
                let (k, v) = match &inputs.kv {
                    KvCache::Tensors { k, v } => (*k, *v),
                    KvCache::Paged(c) => {
                        gathered = c.as_tensors(problem);
                        let (k, v, l) = &gathered;
                        (Tensor::new(&k[..], *l), Tensor::new(&v[..], *l))
                    }
                };
                let x = Qkv {
                    q: inputs.q,
                    k,
                    v,
                    mask: inputs.mask,
                };
                c.run_host(self.path, problem, &x, out, lse)
            }
        }
    }

    fn check<T>(&self, p: &Problem, x: &Qkv<'_, T>, out_len: usize, fit: Fit) -> Result<()> {
        let s = p.shape();
        let ops = Operands {
            out: Operand {
                len: out_len,
                layout: Layout::bhsd(s.q_heads, s.q_len, s.head_dim),
            },
            ..operands(x)
        };
        check_call(p, &ops, fit)
    }

    fn dispatch<T: Element>(
        &self,
        p: &Problem,
        x: &Qkv<'_, T>,
        out: TensorMut<'_, T>,
    ) -> Result<()> {
        match &self.inner {
            Inner::Cpu(c) => c.run(p, &(*x).into(), out, None),
            #[cfg(feature = "cuda")]
            Inner::Cuda(c) => c.run_host(self.path, p, x, out, None),
        }
    }

    /// Compute attention on device-resident tensors on `stream`, on this engine's path: see
    /// [`crate::cuda::CudaBackend::run_device`]. [`Error::PathUnavailable`] on a CPU engine.
    #[cfg(feature = "cuda")]
    pub fn run_device<T: Element + crate::cuda::DeviceRepr>(
        &self,
        stream: &crate::cuda::CudaStream,
        problem: &Problem,
        inputs: &crate::cuda::DeviceQkv<'_, T>,
        out: crate::cuda::DeviceTensorMut<'_, T>,
    ) -> Result<()> {
        match &self.inner {
            Inner::Cuda(c) => c.run_device(self.path, stream, problem, inputs, out),
            Inner::Cpu(_) => Err(Error::PathUnavailable {
                path: self.path,
                backend: "cpu".into(),
                reason: "device-resident tensors need a CUDA engine",
            }),
        }
    }

    /// The CUDA backend of this engine, for the device-resident entry points.
    #[cfg(feature = "cuda")]
    pub fn cuda(&self) -> Option<&crate::cuda::CudaBackend> {
        match &self.inner {
            Inner::Cuda(c) => Some(c.as_ref()),
            Inner::Cpu(_) => None,
        }
    }
}

#[cfg(feature = "cuda")]
fn cuda_backend(ordinal: usize) -> Result<Inner> {
    Ok(Inner::Cuda(Box::new(crate::cuda::CudaBackend::new(
        ordinal,
    )?)))
}

#[cfg(not(feature = "cuda"))]
fn cuda_backend(_ordinal: usize) -> Result<Inner> {
    Err(Error::NoCudaDriver {
        reason: "detattn was built without the `cuda` feature".into(),
    })
}

/// The input operands of a host call (the output's is added by the caller).
fn operands<T>(x: &Qkv<'_, T>) -> Operands {
    Operands {
        q: (&x.q).into(),
        k: (&x.k).into(),
        v: (&x.v).into(),
        mask: x.mask.map(<[bool]>::len),
        out: Operand {
            len: 0,
            layout: Layout::bhsd(0, 0, 0),
        },
    }
}
