//! The CUDA-event benchmark protocol both paths' `bench` share (DESIGN.md §8): seeded input sets
//! (never zeros) uploaded once, the output poisoned once, warm-up calls, then samples of
//! `per_sample` calls back to back between one pair of events, cycling the input sets so that one
//! does not sit in L2. The figures are per call: median, fastest and slowest sample.

use super::{BenchResult, drv};
use crate::dtype::Element;
use crate::error::Result;
use crate::inputs::{GenOptions, generate};
use crate::problem::Problem;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DeviceRepr};
use std::sync::Arc;

/// One seeded input set on the device.
pub(crate) struct InputSet<T> {
    pub(crate) q: CudaSlice<T>,
    pub(crate) k: CudaSlice<T>,
    pub(crate) v: CudaSlice<T>,
    /// One byte per mask entry (0 or 1), when the problem has a mask.
    pub(crate) mask: Option<CudaSlice<u8>>,
}

/// `rotate` input sets from seeds `seed, seed + 1, …` (the crate's generator: never zeros),
/// uploaded to `st`.
pub(crate) fn input_sets<T: Element + DeviceRepr>(
    st: &Arc<CudaStream>,
    p: &Problem,
    seed: u64,
    rotate: usize,
) -> Result<Vec<InputSet<T>>> {
    (0..rotate.max(1) as u64)
        .map(|r| {
            let x = generate::<T>(p, GenOptions::seed(seed.wrapping_add(r)));
            let up = |v: &[T]| st.clone_htod(v).map_err(drv("cuMemcpyHtoD"));
            let mask = match &x.mask {
                Some(m) => {
                    let bytes: Vec<u8> = m.iter().map(|&b| u8::from(b)).collect();
                    Some(st.clone_htod(&bytes).map_err(drv("cuMemcpyHtoD"))?)
                }
                None => None,
            };
            Ok(InputSet {
                q: up(&x.q)?,
                k: up(&x.k)?,
                v: up(&x.v)?,
                mask,
            })
        })
        .collect()
}

/// An output buffer of `p` with every bit set (a NaN pattern in every dtype), so that an element
/// a kernel failed to write would show.
pub(crate) fn poisoned_output<T: Element + DeviceRepr>(
    st: &Arc<CudaStream>,
    p: &Problem,
) -> Result<CudaSlice<T>> {
    let poison = vec![T::from_bits_u32(u32::MAX); p.shape().q_elems()];
    st.clone_htod(&poison).map_err(drv("cuMemcpyHtoD"))
}

/// A CUDA event on `st`'s context, with timing.
pub(crate) fn event(st: &CudaStream) -> Result<CudaEvent> {
    st.context()
        .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(drv("cuEventCreate"))
}

/// Time `call(set)` by the protocol above: at least `warmup` untimed calls, then `iters` samples
/// of `per_sample` calls each between two events on `st` (`call` must enqueue on `st` and not
/// wait), cycling `set` through `0..rotate`.
pub(crate) fn sample(
    st: &Arc<CudaStream>,
    warmup: usize,
    iters: usize,
    per_sample: usize,
    rotate: usize,
    mut call: impl FnMut(usize) -> Result<()>,
) -> Result<BenchResult> {
    let (iters, per_sample, rotate) = (iters.max(1), per_sample.max(1), rotate.max(1));
    let samples = warmup.div_ceil(per_sample) + iters;
    let mut times = Vec::with_capacity(iters);
    let mut n = 0usize;
    for s in 0..samples {
        let (e0, e1) = (event(st)?, event(st)?);
        e0.record(st).map_err(drv("cuEventRecord"))?;
        for _ in 0..per_sample {
            call(n % rotate)?;
            n += 1;
        }
        e1.record(st).map_err(drv("cuEventRecord"))?;
        e1.synchronize().map_err(drv("kernel execution"))?;
        if s >= samples - iters {
            let ms = e0.elapsed_ms(&e1).map_err(drv("cuEventElapsedTime"))?;
            times.push(f64::from(ms) * 1000.0 / per_sample as f64);
        }
    }
    Ok(bench_result(times, rotate))
}

/// The summary of per-launch times (microseconds): median, fastest, slowest.
fn bench_result(mut times: Vec<f64>, rotate: usize) -> BenchResult {
    times.sort_by(f64::total_cmp);
    let n = times.len();
    let median = match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => times[n / 2],
        _ => 0.5 * (times[n / 2 - 1] + times[n / 2]),
    };
    BenchResult {
        median_us: median,
        min_us: times.first().copied().unwrap_or(f64::NAN),
        max_us: times.last().copied().unwrap_or(f64::NAN),
        iters: n,
        rotate,
    }
}
