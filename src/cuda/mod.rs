//! The CUDA backend: both paths on NVIDIA GPUs (sm_80, sm_86, sm_89, sm_90 run or built; see
//! [`ARCHS`] and docs/design.md for which were run).
//!
//! What it promises: on every GPU it accepts, the `Exact` path's output bits are those of the CPU
//! reference (docs/numerics.md), for every input, dtype, option and layout; the `TensorCore` path
//! keeps its contract (docs/tensorcore.md). The kernels are the embedded cubins of
//! `kernels/cubin/`, each checked against its recorded SHA-256 before it is loaded. What it does
//! not: it never compiles CUDA at run time and never falls back to another binary or to the CPU
//! (`Backend::Auto` in the engine is where a fallback is chosen). Without a CUDA driver everything
//! here returns [`Error::NoCudaDriver`]; nothing panics.
//!
//! Reading order: `path` (what a GPU path is: plan, scratch, launches), `entry` (the entry points,
//! written once for every path), `varlen` (variable-length batches on any path), `paged` (paged
//! caches on the device entry point), `exact` and `tensorcore` (the two paths), `backend` (the
//! opened device and its public entry points), `launch` (the FFI edge), `cubins`, `timing`,
//! `guards`.

/// Run `$body` with `$p` bound to the path module of `$path`, wrapped so that it also takes
/// variable-length problems (`varlen.rs`): the one place a path is picked, for every entry point
/// (`backend.rs`, and the raw-address ones in `entry.rs`; a new path is one more arm here). The
/// call site has `Path` and `varlen::Sequences` in scope.
macro_rules! with_path {
    ($self:ident, $path:expr, |$p:ident| $body:expr) => {
        match $path {
            Path::Exact => {
                let $p = &Sequences(&$self.exact);
                $body
            }
            Path::TensorCore => {
                let $p = &Sequences($self.tensorcore()?);
                $body
            }
        }
    };
}

mod backend;
mod cubins;
mod entry;
mod exact;
mod guards;
mod launch;
mod paged;
mod path;
mod tensorcore;
mod timing;
mod varlen;

pub use backend::{CudaBackend, probe};
pub use cubins::{ARCHS, OVERRIDE_CAPABLE, TEST_CUBIN_DIR_ENV};

/// The architectures whose cubins have been run and checked on a real GPU (selftest, the GPU
/// contract tests): `sm_90` on an NVIDIA H100 (docs/perf.md has the dates). The others of
/// [`ARCHS`] are built and audited from the same sources but were never executed here.
pub const ARCHS_RUN: [&str; 1] = ["sm_90"];
pub use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
pub use path::{
    DevicePagedKv, DeviceQkv, DeviceTensor, DeviceTensorMut, RawDeviceOut, RawDevicePagedKv,
    RawDeviceQkv, RawDeviceTensor,
};
pub use tensorcore::TENSORCORE_HEAD_DIMS;
pub use timing::{BenchOptions, BenchResult, PagedRead};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::path::Path;
use crate::problem::Problem;

/// What `path` takes of `p` in `dtype` — element type, head dim, launch limits — checked without
/// a GPU: the same typed errors the entry points return before any work. For tools that report
/// them on any machine (the CLI checks a problem before it opens a backend). A variable-length
/// problem is checked as its packed tensors and as each sequence alone, as the entry points run it.
pub fn check_path(path: Path, p: &Problem, dtype: DType) -> Result<()> {
    match path {
        Path::Exact => Ok(()),
        Path::TensorCore => (0..p.sequences())
            .map(|b| p.sequence_problem(b))
            .chain(std::iter::once(p.packed()))
            .try_for_each(|sub| tensorcore::validate(&sub, dtype, None).map(|_| ())),
    }
}

/// A paged cache handed to a plan that does not read pages (`GpuPath::reads_pages`): the entry
/// points gather for those, so this is an internal error, never a silent misread.
pub(crate) fn unread_pages(path: &str) -> Error {
    Error::Cuda {
        op: "launch planning",
        message: format!("{path} path: a paged cache for a plan that does not read pages"),
    }
}

/// A GPU as seen by the probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device ordinal.
    pub ordinal: usize,
    /// Marketing name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// Compute capability.
    pub major: i32,
    /// Compute capability.
    pub minor: i32,
    /// Whether embedded cubins exist for this architecture.
    pub supported: bool,
}

/// One embedded kernel binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CubinInfo {
    /// File name in `kernels/cubin/`.
    pub file: String,
    /// `sm_90` etc.
    pub arch: String,
    /// SHA-256 recorded in `kernels/cubin/SHA256SUMS`.
    pub sha256: String,
    /// Whether the embedded bytes hash to it.
    pub verified: bool,
    /// Where this process loads the cubin from: `embedded`; in a `test-override` build with
    /// [`TEST_CUBIN_DIR_ENV`] set, the test folder; or the error loading it would give.
    pub loads_from: String,
}

/// What the machine offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Driver found (its CUDA version, e.g. 13000), or why not.
    pub driver: std::result::Result<i32, String>,
    /// GPUs found.
    pub devices: Vec<DeviceInfo>,
    /// Embedded cubins.
    pub cubins: Vec<CubinInfo>,
}

/// Map a driver error to [`Error::Cuda`] naming the call.
pub(crate) fn drv(op: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error {
    move |e| Error::Cuda {
        op,
        message: e.to_string(),
    }
}
