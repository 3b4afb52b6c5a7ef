//! What the GPU test binaries (cuda_exact, cuda_tensorcore) share: opening GPU 0 for a path, or
//! saying loudly that the test is skipped and why. A test without a usable GPU must never pass
//! silently.
#![allow(dead_code)]

use detattn::{Backend, Engine, Path};
use std::io::Write as _;

/// GPU 0 on `path`, or `None` after printing `SKIPPED <test>: …` with the reason.
pub fn gpu(test: &str, path: Path) -> Option<Engine> {
    match Engine::new(Backend::Cuda(0), path) {
        Ok(e) => {
            eprintln!("{test}: running on {}", e.describe());
            Some(e)
        }
        Err(e) => {
            loud(&format!(
                "SKIPPED {test}: no usable CUDA GPU for the {} path ({e})",
                path.name()
            ));
            None
        }
    }
}

/// A line that must be seen even when the test passes: straight to the stderr handle, not
/// through `eprintln!`, which the test harness captures and hides for passing tests.
pub fn loud(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// `out` as the contiguous `[B, Hq, Sq, D]` output of `p`.
fn bhsd_out<'a, T: detattn::Element + detattn::cuda::DeviceRepr>(
    p: &detattn::Problem,
    out: &'a mut detattn::cuda::CudaSlice<T>,
) -> detattn::cuda::DeviceTensorMut<'a, T> {
    let s = p.shape();
    detattn::cuda::DeviceTensorMut::new(out, detattn::Layout::bhsd(s.q_heads, s.q_len, s.head_dim))
}

/// The device entry point on contiguous `[B, H, S, D]` buffers (the tests' common case).
#[allow(clippy::too_many_arguments)]
pub fn dev_run<T: detattn::Element + detattn::cuda::DeviceRepr>(
    cb: &detattn::cuda::CudaBackend,
    path: Path,
    stream: &detattn::cuda::CudaStream,
    p: &detattn::Problem,
    q: &detattn::cuda::CudaSlice<T>,
    k: &detattn::cuda::CudaSlice<T>,
    v: &detattn::cuda::CudaSlice<T>,
    mask: Option<&detattn::cuda::CudaSlice<u8>>,
    out: &mut detattn::cuda::CudaSlice<T>,
) -> detattn::Result<()> {
    let x = detattn::cuda::DeviceQkv::bhsd(p, q, k, v, mask);
    cb.run_device(path, stream, p, &x, bhsd_out(p, out))
}

/// The timed launch on contiguous buffers.
#[allow(clippy::too_many_arguments)]
pub fn dev_time<T: detattn::Element + detattn::cuda::DeviceRepr>(
    cb: &detattn::cuda::CudaBackend,
    path: Path,
    stream: &detattn::cuda::CudaStream,
    p: &detattn::Problem,
    q: &detattn::cuda::CudaSlice<T>,
    k: &detattn::cuda::CudaSlice<T>,
    v: &detattn::cuda::CudaSlice<T>,
    mask: Option<&detattn::cuda::CudaSlice<u8>>,
    out: &mut detattn::cuda::CudaSlice<T>,
) -> detattn::Result<f32> {
    let x = detattn::cuda::DeviceQkv::bhsd(p, q, k, v, mask);
    cb.time_launch(path, stream, p, &x, bhsd_out(p, out))
}

/// Bench options with these counts (seed, warm-up, iterations, input sets, calls per sample).
pub fn bench_opts(
    seed: u64,
    warmup: usize,
    iters: usize,
    rotate: usize,
    per_sample: usize,
) -> detattn::cuda::BenchOptions {
    detattn::cuda::BenchOptions {
        seed,
        warmup,
        iters,
        rotate,
        per_sample,
        order: detattn::Order::Bhsd,
        page_size: None,
    }
}

/// Leave `bytes` of device memory holding `byte` in `st`'s memory pool: allocated, filled and freed
/// on `st`, so that the next allocations on that stream (a call's scratch: the pool serves it
/// from the freed block) start from this pattern rather than from zeros or an earlier call's
/// values. 0xFF is a NaN in every dtype.
pub fn soil_pool(st: &std::sync::Arc<detattn::cuda::CudaStream>, bytes: usize, byte: u8) {
    let junk = st.clone_htod(&vec![byte; bytes]).expect("upload");
    drop(junk);
}
