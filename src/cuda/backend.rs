//! [`CudaBackend`]: one opened GPU with its verified kernels, and the public device entry points.
//! Each entry point picks the path's module and hands it to the one implementation in `entry.rs`.

use super::cubins;
use super::entry::{self, Device};
use super::exact::Exact;
use super::launch::{self, Module};
use super::paged::Gather;
use super::path::{DevicePagedKv, DeviceQkv, DeviceTensor, DeviceTensorMut};
use super::tensorcore::TensorCore;
use super::timing::{BenchOptions, BenchResult};
use super::varlen::Sequences;
use super::{CubinInfo, DeviceInfo, Probe, drv};
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::path::Path;
use crate::problem::Problem;
use crate::tensor::{Qkv, TensorMut};
use cudarc::driver::{CudaContext, CudaStream, DeviceRepr, ValidAsZeroBits};
use half::{bf16, f16};
use std::sync::{Arc, OnceLock};

/// A CUDA device with the embedded `Exact` kernels loaded (and the `TensorCore` kernels, on first
/// use of that path).
#[derive(Debug)]
pub struct CudaBackend {
    pub(super) dev: Device,
    pub(super) exact: Exact,
    /// The paged-cache gather of the device entry point (in the Exact module; both paths use it).
    pub(super) gather: Gather,
    /// Where each loaded cubin came from (`embedded`, or a test folder).
    sources: std::sync::Mutex<Vec<String>>,
    /// The `TensorCore` kernels, loaded and verified on first use (or why they could not be).
    tc: OnceLock<Result<TensorCore>>,
}

/// Run `$body` with `$t` the element type of `$dtype`.
macro_rules! with_dtype {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $t = f32;
                $body
            }
            DType::F16 => {
                type $t = f16;
                $body
            }
            DType::Bf16 => {
                type $t = bf16;
                $body
            }
        }
    };
}

impl CudaBackend {
    /// Open GPU `ordinal`: probe the driver, pick the cubins for the device's exact architecture,
    /// check their SHA-256, load the `Exact` one.
    ///
    /// Errors: [`Error::NoCudaDriver`] without a driver or with no such GPU,
    /// [`Error::UnsupportedGpu`] (naming the supported architectures) for another architecture,
    /// [`Error::CubinIntegrity`] when a cubin does not match its recorded hash.
    pub fn new(ordinal: usize) -> Result<Self> {
        if !launch::driver_present() {
            return Err(Error::NoCudaDriver {
                reason: "libcuda.so could not be loaded".into(),
            });
        }
        launch::driver_version().map_err(|e| Error::NoCudaDriver {
            reason: e.to_string(),
        })?;
        let Some((_, name, major, minor)) = launch::devices()?.into_iter().find(|d| d.0 == ordinal)
        else {
            return Err(Error::NoCudaDriver {
                reason: format!("no CUDA GPU with ordinal {ordinal}"),
            });
        };
        let arch = cubins::arch_of(major, minor).ok_or_else(|| Error::UnsupportedGpu {
            ordinal,
            name: name.clone(),
            major,
            minor,
            supported: cubins::ARCHS.join(", "),
        })?;
        let cubin = cubins::load("exact", arch)?;
        let ctx = CudaContext::new(ordinal).map_err(drv("cuCtxCreate"))?;
        let stream = ctx.default_stream();
        let module = Module::load(&ctx, &cubin.bytes)?;
        let exact = Exact::open(&module)?;
        let gather = Gather::open(&module)?;
        Ok(CudaBackend {
            dev: Device {
                ordinal,
                ctx,
                stream,
                name,
                arch,
            },
            exact,
            gather,
            sources: std::sync::Mutex::new(vec![cubin.source]),
            tc: OnceLock::new(),
        })
    }

    /// The `TensorCore` kernels, loading and verifying `tensorcore.<arch>.cubin` on first use.
    /// Errors as [`CudaBackend::new`] ([`Error::CubinIntegrity`], [`Error::Cuda`]).
    pub(crate) fn tensorcore(&self) -> Result<&TensorCore> {
        self.tc
            .get_or_init(|| {
                let c = cubins::load("tensorcore", self.dev.arch)?;
                let tc = TensorCore::open(&Module::load(&self.dev.ctx, &c.bytes)?)?;
                if let Ok(mut s) = self.sources.lock() {
                    s.push(c.source);
                }
                Ok(tc)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Load and verify the kernels of `path` now (the `Exact` ones are loaded by [`new`]), so that
    /// a bad cubin fails here rather than at the first call.
    ///
    /// [`new`]: CudaBackend::new
    pub fn load_path(&self, path: Path) -> Result<()> {
        match path {
            Path::Exact => Ok(()),
            Path::TensorCore => self.tensorcore().map(|_| ()),
        }
    }

    /// The architecture of the loaded kernels (`sm_90`): the `TensorCore` path's bits, and so its
    /// golden digests, are per architecture.
    pub fn arch(&self) -> &'static str {
        self.dev.arch
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.dev.ordinal
    }

    /// One-line description (`cuda:0 NVIDIA H100 80GB HBM3 (sm_90)`).
    pub fn describe(&self) -> String {
        format!(
            "cuda:{} {} ({})",
            self.dev.ordinal, self.dev.name, self.dev.arch
        )
    }

    /// Where each loaded cubin came from, in load order: `embedded`, or in a build with the
    /// test-only `test-override` feature, the test folder's file.
    pub fn cubin_sources(&self) -> Vec<String> {
        self.sources.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The stream the host entry points run on (the context's default stream).
    pub fn stream(&self) -> Arc<CudaStream> {
        self.dev.stream.clone()
    }

    /// A new stream on this device (for concurrent launches).
    pub fn new_stream(&self) -> Result<Arc<CudaStream>> {
        self.dev.ctx.new_stream().map_err(drv("cuStreamCreate"))
    }

    /// Free and total device memory, in bytes.
    pub fn memory(&self) -> Result<(u64, u64)> {
        launch::memory(&self.dev.ctx)
    }

    /// Bytes of device memory held by live allocations of the device's memory pool (where this
    /// crate allocates its buffers), after returning the pool's unused reserve to the driver: a
    /// leak shows here, a cached reserve does not. Synchronise the streams first.
    pub fn pool_in_use(&self) -> Result<u64> {
        launch::pool_usage(&self.dev.ctx, true).map(|(used, _)| used)
    }

    /// Host tensors in and out, and the log-sum-exp when asked; the engine has checked them
    /// (`tensor::check_call`, `tensor::check_cache_call`).
    pub(crate) fn run_host<T: Element>(
        &self,
        path: Path,
        p: &Problem,
        x: &Qkv<'_, T>,
        out: TensorMut<'_, T>,
        lse: Option<&mut [f32]>,
    ) -> Result<()> {
        with_path!(self, path, |m| entry::run_host(
            &self.dev, m, p, x, out, lse
        ))
    }

    /// Device-resident tensors of any layout, launched on `stream` (asynchronous: synchronise the
    /// stream before reading the output). The mask is one byte per entry (nonzero = attend).
    /// Checks, before any work and in this order: the tensors against their buffers
    /// ([`Error::TensorLength`], [`Error::TensorExtent`], [`Error::OutputOverlap`], …), what the
    /// path takes ([`Error::DTypeUnsupported`], [`Error::HeadDimUnsupported`],
    /// [`Error::Misaligned`]), that every buffer and the stream belong to this device
    /// ([`Error::WrongDevice`]), device memory ([`Error::DeviceMemory`]); then under
    /// `NonFinitePolicy::Reject` the path's own GPU scan (every element read, one decision on
    /// three words; this waits for the scan), writing nothing if an input is non-finite
    /// ([`Error::NonFinite`]). Same bits as the host entry points.
    pub fn run_device<T: Element + DeviceRepr>(
        &self,
        path: Path,
        stream: &CudaStream,
        p: &Problem,
        x: &DeviceQkv<'_, T>,
        out: DeviceTensorMut<'_, T>,
    ) -> Result<()> {
        with_path!(self, path, |m| entry::run_device(
            &self.dev, m, stream, p, x, out
        ))
    }

    /// [`run_device`](CudaBackend::run_device) with K and V in a paged cache in device memory
    /// ([`DevicePagedKv`]; the block table on the host: it is public, checked, and uploaded per
    /// call). The rows the problem reads are first gathered on `stream` into contiguous K and V
    /// (device memory for two `[B, Hkv, Skv, D]` tensors, freed after the stream has used them),
    /// then the path runs on them: the bits of the same problem with contiguous K and V. Checks,
    /// before any work: the tensors and the cache in the crate's order (as
    /// [`Engine::run_cache`](crate::Engine::run_cache): the page size, the table's length, each
    /// sequence's capacity and used entries), what the path takes, the devices, device memory;
    /// then as `run_device` (under `Reject` the scan reads exactly the rows the problem reads).
    #[allow(clippy::too_many_arguments)]
    pub fn run_device_paged<T: Element + DeviceRepr + ValidAsZeroBits>(
        &self,
        path: Path,
        stream: &CudaStream,
        p: &Problem,
        q: DeviceTensor<'_, T>,
        cache: &DevicePagedKv<'_, T>,
        mask: Option<&cudarc::driver::CudaSlice<u8>>,
        out: DeviceTensorMut<'_, T>,
    ) -> Result<()> {
        with_path!(self, path, |m| entry::run_device_paged(
            &self.dev,
            &self.gather,
            m,
            stream,
            p,
            q,
            cache,
            mask,
            out
        ))
    }

    /// Microseconds (CUDA events on `stream`) of exactly the GPU work
    /// [`run_device`](CudaBackend::run_device) enqueues for this problem and policy, without the
    /// host's `Reject` decision in between, so the time covers the same launches whatever the
    /// values (the constant-time test's timer). The output is written.
    pub fn time_launch<T: Element + DeviceRepr>(
        &self,
        path: Path,
        stream: &CudaStream,
        p: &Problem,
        x: &DeviceQkv<'_, T>,
        out: DeviceTensorMut<'_, T>,
    ) -> Result<f32> {
        with_path!(self, path, |m| entry::time_launch(
            &self.dev, m, stream, p, x, out
        ))
    }

    /// [`time_launch`](CudaBackend::time_launch) kernel by kernel: each launch of the call in
    /// order, its kernel's name and its microseconds between CUDA events recorded around it. For
    /// tracing a timing difference of the whole call to one kernel (the constant-time test's
    /// `--each-kernel`). The output is written.
    pub fn time_launch_each<T: Element + DeviceRepr>(
        &self,
        path: Path,
        stream: &CudaStream,
        p: &Problem,
        x: &DeviceQkv<'_, T>,
        out: DeviceTensorMut<'_, T>,
    ) -> Result<Vec<(String, f32)>> {
        with_path!(self, path, |m| entry::time_launch_each(
            &self.dev, m, stream, p, x, out
        ))
    }

    /// [`time_launch`](CudaBackend::time_launch) for a paged cache: microseconds of exactly the
    /// GPU work [`run_device_paged`](CudaBackend::run_device_paged) enqueues (the pages read
    /// through the block table, or gathered and then read), without the host's `Reject`
    /// decision; the checks and uploads come first. The output is written.
    #[allow(clippy::too_many_arguments)]
    pub fn time_launch_paged<T: Element + DeviceRepr + ValidAsZeroBits>(
        &self,
        path: Path,
        stream: &CudaStream,
        p: &Problem,
        q: DeviceTensor<'_, T>,
        cache: &DevicePagedKv<'_, T>,
        mask: Option<&cudarc::driver::CudaSlice<u8>>,
        out: DeviceTensorMut<'_, T>,
    ) -> Result<f32> {
        with_path!(self, path, |m| entry::time_launch_paged(
            &self.dev,
            &self.gather,
            m,
            stream,
            p,
            q,
            cache,
            mask,
            out
        ))
    }

    /// Time `p` on `path` with CUDA events by the benchmark protocol ([`BenchOptions`]): seeded
    /// input sets (never zeros) uploaded once, the output poisoned once, warm-up, then samples of
    /// `per_sample` calls of the GPU work one host call runs (without uploads; under `Reject`
    /// without the scan: the inputs are finite).
    pub fn bench(
        &self,
        path: Path,
        p: &Problem,
        dtype: DType,
        opts: &BenchOptions,
    ) -> Result<BenchResult> {
        with_path!(
            self,
            path,
            |m| with_dtype!(dtype, T => entry::bench::<_, T>(&self.dev, &self.gather, m, p, opts))
        )
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
