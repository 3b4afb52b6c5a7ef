//! GPU contract tests of the `TensorCore` path (docs/tensorcore.md): D1 (1000 runs),
//! D2 (a problem alone and inside batches of 1..64), D3 (decode = causal prefill at every row;
//! and every pair of the four kernels the host picks per dtype and head dim, prefill or decode,
//! causal or not, held equal on the rows their problems share; and past 2048 keys, every way the
//! key split runs — split decode and merge, decode folding in one block, prefill in chunk
//! launches — held to the same rows; these three hold each row's log-sum-exp to the same bits
//! too), D4 (query subsets), D5 (two streams at once), D1 and D2 also under `Propagate` with NaN/±inf
//! planted, the error against the CPU `Exact` path on 300 random problems, finite output at the
//! dtypes' extreme magnitudes, `Propagate` against the CPU `Exact` engine's NaN rows, the golden
//! digests per architecture (all finite), the timing API, and the typed errors of the path.
//!
//! Every bitwise check compares the path with itself; the accuracy check compares it with the
//! CPU `Exact` reference. Without a CUDA driver or a supported GPU every GPU test prints
//! `SKIPPED` and why (straight to stderr) and returns. With `DETATTN_RECORD=<dir>` the golden
//! test also writes the digests it computed to `<dir>/golden_tensorcore_<arch>.txt` (to be
//! committed as `tests/snapshots/`).
//!
//! `DETATTN_TC_PLANT=1` plants a fault in the test's own calls (the scale of every third call is
//! multiplied by 1.05, as `scripts/tc_check.py --plant` does): every check below but the typed
//! errors must then FAIL; this is how the checkers were seen to be able to fail.
#![cfg(feature = "cuda")]

mod gpu_common;
mod kvcache_common;

use detattn::cuda::{self, CudaSlice, DeviceRepr};
use detattn::inputs::{GenOptions, SplitMix64, generate};
use detattn::{
    Backend, DType, Element, Engine, Error, MaskLayout, NonFinitePolicy, Path, Problem, Shape,
    TensorName, bf16, f16, golden,
};

/// The CUDA `TensorCore` engine, or `None` after printing why the test is skipped.
fn gpu(test: &str) -> Option<Engine> {
    gpu_common::gpu(test, Path::TensorCore)
}

use gpu_common::{bench_opts, dev_run, dev_time, loud, soil_pool};

const DIMS: [usize; 3] = [64, 128, 256];

#[allow(clippy::too_many_arguments)]
fn problem(
    (b, hq, hkv, sq, skv, d): (usize, usize, usize, usize, usize, usize),
    causal: bool,
    kv_lens: Option<Vec<usize>>,
    mask: Option<MaskLayout>,
) -> Problem {
    let mut pb = Problem::builder(Shape::new(b, hq, hkv, sq, skv, d)).causal(causal);
    if let Some(l) = kv_lens {
        pb = pb.kv_lens(l);
    }
    if let Some(m) = mask {
        pb = pb.mask(m);
    }
    pb.build().expect("valid test problem")
}

struct Inputs<T> {
    q: Vec<T>,
    k: Vec<T>,
    v: Vec<T>,
    mask: Option<Vec<bool>>,
}

fn inputs<T: Element>(p: &Problem, seed: u64) -> Inputs<T> {
    let x = generate::<T>(
        p,
        GenOptions {
            seed,
            amp: 0,
            blank_rows_every: Some(11),
        },
    );
    Inputs {
        q: x.q,
        k: x.k,
        v: x.v,
        mask: x.mask,
    }
}

/// `p` with the non-finite policy `policy` (everything else kept).
fn with_policy(p: &Problem, policy: NonFinitePolicy) -> Problem {
    let mut pb = Problem::builder(*p.shape())
        .causal(p.causal())
        .scale(p.scale())
        .nonfinite(policy);
    if let Some(l) = p.kv_lens() {
        pb = pb.kv_lens(l.to_vec());
    }
    if let Some(m) = p.mask() {
        pb = pb.mask(m);
    }
    pb.build().expect("valid test problem")
}

/// NaN, +inf or −inf, by `r`.
fn nonfinite<T: Element>(r: u64) -> T {
    T::from_f32_rne([f32::NAN, f32::INFINITY, f32::NEG_INFINITY][(r % 3) as usize])
}

/// Plant `n` non-finite values at seeded positions of Q, K and V (anywhere: valid keys, masked
/// keys, keys past a key length, query rows that see nothing).
fn plant<T: Element>(x: &mut Inputs<T>, rng: &mut SplitMix64, n: usize) {
    for _ in 0..n {
        let r = rng.next_u64();
        let t = match r % 3 {
            0 => &mut x.q,
            1 => &mut x.k,
            _ => &mut x.v,
        };
        let at = (rng.next_u64() % t.len() as u64) as usize;
        t[at] = nonfinite(rng.next_u64());
    }
}

/// `x` with every NaN and ±inf replaced by +0 (what `Propagate` computes the other rows on).
fn sanitized<T: Element>(x: &Inputs<T>) -> Inputs<T> {
    let f = |v: &[T]| -> Vec<T> {
        v.iter()
            .map(|e| {
                if e.to_f32().is_finite() {
                    *e
                } else {
                    T::from_bits_u32(0)
                }
            })
            .collect()
    };
    Inputs {
        q: f(&x.q),
        k: f(&x.k),
        v: f(&x.v),
        mask: x.mask.clone(),
    }
}

static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `p`, or under `DETATTN_TC_PLANT` (module docs) every third call's `p` with the fault planted.
fn planted(p: &Problem) -> detattn::Result<Problem> {
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if std::env::var_os("DETATTN_TC_PLANT").is_none() || n % 3 != 2 {
        return Ok(p.clone());
    }
    let mut pb = Problem::builder(*p.shape())
        .causal(p.causal())
        .causal_align(p.causal_align())
        .scale(p.scale() * 1.05)
        .nonfinite(p.nonfinite());
    if let Some(l) = p.kv_lens() {
        pb = pb.kv_lens(l.to_vec());
    }
    if let Some(m) = p.mask() {
        pb = pb.mask(m);
    }
    pb.build()
}

/// `e.run` (with the planted fault of `DETATTN_TC_PLANT` when it is set).
fn run_raw<T: Element>(
    e: &Engine,
    p: &Problem,
    q: &[T],
    k: &[T],
    v: &[T],
    mask: Option<&[bool]>,
) -> detattn::Result<Vec<T>> {
    e.run(&planted(p)?, q, k, v, mask)
}

/// The output and each query row's log-sum-exp (`Engine::run_cache`; the plant as `run_raw`).
fn run_raw_lse<T: Element>(
    e: &Engine,
    p: &Problem,
    q: &[T],
    k: &[T],
    v: &[T],
    mask: Option<&[bool]>,
) -> detattn::Result<(Vec<T>, Vec<f32>)> {
    let p = planted(p)?;
    kvcache_common::run_cache_on(e, &p, q, kvcache_common::contiguous(&p, k, v), mask, true)
}

fn run<T: Element>(e: &Engine, p: &Problem, x: &Inputs<T>) -> Vec<T> {
    run_raw(e, p, &x.q, &x.k, &x.v, x.mask.as_deref())
        .unwrap_or_else(|err| panic!("tensorcore run failed: {err}"))
}

fn run_lse<T: Element>(e: &Engine, p: &Problem, x: &Inputs<T>) -> (Vec<T>, Vec<f32>) {
    run_raw_lse(e, p, &x.q, &x.k, &x.v, x.mask.as_deref())
        .unwrap_or_else(|err| panic!("tensorcore run failed: {err}"))
}

fn bits<T: Element>(x: &[T]) -> Vec<u32> {
    x.iter().map(|e| e.to_bits_u32()).collect()
}

/// Rows `[row0, row0 + n)` of head `h` of batch element `b` of a `[B, H, S, D]` tensor.
fn rows<T: Copy>(x: &[T], (h_n, s_n, d): (usize, usize, usize), b: usize, h: usize) -> &[T] {
    let start = ((b * h_n + h) * s_n) * d;
    &x[start..start + s_n * d]
}

/// Run `f::<f16>(d)` and `f::<bf16>(d)` for every head dim.
macro_rules! each_type_and_dim {
    ($f:ident, $e:expr) => {
        for d in DIMS {
            $f::<f16>($e, d);
            $f::<bf16>($e, d);
        }
    };
}

fn tname<T: Element>() -> &'static str {
    T::DTYPE.name()
}

// ------------------------------------------------------------------------------------ D1

fn d1_one<T: Element>(e: &Engine, d: usize) {
    // GQA, causal, ragged kv_lens, a full mask: every option at once.
    let p = problem(
        (2, 4, 2, 37, 77, d),
        true,
        Some(vec![77, 50]),
        Some(MaskLayout::FULL),
    );
    let x = inputs::<T>(&p, 100 + d as u64);
    let first = bits(&run(e, &p, &x));
    for i in 1..1000 {
        let again = bits(&run(e, &p, &x));
        assert!(again == first, "D1 {} d{d}: run {i} differs", tname::<T>());
    }
    // Under Propagate, with NaN and ±inf planted (sanitize, kernel, poison every run).
    let pp = with_policy(&p, NonFinitePolicy::Propagate);
    let mut xp = inputs::<T>(&p, 150 + d as u64);
    plant(&mut xp, &mut SplitMix64::new(d as u64), 6);
    let first = bits(&run(e, &pp, &xp));
    for i in 1..1000 {
        assert!(
            bits(&run(e, &pp, &xp)) == first,
            "D1 propagate {} d{d}: run {i} differs",
            tname::<T>()
        );
    }
    // The decode kernel too (G·Sq ≤ 16).
    let pd = problem((3, 8, 2, 1, 300, d), false, Some(vec![300, 1, 129]), None);
    let xd = inputs::<T>(&pd, 200 + d as u64);
    let first = bits(&run(e, &pd, &xd));
    for i in 1..1000 {
        assert!(
            bits(&run(e, &pd, &xd)) == first,
            "D1 decode {} d{d}: run {i} differs",
            tname::<T>()
        );
    }
}

#[test]
fn d1_same_bits_over_1000_runs() {
    let Some(e) = gpu("d1_same_bits_over_1000_runs") else {
        return;
    };
    each_type_and_dim!(d1_one, &e);
}

// ------------------------------------------------------------------------------------ D2

/// A problem's output alone, and inside batches of `n` other problems at some position.
fn d2_one<T: Element>(e: &Engine, d: usize) {
    for propagate in [false, true] {
        d2_policy::<T>(e, d, propagate);
    }
}

/// D2 under one policy; under `Propagate` every element of every batch has NaN/±inf planted.
fn d2_policy<T: Element>(e: &Engine, d: usize, propagate: bool) {
    let policy = if propagate {
        NonFinitePolicy::Propagate
    } else {
        NonFinitePolicy::Reject
    };
    let element = |p: &Problem, seed: u64| {
        let mut x = inputs::<T>(p, seed);
        if propagate {
            plant(&mut x, &mut SplitMix64::new(seed), 4);
        }
        x
    };
    for (sq, causal, masked) in [(33, true, false), (33, false, true), (1, false, true)] {
        let (hq, hkv, skv, len) = (4, 2, 70, 61);
        let layout = masked.then_some(MaskLayout::FULL);
        let alone_p = problem((1, hq, hkv, sq, skv, d), causal, Some(vec![len]), layout);
        let alone_p = with_policy(&alone_p, policy);
        let alone_x = element(&alone_p, 7);
        let alone = run(e, &alone_p, &alone_x);
        let mut rng = SplitMix64::new(d as u64 * 31 + sq as u64);
        for n in [1usize, 2, 3, 5, 8, 16, 31, 64] {
            let pos = (rng.next_u64() % n as u64) as usize;
            let lens: Vec<usize> = (0..n)
                .map(|j| {
                    if j == pos {
                        len
                    } else {
                        (rng.next_u64() % (skv as u64 + 1)) as usize
                    }
                })
                .collect();
            let p = problem((n, hq, hkv, sq, skv, d), causal, Some(lens), layout);
            let p = with_policy(&p, policy);
            let mut x = Inputs::<T> {
                q: vec![],
                k: vec![],
                v: vec![],
                mask: masked.then(Vec::new),
            };
            for j in 0..n {
                let one = if j == pos {
                    element(&alone_p, 7)
                } else {
                    element(&alone_p, 1000 + j as u64)
                };
                x.q.extend(one.q);
                x.k.extend(one.k);
                x.v.extend(one.v);
                if let (Some(m), Some(om)) = (x.mask.as_mut(), one.mask) {
                    m.extend(om);
                }
            }
            let out = run(e, &p, &x);
            let qs = hq * sq * d;
            assert!(
                bits(&out[pos * qs..(pos + 1) * qs]) == bits(&alone),
                "D2 {} d{d} sq{sq} causal={causal} mask={masked} propagate={propagate}: element \
                 at {pos} of a batch of {n} differs from the problem alone",
                tname::<T>()
            );
        }
    }
}

#[test]
fn d2_batch_1_to_64() {
    let Some(e) = gpu("d2_batch_1_to_64") else {
        return;
    };
    each_type_and_dim!(d2_one, &e);
}

/// D2 across the TMA prefill's walk (sm_90, kernels/tensorcore.cu `fwd_tma`): once a launch has
/// more query tiles than the GPU has SMs, a block walks several, its K/V ring and Q buffers running
/// on from one to the next, and which block runs a tile follows from the grid. A batch of 18
/// elements of 64 query heads and 400 rows (2304 causal pairs of query tiles at D 64 and 128, 3456
/// or 4608 tiles: a walk of 16 or more units a block on any GPU of up to 144 SMs) against some of
/// its elements alone (128 pairs, 192 or 256 tiles: a unit or two a block on the H100), with ragged
/// key lengths (the full 400, none, one key, random), causal and not: the outputs and log-sum-exp
/// bit for bit. (Masks in walking launches: `d2_batch_1_to_64`, 64 elements of 4 heads. Elsewhere,
/// sm_80-89 and the other head dims, the same property of their per-tile grids.)
fn walk_one<T: Element>(e: &Engine, d: usize) {
    let (b, hq, hkv, s) = (18, 64, 8, 400);
    for causal in [false, true] {
        let mut rng = SplitMix64::new(d as u64 * 7 + causal as u64);
        let lens: Vec<usize> = (0..b)
            .map(|j| match j {
                0 => s,
                1 => 0,
                2 => 1,
                _ => (rng.next_u64() % (s as u64 + 1)) as usize,
            })
            .collect();
        let p = problem((b, hq, hkv, s, s, d), causal, Some(lens.clone()), None);
        let x = inputs::<T>(&p, 11 + d as u64);
        let (out, lse) = run_lse(e, &p, &x);
        let (qs, ks, ls) = (hq * s * d, hkv * s * d, hq * s);
        for j in [0, 1, 2, 9, b - 1] {
            let alone_p = problem((1, hq, hkv, s, s, d), causal, Some(vec![lens[j]]), None);
            let ax = Inputs {
                q: x.q[j * qs..(j + 1) * qs].to_vec(),
                k: x.k[j * ks..(j + 1) * ks].to_vec(),
                v: x.v[j * ks..(j + 1) * ks].to_vec(),
                mask: None,
            };
            let (ao, al) = run_lse(e, &alone_p, &ax);
            let what = format!(
                "{} d{d} causal={causal}: element {j} (kv_len {}) of a batch of {b}",
                tname::<T>(),
                lens[j]
            );
            assert!(
                bits(&out[j * qs..(j + 1) * qs]) == bits(&ao),
                "walk {what}: output differs from the problem alone"
            );
            let lb = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(
                lb(&lse[j * ls..(j + 1) * ls]) == lb(&al),
                "walk {what}: log-sum-exp differs from the problem alone"
            );
        }
    }
}

#[test]
fn d2_across_the_tma_walk() {
    let Some(e) = gpu("d2_across_the_tma_walk") else {
        return;
    };
    for d in [64, 128] {
        walk_one::<f16>(&e, d);
        walk_one::<bf16>(&e, d);
    }
    loud(
        "TMA walk: 18 x 64 heads x 400 rows (each block walks many query tiles on sm_90) = \
         elements alone, causal and not, ragged key lengths, f16 and bf16, D 64 and 128; \
         outputs and log-sum-exp bit for bit",
    );
}

// ------------------------------------------------------------------------------------ D3

/// Decode step `i` (one query row against keys `[0, i]` through kv_lens) gives the bits of row
/// `i` of the causal prefill, and of its log-sum-exp, for every `i`, through the decode kernel
/// (G = 4) and, for MQA with G = 32, through the prefill kernel used as a decoder.
fn d3_one<T: Element>(e: &Engine, d: usize) {
    let configs: &[(usize, usize, bool)] = if d == 128 {
        &[(8, 2, false), (8, 2, true), (32, 1, false)]
    } else {
        &[(8, 2, d == 64)]
    };
    let s = 96;
    for &(hq, hkv, masked) in configs {
        let layout = masked.then_some(MaskLayout::SHARED);
        let pre_p = problem((1, hq, hkv, s, s, d), true, None, layout);
        let x = inputs::<T>(&pre_p, 300 + d as u64);
        let (pre, pre_lse) = run_lse(e, &pre_p, &x);
        for i in 0..s {
            let dp = problem((1, hq, hkv, 1, s, d), false, Some(vec![i + 1]), layout);
            let q: Vec<T> = (0..hq)
                .flat_map(|h| x.q[(h * s + i) * d..(h * s + i + 1) * d].iter().copied())
                .collect();
            let mask = x.mask.as_ref().map(|m| m[i * s..(i + 1) * s].to_vec());
            let (step, step_lse) = run_raw_lse(e, &dp, &q, &x.k, &x.v, mask.as_deref())
                .unwrap_or_else(|err| panic!("decode run: {err}"));
            for h in 0..hq {
                let want = &pre[(h * s + i) * d..(h * s + i + 1) * d];
                assert!(
                    bits(&step[h * d..(h + 1) * d]) == bits(want),
                    "D3 {} d{d} Hq{hq} Hkv{hkv} mask={masked}: decode step {i}, head {h} \
                     differs from the causal prefill row",
                    tname::<T>()
                );
                assert!(
                    step_lse[h].to_bits() == pre_lse[h * s + i].to_bits(),
                    "D3 {} d{d} Hq{hq} Hkv{hkv} mask={masked}: decode step {i}, head {h}: \
                     log-sum-exp {} against the causal prefill row's {}",
                    tname::<T>(),
                    step_lse[h],
                    pre_lse[h * s + i]
                );
            }
        }
    }
}

#[test]
fn d3_decode_equals_causal_prefill_at_every_row() {
    let Some(e) = gpu("d3_decode_equals_causal_prefill_at_every_row") else {
        return;
    };
    each_type_and_dim!(d3_one, &e);
}

// ------------------------------------------------------------------- across the key chunks

/// Keys of the causal reference of `d2_d3_d4_across_key_chunks`: three chunks of the key split
/// (`tc_kchunk` = 2048 keys, docs/tensorcore-numerics.md §9), the last one partial.
const SPLIT_S: usize = 4500;
/// Keys per chunk (kernels/tensorcore.cu, `TC_KCHUNK`).
const KCHUNK: usize = 2048;
/// Rows checked through the decode kernel: both sides of each chunk boundary, the ends, and a few
/// in between.
const SPLIT_ROWS: [usize; 14] = [
    0, 1, 1000, 2046, 2047, 2048, 2049, 3000, 4094, 4095, 4096, 4097, 4498, 4499,
];

/// One row of a key-split test against its causal prefill row: the output bit for bit, then the
/// log-sum-exp (`want_lse`: its bits); `what` names the row in the failure message, `how` the
/// route (the log-sum-exp's message says "log-sum-exp of" it).
fn same_row<T: Element>(
    got: &[T],
    lse: f32,
    want: &[T],
    want_lse: u32,
    how: &str,
    what: impl Fn(&str) -> String,
) {
    assert!(bits(got) == bits(want), "{}", what(how));
    assert!(
        lse.to_bits() == want_lse,
        "{}",
        what(&format!("log-sum-exp of {how}"))
    );
}

/// With more keys than one chunk, the rows of a causal prefill (one launch per chunk, each folding
/// into the state of the last; on sm_90's TMA kernels one launch whose blocks fold at each chunk
/// boundary), and their log-sum-exp, equal: decode steps through the split decode launch and its merge,
/// alone (key length `i + 1` by kv_lens, or by a cache of exactly `i + 1` keys: one chunk or a
/// split) and batched with other steps (ragged chunk counts in one launch; D2, D3); windows of
/// query rows through the prefill kernel (D4). With a mask too, whose rows 2100..2300 hide every
/// key of chunk 0 (the fold then starts from a chunk with no key) and every 11th row is empty.
fn split_one<T: Element>(e: &Engine, d: usize) {
    let (hq, hkv, s) = (8, 2, SPLIT_S);
    for masked in [false, true] {
        let layout = masked.then_some(MaskLayout::FULL);
        let pre_p = problem((1, hq, hkv, s, s, d), true, None, layout);
        let mut x = inputs::<T>(&pre_p, 700 + d as u64 + u64::from(masked));
        if let Some(m) = x.mask.as_mut() {
            for h in 0..hq {
                for i in 2100..2300 {
                    m[(h * s + i) * s..][..KCHUNK].fill(false);
                }
            }
        }
        let (pre, pre_lse) = run_lse(e, &pre_p, &x);
        let want = |h: usize, i: usize| &pre[(h * s + i) * d..][..d];
        let want_lse = |h: usize, i: usize| pre_lse[h * s + i].to_bits();
        let q_row = |h: usize, i: usize| &x.q[(h * s + i) * d..][..d];
        let mask_row = |h: usize, i: usize| x.mask.as_ref().map(|m| &m[(h * s + i) * s..][..s]);
        let what = |how: &str, i: usize, h: usize| {
            format!(
                "{} d{d} mask={masked}: {how}, row {i} head {h} differs from the causal prefill row",
                tname::<T>()
            )
        };
        // Decode, alone: key length i + 1 through kv_lens over the whole cache, and a cache of
        // exactly i + 1 keys.
        for &i in &SPLIT_ROWS {
            let q: Vec<T> = (0..hq).flat_map(|h| q_row(h, i).iter().copied()).collect();
            let mask: Option<Vec<bool>> = masked.then(|| {
                (0..hq)
                    .flat_map(|h| mask_row(h, i).unwrap().iter().copied())
                    .collect()
            });
            let dp = problem((1, hq, hkv, 1, s, d), false, Some(vec![i + 1]), layout);
            let (got, lse) = run_raw_lse(e, &dp, &q, &x.k, &x.v, mask.as_deref()).expect("decode");
            for h in 0..hq {
                same_row(
                    &got[h * d..][..d],
                    lse[h],
                    want(h, i),
                    want_lse(h, i),
                    "decode by kv_lens",
                    |k| what(k, i, h),
                );
            }
            let n = i + 1;
            let cut = |t: &[T]| -> Vec<T> {
                (0..hkv)
                    .flat_map(|g| t[g * s * d..][..n * d].iter().copied())
                    .collect()
            };
            let mcut: Option<Vec<bool>> = mask.as_ref().map(|m| {
                (0..hq)
                    .flat_map(|h| m[h * s..][..n].iter().copied())
                    .collect()
            });
            let dp = problem((1, hq, hkv, 1, n, d), false, None, layout);
            let (got, lse) =
                run_raw_lse(e, &dp, &q, &cut(&x.k), &cut(&x.v), mcut.as_deref()).expect("decode");
            for h in 0..hq {
                same_row(
                    &got[h * d..][..d],
                    lse[h],
                    want(h, i),
                    want_lse(h, i),
                    "decode, cache of i + 1 keys",
                    |k| what(k, i, h),
                );
            }
        }
        // Decode, batched: one step per batch element, ragged chunk counts in one launch. Six
        // elements split the keys over blocks (and merge); 128 (256 kv-head blocks, the host's
        // DECODE_WHOLE_BLOCKS) walk every chunk in one block and fold in registers.
        let few = [4499, 2047, 0, 2048, 4095, 3500];
        let many: Vec<usize> = (0..128)
            .map(|b| (SPLIT_ROWS[b % SPLIT_ROWS.len()] + b / 14).min(SPLIT_S - 1))
            .collect();
        for steps in [&few[..], &many[..]] {
            let nb = steps.len();
            let mut bq = Vec::new();
            let (mut bk, mut bv) = (Vec::new(), Vec::new());
            let mut bm = Vec::new();
            for &i in steps {
                bq.extend((0..hq).flat_map(|h| q_row(h, i).iter().copied()));
                bk.extend_from_slice(&x.k);
                bv.extend_from_slice(&x.v);
                if masked {
                    bm.extend((0..hq).flat_map(|h| mask_row(h, i).unwrap().iter().copied()));
                }
            }
            let dp = problem(
                (nb, hq, hkv, 1, s, d),
                false,
                Some(steps.iter().map(|i| i + 1).collect()),
                layout,
            );
            let (got, lse) = run_raw_lse(e, &dp, &bq, &bk, &bv, masked.then_some(&bm[..]))
                .expect("batched decode");
            for (b, &i) in steps.iter().enumerate() {
                for h in 0..hq {
                    let how = format!("batched decode (batch element {b} of {nb})");
                    same_row(
                        &got[(b * hq + h) * d..][..d],
                        lse[b * hq + h],
                        want(h, i),
                        want_lse(h, i),
                        &how,
                        |k| what(k, i, h),
                    );
                }
            }
        }
        // Query windows through the prefill kernel, bottom-right causal by key length a + w.
        for &(a, w) in &[(0, 40), (2020, 40), (2000, 130), (4090, 17), (4460, 40)] {
            let wp = problem((1, hq, hkv, w, s, d), true, Some(vec![a + w]), layout);
            let wq: Vec<T> = (0..hq)
                .flat_map(|h| (a..a + w).flat_map(move |i| q_row(h, i).iter().copied()))
                .collect();
            let wm: Option<Vec<bool>> = masked.then(|| {
                (0..hq)
                    .flat_map(|h| {
                        (a..a + w).flat_map(move |i| mask_row(h, i).unwrap().iter().copied())
                    })
                    .collect()
            });
            let (got, lse) = run_raw_lse(e, &wp, &wq, &x.k, &x.v, wm.as_deref()).expect("window");
            for h in 0..hq {
                for (r, i) in (a..a + w).enumerate() {
                    let how = format!("window [{a}, {}) through the prefill kernel", a + w);
                    same_row(
                        &got[(h * w + r) * d..][..d],
                        lse[h * w + r],
                        want(h, i),
                        want_lse(h, i),
                        &how,
                        |k| what(k, i, h),
                    );
                }
            }
        }
    }
}

#[test]
fn d2_d3_d4_across_key_chunks() {
    let Some(e) = gpu("d2_d3_d4_across_key_chunks") else {
        return;
    };
    each_type_and_dim!(split_one, &e);
    loud(&format!(
        "key split: causal prefill of {SPLIT_S} keys (3 chunks) = decode alone ({} rows x 2 \
         cache forms), batched decode (6 steps: split and merged; 128 steps: folded in one \
         block), prefill windows (5), with and without a mask, every dtype and head dim; \
         outputs and log-sum-exp bit for bit",
        SPLIT_ROWS.len()
    ));
}

/// Keys of `merge_across_many_chunks`: 38 chunks, the last holding 5 keys.
const MANY_S: usize = 37 * KCHUNK + 5;
/// Its windows `(first row, rows)`: rows whose key counts reach 17 and 18 chunks (the merge's first
/// load batch of 16 chunk records after chunk 0, full and one past it) and 37 and 38 (a third,
/// partial batch).
const MANY_WINDOWS: [(usize, usize); 2] = [(17 * KCHUNK - 10, 20), (MANY_S - 20, 20)];

/// A split decode's merge over many chunks (kernels/tensorcore.cu, `tc::merge`: the chunk records
/// loaded in batches) gives the causal prefill rows and their log-sum-exp (D3): decode steps alone
/// (key length `i + 1` by kv_lens: 17, 18, 37 or 38 chunks) and two in one launch with ragged chunk
/// counts (D2), against windows of query rows through the prefill kernel, whose blocks fold the
/// chunks themselves.
fn merge_one<T: Element>(e: &Engine, d: usize) {
    let (hq, hkv, s) = (4, 2, MANY_S);
    let kv_p = problem((1, hq, hkv, 1, s, d), false, None, None);
    let x = inputs::<T>(&kv_p, 900 + d as u64);
    let what = |how: &str, i: usize, h: usize| {
        format!(
            "{} d{d}: {how}, row {i} (key length {}) head {h} differs from the causal prefill row",
            tname::<T>(),
            i + 1
        )
    };
    for (wi, &(a, w)) in MANY_WINDOWS.iter().enumerate() {
        // The window's query rows: seeded, independent of K and V's.
        let wp = problem((1, hq, hkv, w, s, d), true, Some(vec![a + w]), None);
        let wq = inputs::<T>(&wp, 950 + d as u64 + wi as u64).q;
        let (want, want_lse) = run_raw_lse(e, &wp, &wq, &x.k, &x.v, None).expect("window");
        let q_row = |h: usize, r: usize| &wq[(h * w + r) * d..][..d];
        for r in [0, 9, 10, 11, w - 1] {
            let i = a + r;
            let q: Vec<T> = (0..hq).flat_map(|h| q_row(h, r).iter().copied()).collect();
            let dp = problem((1, hq, hkv, 1, s, d), false, Some(vec![i + 1]), None);
            let (got, lse) = run_raw_lse(e, &dp, &q, &x.k, &x.v, None).expect("decode");
            for h in 0..hq {
                same_row(
                    &got[h * d..][..d],
                    lse[h],
                    &want[(h * w + r) * d..][..d],
                    want_lse[h * w + r].to_bits(),
                    "split decode and merge",
                    |k| what(k, i, h),
                );
            }
        }
        // Two steps in one launch: this window's last row and its first, ragged chunk counts.
        let steps = [w - 1, 0];
        let bq: Vec<T> = steps
            .iter()
            .flat_map(|&r| (0..hq).flat_map(move |h| q_row(h, r).iter().copied()))
            .collect();
        let bk = [&x.k[..], &x.k[..]].concat();
        let bv = [&x.v[..], &x.v[..]].concat();
        let dp = problem(
            (2, hq, hkv, 1, s, d),
            false,
            Some(steps.iter().map(|&r| a + r + 1).collect()),
            None,
        );
        let (got, lse) = run_raw_lse(e, &dp, &bq, &bk, &bv, None).expect("batched decode");
        for (b, &r) in steps.iter().enumerate() {
            for h in 0..hq {
                let how = format!("batched split decode (batch element {b} of 2)");
                same_row(
                    &got[(b * hq + h) * d..][..d],
                    lse[b * hq + h],
                    &want[(h * w + r) * d..][..d],
                    want_lse[h * w + r].to_bits(),
                    &how,
                    |k| what(k, a + r, h),
                );
            }
        }
    }
}

#[test]
fn merge_across_many_chunks() {
    let Some(e) = gpu("merge_across_many_chunks") else {
        return;
    };
    each_type_and_dim!(merge_one, &e);
    loud(&format!(
        "merge: split decodes of 17, 18, 37 and 38 key chunks ({MANY_S} keys), alone and two in \
         one launch, = the rows of causal prefill windows; outputs and log-sum-exp bit for bit, \
         every dtype and head dim"
    ));
}

// ----------------------------------------------------------------- every pair of kernels

// D3 across every pair of kernels the host can pick. For one (dtype, D) the host chooses among
// four attention kernels, from the shape alone (src/cuda/tensorcore.rs, `plan` and `attention`):
// `tc_fwd` or `tc_dec` (decode iff G·Sq ≤ 16, the decode kernel's BM), each causal or not. The
// prefill tile height BM and the key tile width BN are constants of the cubin per head dim (and BM
// per architecture: 128 or 64); the key split's launches (past 2048 keys) follow from Skv alone
// and are held to the same rows by `d2_d3_d4_across_key_chunks`.
// So one causal prefill (the reference, `tc_fwd_*_causal`) is computed once, and its rows are
// computed again through each kernel, from problems whose rows are a subset of its rows:
//
// - windows of w consecutive query rows [a, a + w) of g query heads per kv head, each window one
//   batch element (so batches and ragged key lengths too), with the causal limit expressed as
//     causal bottom-right with key length a + w (`KvLens`),
//     causal top-left from row 0 (`TopLeft`: row i sees keys j ≤ i),
//     no causal flag and a boolean mask holding the causal limit (`Mask`, key length Skv: the
//       kernel also runs the fully masked tiles past the limit),
//     no causal flag, one row per batch element with key length i + 1 (`RowLens`);
// - with g·w ≤ 16 (decode kernel) and g·w > 16 (prefill kernel; windows start anywhere, so a row
//   sits at another place in its query tile than in the reference, and windows of 130 rows cross
//   a tile boundary of BM 64 or 128); g up to 20 by repeating query heads (rows of the same query
//   head may appear several times in one problem);
// - window ends around the key tile widths (BN 32, 64) and prefill tile heights, and the last
//   row; the reference with and without a random boolean mask (every 11th query row fully masked:
//   rows that see no key, +0 in every kernel).
//
// Every row of every such problem must be the reference row's bits, and so must its log-sum-exp.
// By transitivity every pair of the four kernels is held equal wherever their problems overlap.

/// Query rows the host gives to the decode kernel at most (src/cuda/tensorcore.rs `plan`: G·Sq ≤
/// `tc_cfg_dec_d<D>[0]`, which is `Cfg<…, DEC>::BM` = 16 in kernels/tensorcore.cu).
const DECODE_ROWS: usize = 16;
/// The reference: B 1, Hq 8, Hkv 2 (G 4), Sq = Skv = PAIR_S, causal.
const PAIR_S: usize = 300;
const PAIR_HKV: usize = 2;
const PAIR_G: usize = 4;
/// Last rows of the windows (a window of w rows ending at e starts at e + 1 − w).
const PAIR_ENDS: [usize; 14] = [0, 15, 31, 32, 63, 64, 65, 127, 128, 129, 191, 255, 256, 299];
/// The rows of the one-row-per-batch-element routes.
const PAIR_ROWS: [usize; 14] = [0, 1, 31, 32, 33, 63, 64, 65, 127, 128, 129, 200, 256, 299];

/// The name of the kernel the host picks for `p` (the rule of src/cuda/tensorcore.rs).
fn kernel_name<T: Element>(p: &Problem) -> String {
    let s = p.shape();
    let kind = if s.group() * s.q_len <= DECODE_ROWS {
        "dec"
    } else {
        "fwd"
    };
    let c = if p.causal() { "_causal" } else { "" };
    format!("tc_{kind}_{}_d{}{c}", tname::<T>(), s.head_dim)
}

/// How a route expresses the reference's causal limit (see above).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keys {
    KvLens,
    TopLeft,
    Mask,
    RowLens,
}

/// g query heads per kv head, w rows per window, the keys.
#[derive(Clone, Copy, Debug)]
struct Route {
    g: usize,
    w: usize,
    keys: Keys,
}

/// Every route, for the decode kernel (g·w ≤ 16) and the prefill kernel.
fn pair_routes() -> Vec<Route> {
    use Keys::*;
    let r = |g, w, keys| Route { g, w, keys };
    vec![
        // decode kernel, causal
        r(4, 4, KvLens),
        r(1, 16, KvLens),
        r(2, 3, KvLens),
        r(16, 1, KvLens),
        r(4, 4, TopLeft),
        r(1, 16, TopLeft),
        // decode kernel, not causal
        r(4, 4, Mask),
        r(2, 8, Mask),
        r(4, 1, RowLens),
        r(1, 1, RowLens),
        // prefill kernel, causal
        r(4, 5, KvLens),
        r(1, 17, KvLens),
        r(2, 40, KvLens),
        r(4, 130, KvLens),
        r(4, 40, TopLeft),
        r(2, PAIR_S, TopLeft),
        // prefill kernel, not causal
        r(4, 5, Mask),
        r(1, 130, Mask),
        r(20, 1, RowLens),
    ]
}

/// A fault planted in the comparison, to see that it can fail (`kernel_pairs_logic_on_cpu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PairPlant {
    None,
    /// Compare row i of a window with reference row i + 1.
    RowShift,
    /// Give every route (but `TopLeft`) one key more than the reference row sees.
    ExtraKey,
    /// Compare each row's log-sum-exp with the bits of the reference row's plus one.
    LseUlp,
}

/// Rows compared per kernel (by name), mismatching rows per route, and the first mismatch.
#[derive(Default)]
struct PairCounts {
    rows: std::collections::BTreeMap<String, usize>,
    mismatches: usize,
    route_mismatches: Vec<(Route, usize)>,
    first: Option<String>,
}

/// The reference's inputs, output and log-sum-exp; its heads are query heads 0..8, kv head h / 4.
struct PairRef<T> {
    d: usize,
    x: Inputs<T>,
    out: Vec<T>,
    lse: Vec<f32>,
}

impl<T: Element> PairRef<T> {
    fn q_row(&self, h: usize, i: usize) -> &[T] {
        &self.x.q[(h * PAIR_S + i) * self.d..][..self.d]
    }
    fn out_row(&self, h: usize, i: usize) -> &[T] {
        &self.out[(h * PAIR_S + i) * self.d..][..self.d]
    }
    fn lse_row(&self, h: usize, i: usize) -> u32 {
        self.lse[h * PAIR_S + i].to_bits()
    }
    /// The reference's mask row (true everywhere without a mask).
    fn mask_row(&self, h: usize, i: usize) -> Vec<bool> {
        match &self.x.mask {
            Some(m) => m[(h * PAIR_S + i) * PAIR_S..][..PAIR_S].to_vec(),
            None => vec![true; PAIR_S],
        }
    }
}

/// First rows of the batch elements of `r`.
fn route_starts(r: &Route) -> Vec<usize> {
    match r.keys {
        Keys::TopLeft => vec![0; 3],
        Keys::RowLens => PAIR_ROWS.to_vec(),
        Keys::KvLens | Keys::Mask => PAIR_ENDS
            .iter()
            .filter(|&&e| e + 1 >= r.w)
            .map(|&e| e + 1 - r.w)
            .collect(),
    }
}

/// Reference query head of query head `gi` (of `g`) of kv head `kvh` in batch element `b`: the
/// reference heads of that kv head in rotation, repeated when g > 4.
fn pair_head(kvh: usize, gi: usize, b: usize) -> usize {
    kvh * PAIR_G + (b + gi) % PAIR_G
}

/// The problem and inputs of route `r` (its rows taken from the reference), and the reference row
/// each of its rows must equal, as (head, row).
#[allow(clippy::type_complexity)]
fn route_case<T: Element>(
    rf: &PairRef<T>,
    r: &Route,
    plant: PairPlant,
) -> (Problem, Inputs<T>, Vec<(usize, usize)>) {
    let d = rf.d;
    let starts = route_starts(r);
    let nb = starts.len();
    let hq = PAIR_HKV * r.g;
    let extra = usize::from(plant == PairPlant::ExtraKey);
    let shift = usize::from(plant == PairPlant::RowShift);
    let masked = rf.x.mask.is_some() || r.keys == Keys::Mask;
    let mut pb = Problem::builder(Shape::new(nb, hq, PAIR_HKV, r.w, PAIR_S, d));
    pb = match r.keys {
        Keys::KvLens => pb.causal(true).kv_lens(
            starts
                .iter()
                .map(|&a| (a + r.w + extra).min(PAIR_S))
                .collect(),
        ),
        Keys::TopLeft => pb.causal(true).causal_align(detattn::CausalAlign::TopLeft),
        Keys::Mask => pb,
        Keys::RowLens => pb.kv_lens(
            starts
                .iter()
                .map(|&a| (a + 1 + extra).min(PAIR_S))
                .collect(),
        ),
    };
    if masked {
        pb = pb.mask(MaskLayout::FULL);
    }
    let p = pb.build().expect("valid route problem");
    let mut x = Inputs::<T> {
        q: Vec::with_capacity(nb * hq * r.w * d),
        k: Vec::with_capacity(nb * rf.x.k.len()),
        v: Vec::with_capacity(nb * rf.x.v.len()),
        mask: masked.then(Vec::new),
    };
    let mut want = Vec::with_capacity(nb * hq * r.w);
    for (b, &a) in starts.iter().enumerate() {
        x.k.extend_from_slice(&rf.x.k);
        x.v.extend_from_slice(&rf.x.v);
        for kvh in 0..PAIR_HKV {
            for gi in 0..r.g {
                let h = pair_head(kvh, gi, b);
                for i in a..a + r.w {
                    x.q.extend_from_slice(rf.q_row(h, i));
                    want.push((h, i + shift));
                    if let Some(m) = x.mask.as_mut() {
                        let row = rf.mask_row(h, i);
                        if r.keys == Keys::Mask {
                            // The causal limit of row i as mask bits (bottom-right, Sq = Skv).
                            m.extend(row.iter().enumerate().map(|(j, &t)| t && j <= i + extra));
                        } else {
                            m.extend(row);
                        }
                    }
                }
            }
        }
    }
    (p, x, want)
}

/// What `kernel_pairs` runs a problem with: its output and log-sum-exp.
type PairRunner<'a, T> = &'a dyn Fn(&Problem, &Inputs<T>) -> (Vec<T>, Vec<f32>);

/// The reference of (T, d), masked or not, and every route compared with it through `run`.
fn kernel_pairs<T: Element>(
    d: usize,
    run: PairRunner<'_, T>,
    plant: PairPlant,
    n: &mut PairCounts,
) {
    for masked in [false, true] {
        let layout = masked.then_some(MaskLayout::FULL);
        let p = problem(
            (1, PAIR_HKV * PAIR_G, PAIR_HKV, PAIR_S, PAIR_S, d),
            true,
            None,
            layout,
        );
        let x = inputs::<T>(&p, 900 + d as u64 + u64::from(masked));
        let (out, lse) = run(&p, &x);
        *n.rows.entry(kernel_name::<T>(&p)).or_default() += PAIR_HKV * PAIR_G * PAIR_S;
        let rf = PairRef { d, x, out, lse };
        let lse_plant = u32::from(plant == PairPlant::LseUlp);
        for r in pair_routes() {
            let (rp, rx, want) = route_case(&rf, &r, plant);
            let (got, got_lse) = run(&rp, &rx);
            let kernel = kernel_name::<T>(&rp);
            let mut bad = 0;
            for (row, &(h, i)) in want.iter().enumerate() {
                if i >= PAIR_S {
                    continue; // only under PairPlant::RowShift
                }
                *n.rows.entry(kernel.clone()).or_default() += 1;
                let what = if bits(&got[row * d..][..d]) != bits(rf.out_row(h, i)) {
                    "output row"
                } else if got_lse[row].to_bits() != rf.lse_row(h, i).wrapping_add(lse_plant) {
                    "log-sum-exp of row"
                } else {
                    continue;
                };
                bad += 1;
                n.first.get_or_insert_with(|| {
                    let s = rp.shape();
                    format!(
                        "{kernel} ({r:?}, mask={masked}; B {} Hq {} Sq {}): {what} {row} (batch \
                         {}, head {}, row {}) differs from row {i} of head {h} of the causal \
                         prefill",
                        s.batch,
                        s.q_heads,
                        s.q_len,
                        row / (s.q_heads * s.q_len),
                        row / s.q_len % s.q_heads,
                        row % s.q_len,
                    )
                });
            }
            n.mismatches += bad;
            n.route_mismatches.push((r, bad));
        }
    }
}

/// The four kernels of (T, d), each exercised (with and without a mask) by `kernel_pairs`.
fn assert_every_kernel<T: Element>(d: usize, n: &PairCounts) {
    for kind in ["fwd", "dec"] {
        for c in ["", "_causal"] {
            let name = format!("tc_{kind}_{}_d{d}{c}", tname::<T>());
            assert!(
                n.rows.get(&name).is_some_and(|&k| k > 0),
                "no rows compared through {name}: {:?}",
                n.rows
            );
        }
    }
}

/// `kernel_pairs` without a plant through `run`: no row may differ, every kernel of (T, d) must
/// have been exercised. The rows compared per kernel.
fn pairs_clean<T: Element>(
    d: usize,
    run: PairRunner<'_, T>,
) -> std::collections::BTreeMap<String, usize> {
    let mut n = PairCounts::default();
    kernel_pairs::<T>(d, run, PairPlant::None, &mut n);
    assert!(
        n.mismatches == 0,
        "{} rows differ between kernels; the first: {}",
        n.mismatches,
        n.first.as_deref().unwrap_or("")
    );
    assert_every_kernel::<T>(d, &n);
    n.rows
}

fn pairs_one<T: Element>(e: &Engine, d: usize, total: &mut PairCounts) {
    for (k, c) in pairs_clean::<T>(d, &|p, x| run_lse(e, p, x)) {
        *total.rows.entry(k).or_default() += c;
    }
}

/// `p` on the CPU `Exact` engine: output and log-sum-exp.
fn cpu_lse<T: Element>(cpu: &Engine, p: &Problem, x: &Inputs<T>) -> (Vec<T>, Vec<f32>) {
    let kv = kvcache_common::contiguous(p, &x.k, &x.v);
    kvcache_common::run_cache_on(cpu, p, &x.q, kv, x.mask.as_deref(), true).expect("cpu exact")
}

/// The CPU `Exact` engine as the runner of `kernel_pairs`.
fn pairs_cpu<T: Element>(cpu: &Engine, d: usize) {
    pairs_clean::<T>(d, &|p, x| cpu_lse(cpu, p, x));
}

#[test]
fn every_pair_of_kernels_agrees_where_their_problems_overlap() {
    let Some(e) = gpu("every_pair_of_kernels_agrees_where_their_problems_overlap") else {
        return;
    };
    let mut n = PairCounts::default();
    for d in DIMS {
        pairs_one::<f16>(&e, d, &mut n);
        pairs_one::<bf16>(&e, d, &mut n);
    }
    let per: Vec<String> = n.rows.iter().map(|(k, c)| format!("{k} {c}")).collect();
    loud(&format!(
        "tensorcore kernel pairs: {} rows of {} problems through {} kernels, every row the bits \
         of the causal prefill row it repeats (rows per kernel, reference included: {})",
        n.rows.values().sum::<usize>(),
        DIMS.len() * 2 * 2 * (1 + pair_routes().len()),
        n.rows.len(),
        per.join(", ")
    ));
}

/// The comparison logic of `every_pair_of_kernels_agrees_where_their_problems_overlap` on the CPU
/// `Exact` engine, which keeps D2–D4 bit for bit too (no GPU needed): every route gives the
/// reference's rows, the kernel names cover all four kernels, and each planted fault is found in
/// every route it applies to (so no route's comparison is vacuous).
#[test]
fn kernel_pairs_logic_on_cpu() {
    let cpu = Engine::cpu();
    each_type_and_dim!(pairs_cpu, &cpu);
    let run_cpu = |p: &Problem, x: &Inputs<f16>| cpu_lse(&cpu, p, x);
    for plant in [PairPlant::RowShift, PairPlant::ExtraKey, PairPlant::LseUlp] {
        let mut n = PairCounts::default();
        kernel_pairs::<f16>(64, &run_cpu, plant, &mut n);
        for (r, bad) in &n.route_mismatches {
            if plant == PairPlant::ExtraKey && r.keys == Keys::TopLeft {
                continue; // the plant does not apply
            }
            assert!(*bad > 0, "{plant:?} not found in route {r:?}");
        }
    }
}

// ------------------------------------------------------------------------------------ D4

fn d4_one<T: Element>(e: &Engine, d: usize) {
    let (hq, hkv, s, skv) = (4, 2, 100, 120);
    // Causal suffixes: with bottom-right alignment, row i of the suffix starting at a is row
    // a + i of the full problem.
    let full_p = problem((1, hq, hkv, s, skv, d), true, None, None);
    let x = inputs::<T>(&full_p, 400 + d as u64);
    let full = run(e, &full_p, &x);
    for a in [1usize, 17, 63, 99] {
        let n = s - a;
        let p = problem((1, hq, hkv, n, skv, d), true, None, None);
        let q: Vec<T> = (0..hq)
            .flat_map(|h| x.q[(h * s + a) * d..(h * s + s) * d].iter().copied())
            .collect();
        let out = run_raw(e, &p, &q, &x.k, &x.v, None).expect("suffix run");
        for h in 0..hq {
            assert!(
                bits(rows(&out, (hq, n, d), 0, h)) == bits(&rows(&full, (hq, s, d), 0, h)[a * d..]),
                "D4 {} d{d}: causal suffix from row {a}, head {h} differs",
                tname::<T>()
            );
        }
    }
    // Scattered subsets with a full mask (the mask rows travel with their query rows).
    let full_p = problem((1, hq, hkv, s, skv, d), false, None, Some(MaskLayout::FULL));
    let x = inputs::<T>(&full_p, 500 + d as u64);
    let full = run(e, &full_p, &x);
    for stride in [3usize, 7, 10] {
        let sel: Vec<usize> = (0..s).filter(|r| r % stride == stride / 2).collect();
        let n = sel.len();
        let p = problem((1, hq, hkv, n, skv, d), false, None, Some(MaskLayout::FULL));
        let mut q = vec![];
        let mut m = vec![];
        let fm = x.mask.as_ref().expect("mask");
        for h in 0..hq {
            for &r in &sel {
                q.extend_from_slice(&x.q[(h * s + r) * d..(h * s + r + 1) * d]);
                m.extend_from_slice(&fm[(h * s + r) * skv..(h * s + r + 1) * skv]);
            }
        }
        let out = run_raw(e, &p, &q, &x.k, &x.v, Some(&m)).expect("subset run");
        for h in 0..hq {
            for (i, &r) in sel.iter().enumerate() {
                assert!(
                    bits(&out[(h * n + i) * d..(h * n + i + 1) * d])
                        == bits(&full[(h * s + r) * d..(h * s + r + 1) * d]),
                    "D4 {} d{d}: subset of {n} rows: row {r} of head {h} differs",
                    tname::<T>()
                );
            }
        }
    }
}

#[test]
fn d4_query_subsets() {
    let Some(e) = gpu("d4_query_subsets") else {
        return;
    };
    each_type_and_dim!(d4_one, &e);
}

// ------------------------------------------------------------------------------------ D5

fn d5_one<T: Element + DeviceRepr>(e: &Engine, d: usize) {
    let c = e.cuda().expect("a CUDA engine");
    let pa = problem((2, 8, 2, 200, 300, d), true, Some(vec![300, 123]), None);
    let pb = problem((4, 8, 8, 1, 500, d), false, None, Some(MaskLayout::FULL));
    let xa = inputs::<T>(&pa, 600 + d as u64);
    let xb = inputs::<T>(&pb, 700 + d as u64);
    let want_a = bits(&run(e, &pa, &xa));
    let want_b = bits(&run(e, &pb, &xb));
    let (s1, s2) = (
        c.new_stream().expect("stream"),
        c.new_stream().expect("stream"),
    );
    let up = |s: &std::sync::Arc<cuda::CudaStream>, x: &Inputs<T>| {
        let m = x
            .mask
            .as_ref()
            .map(|m| s.clone_htod(&m.iter().map(|&b| u8::from(b)).collect::<Vec<u8>>()));
        (
            s.clone_htod(&x.q).expect("upload"),
            s.clone_htod(&x.k).expect("upload"),
            s.clone_htod(&x.v).expect("upload"),
            m.map(|r| r.expect("upload")),
        )
    };
    let (a, b) = (up(&s1, &xa), up(&s2, &xb));
    let reps = 8;
    let mut oa: Vec<CudaSlice<T>> = (0..reps)
        .map(|_| {
            s1.clone_htod(&vec![T::default(); want_a.len()])
                .expect("alloc")
        })
        .collect();
    let mut ob: Vec<CudaSlice<T>> = (0..reps)
        .map(|_| {
            s2.clone_htod(&vec![T::default(); want_b.len()])
                .expect("alloc")
        })
        .collect();
    s1.synchronize().expect("sync");
    s2.synchronize().expect("sync");
    // Interleaved launches on the two streams, no synchronisation in between.
    for (o1, o2) in oa.iter_mut().zip(ob.iter_mut()) {
        dev_run(
            c,
            Path::TensorCore,
            &s1,
            &pa,
            &a.0,
            &a.1,
            &a.2,
            a.3.as_ref(),
            o1,
        )
        .expect("stream 1");
        dev_run(
            c,
            Path::TensorCore,
            &s2,
            &pb,
            &b.0,
            &b.1,
            &b.2,
            b.3.as_ref(),
            o2,
        )
        .expect("stream 2");
    }
    for (i, (o1, o2)) in oa.iter().zip(&ob).enumerate() {
        let g1 = s1.clone_dtoh(o1).expect("download");
        let g2 = s2.clone_dtoh(o2).expect("download");
        assert!(
            bits(&g1) == want_a && bits(&g2) == want_b,
            "D5 {} d{d}: launch {i} on two concurrent streams differs from the host entry point",
            tname::<T>()
        );
    }
}

#[test]
fn d5_two_streams_concurrently() {
    let Some(e) = gpu("d5_two_streams_concurrently") else {
        return;
    };
    for d in DIMS {
        d5_one::<f16>(&e, d);
        d5_one::<bf16>(&e, d);
    }
}

// ------------------------------------------------------------------------------ accuracy

/// Relative L2 error of `got` against `want` (both finite), in f64; 0 when both are 0.
fn rel_l2<T: Element>(got: &[T], want: &[T]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (f64::from(g.to_f32()), f64::from(w.to_f32()));
        num += (g - w) * (g - w);
        den += w * w;
    }
    if den == 0.0 {
        if num == 0.0 { 0.0 } else { f64::INFINITY }
    } else {
        (num / den).sqrt()
    }
}

fn accuracy_one<T: Element>(e: &Engine, cpu: &Engine, rng: &mut SplitMix64, i: usize) -> f64 {
    let mut r = |n: u64| rng.next_u64() % n;
    let d = DIMS[r(3) as usize];
    let b = 1 + r(2) as usize;
    let hkv = 1 + r(3) as usize;
    let hq = hkv * [1, 2, 4, 8][r(4) as usize];
    let short = r(4) == 0;
    let sq = 1 + r(if short { 4 } else { 120 }) as usize;
    // One problem in eight past one chunk of the key split (docs/tensorcore-numerics.md §9).
    let long = r(8) == 0;
    let sq = if long { sq.min(24) } else { sq };
    let skv = if long { 2049 + r(3000) } else { 1 + r(160) } as usize;
    let causal = r(2) == 0;
    let lens = (r(3) == 0).then(|| (0..b).map(|_| r(skv as u64 + 1) as usize).collect());
    let mask = match r(8) {
        0 => Some(MaskLayout::FULL),
        1 => Some(MaskLayout::SHARED),
        _ => None,
    };
    let p = problem((b, hq, hkv, sq, skv, d), causal, lens, mask);
    let x = inputs::<T>(&p, 10_000 + i as u64);
    let got = run(e, &p, &x);
    let want = cpu
        .run(&p, &x.q, &x.k, &x.v, x.mask.as_deref())
        .expect("cpu exact");
    assert!(
        got.iter().all(|v| v.to_f32().is_finite()),
        "problem {i} ({} {p:?}): non-finite output from finite input",
        tname::<T>()
    );
    let err = rel_l2(&got, &want);
    let bound = if T::DTYPE == DType::F16 { 2e-3 } else { 1e-2 };
    assert!(
        err <= bound,
        "problem {i} ({} {p:?}): relative L2 error {err:.3e} > {bound:e}",
        tname::<T>()
    );
    err
}

#[test]
fn error_against_cpu_exact_on_300_random_problems() {
    let Some(e) = gpu("error_against_cpu_exact_on_300_random_problems") else {
        return;
    };
    let cpu = Engine::new(Backend::Cpu, Path::Exact).expect("cpu");
    let mut rng = SplitMix64::new(0x7c);
    let (mut w16, mut wb16) = (0f64, 0f64);
    for i in 0..300 {
        if i % 2 == 0 {
            w16 = w16.max(accuracy_one::<f16>(&e, &cpu, &mut rng, i));
        } else {
            wb16 = wb16.max(accuracy_one::<bf16>(&e, &cpu, &mut rng, i));
        }
    }
    loud(&format!(
        "tensorcore vs CPU Exact, 300 random problems: worst relative L2 f16 {w16:.3e} (bound \
         2e-3), bf16 {wb16:.3e} (bound 1e-2), no non-finite output"
    ));
}

// --------------------------------------------------------------------------- golden digests

/// A golden case's digest (of the output, or of the log-sum-exp where the case asks for it)
/// through `run_raw`/`run_raw_lse`, and how many outputs are not finite.
fn own_digest<T: Element>(case: &golden::GoldenCase, e: &Engine) -> (detattn::Digest, usize) {
    let p = case.problem();
    let x = generate::<T>(&p, case.inputs);
    let (out, lse) = run_raw_lse(e, &p, &x.q, &x.k, &x.v, x.mask.as_deref()).expect("golden run");
    let s = p.shape();
    let nonfinite = out.iter().filter(|v| !v.to_f32().is_finite()).count();
    let dg = if case.asks_lse() {
        detattn::lse_digest(Path::TensorCore, &p, &lse)
    } else {
        detattn::digest(
            Path::TensorCore,
            [s.batch, s.q_heads, s.q_len, s.head_dim],
            &out,
        )
    };
    (dg.expect("digest"), nonfinite)
}

#[test]
fn golden_digests_per_architecture() {
    let Some(e) = gpu("golden_digests_per_architecture") else {
        return;
    };
    let arch = e.cuda().expect("cuda").arch();
    let mut got = vec![];
    for case in golden::cases() {
        let r = case.digest_on(&e);
        if case.runs_on(Path::TensorCore) {
            let dg = r.unwrap_or_else(|err| panic!("{}: {err}", case.name));
            // Again, through this file's own runner (the planted fault enters here): the library
            // helper that `detattn selftest` uses must agree with it, and a digest that changes
            // between runs must not be recorded.
            let (again, nonfinite) = match case.dtype {
                DType::F16 => own_digest::<f16>(&case, &e),
                _ => own_digest::<bf16>(&case, &e),
            };
            assert_eq!(dg, again, "{}: digest changed between runs", case.name);
            // Finite input never gives NaN or ±inf, also at the dtype's largest values
            // (bf16_near_max, f16_near_max).
            assert_eq!(
                nonfinite, 0,
                "{}: {nonfinite} non-finite outputs from finite input",
                case.name
            );
            got.push((case.name.to_string(), dg.to_string()));
        } else {
            match r {
                Err(Error::HeadDimUnsupported { .. }) | Err(Error::DTypeUnsupported { .. }) => {}
                other => panic!("{}: expected a typed refusal, got {other:?}", case.name),
            }
        }
    }
    assert!(got.len() >= 10, "only {} golden cases ran", got.len());
    let text: String = got.iter().map(|(n, d)| format!("{n} {d}\n")).collect();
    loud(&format!(
        "tensorcore golden digests on {arch} ({}):\n{text}",
        e.describe()
    ));
    if let Some(dir) = std::env::var_os("DETATTN_RECORD") {
        let file = std::path::Path::new(&dir).join(format!("tensorcore.{arch}.txt"));
        let results: Vec<(&str, detattn::Digest)> = golden::cases()
            .iter()
            .filter(|c| c.runs_on(Path::TensorCore))
            .map(|c| (c.name, c.digest_on(&e).expect("golden run")))
            .collect();
        let text = golden::render(
            Path::TensorCore,
            arch,
            "TensorCore operation sequence of docs/tensorcore.md (per architecture)",
            &format!(
                "on {} by tests/cuda_tensorcore.rs with DETATTN_RECORD (the date is the commit's)",
                e.describe()
            ),
            &results,
        );
        std::fs::write(&file, text).expect("write the recorded digests");
        loud(&format!("recorded to {}", file.display()));
    }
    match golden::expected(Path::TensorCore, arch) {
        Some(want) => {
            let mut bad = vec![];
            for (gn, gd) in &got {
                match want.digest(gn) {
                    Some(w) if w == gd => {}
                    w => bad.push(format!("{gn}: recorded {w:?}, got {gd}")),
                }
            }
            assert!(
                bad.is_empty() && want.digests.len() == got.len(),
                "golden digests on {arch} ({} recorded, {} run):\n{}",
                want.digests.len(),
                got.len(),
                bad.join("\n")
            );
            loud(&format!(
                "tensorcore golden digests: {} cases match golden/tensorcore.{arch}.txt",
                got.len()
            ));
        }
        None => loud(&format!(
            "NOT CHECKED golden_digests_per_architecture: no tensorcore golden digests are \
             recorded for {arch} (golden/tensorcore.<arch>.txt)"
        )),
    }
}

// ----------------------------------------------------------------------------- typed errors

#[test]
fn typed_errors_of_the_path() {
    let Some(e) = gpu("typed_errors_of_the_path") else {
        return;
    };
    let p = problem((1, 2, 2, 5, 9, 64), false, None, None);
    let x32 = inputs::<f32>(&p, 1);
    match e.run(&p, &x32.q, &x32.k, &x32.v, None) {
        Err(Error::DTypeUnsupported {
            path: Path::TensorCore,
            dtype: DType::F32,
            ..
        }) => {}
        other => panic!("f32: expected DTypeUnsupported, got {other:?}"),
    }
    for d in [32usize, 80, 96, 512] {
        let pd = problem((1, 2, 2, 5, 9, d), false, None, None);
        let x = inputs::<f16>(&pd, 1);
        match e.run(&pd, &x.q, &x.k, &x.v, None) {
            Err(Error::HeadDimUnsupported {
                path: Path::TensorCore,
                head_dim,
                ..
            }) if head_dim == d => {}
            other => panic!("d{d}: expected HeadDimUnsupported, got {other:?}"),
        }
    }
    let pp = Problem::builder(Shape::new(1, 2, 2, 5, 9, 64))
        .nonfinite(NonFinitePolicy::Propagate)
        .build()
        .expect("valid");
    // Propagate is taken (it used to be PathUnavailable): finite inputs give the Reject bits.
    let x = inputs::<bf16>(&pp, 1);
    let got = e
        .run(&pp, &x.q, &x.k, &x.v, None)
        .unwrap_or_else(|err| panic!("Propagate: expected a result, got {err}"));
    let reject = with_policy(&pp, NonFinitePolicy::Reject);
    assert_eq!(bits(&got), bits(&run(&e, &reject, &x)), "Propagate, finite");
    // Reject, host slices: the tensor is named and `out` is left untouched.
    for (t, name) in [(0, TensorName::Q), (1, TensorName::K), (2, TensorName::V)] {
        let mut x = inputs::<f16>(&p, 2);
        let target = match t {
            0 => &mut x.q,
            1 => &mut x.k,
            _ => &mut x.v,
        };
        let n = target.len();
        target[n / 2] = f16::NAN;
        let mut out = vec![f16::from_f32(7.0); p.shape().q_elems()];
        match e.run_into(&p, &x.q, &x.k, &x.v, None, &mut out) {
            Err(Error::NonFinite { tensor }) if tensor == name => {}
            other => panic!("NaN in {name}: expected NonFinite, got {other:?}"),
        }
        assert!(out.iter().all(|v| v.to_f32() == 7.0), "out was written");
    }
    // Reject, device buffers: the GPU scan finds an infinity in V; nothing is written.
    let c = e.cuda().expect("cuda");
    let st = c.stream();
    let mut x = inputs::<bf16>(&p, 3);
    x.v[5] = bf16::INFINITY;
    let (q, k, v) = (
        st.clone_htod(&x.q).expect("up"),
        st.clone_htod(&x.k).expect("up"),
        st.clone_htod(&x.v).expect("up"),
    );
    let poison = vec![bf16::from_f32(7.0); p.shape().q_elems()];
    let mut out = st.clone_htod(&poison).expect("up");
    match dev_run(c, Path::TensorCore, &st, &p, &q, &k, &v, None, &mut out) {
        Err(Error::NonFinite {
            tensor: TensorName::V,
        }) => {}
        other => panic!("device Inf in v: expected NonFinite, got {other:?}"),
    }
    let back = st.clone_dtoh(&out).expect("down");
    assert!(back.iter().all(|v| v.to_f32() == 7.0), "out was written");
    // And the clean device call gives the host entry point's bits.
    let x = inputs::<bf16>(&p, 3);
    let v = st.clone_htod(&x.v).expect("up");
    dev_run(c, Path::TensorCore, &st, &p, &q, &k, &v, None, &mut out).expect("device run");
    let back = st.clone_dtoh(&out).expect("down");
    assert_eq!(bits(&back), bits(&run(&e, &p, &x)));
    // The CPU backend does not offer the path.
    assert!(matches!(
        Engine::new(Backend::Cpu, Path::TensorCore),
        Err(Error::PathUnavailable { .. })
    ));
}

// ------------------------------------------------------------------------ extreme magnitudes

/// Bits of the largest finite value, and mantissa width, of `T`.
fn max_and_mant<T: Element>() -> (u32, u32) {
    if T::DTYPE == DType::F16 {
        (0x7BFF, 10)
    } else {
        (0x7F7F, 7)
    }
}

/// One finite element of `T` by row mode: 0 any normal exponent, 1 ±max, 2 subnormal, 3 +0,
/// 4 huge (the top three exponents), 5 [−2, 2).
fn extreme<T: Element>(r: u64, mode: u64) -> T {
    let (max, mb) = max_and_mant::<T>();
    let emax = (0x7FFF >> mb) - 1; // largest biased exponent of a finite value
    let sign = ((r >> 63) as u32) << 15;
    let mant = (r as u32) & ((1 << mb) - 1);
    let e = (r >> 32) as u32;
    let b = match mode {
        0 => sign | ((1 + e % emax) << mb) | mant,
        1 => sign | max,
        2 => sign | mant.max(1),
        3 => 0,
        4 => sign | ((emax - e % 3) << mb) | mant,
        _ => return detattn::inputs::value(r, 0),
    };
    T::from_bits_u32(b)
}

/// Fill `rows` rows of `d` elements: each row one mode, or one-hot (±max at one place, the rest
/// subnormal or zero). `modes` are the row modes this tensor may use.
fn extreme_rows<T: Element>(rng: &mut SplitMix64, rows: usize, d: usize, modes: &[u64]) -> Vec<T> {
    let mut out = Vec::with_capacity(rows * d);
    for _ in 0..rows {
        let mode = modes[(rng.next_u64() % modes.len() as u64) as usize];
        if mode == 6 {
            let hot = (rng.next_u64() % d as u64) as usize;
            for c in 0..d {
                let m = if c == hot { 1 } else { 2 + rng.next_u64() % 2 };
                out.push(extreme::<T>(rng.next_u64(), m));
            }
        } else {
            for _ in 0..d {
                out.push(extreme::<T>(rng.next_u64(), mode));
            }
        }
    }
    out
}

/// A random problem for the extreme and Propagate properties: D 64/128/256, GQA/MQA, small Sq
/// (decode kernel) or larger (prefill), causal, kv_lens incl. 0, every mask layout.
fn random_problem(rng: &mut SplitMix64, scale_extreme: bool) -> Problem {
    let mut r = |n: u64| rng.next_u64() % n;
    let d = DIMS[r(3) as usize];
    let b = 1 + r(2) as usize;
    let hkv = 1 + r(2) as usize;
    let g = [1, 2, 4, 8][r(4) as usize];
    let short = r(2) == 0;
    let sq = 1 + r(if short { 2 } else { 90 }) as usize;
    let skv = 1 + r(150) as usize;
    let mut pb = Problem::builder(Shape::new(b, hkv * g, hkv, sq, skv, d)).causal(r(2) == 0);
    if r(3) == 0 {
        pb = pb.kv_lens((0..b).map(|_| r(skv as u64 + 1) as usize).collect());
    }
    let layouts = [
        MaskLayout::FULL,
        MaskLayout::SHARED,
        MaskLayout {
            per_batch: true,
            per_head: false,
        },
    ];
    if r(3) == 0 {
        pb = pb.mask(layouts[r(3) as usize]);
    }
    if scale_extreme && r(4) == 0 {
        let scales = [f32::MAX, 1e30, 1e-30, f32::from_bits(1), 1e3];
        pb = pb.scale(scales[r(5) as usize]);
    }
    pb.build().expect("valid random problem")
}

/// A seeded mask with every 5th query row fully masked.
fn mask_for(p: &Problem, rng: &mut SplitMix64) -> Option<Vec<bool>> {
    p.mask().map(|_| {
        let [bm, hm, sq, skv] = p.mask_dims();
        (0..bm * hm * sq * skv)
            .map(|n| (n / skv) % sq % 5 != 4 && rng.next_u64() >> 62 != 0)
            .collect()
    })
}

fn extreme_one<T: Element>(e: &Engine, rng: &mut SplitMix64, i: usize) {
    let p = random_problem(rng, true);
    let s = *p.shape();
    // Scenarios: everything mixed; tiny Q and K with huge V; everything ±max; peaked rows.
    let (mq, mk, mv): (&[u64], &[u64], &[u64]) = match rng.next_u64() % 4 {
        0 => (
            &[0, 1, 2, 3, 4, 5, 6],
            &[0, 1, 2, 3, 4, 5, 6],
            &[0, 1, 2, 3, 4, 5, 6],
        ),
        1 => (&[2, 3], &[2, 3], &[1, 4]),
        2 => (&[1], &[1], &[1]),
        _ => (&[6], &[6, 1], &[1, 4, 5]),
    };
    let x = Inputs::<T> {
        q: extreme_rows(rng, s.batch * s.q_heads * s.q_len, s.head_dim, mq),
        k: extreme_rows(rng, s.batch * s.kv_heads * s.kv_len, s.head_dim, mk),
        v: extreme_rows(rng, s.batch * s.kv_heads * s.kv_len, s.head_dim, mv),
        mask: mask_for(&p, rng),
    };
    let out = run(e, &p, &x);
    let d = s.head_dim;
    for b in 0..s.batch {
        for h in 0..s.q_heads {
            for r in 0..s.q_len {
                let row = &out[((b * s.q_heads + h) * s.q_len + r) * d..][..d];
                assert!(
                    row.iter().all(|v| v.to_f32().is_finite()),
                    "extreme {i} ({} {p:?}): row ({b}, {h}, {r}) not finite",
                    tname::<T>()
                );
                if !extremes_common::sees_a_key(&p, x.mask.as_deref(), b, h, r) {
                    assert!(
                        row.iter().all(|v| v.to_bits_u32() == 0),
                        "extreme {i} ({} {p:?}): row ({b}, {h}, {r}) sees no key but is not +0",
                        tname::<T>()
                    );
                }
            }
        }
    }
}

#[test]
fn finite_output_at_extreme_magnitudes() {
    let Some(e) = gpu("finite_output_at_extreme_magnitudes") else {
        return;
    };
    let mut rng = SplitMix64::new(0xe7);
    for i in 0..400 {
        if i % 2 == 0 {
            extreme_one::<f16>(&e, &mut rng, i);
        } else {
            extreme_one::<bf16>(&e, &mut rng, i);
        }
    }
    loud(
        "tensorcore, 400 random problems at extreme finite magnitudes (±max, subnormals, mixed, \
         peaked, huge V with tiny Q/K, extreme scales): every output finite, rows that see no \
         key exactly +0",
    );
}

// -------------------------------------------------------------------------------- Propagate

/// Counts over the Propagate property: NaN rows, other rows.
#[derive(Default)]
struct PropagateCounts {
    nan: usize,
    other: usize,
}

fn propagate_one<T: Element + DeviceRepr>(
    e: &Engine,
    cpu: &Engine,
    rng: &mut SplitMix64,
    i: usize,
    n: &mut PropagateCounts,
) {
    let p = with_policy(&random_problem(rng, false), NonFinitePolicy::Propagate);
    let s = *p.shape();
    let mut x = inputs::<T>(&p, 20_000 + i as u64);
    let planted = 1 + (rng.next_u64() % 6) as usize;
    plant(&mut x, rng, planted);
    // And one in a key past the key length of batch 0, where there is one: it must not poison.
    let l0 = p.kv_len_of(0);
    if l0 < s.kv_len {
        let j = l0 + (rng.next_u64() % (s.kv_len - l0) as u64) as usize;
        let at = j * s.head_dim + (rng.next_u64() % s.head_dim as u64) as usize;
        let t = if rng.next_u64().is_multiple_of(2) {
            &mut x.k
        } else {
            &mut x.v
        };
        t[at] = nonfinite(rng.next_u64());
    }
    let got = run(e, &p, &x);
    let want = cpu
        .run(&p, &x.q, &x.k, &x.v, x.mask.as_deref())
        .expect("cpu exact propagate");
    let clean = run(e, &with_policy(&p, NonFinitePolicy::Reject), &sanitized(&x));
    let d = s.head_dim;
    let nan = T::canonical_nan().to_bits_u32();
    for (r, ((g, w), c)) in got
        .chunks(d)
        .zip(want.chunks(d))
        .zip(clean.chunks(d))
        .enumerate()
    {
        let cpu_nan = w.iter().any(|v| v.to_f32().is_nan());
        let is_nan = g.iter().all(|v| v.to_bits_u32() == nan);
        assert_eq!(
            is_nan,
            cpu_nan,
            "propagate {i} ({} {p:?}): row {r} is {} on the tensorcore path, {} on the CPU",
            tname::<T>(),
            if is_nan { "NaN" } else { "not NaN" },
            if cpu_nan { "NaN" } else { "not NaN" },
        );
        if is_nan {
            n.nan += 1;
        } else {
            n.other += 1;
            assert!(
                bits(g) == bits(c),
                "propagate {i} ({} {p:?}): row {r} differs from the Reject run on the inputs \
                 with non-finite values replaced by +0",
                tname::<T>()
            );
        }
    }
    // The device entry point gives the same bits.
    let c = e.cuda().expect("cuda");
    let st = c.stream();
    let up = |v: &[T]| st.clone_htod(v).expect("upload");
    let m = x.mask.as_ref().map(|m| {
        st.clone_htod(&m.iter().map(|&b| u8::from(b)).collect::<Vec<u8>>())
            .expect("upload")
    });
    let (q, k, v) = (up(&x.q), up(&x.k), up(&x.v));
    let mut out = up(&vec![T::from_bits_u32(0x1357); got.len()]);
    dev_run(
        c,
        Path::TensorCore,
        &st,
        &p,
        &q,
        &k,
        &v,
        m.as_ref(),
        &mut out,
    )
    .expect("device propagate");
    let back = st.clone_dtoh(&out).expect("download");
    assert!(
        bits(&back) == bits(&got),
        "propagate {i} ({} {p:?}): device entry point differs from the host one",
        tname::<T>()
    );
}

#[test]
fn propagate_poisons_exactly_the_rows_exact_does() {
    let Some(e) = gpu("propagate_poisons_exactly_the_rows_exact_does") else {
        return;
    };
    let cpu = Engine::new(Backend::Cpu, Path::Exact).expect("cpu");
    let mut rng = SplitMix64::new(0x9a);
    let mut n = PropagateCounts::default();
    for i in 0..300 {
        if i % 2 == 0 {
            propagate_one::<f16>(&e, &cpu, &mut rng, i, &mut n);
        } else {
            propagate_one::<bf16>(&e, &cpu, &mut rng, i, &mut n);
        }
    }
    // Not vacuous: both kinds of rows occurred.
    assert!(
        n.nan > 100 && n.other > 1000,
        "only {} NaN and {} other rows",
        n.nan,
        n.other
    );
    loud(&format!(
        "tensorcore Propagate, 300 random problems with NaN/±inf planted: {} NaN rows (canonical, \
         = the CPU Exact set), {} other rows (= Reject on the inputs with +0), device = host",
        n.nan, n.other
    ));
}

// ------------------------------------------------------------------------------- timing API

#[test]
fn timing_api_of_the_path() {
    let Some(e) = gpu("timing_api_of_the_path") else {
        return;
    };
    let c = e.cuda().expect("cuda");
    let p = problem((2, 4, 2, 40, 70, 64), true, Some(vec![70, 33]), None);
    for policy in [NonFinitePolicy::Reject, NonFinitePolicy::Propagate] {
        let pp = with_policy(&p, policy);
        for per_sample in [1, 4] {
            let r = c
                .bench(
                    Path::TensorCore,
                    &pp,
                    DType::F16,
                    &bench_opts(1, 2, 5, 3, per_sample),
                )
                .expect("bench_path");
            assert!(
                r.median_us > 0.0 && r.median_us.is_finite() && r.iters == 5 && r.rotate == 3,
                "{policy:?} per_sample {per_sample}: {r:?}"
            );
        }
        // time_launch_path writes `out`: the bits of the host call (Propagate: NaN planted).
        let mut x = inputs::<bf16>(&pp, 5);
        if policy == NonFinitePolicy::Propagate {
            plant(&mut x, &mut SplitMix64::new(5), 5);
        }
        let st = c.stream();
        let (q, k, v) = (
            st.clone_htod(&x.q).expect("up"),
            st.clone_htod(&x.k).expect("up"),
            st.clone_htod(&x.v).expect("up"),
        );
        let mut out = st
            .clone_htod(&vec![bf16::from_bits(0x1357); x.q.len()])
            .expect("up");
        let us = dev_time(c, Path::TensorCore, &st, &pp, &q, &k, &v, None, &mut out)
            .expect("time_launch");
        assert!(us > 0.0 && us.is_finite(), "{policy:?}: {us} µs");
        let back = st.clone_dtoh(&out).expect("down");
        assert_eq!(bits(&back), bits(&run(&e, &pp, &x)), "{policy:?}");
    }
    // The Exact path through the same protocol, one and several launches per sample.
    let p32 = problem((1, 2, 2, 16, 16, 64), false, None, None);
    for per_sample in [1, 3] {
        let r = c
            .bench(
                Path::Exact,
                &p32,
                DType::F32,
                &bench_opts(1, 1, 3, 2, per_sample),
            )
            .expect("bench_path exact");
        assert!(
            r.median_us > 0.0 && r.median_us.is_finite() && r.iters == 3 && r.rotate == 2,
            "exact per_sample {per_sample}: {r:?}"
        );
    }
    match c.bench(
        Path::TensorCore,
        &p32,
        DType::F32,
        &bench_opts(1, 1, 3, 1, 1),
    ) {
        Err(Error::DTypeUnsupported { .. }) => {}
        other => panic!("tensorcore f32: expected DTypeUnsupported, got {other:?}"),
    }
}

// ----------------------------------------------------------------- structured extreme patterns

mod extremes_common;

/// Structured extremes (tests/extremes_common): every pattern for Q, K and V (K in phase with Q,
/// so that q·k is as large as it gets, and against it), in every structure, on every head dim and
/// both dtypes — so every kernel (prefill and decode, causal or not, f16/bf16 × D 64/128/256)
/// meets them. Every output finite; every row that sees no key exactly +0.
fn structured_one<T: Element>(e: &Engine, d: usize) -> usize {
    use extremes_common::{assert_finite_and_unseen_zero, for_each_case};
    for_each_case::<T>(
        d,
        |pq| vec![(pq, 0), (pq, 1), ("alternating_max", 0)],
        |pq| vec!["alternating_max", "all_plus_max", pq],
        |c| {
            let x = Inputs::<T> {
                q: c.q.clone(),
                k: c.k.clone(),
                v: c.v.clone(),
                mask: c.mask.clone(),
            };
            assert_finite_and_unseen_zero(c, &run(e, &c.problem, &x));
        },
    )
}

#[test]
fn structured_extremes_are_finite_on_every_kernel() {
    let Some(e) = gpu("structured_extremes_are_finite_on_every_kernel") else {
        return;
    };
    let mut n = 0;
    for d in DIMS {
        n += structured_one::<f16>(&e, d);
        n += structured_one::<bf16>(&e, d);
    }
    loud(&format!(
        "structured extremes: {n} problems (7 structures x 7 patterns x K/V variants, f16/bf16, \
         D 64/128/256): every output finite, unseen rows +0"
    ));
}

/// Scratch that a call writes in full before reading it is not zeroed (`GpuPath::written_first`:
/// under `Propagate` the sanitised copies of Q, K and V, as large as the inputs): so no bit may
/// depend on what earlier work left in that memory. The stream's pool is soiled with 0xFF bytes
/// (NaN), then 0x00, then 0x5A before the same call, through the device entry and the host entry:
/// every output must be the same bits. Problems: a decode (split: 5 000 keys) with key lengths
/// and NaNs planted, and a causal prefill across a key chunk. A sanitise kernel that skips the
/// copy's odd rows (planted once through the test-only override, kernels left as shipped) fails
/// it.
#[test]
fn stale_scratch_changes_no_bit() {
    let test = "stale_scratch_changes_no_bit";
    let Some(e) = gpu(test) else {
        return;
    };
    let cb = e.cuda().expect("cuda");
    let st = cb.stream();
    let cases = [
        problem((2, 8, 2, 1, 5000, 128), false, Some(vec![5000, 2300]), None),
        problem((1, 4, 2, 70, 2200, 64), true, None, None),
    ];
    for (i, p0) in cases.iter().enumerate() {
        let p = with_policy(p0, NonFinitePolicy::Propagate);
        let mut x = inputs::<bf16>(&p, 40 + i as u64);
        plant(&mut x, &mut SplitMix64::new(7 + i as u64), 3);
        let s = p.shape();
        let up = |t: &[bf16]| st.clone_htod(t).expect("upload");
        let (dq, dk, dv) = (up(&x.q), up(&x.k), up(&x.v));
        let mut seen: Vec<(String, Vec<u32>)> = Vec::new();
        for byte in [0xFFu8, 0x00, 0x5A] {
            soil_pool(&st, 256 << 20, byte);
            let mut out = up(&vec![bf16::from_f32(0.0); s.q_elems()]);
            dev_run(cb, Path::TensorCore, &st, &p, &dq, &dk, &dv, None, &mut out)
                .unwrap_or_else(|err| panic!("{test} case {i}: {err}"));
            let dev = st.clone_dtoh(&out).expect("download");
            seen.push((
                format!("device entry, pool soiled with {byte:#04x}"),
                bits(&dev),
            ));
            soil_pool(&st, 256 << 20, byte);
            let host = run(&e, &p, &x);
            seen.push((
                format!("host entry, pool soiled with {byte:#04x}"),
                bits(&host),
            ));
        }
        for (what, b) in &seen[1..] {
            assert!(
                *b == seen[0].1,
                "{test} case {i} ({p:?}): {what} differs from {}",
                seen[0].0
            );
        }
    }
    loud(&format!(
        "{test}: a split decode and a chunked prefill under Propagate, device and host entries, \
         the pool soiled with 0xff, 0x00, 0x5a before each call: the same bits on {}",
        e.describe()
    ));
}

/// `Reject` through the device entry finds a NaN, +inf or −inf anywhere in Q, K or V, as the host
/// entry (the CPU's scan) does: `gpu_common::reject_scan_case`, on a prefill and a decode of every
/// dtype and head dim, with tensors of several scan blocks (`tc_scan_*`: 2 048 16-byte units a
/// block). A scan that skips a block's last unit (planted once through the test-only override)
/// fails it.
#[test]
fn reject_scan_finds_a_nonfinite_anywhere() {
    let test = "reject_scan_finds_a_nonfinite_anywhere";
    let Some(e) = gpu(test) else {
        return;
    };
    let mut calls = 0;
    for d in DIMS {
        for p in gpu_common::reject_problems(d) {
            calls += gpu_common::reject_scan_case::<f16>(&e, &p, 2048 * 8);
            calls += gpu_common::reject_scan_case::<bf16>(&e, &p, 2048 * 8);
        }
    }
    loud(&format!(
        "{test}: {calls} device calls under Reject (f16/bf16, D 64/128/256, a prefill and a \
         decode): each the host entry's verdict, out untouched on NonFinite, on {}",
        e.describe()
    ));
}
