//! The CUDA-event benchmark protocol every path shares (docs/design.md, "Performance protocol"):
//! seeded input sets (never zeros) uploaded once in the layout asked for, the output poisoned once,
//! warm-up calls, then samples of `per_sample` calls back to back between one pair of events,
//! cycling the input sets so that one does not sit in L2. The figures are per call: median,
//! fastest and slowest sample.

use super::drv;
use super::path::{DeviceQkv, DeviceTensor};
use crate::dtype::Element;
use crate::error::Result;
use crate::inputs::{GenOptions, generate, paginate};
use crate::problem::Problem;
use crate::tensor::{Layout, Order, Paging, scatter};
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DeviceRepr};
use std::sync::Arc;
use std::time::Instant;

/// How to time a problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchOptions {
    /// Seed of the first input set (the others: `seed + 1`, …).
    pub seed: u64,
    /// Untimed calls first.
    pub warmup: usize,
    /// Timed samples (the protocol asks for at least 20).
    pub iters: usize,
    /// Input sets cycled through.
    pub rotate: usize,
    /// Calls back to back between one pair of events (1: the anchors' protocol).
    pub per_sample: usize,
    /// The layout of the inputs and the output.
    pub order: Order,
    /// K and V in a paged cache of this many rows per page (`inputs::paginate`'s shuffled
    /// placement, one block table for every input set), read as `CudaBackend::run_device_paged`
    /// reads it ([`BenchResult::paged`] says how).
    pub page_size: Option<usize>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            seed: 0,
            warmup: 3,
            iters: 20,
            rotate: 4,
            per_sample: 1,
            order: Order::Bhsd,
            page_size: None,
        }
    }
}

/// Kernel timing from CUDA events (microseconds per call).
#[derive(Clone, Debug, PartialEq)]
pub struct BenchResult {
    /// Median of the timed samples.
    pub median_us: f64,
    /// Fastest.
    pub min_us: f64,
    /// Slowest.
    pub max_us: f64,
    /// Timed samples.
    pub iters: usize,
    /// Median over the timed samples of the host's time to enqueue a sample's calls, per call:
    /// what a call costs the CPU (argument packing, the driver's launches), which at one call a
    /// sample the GPU waits through before the first kernel.
    pub host_us: f64,
    /// Input sets rotated between calls (so they do not sit in L2).
    pub rotate: usize,
    /// With `BenchOptions::page_size`: how each call read the paged cache.
    pub paged: Option<PagedRead>,
}

/// How a paged call reads its cache (`CudaBackend::run_device_paged`, the benchmark).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PagedRead {
    /// The attention kernels read the pages through the block table (the TensorCore decode
    /// kernels, pages laid out as the path needs).
    BlockTable,
    /// The rows the call uses are gathered into contiguous K and V first, then the path runs on
    /// those.
    Gathered,
}

/// One seeded input set on the device, in the layout asked for.
pub(crate) struct InputSet<T> {
    q: CudaSlice<T>,
    k: CudaSlice<T>,
    v: CudaSlice<T>,
    /// One byte per mask entry (0 or 1), when the problem has a mask.
    mask: Option<CudaSlice<u8>>,
    q_layout: Layout,
    kv_layout: Layout,
    /// With `BenchOptions::page_size`: `k` and `v` are the pages (at `kv_layout`), and this the
    /// rest of the cache.
    paged: Option<PagedMeta>,
}

/// What a paged input set holds beside its pages.
struct PagedMeta {
    num_pages: usize,
    page_size: usize,
    block_table: Vec<i32>,
    max_pages: usize,
}

impl<T> InputSet<T> {
    /// The set as tensors (for a paged set, K and V are the pages).
    pub(crate) fn qkv(&self) -> DeviceQkv<'_, T> {
        DeviceQkv {
            q: DeviceTensor::new(&self.q, self.q_layout),
            k: DeviceTensor::new(&self.k, self.kv_layout),
            v: DeviceTensor::new(&self.v, self.kv_layout),
            mask: self.mask.as_ref(),
        }
    }

    /// The paged cache's table and sizes, for a paged set.
    pub(crate) fn paging(&self) -> Option<Paging<'_>> {
        self.paged.as_ref().map(|m| Paging {
            num_pages: m.num_pages,
            page_size: m.page_size,
            block_table: &m.block_table,
            max_pages: m.max_pages,
        })
    }
}

/// The contiguous layout of `order` for q (and the output, `q == true`) or k and v.
pub(crate) fn layout(p: &Problem, order: Order, q: bool) -> Layout {
    let s = p.shape();
    let (heads, seq) = if q {
        (s.q_heads, s.q_len)
    } else {
        (s.kv_heads, s.kv_len)
    };
    Layout::contiguous(order, heads, seq, s.head_dim)
}

/// `opts.rotate` input sets from seeds `seed, seed + 1, …` (the crate's generator: never zeros),
/// uploaded to `st` in `opts.order`.
pub(crate) fn input_sets<T: Element + DeviceRepr>(
    st: &Arc<CudaStream>,
    p: &Problem,
    opts: &BenchOptions,
) -> Result<Vec<InputSet<T>>> {
    let s = p.shape();
    let (qd, kd) = crate::tensor::dims(p);
    let (ql, kl) = (layout(p, opts.order, true), layout(p, opts.order, false));
    (0..opts.rotate.max(1) as u64)
        .map(|r| {
            let x = generate::<T>(p, GenOptions::seed(opts.seed.wrapping_add(r)));
            let up = |v: &[T], d, l| {
                let n = if d == qd { s.q_elems() } else { s.kv_elems() };
                st.clone_htod(&scatter(v, d, l, n, T::default()))
                    .map_err(drv("cuMemcpyHtoD"))
            };
            let mask = match &x.mask {
                Some(m) => {
                    let bytes: Vec<u8> = m.iter().map(|&b| u8::from(b)).collect();
                    Some(st.clone_htod(&bytes).map_err(drv("cuMemcpyHtoD"))?)
                }
                None => None,
            };
            let q = up(&x.q, qd, ql)?;
            if let Some(ps) = opts.page_size {
                // One placement (the first seed's) for every set: the same block table.
                let c = paginate(p, &x.k, &x.v, ps, opts.seed)?;
                let pages = |v: &[T]| st.clone_htod(v).map_err(drv("cuMemcpyHtoD"));
                return Ok(InputSet {
                    q,
                    k: pages(&c.k)?,
                    v: pages(&c.v)?,
                    mask,
                    q_layout: ql,
                    kv_layout: c.layout,
                    paged: Some(PagedMeta {
                        num_pages: c.num_pages,
                        page_size: c.page_size,
                        block_table: c.block_table,
                        max_pages: c.max_pages,
                    }),
                });
            }
            Ok(InputSet {
                q,
                k: up(&x.k, kd, kl)?,
                v: up(&x.v, kd, kl)?,
                mask,
                q_layout: ql,
                kv_layout: kl,
                paged: None,
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
    opts: &BenchOptions,
    mut call: impl FnMut(usize) -> Result<()>,
) -> Result<BenchResult> {
    let (iters, per_sample, rotate) = (
        opts.iters.max(1),
        opts.per_sample.max(1),
        opts.rotate.max(1),
    );
    let samples = opts.warmup.div_ceil(per_sample) + iters;
    let mut times = Vec::with_capacity(iters);
    let mut host = Vec::with_capacity(iters);
    let mut n = 0usize;
    for s in 0..samples {
        let (e0, e1) = (event(st)?, event(st)?);
        e0.record(st).map_err(drv("cuEventRecord"))?;
        let t0 = Instant::now();
        for _ in 0..per_sample {
            call(n % rotate)?;
            n += 1;
        }
        let enqueued = t0.elapsed();
        e1.record(st).map_err(drv("cuEventRecord"))?;
        e1.synchronize().map_err(drv("kernel execution"))?;
        if s >= samples - iters {
            let ms = e0.elapsed_ms(&e1).map_err(drv("cuEventElapsedTime"))?;
            times.push(f64::from(ms) * 1000.0 / per_sample as f64);
            host.push(enqueued.as_secs_f64() * 1e6 / per_sample as f64);
        }
    }
    Ok(bench_result(times, host, rotate))
}

/// The summary of per-call times (microseconds): median, fastest, slowest; the host's median.
fn bench_result(mut times: Vec<f64>, mut host: Vec<f64>, rotate: usize) -> BenchResult {
    times.sort_by(f64::total_cmp);
    host.sort_by(f64::total_cmp);
    BenchResult {
        median_us: median_sorted(&times),
        min_us: times.first().copied().unwrap_or(f64::NAN),
        max_us: times.last().copied().unwrap_or(f64::NAN),
        iters: times.len(),
        host_us: median_sorted(&host),
        rotate,
        paged: None,
    }
}

/// Median of a sorted slice (mean of the middle two for an even count); NaN when empty.
fn median_sorted(ts: &[f64]) -> f64 {
    let n = ts.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => ts[n / 2],
        _ => 0.5 * (ts[n / 2 - 1] + ts[n / 2]),
    }
}

#[cfg(test)]
mod tests {
    use super::bench_result;

    #[test]
    fn bench_result_takes_medians_of_the_call_times_and_of_the_host_times() {
        let r = bench_result(vec![5.0, 1.0, 3.0, 4.0], vec![0.9, 0.3, 0.5, 0.7], 4);
        assert_eq!(
            (r.median_us, r.min_us, r.max_us, r.iters),
            (3.5, 1.0, 5.0, 4)
        );
        assert_eq!(r.host_us, 0.6);
        let one = bench_result(vec![2.0], vec![0.25], 1);
        assert_eq!((one.median_us, one.host_us), (2.0, 0.25));
        assert!(bench_result(Vec::new(), Vec::new(), 1).host_us.is_nan());
    }
}
