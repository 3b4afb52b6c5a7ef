//! GPU contract tests of the CUDA `Exact` path: D6 (bit-identical to the CPU on random problems
//! with every option, odd sizes, extreme and non-finite values, all dtypes), the golden digests,
//! D1–D5, fully written outputs, typed errors on the device path.
//!
//! Without a CUDA driver or a supported GPU every test prints `SKIPPED` and why (to stderr) and
//! returns: it cannot pass silently on a machine that has no GPU. Built without the `cuda`
//! feature, this file is empty (there is no CUDA backend to test).
#![cfg(feature = "cuda")]

mod gpu_common;
mod layout_common;
use gpu_common::{dev_run, dev_time};

use detattn::cuda::{CudaBackend, CudaSlice, CudaStream, DeviceRepr};
use detattn::inputs::{GenOptions, SplitMix64, generate};
use detattn::{
    DType, Element, Engine, Error, MaskLayout, NonFinitePolicy, Path, Problem, Shape, TensorName,
    bf16, f16, golden,
};
use std::sync::Arc;

/// The CUDA engine, or `None` after printing why the test is skipped.
fn gpu(test: &str) -> Option<Engine> {
    gpu_common::gpu(test, Path::Exact)
}

fn cuda(e: &Engine) -> &CudaBackend {
    e.cuda().expect("a CUDA engine has a CUDA backend")
}

fn bits<T: Element>(x: &[T]) -> Vec<u32> {
    x.iter().map(|e| e.to_bits_u32()).collect()
}

/// First differing element, as text, or None when the bits are equal.
fn first_diff<T: Element>(a: &[T], b: &[T]) -> Option<String> {
    if a.len() != b.len() {
        return Some(format!("lengths {} vs {}", a.len(), b.len()));
    }
    a.iter()
        .zip(b)
        .position(|(x, y)| x.to_bits_u32() != y.to_bits_u32())
        .map(|i| {
            format!(
                "element {i}: {:#x} vs {:#x}",
                a[i].to_bits_u32(),
                b[i].to_bits_u32()
            )
        })
}

/// Inputs of `p` as the engine takes them.
struct Case<T> {
    q: Vec<T>,
    k: Vec<T>,
    v: Vec<T>,
    mask: Option<Vec<bool>>,
}

/// Seeded inputs scaled by 2^amp, then a few extreme or non-finite values planted.
fn inputs<T: AnyF32>(p: &Problem, seed: u64, amp: i32, plant: usize, nonfinite: bool) -> Case<T> {
    let x = generate::<T>(
        p,
        GenOptions {
            seed,
            amp,
            blank_rows_every: Some(5 + (seed % 7) as usize),
        },
    );
    let mut c = Case {
        q: x.q,
        k: x.k,
        v: x.v,
        mask: x.mask,
    };
    let mut rng = SplitMix64::new(seed ^ 0xD1CE);
    let maxt = T::DTYPE.max_finite();
    let mut specials = vec![
        maxt,
        -maxt,
        f32::from_bits(1), // smallest subnormal (becomes 0 in f16/bf16 unless exact)
        -f32::from_bits(0x0080_0000), // smallest normal
        0.0,
        -0.0,
    ];
    if nonfinite {
        specials.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
    }
    for _ in 0..plant {
        let which = rng.next_u64() % 3;
        let t = match which {
            0 => &mut c.q,
            1 => &mut c.k,
            _ => &mut c.v,
        };
        let i = (rng.next_u64() % t.len() as u64) as usize;
        let s = specials[(rng.next_u64() % specials.len() as u64) as usize];
        t[i] = T::from_f32_rne_any(s);
    }
    c
}

/// `from_f32_rne` for values the dtype may not hold exactly (NaN, inf, f32 extremes): through
/// the `half` conversions, which handle every input.
trait AnyF32: Element {
    fn from_f32_rne_any(x: f32) -> Self;
}
impl AnyF32 for f32 {
    fn from_f32_rne_any(x: f32) -> Self {
        x
    }
}
impl AnyF32 for f16 {
    fn from_f32_rne_any(x: f32) -> Self {
        f16::from_f32(x)
    }
}
impl AnyF32 for bf16 {
    fn from_f32_rne_any(x: f32) -> Self {
        bf16::from_f32(x)
    }
}

/// CPU and GPU (host entry point) on the same problem: same bits, or the same error.
fn compare_host<T: Element>(gpu: &Engine, p: &Problem, c: &Case<T>) -> Result<(), String> {
    let cpu = Engine::cpu().run(p, &c.q, &c.k, &c.v, c.mask.as_deref());
    let dev = gpu.run(p, &c.q, &c.k, &c.v, c.mask.as_deref());
    match (cpu, dev) {
        (Ok(a), Ok(b)) => first_diff(&a, &b).map_or(Ok(()), Err),
        (Err(a), Err(b)) if a == b => Ok(()),
        (a, b) => Err(format!("cpu {:?} vs gpu {:?}", a.err(), b.err())),
    }
}

fn upload<T: DeviceRepr>(s: &Arc<CudaStream>, x: &[T]) -> CudaSlice<T> {
    s.clone_htod(x).expect("upload")
}

/// A device output buffer filled with a poison pattern that no result can have (all ones:
/// a non-canonical NaN in every dtype).
fn poisoned<T: Element + DeviceRepr>(s: &Arc<CudaStream>, n: usize) -> CudaSlice<T> {
    upload(s, &vec![T::from_bits_u32(0xFFFF_FFFF); n])
}

fn mask_bytes(m: &Option<Vec<bool>>) -> Option<Vec<u8>> {
    m.as_ref().map(|m| m.iter().map(|&b| u8::from(b)).collect())
}

/// The device entry point on `stream`, output poisoned first; returns the output (or error).
fn run_device<T: Element + DeviceRepr>(
    be: &CudaBackend,
    stream: &Arc<CudaStream>,
    p: &Problem,
    c: &Case<T>,
) -> Result<Vec<T>, Error> {
    let (q, k, v) = (
        upload(stream, &c.q),
        upload(stream, &c.k),
        upload(stream, &c.v),
    );
    let m = mask_bytes(&c.mask).map(|m| upload(stream, &m));
    let mut out = poisoned::<T>(stream, p.shape().q_elems());
    dev_run(be, Path::Exact, stream, p, &q, &k, &v, m.as_ref(), &mut out)?;
    let host = stream.clone_dtoh(&out).expect("download");
    stream.synchronize().expect("sync");
    Ok(host)
}

fn compare_device<T: Element + DeviceRepr>(
    gpu: &Engine,
    p: &Problem,
    c: &Case<T>,
) -> Result<(), String> {
    let be = cuda(gpu);
    let cpu = Engine::cpu().run(p, &c.q, &c.k, &c.v, c.mask.as_deref());
    let dev = run_device(be, &be.stream(), p, c);
    match (cpu, dev) {
        (Ok(a), Ok(b)) => first_diff(&a, &b).map_or(Ok(()), Err),
        (Err(a), Err(b)) if a == b => Ok(()),
        (a, b) => Err(format!("cpu {:?} vs gpu {:?}", a.err(), b.err())),
    }
}

/// The sizes a random problem is drawn from.
#[derive(Clone, Copy, PartialEq)]
enum Sizes {
    Small,
    Big,
    /// `group · q_len ≤ 16` (the decode kernels), up to 9000 keys (several stages, partial ones).
    Decode,
    /// Decode shapes with enough KV heads (`batch · kv_heads · ⌈head_dim / 128⌉ ≥
    /// WIDE_MIN_BLOCKS`) for the wide values kernel, up to 1200 keys.
    DecodeWide,
}

/// src/cuda/exact.rs `DEC_WIDE_MIN_BLOCKS`: from this many blocks of 128 columns (batch · KV
/// heads · ⌈head_dim / 128⌉) a decode runs `dec_values_wide` (checked by name in
/// `time_launch_each_names_the_decode_kernels_and_writes_the_output`).
const WIDE_MIN_BLOCKS: usize = 96;

/// One random problem description from a seed.
fn random_problem(rng: &mut SplitMix64, sizes: Sizes) -> (Problem, DType, i32, usize, bool) {
    let mut r = |n: u64| (rng.next_u64() % n) as usize;
    const DIMS: [usize; 24] = [
        1, 2, 3, 5, 8, 16, 31, 32, 33, 63, 64, 64, 65, 80, 96, 127, 128, 128, 129, 200, 255, 256,
        257, 520,
    ];
    let d = DIMS[r(DIMS.len() as u64)];
    let hkv = 1 + r(3);
    let group = 1 + r(3);
    let mut b = 1 + r(3);
    let (group, sq, skv) = match sizes {
        Sizes::Small => (group, 1 + r(70), 1 + r(150)),
        Sizes::Big => (group, 1 + r(300), 1 + r(700)),
        Sizes::Decode => {
            let g = [1, 2, 4, 8, 16][r(5)];
            let skv = if r(8) == 0 { 1 + r(9000) } else { 1 + r(3000) };
            (g, 1 + r(16 / g as u64), skv)
        }
        Sizes::DecodeWide => {
            // From the threshold up (96 to about 700 blocks, by head dim and KV heads).
            b = WIDE_MIN_BLOCKS.div_ceil(hkv * d.div_ceil(128)) + r(40);
            let g = [1, 2, 4, 8, 16][r(5)];
            (g, 1 + r(16 / g as u64), 1 + r(1200))
        }
    };
    let dtype = [DType::F32, DType::F16, DType::Bf16][r(3)];
    let mut pb = Problem::builder(Shape::new(b, hkv * group, hkv, sq, skv, d)).causal(r(2) == 1);
    if r(3) == 0 {
        let lens = (0..b)
            .map(|_| if r(5) == 0 { 0 } else { r(skv as u64 + 1) })
            .collect();
        pb = pb.kv_lens(lens);
    }
    match r(5) {
        0 => pb = pb.mask(MaskLayout::FULL),
        1 => pb = pb.mask(MaskLayout::SHARED),
        2 => {
            pb = pb.mask(MaskLayout {
                per_batch: true,
                per_head: false,
            })
        }
        3 => {
            pb = pb.mask(MaskLayout {
                per_batch: false,
                per_head: true,
            })
        }
        _ => {}
    }
    if r(4) == 0 {
        pb = pb.scale([0.3f32, 1.0, 1e-3, 7.5][r(4)]);
    }
    let nonfinite = r(3) == 0;
    // Mostly Propagate when non-finite values are planted, else either policy. (Short-circuit
    // order fixes which draws are taken, so the problem list is the same on every run.)
    let propagate = (nonfinite && r(4) != 0) || r(2) == 0;
    let policy = if propagate {
        NonFinitePolicy::Propagate
    } else {
        NonFinitePolicy::Reject
    };
    pb = pb.nonfinite(policy);
    // amp: ordinary, tiny (subnormal products), and near the dtype's top.
    let amp = match (dtype, r(6)) {
        (_, 0..=2) => 0,
        (DType::F32, 3) => -120,
        (DType::F32, 4) => 100,
        (DType::F32, _) => 126,
        (DType::F16, 3) => -10,
        (DType::F16, _) => 14,
        (DType::Bf16, 3) => -120,
        (DType::Bf16, _) => 126,
    };
    let plant = if r(2) == 0 { 0 } else { 1 + r(6) };
    (
        pb.build().expect("valid random problem"),
        dtype,
        amp,
        plant,
        nonfinite,
    )
}

fn check_one<T: Element + AnyF32 + DeviceRepr>(
    gpu: &Engine,
    p: &Problem,
    seed: u64,
    amp: i32,
    plant: usize,
    nonfinite: bool,
    device: bool,
) -> Result<(), String> {
    let c = inputs::<T>(p, seed, amp, plant, nonfinite);
    compare_host(gpu, p, &c).map_err(|e| format!("host entry: {e}"))?;
    if device {
        compare_device(gpu, p, &c).map_err(|e| format!("device entry: {e}"))?;
    }
    Ok(())
}

/// What a run of random problems found: the mismatches (as text), problems per dtype, shapes.
struct RandomRun {
    failures: Vec<String>,
    kinds: [usize; 3],
    shapes: Vec<Shape>,
}

/// `n` random problems from `seed`, problem `i` drawn from `sizes(i)`, each on the GPU's host
/// entry (and every third on its device entry) against the CPU.
fn random_vs_cpu(gpu: &Engine, seed: u64, n: usize, sizes: impl Fn(usize) -> Sizes) -> RandomRun {
    let mut rng = SplitMix64::new(seed);
    let mut run = RandomRun {
        failures: Vec::new(),
        kinds: [0; 3],
        shapes: Vec::new(),
    };
    for i in 0..n {
        let (p, dtype, amp, plant, nonfinite) = random_problem(&mut rng, sizes(i));
        let seed = rng.next_u64();
        let device = i % 3 == 0;
        run.kinds[dtype.code() as usize] += 1;
        run.shapes.push(*p.shape());
        let r = match dtype {
            DType::F32 => check_one::<f32>(gpu, &p, seed, amp, plant, nonfinite, device),
            DType::F16 => check_one::<f16>(gpu, &p, seed, amp, plant, nonfinite, device),
            DType::Bf16 => check_one::<bf16>(gpu, &p, seed, amp, plant, nonfinite, device),
        };
        if let Err(e) = r {
            run.failures
                .push(format!("#{i} {dtype} {p:?} amp {amp} plant {plant}: {e}"));
        }
    }
    run
}

#[test]
fn d6_random_problems_bit_identical_to_cpu() {
    let Some(gpu) = gpu("d6_random_problems_bit_identical_to_cpu") else {
        return;
    };
    let n = 330;
    let run = random_vs_cpu(&gpu, 0x5EED_0003, n, |i| {
        if i % 20 == 0 {
            Sizes::Big
        } else {
            Sizes::Small
        }
    });
    eprintln!(
        "{n} random problems (f32/f16/bf16: {:?}), {} mismatches",
        run.kinds,
        run.failures.len()
    );
    assert!(run.failures.is_empty(), "{}", run.failures.join("\n"));
}

#[test]
fn decode_kernels_bit_identical_to_cpu() {
    // group · q_len ≤ 16 picks the decode kernels (scores, weights, chains and division spread
    // over the GPU): the same bits as the CPU, with every option, both entry points.
    let Some(gpu) = gpu("decode_kernels_bit_identical_to_cpu") else {
        return;
    };
    let n = 240;
    let run = random_vs_cpu(&gpu, 0x5EED_0DEC, n, |_| Sizes::Decode);
    assert!(run.shapes.iter().all(|s| s.group() * s.q_len <= 16));
    let keys = run.shapes.iter().map(|s| s.kv_len).max().unwrap_or(0);
    eprintln!(
        "{n} random decode problems (f32/f16/bf16: {:?}, up to {keys} keys), {} mismatches",
        run.kinds,
        run.failures.len()
    );
    assert!(run.failures.is_empty(), "{}", run.failures.join("\n"));
}

#[test]
fn wide_decode_kernel_bit_identical_to_cpu() {
    // Decodes with many KV heads take dec_values_wide (128 columns a block) in place of
    // dec_values: the same chains, so the same bits as the CPU, with every option and entry.
    let Some(gpu) = gpu("wide_decode_kernel_bit_identical_to_cpu") else {
        return;
    };
    let n = 60;
    let run = random_vs_cpu(&gpu, 0x5EED_0DEE, n, |_| Sizes::DecodeWide);
    assert!(run.shapes.iter().all(|s| s.group() * s.q_len <= 16
        && s.batch * s.kv_heads * s.head_dim.div_ceil(128) >= WIDE_MIN_BLOCKS));
    eprintln!(
        "{n} random wide decode problems (f32/f16/bf16: {:?}), {} mismatches",
        run.kinds,
        run.failures.len()
    );
    assert!(run.failures.is_empty(), "{}", run.failures.join("\n"));
}

#[test]
fn golden_digests_reproduced_on_gpu() {
    let Some(gpu) = gpu("golden_digests_reproduced_on_gpu") else {
        return;
    };
    // d7_compare.py reads this line to see which cubins ran.
    eprintln!("cubin: {}", cuda(&gpu).cubin_sources().join(", "));
    let want = golden::expected(Path::Exact, "any").expect("golden/exact.txt");
    let mut bad = Vec::new();
    let cases = golden::cases();
    for case in &cases {
        let got = case.digest_on(&gpu).expect(case.name).to_string();
        let exp = want.digest(case.name).expect("pinned");
        if got != exp {
            bad.push(format!("{}: {got} != {exp}", case.name));
        }
    }
    eprintln!(
        "{} golden cases checked on the GPU: all, paged, varlen and log-sum-exp ones included",
        cases.len()
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

fn mixed_problem(b: usize, sq: usize, skv: usize) -> Problem {
    Problem::builder(Shape::new(b, 4, 2, sq, skv, 64))
        .causal(true)
        .mask(MaskLayout::FULL)
        .nonfinite(NonFinitePolicy::Propagate)
        .build()
        .unwrap()
}

#[test]
fn d1_thousand_runs_same_bits() {
    let Some(gpu) = gpu("d1_thousand_runs_same_bits") else {
        return;
    };
    let be = cuda(&gpu);
    let s = be.stream();
    let p = mixed_problem(2, 100, 130);
    let c = inputs::<f32>(&p, 11, 0, 4, true);
    let (q, k, v) = (upload(&s, &c.q), upload(&s, &c.k), upload(&s, &c.v));
    let m = mask_bytes(&c.mask).map(|m| upload(&s, &m));
    let first = run_device(be, &s, &p, &c).unwrap();
    let mut out = poisoned::<f32>(&s, p.shape().q_elems());
    for run in 0..1000 {
        dev_run(be, Path::Exact, &s, &p, &q, &k, &v, m.as_ref(), &mut out).unwrap();
        let host = s.clone_dtoh(&out).unwrap();
        assert_eq!(bits(&host), bits(&first), "run {run} differs");
    }
}

#[test]
fn d2_problem_alone_equals_problem_in_batch() {
    let Some(gpu) = gpu("d2_problem_alone_equals_problem_in_batch") else {
        return;
    };
    let (b, hq, hkv, sq, skv, d) = (5, 6, 3, 45, 90, 80);
    let lens = vec![90, 17, 64, 0, 89];
    let p = Problem::builder(Shape::new(b, hq, hkv, sq, skv, d))
        .kv_lens(lens.clone())
        .causal(true)
        .build()
        .unwrap();
    let c = inputs::<bf16>(&p, 21, 0, 0, false);
    let all = gpu.run(&p, &c.q, &c.k, &c.v, None).unwrap();
    let (qn, kn) = (hq * sq * d, hkv * skv * d);
    for bi in 0..b {
        let one = Problem::builder(Shape::new(1, hq, hkv, sq, skv, d))
            .kv_lens(vec![lens[bi]])
            .causal(true)
            .build()
            .unwrap();
        let out = gpu
            .run(
                &one,
                &c.q[bi * qn..(bi + 1) * qn],
                &c.k[bi * kn..(bi + 1) * kn],
                &c.v[bi * kn..(bi + 1) * kn],
                None,
            )
            .unwrap();
        assert_eq!(bits(&out), bits(&all[bi * qn..(bi + 1) * qn]), "batch {bi}");
    }
}

#[test]
fn d3_decode_rows_equal_causal_prefill() {
    let Some(gpu) = gpu("d3_decode_rows_equal_causal_prefill") else {
        return;
    };
    // Every kernel pair: the decode kernels (group · q_len = 2 ≤ 16) against the prefill kernel
    // of each head-dim class (fast 64, 128, 256, generic), in every dtype.
    fn one<T: Element + AnyF32>(gpu: &Engine, d: usize) -> usize {
        let (hq, hkv, s) = (4, 2, 300);
        let p = Problem::builder(Shape::new(1, hq, hkv, s, s, d))
            .causal(true)
            .build()
            .unwrap();
        let c = inputs::<T>(&p, 31 + d as u64, 0, 0, false);
        let prefill = gpu.run(&p, &c.q, &c.k, &c.v, None).unwrap();
        let rows = [0usize, 1, 63, 64, 65, 127, 128, 255, 256, 257, 299];
        for &i in &rows {
            // Decoding token i: one query row against a cache holding keys 0..=i.
            let dec = Problem::builder(Shape::new(1, hq, hkv, 1, i + 1, d))
                .causal(true)
                .build()
                .unwrap();
            let q: Vec<T> = (0..hq)
                .flat_map(|h| c.q[(h * s + i) * d..(h * s + i + 1) * d].to_vec())
                .collect();
            let cache = |x: &[T]| -> Vec<T> {
                (0..hkv)
                    .flat_map(|h| x[h * s * d..(h * s + i + 1) * d].to_vec())
                    .collect()
            };
            let out = gpu.run(&dec, &q, &cache(&c.k), &cache(&c.v), None).unwrap();
            // The same decode repeated over enough batch elements for the wide values kernel
            // (batch · kv_heads · ⌈d / 128⌉ ≥ WIDE_MIN_BLOCKS): every copy gives the prefill row
            // too.
            let nb = WIDE_MIN_BLOCKS.div_ceil(hkv * d.div_ceil(128));
            let rep = |x: &[T]| -> Vec<T> { (0..nb).flat_map(|_| x.to_vec()).collect() };
            let wide = Problem::builder(Shape::new(nb, hq, hkv, 1, i + 1, d))
                .causal(true)
                .build()
                .unwrap();
            let outw = gpu
                .run(
                    &wide,
                    &rep(&q),
                    &rep(&cache(&c.k)),
                    &rep(&cache(&c.v)),
                    None,
                )
                .unwrap();
            for h in 0..hq {
                let want = bits(&prefill[(h * s + i) * d..(h * s + i + 1) * d]);
                assert_eq!(
                    bits(&out[h * d..(h + 1) * d]),
                    want,
                    "{} d {d} row {i} head {h}",
                    T::DTYPE
                );
                for bi in [0, nb / 2, nb - 1] {
                    let o = (bi * hq + h) * d;
                    assert_eq!(
                        bits(&outw[o..o + d]),
                        want,
                        "{} d {d} row {i} head {h}, batch {bi} of {nb} (wide values kernel)",
                        T::DTYPE
                    );
                }
            }
        }
        rows.len() * hq
    }
    let mut n = 0;
    for d in [64, 128, 256, 300] {
        n += one::<f32>(&gpu, d) + one::<f16>(&gpu, d) + one::<bf16>(&gpu, d);
    }
    eprintln!("D3: {n} decode rows equal to their causal prefill rows (4 head dims x 3 dtypes)");
}

#[test]
fn d4_query_subset_gives_the_same_rows() {
    let Some(gpu) = gpu("d4_query_subset_gives_the_same_rows") else {
        return;
    };
    let (hq, sq, skv, d) = (3, 140, 77, 64);
    let p = Problem::builder(Shape::new(1, hq, hq, sq, skv, d))
        .mask(MaskLayout::FULL)
        .build()
        .unwrap();
    let c = inputs::<f32>(&p, 41, 0, 0, false);
    let full = gpu.run(&p, &c.q, &c.k, &c.v, c.mask.as_deref()).unwrap();
    let rows: Vec<usize> = vec![0, 5, 6, 63, 64, 100, 139];
    let sub = Problem::builder(Shape::new(1, hq, hq, rows.len(), skv, d))
        .mask(MaskLayout::FULL)
        .build()
        .unwrap();
    let mask = c.mask.as_ref().unwrap();
    let mut q = Vec::new();
    let mut m = Vec::new();
    for h in 0..hq {
        for &i in &rows {
            q.extend_from_slice(&c.q[(h * sq + i) * d..(h * sq + i + 1) * d]);
            m.extend_from_slice(&mask[(h * sq + i) * skv..(h * sq + i + 1) * skv]);
        }
    }
    let out = gpu.run(&sub, &q, &c.k, &c.v, Some(&m)).unwrap();
    for h in 0..hq {
        for (r, &i) in rows.iter().enumerate() {
            let a = &out[(h * rows.len() + r) * d..(h * rows.len() + r + 1) * d];
            let b = &full[(h * sq + i) * d..(h * sq + i + 1) * d];
            assert_eq!(bits(a), bits(b), "head {h} row {i}");
        }
    }
}

#[test]
fn d5_two_streams_concurrent_launches() {
    let Some(gpu) = gpu("d5_two_streams_concurrent_launches") else {
        return;
    };
    let be = cuda(&gpu);
    let (s1, s2) = (be.new_stream().unwrap(), be.new_stream().unwrap());
    let pa = mixed_problem(3, 200, 260);
    let pb = Problem::builder(Shape::new(2, 8, 8, 300, 300, 128))
        .nonfinite(NonFinitePolicy::Propagate)
        .build()
        .unwrap();
    let ca = inputs::<f32>(&pa, 51, 0, 3, true);
    let cb = inputs::<bf16>(&pb, 52, 0, 0, false);
    let want_a = Engine::cpu()
        .run(&pa, &ca.q, &ca.k, &ca.v, ca.mask.as_deref())
        .unwrap();
    let want_b = Engine::cpu().run(&pb, &cb.q, &cb.k, &cb.v, None).unwrap();
    let ma = mask_bytes(&ca.mask).map(|m| upload(&s1, &m));
    let (qa, ka, va) = (upload(&s1, &ca.q), upload(&s1, &ca.k), upload(&s1, &ca.v));
    let (qb, kb, vb) = (upload(&s2, &cb.q), upload(&s2, &cb.k), upload(&s2, &cb.v));
    let mut outs_a: Vec<_> = (0..8)
        .map(|_| poisoned::<f32>(&s1, pa.shape().q_elems()))
        .collect();
    let mut outs_b: Vec<_> = (0..8)
        .map(|_| poisoned::<bf16>(&s2, pb.shape().q_elems()))
        .collect();
    // Interleaved launches on two streams with no synchronisation in between.
    for (oa, ob) in outs_a.iter_mut().zip(outs_b.iter_mut()) {
        dev_run(be, Path::Exact, &s1, &pa, &qa, &ka, &va, ma.as_ref(), oa).unwrap();
        dev_run(be, Path::Exact, &s2, &pb, &qb, &kb, &vb, None, ob).unwrap();
    }
    for (i, o) in outs_a.iter().enumerate() {
        let h = s1.clone_dtoh(o).unwrap();
        assert_eq!(first_diff(&h, &want_a), None, "stream 1 launch {i}");
    }
    for (i, o) in outs_b.iter().enumerate() {
        let h = s2.clone_dtoh(o).unwrap();
        assert_eq!(first_diff(&h, &want_b), None, "stream 2 launch {i}");
    }
}

#[test]
fn device_entry_rejects_nonfinite_and_bad_arguments_without_writing() {
    let Some(gpu) = gpu("device_entry_rejects_nonfinite_and_bad_arguments_without_writing") else {
        return;
    };
    let be = cuda(&gpu);
    let s = be.stream();
    let p = Problem::builder(Shape::new(1, 2, 2, 9, 70, 32))
        .build()
        .unwrap();
    for (which, name) in [
        (0usize, TensorName::Q),
        (1, TensorName::K),
        (2, TensorName::V),
    ] {
        let mut c = inputs::<f32>(&p, 61, 0, 0, false);
        let t = [&mut c.q, &mut c.k, &mut c.v][which].as_mut_slice();
        let n = t.len();
        t[n - 1] = f32::NAN; // the last element: the scan must read everything
        let (q, k, v) = (upload(&s, &c.q), upload(&s, &c.k), upload(&s, &c.v));
        let mut out = poisoned::<f32>(&s, p.shape().q_elems());
        let r = dev_run(be, Path::Exact, &s, &p, &q, &k, &v, None, &mut out);
        assert_eq!(r, Err(Error::NonFinite { tensor: name }));
        let host = s.clone_dtoh(&out).unwrap();
        assert!(
            host.iter().all(|x| x.to_bits() == 0xFFFF_FFFF),
            "out was written"
        );
    }
    // A buffer shorter than its tensor's extent: a typed error before any work (device buffers
    // may be longer than the tensor — views — so the error is the extent's, not a length's).
    let c = inputs::<f32>(&p, 62, 0, 0, false);
    let (q, k) = (upload(&s, &c.q), upload(&s, &c.k));
    let short = upload(&s, &c.v[1..]);
    let mut out = poisoned::<f32>(&s, p.shape().q_elems());
    let r = dev_run(be, Path::Exact, &s, &p, &q, &k, &short, None, &mut out);
    assert!(
        matches!(
            r,
            Err(Error::TensorExtent {
                tensor: TensorName::V,
                needed: 4480,
                got: 4479,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(
        s.clone_dtoh(&out)
            .unwrap()
            .iter()
            .all(|x| x.to_bits() == 0xFFFF_FFFF),
        "out was written"
    );
    // A longer one is fine (the tensor is a view of it).
    let long = upload(&s, &[c.v.clone(), vec![1.0; 8]].concat());
    let v = upload(&s, &c.v);
    dev_run(be, Path::Exact, &s, &p, &q, &k, &long, None, &mut out).expect("a longer buffer");
    let a = s.clone_dtoh(&out).unwrap();
    dev_run(be, Path::Exact, &s, &p, &q, &k, &v, None, &mut out).expect("exact length");
    assert_eq!(first_diff(&a, &s.clone_dtoh(&out).unwrap()), None);
}

#[test]
fn time_launch_reports_a_positive_time_and_writes_the_output() {
    let Some(gpu) = gpu("time_launch_reports_a_positive_time_and_writes_the_output") else {
        return;
    };
    let be = cuda(&gpu);
    let s = be.stream();
    let p = mixed_problem(1, 64, 64);
    let c = inputs::<f16>(&p, 71, 0, 0, false);
    let (q, k, v) = (upload(&s, &c.q), upload(&s, &c.k), upload(&s, &c.v));
    let m = mask_bytes(&c.mask).map(|m| upload(&s, &m));
    let mut out = poisoned::<f16>(&s, p.shape().q_elems());
    let us = dev_time(be, Path::Exact, &s, &p, &q, &k, &v, m.as_ref(), &mut out).unwrap();
    assert!(us > 0.0 && us.is_finite(), "{us}");
    let want = Engine::cpu()
        .run(&p, &c.q, &c.k, &c.v, c.mask.as_deref())
        .unwrap();
    assert_eq!(first_diff(&s.clone_dtoh(&out).unwrap(), &want), None);
}

/// `time_launch_each` (the constant-time test's per-kernel timer): on a decode, the four decode
/// kernels in launch order, each with a positive time, and the output the host call's bits; the
/// values kernel is the wide one from `WIDE_MIN_BLOCKS` blocks on (2 KV heads, head dim 64: one
/// block a KV head) and the narrow one below.
#[test]
fn time_launch_each_names_the_decode_kernels_and_writes_the_output() {
    let Some(gpu) = gpu("time_launch_each_names_the_decode_kernels_and_writes_the_output") else {
        return;
    };
    let be = cuda(&gpu);
    for (batch, values) in [
        (1, "detattn_dec_values_f16"),
        (WIDE_MIN_BLOCKS / 2 - 1, "detattn_dec_values_f16"),
        (WIDE_MIN_BLOCKS / 2, "detattn_dec_values_wide_f16"),
    ] {
        each_kernel_of_a_decode(be, batch, values);
    }
}

fn each_kernel_of_a_decode(be: &detattn::cuda::CudaBackend, batch: usize, values: &str) {
    let s = be.stream();
    let p = mixed_problem(batch, 1, 300);
    let c = inputs::<f16>(&p, 72, 0, 0, false);
    let (q, k, v) = (upload(&s, &c.q), upload(&s, &c.k), upload(&s, &c.v));
    let m = mask_bytes(&c.mask).map(|m| upload(&s, &m));
    let mut out = poisoned::<f16>(&s, p.shape().q_elems());
    let x = detattn::cuda::DeviceQkv::bhsd(&p, &q, &k, &v, m.as_ref());
    let layout = detattn::Layout::bhsd(p.shape().q_heads, p.shape().q_len, p.shape().head_dim);
    let each = be
        .time_launch_each(
            Path::Exact,
            &s,
            &p,
            &x,
            detattn::cuda::DeviceTensorMut::new(&mut out, layout),
        )
        .unwrap();
    let names: Vec<&str> = each.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "detattn_dec_scores_f16",
            "detattn_dec_weights_f16",
            values,
            "detattn_dec_finish_f16"
        ],
        "batch {batch}"
    );
    assert!(
        each.iter().all(|(_, us)| *us > 0.0 && us.is_finite()),
        "{each:?}"
    );
    let want = Engine::cpu()
        .run(&p, &c.q, &c.k, &c.v, c.mask.as_deref())
        .unwrap();
    assert_eq!(first_diff(&s.clone_dtoh(&out).unwrap(), &want), None);
}

// ----------------------------------------------------------------- structured extreme patterns

mod extremes_common;

/// The structured extremes of tests/extremes_common on the `Exact` path: the GPU gives the CPU's
/// bits (D6) on each, for every dtype and for head dims that reach every kernel (fast 64, 128,
/// 256 and the generic one), and every output is finite.
#[test]
fn structured_extremes_bit_identical_to_cpu() {
    use extremes_common::{assert_finite_and_unseen_zero, for_each_case};
    let Some(gpu) = gpu("structured_extremes_bit_identical_to_cpu") else {
        return;
    };
    let cpu = Engine::cpu();
    fn one<T: Element>(gpu: &Engine, cpu: &Engine, d: usize) -> usize {
        for_each_case::<T>(
            d,
            |pq| vec![(pq, 0), (pq, 1)],
            |_| vec!["alternating_max"],
            |c| {
                let (p, m) = (&c.problem, c.mask.as_deref());
                let want = cpu.run(p, &c.q, &c.k, &c.v, m).expect("cpu");
                let got = gpu.run(p, &c.q, &c.k, &c.v, m).expect("gpu");
                assert_eq!(first_diff(&got, &want), None, "{}", c.label);
                assert_finite_and_unseen_zero(c, &got);
            },
        )
    }
    let mut n = 0;
    for d in [64, 128, 256, 300] {
        n += one::<f32>(&gpu, &cpu, d);
        n += one::<f16>(&gpu, &cpu, d);
        n += one::<bf16>(&gpu, &cpu, d);
    }
    eprintln!("{n} structured extreme problems: GPU = CPU bit for bit, all finite");
}

/// Scratch that a call writes in full before reading it is not zeroed (`GpuPath::written_first`:
/// the prepared K and V rows, f32, twice the size of a 16-bit K and V): so no bit may depend on
/// what earlier work left in that memory. The stream's pool is soiled with 0xFF bytes (NaN),
/// then 0x00, then 0x5A before the same call through the device entry; every output must be the
/// CPU's bits. Problems under both policies: a prefill (the fast kernels read the prepared rows)
/// and a decode (under `Reject` the scan prepares them), with key lengths.
#[test]
fn stale_scratch_changes_no_bit() {
    let test = "stale_scratch_changes_no_bit";
    let Some(e) = gpu(test) else {
        return;
    };
    let be = cuda(&e);
    let st = be.stream();
    let shapes = [
        Shape::new(2, 4, 2, 40, 300, 64),
        Shape::new(2, 8, 2, 1, 3000, 128),
    ];
    let mut n = 0;
    for (i, shape) in shapes.into_iter().enumerate() {
        for policy in [NonFinitePolicy::Reject, NonFinitePolicy::Propagate] {
            let p = Problem::builder(shape)
                .causal(i == 0)
                .kv_lens(vec![shape.kv_len, shape.kv_len / 2 + 7])
                .nonfinite(policy)
                .build()
                .expect("valid problem");
            let c = inputs::<bf16>(&p, 70 + i as u64, 0, 4, false);
            let cpu = Engine::cpu()
                .run(&p, &c.q, &c.k, &c.v, c.mask.as_deref())
                .expect("cpu");
            for byte in [0xFFu8, 0x00, 0x5A] {
                gpu_common::soil_pool(&st, 256 << 20, byte);
                let dev = run_device(be, &st, &p, &c).unwrap_or_else(|err| panic!("{test}: {err}"));
                if let Some(d) = first_diff(&cpu, &dev) {
                    panic!("{test} {p:?}, pool soiled with {byte:#04x}: {d}");
                }
                n += 1;
            }
        }
    }
    gpu_common::loud(&format!(
        "{test}: {n} calls (prefill and decode, both policies) after the pool was soiled with \
         0xff, 0x00, 0x5a: the CPU's bits on {}",
        e.describe()
    ));
}

/// `Reject` through the device entry finds a NaN, +inf or −inf anywhere in Q, K or V, as the host
/// entry (the CPU's scan) does: `gpu_common::reject_scan_case`, on a prefill and a decode of every
/// dtype, at head dims 32, 80, 128 and 256. A prefill's scan ORs the prepared rows' flags in 256
/// slices (`detattn_reject_part`) and then those words; a decode's (`detattn_scan_*`) reads the
/// caller's rows in chunks of one head. A `detattn_reject_part` that skips each slice's last row,
/// and a `detattn_scan_*` that skips each chunk's last row, (each planted once through the
/// test-only override) fail it.
#[test]
fn reject_scan_finds_a_nonfinite_anywhere() {
    let test = "reject_scan_finds_a_nonfinite_anywhere";
    let Some(e) = gpu(test) else {
        return;
    };
    let mut calls = 0;
    for d in [32, 80, 128, 256] {
        for p in gpu_common::reject_problems(d) {
            calls += gpu_common::reject_scan_case::<f32>(&e, &p, 1 << 20);
            calls += gpu_common::reject_scan_case::<detattn::f16>(&e, &p, 1 << 20);
            calls += gpu_common::reject_scan_case::<detattn::bf16>(&e, &p, 1 << 20);
        }
    }
    gpu_common::loud(&format!(
        "{test}: {calls} device calls under Reject (f32/f16/bf16, D 32/80/128/256, a prefill and \
         a decode): each the host entry's verdict, out untouched on NonFinite, on {}",
        e.describe()
    ));
}

/// `Reject`'s scan reads the rows of every layout and nothing else: Q, K and V placed `[B, S, H,
/// D]`, padded (8 elements between rows) and padded at an odd element offset (rows no longer
/// 16-byte aligned: the scan's element-wise form), with NaN in every gap between rows. Finite rows
/// are accepted with the contiguous run's bits (a scan that read a gap would refuse them); a NaN,
/// +inf or −inf planted at the first or last element of a row, in rows at both ends of each
/// tensor and in seeded ones, is refused as the host entry (the CPU's scan, on the same layout)
/// refuses it, `out` untouched. Head dims 36 (2-byte rows not whole 16-byte units), 37 and 128, every dtype, a
/// decode (`detattn_scan_*`) and a prefill (`prepare`'s flags).
#[test]
fn reject_scan_reads_every_layout_and_nothing_else() {
    let test = "reject_scan_reads_every_layout_and_nothing_else";
    let Some(e) = gpu(test) else {
        return;
    };
    let mut calls = 0;
    for d in [36, 37, 128] {
        for (b, hq, hkv, sq, skv, lens) in [
            (2, 4, 2, 1, 300, vec![300, 170]),
            (2, 2, 1, 5, 40, vec![40, 33]),
        ] {
            let p = Problem::builder(Shape::new(b, hq, hkv, sq, skv, d))
                .kv_lens(lens)
                .nonfinite(NonFinitePolicy::Reject)
                .build()
                .expect("valid test problem");
            calls += layout_scan_case::<f32>(&e, &p);
            calls += layout_scan_case::<f16>(&e, &p);
            calls += layout_scan_case::<bf16>(&e, &p);
        }
    }
    gpu_common::loud(&format!(
        "{test}: {calls} device calls under Reject (f32/f16/bf16, D 36/37/128, decode and \
         prefill, three strided layouts with NaN between the rows): each the host entry's \
         verdict on the same layout, out untouched when refused, on {}",
        e.describe()
    ));
}

fn layout_scan_case<T: Element + DeviceRepr>(e: &Engine, p: &Problem) -> usize {
    use detattn::cuda::{DeviceQkv, DeviceTensor, DeviceTensorMut};
    use detattn::tensor::gather;
    use detattn::{Layout, Qkv, Tensor, TensorMut};
    use layout_common::{Kind, layout, place};
    let cb = cuda(e);
    let st = cb.stream();
    let s = p.shape();
    let qd = [s.batch, s.q_heads, s.q_len, s.head_dim];
    let kd = [s.batch, s.kv_heads, s.kv_len, s.head_dim];
    let clean = generate::<T>(p, GenOptions::seed(s.head_dim as u64 + 7 * s.q_len as u64));
    let want = e
        .run(p, &clean.q, &clean.k, &clean.v, None)
        .expect("contiguous run");
    let nan = T::from_f32_rne(f32::NAN);
    let kind =
        |r: u64| T::from_f32_rne([f32::NAN, f32::INFINITY, f32::NEG_INFINITY][(r % 3) as usize]);
    let mut rng = SplitMix64::new(0x5CA7 + s.head_dim as u64);
    let (lo, olen) = layout(Kind::Bshd, qd);
    let mut calls = 0;
    for (name, odd) in [
        ("bshd", false),
        ("padded", false),
        ("padded, odd offset", true),
    ] {
        let k = if name == "bshd" {
            Kind::Bshd
        } else {
            Kind::Padded
        };
        let ([mut q, mut kb, mut vb], mut ls) = place(p, k, &clean.q, &clean.k, &clean.v, nan);
        if odd {
            // One more element in front: every row starts one element later.
            for buf in [&mut q, &mut kb, &mut vb] {
                buf.insert(0, nan);
            }
            ls = ls.map(|l: Layout| l.with_offset(l.offset + 1));
        }
        let run = |q: &[T], k: &[T], v: &[T], what: &str| {
            let host = Qkv {
                q: Tensor::new(q, ls[0]),
                k: Tensor::new(k, ls[1]),
                v: Tensor::new(v, ls[2]),
                mask: None,
            };
            let mut hout = vec![T::from_f32_rne(7.0); olen];
            let hr = e.run_tensors(p, &host, TensorMut::new(&mut hout, lo));
            let up = |x: &[T]| st.clone_htod(x).expect("upload");
            let (dq, dk, dv) = (up(q), up(k), up(v));
            let dev = DeviceQkv {
                q: DeviceTensor::new(&dq, ls[0]),
                k: DeviceTensor::new(&dk, ls[1]),
                v: DeviceTensor::new(&dv, ls[2]),
                mask: None,
            };
            let mut dout = up(&vec![T::from_f32_rne(7.0); olen]);
            let dr = cb.run_device(e.path(), &st, p, &dev, DeviceTensorMut::new(&mut dout, lo));
            let got = st.clone_dtoh(&dout).expect("download");
            let ctx = format!("{} {name} {p:?}: {what}", T::DTYPE.name());
            match (&hr, &dr) {
                (Ok(()), Ok(())) => {
                    assert_eq!(
                        bits(&gather(&hout, qd, lo)),
                        bits(&want),
                        "{ctx}: host bits"
                    );
                    assert_eq!(
                        bits(&gather(&got, qd, lo)),
                        bits(&want),
                        "{ctx}: device bits"
                    );
                }
                (Err(h), Err(d)) => {
                    assert_eq!(d, h, "{ctx}");
                    let seven = T::from_f32_rne(7.0).to_bits_u32();
                    assert!(
                        bits(&got).iter().all(|&b| b == seven),
                        "{ctx}: out was written"
                    );
                }
                _ => panic!("{ctx}: host entry {hr:?}, device entry {dr:?}"),
            }
            hr.is_ok()
        };
        assert!(
            run(&q, &kb, &vb, "finite rows, NaN between them"),
            "finite rows refused"
        );
        calls += 1;
        for t in 0..3 {
            let dims = if t == 0 { qd } else { kd };
            let rows = dims[0] * dims[1] * dims[2];
            let mut at = vec![0, rows - 1];
            at.extend((0..4).map(|_| (rng.next_u64() % rows as u64) as usize));
            for r in at {
                let (bi, rest) = (r / (dims[1] * dims[2]), r % (dims[1] * dims[2]));
                let (hi, si) = (rest / dims[2], rest % dims[2]);
                for col in [0, s.head_dim - 1] {
                    let (mut x, mut y, mut z) = (q.clone(), kb.clone(), vb.clone());
                    let buf = [&mut x, &mut y, &mut z];
                    let i = ls[t].row(bi, hi, si) + col;
                    buf[t][i] = kind(rng.next_u64());
                    assert!(
                        !run(&x, &y, &z, &format!("tensor {t} row {r} column {col}")),
                        "a non-finite row element accepted"
                    );
                    calls += 1;
                }
            }
        }
    }
    calls
}
