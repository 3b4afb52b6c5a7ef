//! Choosing where and how to compute: a backend (CPU, a CUDA GPU, or whichever is usable) and a
//! path (`Exact` or `TensorCore`).

use crate::cpu::CpuBackend;
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::problem::Problem;
use std::fmt;

/// The arithmetic path (DESIGN.md §1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    /// f32 arithmetic in the fixed order of docs/numerics.md. Bit-identical on the CPU and on
    /// every supported GPU; defines the golden digests.
    Exact,
    /// f16/bf16 tensor-core arithmetic (`mma.sync`) with f32 accumulators, CUDA only
    /// (docs/tensorcore.md). Takes f16/bf16 inputs with head_dim 64, 128 or 256, causal, kv_lens,
    /// GQA/MQA, a boolean mask and either `NonFinitePolicy`; anything else is a typed error
    /// ([`Error::DTypeUnsupported`], [`Error::HeadDimUnsupported`]), never a fallback. Promised:
    /// on one GPU architecture the bits are the same run to run, whatever the batch around a
    /// problem, decode or prefill, the subset of query rows or the stream; relative L2 error
    /// against `Exact` ≤ 1e-2 (bf16) / 2e-3 (f16) on the tested problems; no NaN or ±inf from
    /// finite input (any magnitude); under `Propagate` the canonical NaN on exactly the rows the
    /// `Exact` contract poisons. Not promised: the CPU's or `Exact`'s bits, the same bits on
    /// another architecture (golden digests are recorded per architecture). On the CPU backend:
    /// [`Error::PathUnavailable`].
    TensorCore,
}

impl Path {
    /// Lower-case name (`exact`, `tensorcore`).
    pub fn name(self) -> &'static str {
        match self {
            Path::Exact => "exact",
            Path::TensorCore => "tensorcore",
        }
    }
    /// The code of this path in the digest encoding.
    pub fn code(self) -> u8 {
        match self {
            Path::Exact => 0,
            Path::TensorCore => 1,
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Path {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "exact" => Ok(Path::Exact),
            "tensorcore" => Ok(Path::TensorCore),
            _ => Err(format!("unknown path {s:?}: expected exact or tensorcore")),
        }
    }
}

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

    /// The CPU `Exact` engine on a private pool of `threads` threads.
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
                reason: "tensor cores are a GPU feature; use Path::Exact on the CPU",
            }),
            // Loads and verifies the TensorCore cubin now, so that a bad one fails here.
            #[cfg(feature = "cuda")]
            (Path::TensorCore, Inner::Cuda(c)) => c.tensorcore().map(|_| ()),
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

    /// A one-line description of the backend (`cpu (2 threads)`, `cuda:0 NVIDIA H100 … sm_90`).
    pub fn describe(&self) -> String {
        match &self.inner {
            Inner::Cpu(c) => format!("cpu ({} threads)", c.threads()),
            #[cfg(feature = "cuda")]
            Inner::Cuda(c) => c.describe(),
        }
    }

    /// Compute attention and return the output in the input dtype.
    ///
    /// Guarantees (see the crate docs for the full contract): on the `Exact` path the bits are
    /// those of docs/numerics.md on every backend; every invalid argument is an [`Error`] returned
    /// before any work.
    pub fn run<T: Element>(
        &self,
        problem: &Problem,
        q: &[T],
        k: &[T],
        v: &[T],
        mask: Option<&[bool]>,
    ) -> Result<Vec<T>> {
        problem.check_inputs(q.len(), k.len(), v.len(), mask.map(<[bool]>::len))?;
        let mut out = vec![T::default(); problem.shape().q_elems()];
        self.run_checked(problem, q, k, v, mask, &mut out)?;
        Ok(out)
    }

    /// Compute attention into `out` (`[B, Hq, Sq, D]`). On error `out` is left untouched.
    pub fn run_into<T: Element>(
        &self,
        problem: &Problem,
        q: &[T],
        k: &[T],
        v: &[T],
        mask: Option<&[bool]>,
        out: &mut [T],
    ) -> Result<()> {
        problem.check_inputs(q.len(), k.len(), v.len(), mask.map(<[bool]>::len))?;
        problem.check_output(out.len())?;
        self.run_checked(problem, q, k, v, mask, out)
    }

    fn run_checked<T: Element>(
        &self,
        problem: &Problem,
        q: &[T],
        k: &[T],
        v: &[T],
        mask: Option<&[bool]>,
        out: &mut [T],
    ) -> Result<()> {
        match &self.inner {
            Inner::Cpu(c) => c.run(problem, q, k, v, mask, out),
            #[cfg(feature = "cuda")]
            Inner::Cuda(c) => c.run(problem, self.path, q, k, v, mask, out),
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
