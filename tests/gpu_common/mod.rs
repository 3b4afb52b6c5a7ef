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

/// A prefill (causal at head dim 128) and a GQA decode under `Reject` whose Q, K and V span several
/// scan blocks of either path at head dim `d`, with key lengths shorter than Skv (the rows past
/// them are inputs too).
pub fn reject_problems(d: usize) -> [detattn::Problem; 2] {
    use detattn::{NonFinitePolicy, Problem, Shape};
    let build = |(b, hq, hkv, sq, skv): (usize, usize, usize, usize, usize), lens: Vec<usize>| {
        Problem::builder(Shape::new(b, hq, hkv, sq, skv, d))
            .causal(sq > 1 && d == 128)
            .kv_lens(lens)
            .nonfinite(NonFinitePolicy::Reject)
            .build()
            .expect("valid test problem")
    };
    [
        build((2, 4, 2, 100, 300), vec![300, 170]),
        build((3, 8, 2, 1, 2500), vec![2500, 9, 1800]),
    ]
}

/// `Reject` through the device entry reads every element of Q, K and V: a NaN, +inf or −inf
/// anywhere is `NonFinite` naming the first of q, k, v holding one, with `out` untouched — the
/// verdict of the host entry, whose scan is the CPU's (computed independently of the GPU's) — and
/// finite inputs give the host entry's bits. Positions in each tensor: its first and last element,
/// the ends of its first 16-byte unit, both sides of every multiple of `block` elements (the
/// path's scan block) and of 24 even steps, and seeded ones; then two tensors at once. Returns the
/// device calls made.
pub fn reject_scan_case<T>(e: &Engine, p: &detattn::Problem, block: usize) -> usize
where
    T: detattn::Element + detattn::cuda::DeviceRepr,
{
    use detattn::inputs::{GenOptions, SplitMix64, generate};
    use detattn::{Error, NonFinitePolicy};
    assert_eq!(p.nonfinite(), NonFinitePolicy::Reject);
    let cb = e.cuda().expect("cuda");
    let st = cb.stream();
    let seed = p.shape().head_dim as u64 * 31 + p.shape().q_len as u64;
    let clean = generate::<T>(p, GenOptions::seed(seed));
    let sentinel = vec![T::from_f32_rne(7.0); p.shape().q_elems()];
    let bits = |x: &[T]| x.iter().map(|v| v.to_bits_u32()).collect::<Vec<_>>();
    let kind =
        |r: u64| T::from_f32_rne([f32::NAN, f32::INFINITY, f32::NEG_INFINITY][(r % 3) as usize]);
    let what = |w: &str| format!("{} {} {p:?}: {w}", e.describe(), T::DTYPE.name());
    let mut rng = SplitMix64::new(seed);
    let mut calls = 0;
    let mut check = |q: &[T], k: &[T], v: &[T], w: &str| {
        let mut host_out = sentinel.clone();
        let want = e.run_into(p, q, k, v, None, &mut host_out);
        let up = |t: &[T]| st.clone_htod(t).expect("upload");
        let mut out = up(&sentinel);
        let got = dev_run(cb, e.path(), &st, p, &up(q), &up(k), &up(v), None, &mut out);
        let back = st.clone_dtoh(&out).expect("download");
        calls += 1;
        match (&want, &got) {
            (Err(wa), Err(g)) => {
                assert!(
                    matches!(wa, Error::NonFinite { .. }),
                    "{}: host entry {wa}",
                    what(w)
                );
                assert_eq!(g, wa, "{}", what(w));
                assert!(
                    bits(&back) == bits(&sentinel),
                    "{}: out was written",
                    what(w)
                );
            }
            (Ok(()), Ok(())) => {
                assert!(
                    bits(&back) == bits(&host_out),
                    "{}: device != host bits",
                    what(w)
                )
            }
            _ => panic!("{}: host entry {want:?}, device entry {got:?}", what(w)),
        }
    };
    check(&clean.q, &clean.k, &clean.v, "finite");
    let lens = [clean.q.len(), clean.k.len(), clean.v.len()];
    for (t, &n) in lens.iter().enumerate() {
        let mut at = vec![0, 7, 8, n - 1];
        for b in (block..n).step_by(block).chain((1..24).map(|i| i * n / 24)) {
            at.extend([b - 1, b]);
        }
        at.extend((0..3).map(|_| (rng.next_u64() % n as u64) as usize));
        for i in at {
            let mut x = clean.clone();
            let [q, k, v] = [&mut x.q, &mut x.k, &mut x.v];
            [q, k, v][t][i] = kind(rng.next_u64());
            check(&x.q, &x.k, &x.v, &format!("tensor {t}, element {i} of {n}"));
        }
        // With V's last element bad too, the first tensor holding one is named.
        let mut x = clean.clone();
        x.v[lens[2] - 1] = kind(rng.next_u64());
        let [q, k, v] = [&mut x.q, &mut x.k, &mut x.v];
        [q, k, v][t][n / 2] = kind(rng.next_u64());
        check(&x.q, &x.k, &x.v, &format!("tensor {t} and v"));
    }
    calls
}
