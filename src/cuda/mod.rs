//! The CUDA backend of the `Exact` path (issue 3).
//!
//! What it promises: on every GPU it accepts (sm_80, sm_86, sm_89, sm_90), the output bits are
//! those of the CPU reference (docs/numerics.md), for every input, dtype and option; the kernels
//! are the embedded cubins of `kernels/cubin/`, each checked against its manifest SHA-256 before
//! it is loaded. What it does not: it never compiles CUDA at run time and never falls back to
//! another binary or to the CPU (`Backend::Auto` in the engine is where a fallback is chosen).
//!
//! Without a CUDA driver everything here returns [`Error::NoCudaDriver`]; nothing panics.
//!
//! Layout: `cubins` (embedded binaries and their integrity check), `launch` (the FFI edge, the
//! only `unsafe`), `backend` (the `Exact` path's buffers and launch sequence), `tensorcore` (the
//! `TensorCore` path's), `guards` and `timing` (what both share: buffer addresses held for a
//! launch, the benchmark protocol). This file is the index.

mod backend;
mod cubins;
mod guards;
mod launch;
mod tensorcore;
mod timing;

use crate::dtype::{DType, Element};
use crate::engine::Path;
use crate::error::{Error, Result, TensorName};
use crate::problem::Problem;
use std::sync::Arc;

pub use cubins::{ARCHS, OVERRIDE_CAPABLE, TEST_CUBIN_DIR_ENV};
pub use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr};
pub use tensorcore::{
    TENSORCORE_HEAD_DIMS, golden_digest, tensorcore_expected_digests, tensorcore_supports,
};

/// What the `TensorCore` path takes — element type, head dim, NaN policy, launch limits —
/// checked without a GPU: the same typed errors ([`Error::DTypeUnsupported`],
/// [`Error::HeadDimUnsupported`], [`Error::PathUnavailable`], [`Error::DimensionOutOfRange`])
/// its entry points return before any work. For tools that report them on any machine (the CLI
/// checks a `--path tensorcore` problem before it opens a backend).
pub fn tensorcore_check(p: &Problem, dtype: DType) -> Result<()> {
    tensorcore::validate(p, dtype)
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

/// The `Reject` decision from the three flag words a device scan leaves (q, k, v; non-zero: that
/// tensor holds a NaN or ±inf): [`Error::NonFinite`] naming the first, in that order.
pub(crate) fn nonfinite_decision(words: &[u32]) -> Result<()> {
    let names = [TensorName::Q, TensorName::K, TensorName::V];
    match words.iter().position(|&w| w != 0) {
        Some(i) => Err(Error::NonFinite { tensor: names[i] }),
        None => Ok(()),
    }
}

/// Map a driver error to [`Error::Cuda`] naming the call.
pub(crate) fn drv(op: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error {
    move |e| Error::Cuda {
        op,
        message: e.to_string(),
    }
}

/// Probe the driver, the GPUs and the embedded cubins. Never panics, also without a driver.
pub fn probe() -> Probe {
    let cubins = cubins::embedded()
        .into_iter()
        .map(|e| CubinInfo {
            file: e.file.to_string(),
            arch: e.arch.to_string(),
            sha256: e.sha256,
            verified: e.verified,
            loads_from: e.loads_from,
        })
        .collect();
    if !launch::driver_present() {
        return Probe {
            driver: Err("libcuda.so could not be loaded (no NVIDIA driver on this machine)".into()),
            devices: vec![],
            cubins,
        };
    }
    let driver = launch::driver_version().map_err(|e| e.to_string());
    let devices = match &driver {
        Ok(_) => launch::devices().unwrap_or_default(),
        Err(_) => vec![],
    };
    let devices = devices
        .into_iter()
        .map(|(ordinal, name, major, minor)| DeviceInfo {
            ordinal,
            name,
            major,
            minor,
            supported: cubins::arch_of(major, minor).is_some(),
        })
        .collect();
    Probe {
        driver,
        devices,
        cubins,
    }
}

/// A CUDA device with the embedded `Exact` kernels loaded (and the `TensorCore` kernels, on
/// first use of that path).
#[derive(Debug)]
pub struct CudaBackend {
    inner: backend::Inner,
    /// `sm_90` etc.: the architecture whose cubins were loaded.
    arch: &'static str,
    /// The `TensorCore` cubin, loaded and verified on first use (or why it could not be).
    tc: std::sync::OnceLock<Result<tensorcore::Tc>>,
}

impl CudaBackend {
    /// Open GPU `ordinal`: probe the driver, pick the cubin for the device's exact architecture,
    /// check its SHA-256 against the manifest, load it.
    ///
    /// Errors: [`Error::NoCudaDriver`] without a driver or with no such GPU,
    /// [`Error::UnsupportedGpu`] (naming the supported architectures) for another architecture,
    /// [`Error::CubinIntegrity`] when the cubin does not match its manifest hash.
    pub fn new(ordinal: usize) -> Result<Self> {
        if !launch::driver_present() {
            return Err(Error::NoCudaDriver {
                reason: "libcuda.so could not be loaded".into(),
            });
        }
        let inner = backend::Inner::open(ordinal)?;
        // Inner::open found this device and its architecture among the shipped ones.
        let arch = launch::devices()?
            .into_iter()
            .find(|d| d.0 == ordinal)
            .and_then(|(_, _, major, minor)| cubins::arch_of(major, minor))
            .unwrap_or("unknown");
        Ok(CudaBackend {
            inner,
            arch,
            tc: std::sync::OnceLock::new(),
        })
    }

    /// The architecture of the loaded kernels (`sm_90`): the `TensorCore` path's bits, and so
    /// its golden digests, are per architecture.
    pub fn arch(&self) -> &'static str {
        self.arch
    }

    /// The `TensorCore` kernels, loading and verifying `tensorcore.<arch>.cubin` on first use.
    /// Errors as [`CudaBackend::new`] ([`Error::CubinIntegrity`], [`Error::Cuda`]).
    pub(crate) fn tensorcore(&self) -> Result<&tensorcore::Tc> {
        self.tc
            .get_or_init(|| tensorcore::Tc::open(&self.inner.stream().context().clone(), self.arch))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The embedded `TensorCore` cubin this device runs (`tensorcore.sm_90.cubin`), loading it.
    pub fn tensorcore_cubin(&self) -> Result<&str> {
        Ok(self.tensorcore()?.file())
    }

    /// One-line description (`cuda:0 NVIDIA H100 80GB HBM3 (sm_90)`).
    pub fn describe(&self) -> String {
        self.inner.describe()
    }

    /// Where the loaded cubin came from (`embedded exact.sm_90.cubin`, or the test override).
    pub fn cubin_source(&self) -> &str {
        self.inner.cubin_source()
    }

    /// The stream the host entry point runs on (the context's default stream).
    pub fn stream(&self) -> Arc<CudaStream> {
        self.inner.stream()
    }

    /// A new stream on this device (for concurrent launches).
    pub fn new_stream(&self) -> Result<Arc<CudaStream>> {
        self.inner.new_stream()
    }

    /// Host slices in and out (validated by the engine before this is called). Under `Reject`
    /// the inputs are scanned on the host first; nothing is uploaded if one is non-finite.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run<T: Element>(
        &self,
        p: &Problem,
        path: Path,
        q: &[T],
        k: &[T],
        v: &[T],
        mask: Option<&[bool]>,
        out: &mut [T],
    ) -> Result<()> {
        match path {
            Path::Exact => self.inner.run_host(p, q, k, v, mask, out),
            Path::TensorCore => {
                self.tensorcore()?
                    .run_host(&self.inner.stream(), p, q, k, v, mask, out)
            }
        }
    }

    /// Device-resident buffers, launched on `stream` (asynchronous: synchronise the stream before
    /// reading `out`). The mask is one byte per entry (0 or 1). Validates lengths and devices;
    /// under `Reject` scans the inputs on the GPU first (reading every element, then deciding
    /// once; this waits for the scan) and writes nothing if one is non-finite.
    #[allow(clippy::too_many_arguments)]
    pub fn run_device<T: Element + cudarc::driver::DeviceRepr>(
        &self,
        stream: &CudaStream,
        p: &Problem,
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        mask: Option<&CudaSlice<u8>>,
        out: &mut CudaSlice<T>,
    ) -> Result<()> {
        self.inner.run_device(stream, p, q, k, v, mask, out, true)
    }

    /// The `TensorCore` path on device-resident buffers (f16/bf16, head_dim 64/128/256),
    /// launched on `stream` (asynchronous: synchronise the stream before reading `out`). The mask
    /// is one byte per entry (nonzero = attend). Validates lengths, devices and what the path
    /// takes (typed errors: [`Error::DTypeUnsupported`], [`Error::HeadDimUnsupported`]). Under
    /// `NonFinitePolicy::Reject` the path's own GPU scan runs first (every element read, one
    /// decision on three words; this waits for the scan) and nothing is written if an input is
    /// non-finite ([`Error::NonFinite`] naming q, k or v); under `Propagate` the rows the `Exact`
    /// contract poisons are the canonical NaN and every other row has the bits of the same call
    /// with the non-finite values replaced by +0 (docs/tensorcore.md, "Non-finite inputs"). Same
    /// bits as the host entry point ([`crate::Engine::run`]).
    #[allow(clippy::too_many_arguments)]
    pub fn run_device_tensorcore<T: Element + cudarc::driver::DeviceRepr>(
        &self,
        stream: &CudaStream,
        p: &Problem,
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        mask: Option<&CudaSlice<u8>>,
        out: &mut CudaSlice<T>,
    ) -> Result<()> {
        self.inner
            .check_device_args(stream, p, q, k, v, mask, out)?;
        let tc = self.tensorcore()?;
        tc.run_device(&self.inner.stream(), stream, p, q, k, v, mask, out)
    }

    /// Microseconds (CUDA events) of one launch of the `Exact` kernels on device-resident inputs:
    /// the preparation kernels, the GPU non-finite scan under `Reject`, and the attention kernel,
    /// exactly as [`run_device`](CudaBackend::run_device) enqueues them. For timing harnesses
    /// (the constant-time test): the attention kernel always runs and writes `out`, whatever the
    /// scan finds (the `Reject` decision is not taken here), so the time covers the same work for
    /// every input. Scratch buffers are allocated before the first event, outside the timing.
    #[allow(clippy::too_many_arguments)]
    pub fn time_launch<T: Element + cudarc::driver::DeviceRepr>(
        &self,
        stream: &CudaStream,
        p: &Problem,
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        mask: Option<&CudaSlice<u8>>,
        out: &mut CudaSlice<T>,
    ) -> Result<f32> {
        self.inner.time_launch(stream, p, q, k, v, mask, out)
    }

    /// Time the `Exact` kernels with CUDA events: seeded inputs (never zeros) generated on the
    /// host, `rotate` input sets uploaded, `warmup` untimed launches, then `iters` timed launches
    /// cycling through the sets. Each timed launch is the preparation kernel plus the attention
    /// kernel (what a call costs on the GPU, without uploads or the `Reject` scan). The same as
    /// [`bench_path`](CudaBackend::bench_path) with `Path::Exact` and `per_sample = 1`.
    pub fn bench(
        &self,
        p: &Problem,
        dtype: DType,
        seed: u64,
        warmup: usize,
        iters: usize,
        rotate: usize,
    ) -> Result<BenchResult> {
        self.bench_path(Path::Exact, p, dtype, seed, warmup, iters, rotate, 1)
    }

    /// Like [`bench`](CudaBackend::bench), for either path. `per_sample` launches (each a whole
    /// call's GPU work, cycling the rotated input sets) run back to back between one pair of
    /// CUDA events; the figures are per launch. `per_sample = 1` is the anchors' protocol.
    ///
    /// Both paths: seeded input sets (never zeros) generated on the host and uploaded once, the
    /// output poisoned once; a launch is what one host call runs on the GPU without uploads —
    /// `Path::Exact`: the K/V preparation and the attention kernel; `Path::TensorCore`: under
    /// `Reject` the attention kernel (without the scan; the inputs are finite), under
    /// `Propagate` sanitize, kernel and poison.
    #[allow(clippy::too_many_arguments)]
    pub fn bench_path(
        &self,
        path: Path,
        p: &Problem,
        dtype: DType,
        seed: u64,
        warmup: usize,
        iters: usize,
        rotate: usize,
        per_sample: usize,
    ) -> Result<BenchResult> {
        match path {
            Path::Exact => {
                let e = &self.inner;
                match dtype {
                    DType::F32 => e.bench::<f32>(p, seed, warmup, iters, rotate, per_sample),
                    DType::F16 => e.bench::<half::f16>(p, seed, warmup, iters, rotate, per_sample),
                    DType::Bf16 => {
                        e.bench::<half::bf16>(p, seed, warmup, iters, rotate, per_sample)
                    }
                }
            }
            Path::TensorCore => {
                let tc = self.tensorcore()?;
                let st = self.inner.stream();
                match dtype {
                    DType::F16 => {
                        tc.bench::<half::f16>(&st, p, seed, warmup, iters, rotate, per_sample)
                    }
                    DType::Bf16 => {
                        tc.bench::<half::bf16>(&st, p, seed, warmup, iters, rotate, per_sample)
                    }
                    DType::F32 => tc.bench::<f32>(&st, p, seed, warmup, iters, rotate, per_sample),
                }
            }
        }
    }

    /// Like [`time_launch`](CudaBackend::time_launch), for either path: CUDA events around
    /// exactly the GPU work [`run_device`](CudaBackend::run_device) /
    /// [`run_device_tensorcore`](CudaBackend::run_device_tensorcore) enqueues for this problem
    /// and policy (under `Reject`: the device non-finite scan without the host decision, then
    /// the kernel; under `Propagate` on the `TensorCore` path: sanitize, kernel, poison), so the
    /// time covers the same work whatever the values. `out` is written. Scratch buffers are
    /// allocated before the first event.
    #[allow(clippy::too_many_arguments)]
    pub fn time_launch_path<T: Element + DeviceRepr>(
        &self,
        path: Path,
        stream: &CudaStream,
        p: &Problem,
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        mask: Option<&CudaSlice<u8>>,
        out: &mut CudaSlice<T>,
    ) -> Result<f32> {
        match path {
            Path::Exact => self.time_launch(stream, p, q, k, v, mask, out),
            Path::TensorCore => {
                self.inner
                    .check_device_args(stream, p, q, k, v, mask, out)?;
                let tc = self.tensorcore()?;
                tc.time_launch(&self.inner.stream(), stream, p, q, k, v, mask, out)
            }
        }
    }
}
