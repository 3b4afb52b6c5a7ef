//! The CUDA backend (issue 3). This file fixes the public API; the kernel launch behind it lands
//! with `kernels/exact.cu`. Until then every entry point returns an error: it never pretends to
//! compute.

use crate::dtype::{DType, Element};
use crate::engine::Path;
use crate::error::{Error, Result};
use crate::problem::Problem;

pub use cudarc::driver::{CudaSlice, CudaStream};

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
    /// Whether an embedded cubin exists for this architecture.
    pub supported: bool,
}

/// One embedded kernel binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CubinInfo {
    /// File name in `kernels/cubin/`.
    pub file: String,
    /// `sm_90` etc.
    pub arch: String,
    /// SHA-256 from the manifest.
    pub sha256: String,
    /// Whether the embedded bytes hash to it.
    pub verified: bool,
}

/// What the machine offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Driver found, or why not.
    pub driver: std::result::Result<i32, String>,
    /// GPUs found.
    pub devices: Vec<DeviceInfo>,
    /// Embedded cubins.
    pub cubins: Vec<CubinInfo>,
}

/// Kernel timing from CUDA events (microseconds).
#[derive(Clone, Debug, PartialEq)]
pub struct BenchResult {
    /// Median of the timed launches.
    pub median_us: f64,
    /// Fastest.
    pub min_us: f64,
    /// Slowest.
    pub max_us: f64,
    /// Timed launches.
    pub iters: usize,
    /// Input sets rotated between launches (so they do not sit in L2).
    pub rotate: usize,
}

/// Probe the driver, the GPUs and the embedded cubins. Never panics, also without a driver.
pub fn probe() -> Probe {
    Probe {
        driver: Err("not implemented yet".into()),
        devices: vec![],
        cubins: vec![],
    }
}

/// A CUDA device with the embedded `Exact` kernels loaded.
#[derive(Debug)]
pub struct CudaBackend {
    _private: (),
}

impl CudaBackend {
    /// Open GPU `ordinal`: probe the driver, pick the cubin for the device's architecture, check
    /// its SHA-256 against the manifest, load it.
    pub fn new(_ordinal: usize) -> Result<Self> {
        // SAFETY: only tries to dlopen the driver library; calls nothing in it.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(Error::NoCudaDriver {
                reason: "libcuda.so could not be loaded".into(),
            });
        }
        Err(Error::NoCudaDriver {
            reason: "the CUDA Exact kernel is not built into this version".into(),
        })
    }

    /// One-line description (`cuda:0 NVIDIA H100 80GB HBM3 (sm_90)`).
    pub fn describe(&self) -> String {
        "cuda".into()
    }

    /// The device's default stream.
    pub fn stream(&self) -> std::sync::Arc<CudaStream> {
        unimplemented!("lands with the kernel")
    }

    /// A new stream on this device (for concurrent launches).
    pub fn new_stream(&self) -> Result<std::sync::Arc<CudaStream>> {
        Err(Error::NoCudaDriver {
            reason: "not built".into(),
        })
    }

    /// Host slices in and out (validated by the engine before this is called).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run<T: Element>(
        &self,
        _p: &Problem,
        _path: Path,
        _q: &[T],
        _k: &[T],
        _v: &[T],
        _mask: Option<&[bool]>,
        _out: &mut [T],
    ) -> Result<()> {
        Err(Error::NoCudaDriver {
            reason: "not built".into(),
        })
    }

    /// Device-resident buffers, launched on `stream` (asynchronous: synchronise the stream before
    /// reading `out`). The mask is one byte per entry (0 or 1). Validates lengths and devices;
    /// under `Reject` scans the inputs on the GPU first.
    #[allow(clippy::too_many_arguments)]
    pub fn run_device<T: Element + cudarc::driver::DeviceRepr>(
        &self,
        _stream: &CudaStream,
        _p: &Problem,
        _q: &CudaSlice<T>,
        _k: &CudaSlice<T>,
        _v: &CudaSlice<T>,
        _mask: Option<&CudaSlice<u8>>,
        _out: &mut CudaSlice<T>,
    ) -> Result<()> {
        Err(Error::NoCudaDriver {
            reason: "not built".into(),
        })
    }

    /// Time the kernel with CUDA events: seeded inputs (never zeros) generated on the host,
    /// `rotate` input sets uploaded, `warmup` untimed launches, then `iters` timed launches
    /// cycling through the sets.
    pub fn bench(
        &self,
        _p: &Problem,
        _dtype: DType,
        _seed: u64,
        _warmup: usize,
        _iters: usize,
        _rotate: usize,
    ) -> Result<BenchResult> {
        Err(Error::NoCudaDriver {
            reason: "not built".into(),
        })
    }
}
