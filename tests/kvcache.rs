//! The KV-cache interfaces on the CPU `Exact` backend (`Engine::run_cache`):
//!
//! - a paged cache gives the bits of contiguous K and V: every page size 16..=256, pages in a
//!   shuffled order, key lengths that are not multiples of the page size (rows past them and a
//!   spare page hold NaN: under `Reject` reading one would be an error), GQA/MQA, causal both
//!   alignments, masks, every dtype, odd head dims; the log-sum-exp too;
//! - a variable-length batch gives each sequence the bits of that sequence computed alone (a
//!   problem of batch 1 with its own lengths), with empty sequences, mixed decode and prefill,
//!   both alignments, paged or not;
//! - the log-sum-exp against an f64 evaluation (the bound of docs/numerics.md §10), −inf for a row
//!   with no valid key, NaN for exactly the poisoned rows under `Propagate`;
//! - every typed error of these interfaces, before any write.

mod kvcache_common;
mod layout_common;

use detattn::inputs::{GenOptions, SplitMix64, generate, paginate};
use detattn::{
    CausalAlign, Element, Engine, Error, KvCache, Layout, MaskLayout, NonFinitePolicy, PagedKv,
    Problem, QkvCache, Shape, Tensor, TensorMut, TensorName, bf16, f16,
};
use kvcache_common::{
    alone_inputs, assert_rows_alone, bits, contiguous, run_cache_on, varlen_problem,
};
use layout_common::random_options;
use proptest::prelude::*;

fn f32_bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|e| e.to_bits()).collect()
}

/// Run `p` on the CPU with K and V as given, contiguous `[B, H, S, D]` Q and output: (output,
/// lse).
fn run_cache<T: Element>(
    p: &Problem,
    q: &[T],
    kv: KvCache<'_, T>,
    mask: Option<&[bool]>,
) -> Result<(Vec<T>, Vec<f32>), Error> {
    run_cache_on(&Engine::cpu(), p, q, kv, mask, true)
}

/// A random problem: dims, GQA/MQA, and the layout tests' random options (causal either
/// alignment, key lengths — mostly not multiples of the page size — a mask a quarter of the time).
fn random_problem(rng: &mut SplitMix64) -> Problem {
    let mut r = |n: usize| (rng.next_u64() % n as u64) as usize;
    let d = [1, 3, 8, 64, 80, 128, 300][r(7)];
    let (b, hkv, g) = (1 + r(3), 1 + r(2), 1 + r(3));
    let (sq, skv) = (1 + r(20), 1 + r(300));
    random_options(rng, Shape::new(b, hkv * g, hkv, sq, skv, d))
}

fn paged_vs_contiguous<T: Element>(p: &Problem, seed: u64, page_size: usize) {
    let x = generate::<T>(p, GenOptions::seed(seed));
    let want = run_cache(p, &x.q, contiguous(p, &x.k, &x.v), x.mask.as_deref()).unwrap();
    let paged = paginate(p, &x.k, &x.v, page_size, seed ^ 0xFACE).unwrap();
    let got = run_cache(p, &x.q, KvCache::Paged(paged.cache()), x.mask.as_deref())
        .unwrap_or_else(|e| panic!("page size {page_size}, {p:?}: {e}"));
    assert_eq!(bits(&got.0), bits(&want.0), "page {page_size} {p:?}");
    assert_eq!(f32_bits(&got.1), f32_bits(&want.1), "lse, page {page_size}");
    // The plain entry point agrees with run_cache on contiguous inputs.
    let plain = Engine::cpu()
        .run(p, &x.q, &x.k, &x.v, x.mask.as_deref())
        .unwrap();
    assert_eq!(bits(&plain), bits(&want.0));
}

#[test]
fn a_paged_cache_gives_the_contiguous_bits() {
    let mut rng = SplitMix64::new(0x9A6E);
    for i in 0..150u64 {
        let p = random_problem(&mut rng);
        let page_size = 16 << (i % 5);
        match i % 3 {
            0 => paged_vs_contiguous::<f32>(&p, i, page_size),
            1 => paged_vs_contiguous::<f16>(&p, i, page_size),
            _ => paged_vs_contiguous::<bf16>(&p, i, page_size),
        }
    }
}

#[test]
fn the_page_order_is_shuffled_and_unused_entries_may_be_anything() {
    let p = Problem::builder(Shape::new(2, 4, 2, 3, 200, 16))
        .kv_lens(vec![200, 33])
        .build()
        .unwrap();
    let x = generate::<f32>(&p, GenOptions::seed(5));
    let want = run_cache(&p, &x.q, contiguous(&p, &x.k, &x.v), None).unwrap();
    let mut c = paginate(&p, &x.k, &x.v, 16, 77).unwrap();
    // 13 + 3 pages used and one spare; not in order.
    assert_eq!((c.num_pages, c.max_pages), (17, 13));
    let used: Vec<i32> = c.block_table[..13].to_vec();
    assert!(used.windows(2).any(|w| w[1] != w[0] + 1), "{used:?}");
    // Entries past a sequence's length are not read: anything there (in range or not).
    for (i, e) in c.block_table[13 + 3..].iter_mut().enumerate() {
        *e = [i32::MIN, -1, 1 << 30, 0][i % 4];
    }
    let got = run_cache(&p, &x.q, KvCache::Paged(c.cache()), None).unwrap();
    assert_eq!(f32_bits(&got.0), f32_bits(&want.0));
}

fn varlen_vs_alone<T: Element>(p: &Problem, seed: u64, page_size: Option<usize>) {
    let x = generate::<T>(p, GenOptions::seed(seed));
    let (out, lse) = match page_size {
        None => run_cache(p, &x.q, contiguous(p, &x.k, &x.v), None),
        Some(ps) => {
            let c = paginate(p, &x.k, &x.v, ps, seed).unwrap();
            run_cache(p, &x.q, KvCache::Paged(c.cache()), None)
        }
    }
    .unwrap();
    assert_rows_alone(
        p,
        &out,
        &lse,
        |b| {
            let (sub, q, k, v) = alone_inputs(p, b, &x.q, &x.k, &x.v);
            run_cache(&sub, &q, contiguous(&sub, &k, &v), None).unwrap()
        },
        "cpu",
    );
}

#[test]
fn each_sequence_of_a_varlen_batch_has_its_bits_alone() {
    let mut rng = SplitMix64::new(0x7A51);
    let mut r = |n: usize| (rng.next_u64() % n as u64) as usize;
    for i in 0..60u64 {
        let n = 1 + r(5);
        // Mixed decode (1 row), prefill (many), empty sequences (0 rows or 0 keys).
        let q: Vec<usize> = (0..n).map(|_| [0, 1, 1, 7, 40][r(5)]).collect();
        let k: Vec<usize> = (0..n).map(|_| [0, 1, 12, 64, 150][r(5)]).collect();
        let hkv = 1 + r(2);
        let d = [1, 3, 64, 80][r(4)];
        let causal = [
            None,
            Some(CausalAlign::BottomRight),
            Some(CausalAlign::TopLeft),
        ][r(3)];
        let Some(total) = Some(q.iter().sum::<usize>()).filter(|&t| t > 0) else {
            continue;
        };
        if k.iter().sum::<usize>() == 0 || total == 0 {
            continue;
        }
        let p = varlen_problem(
            (hkv * (1 + r(2)), hkv),
            &q,
            &k,
            d,
            causal,
            NonFinitePolicy::Reject,
        );
        let paged = (r(3) == 0).then(|| 16 << r(5));
        match i % 3 {
            0 => varlen_vs_alone::<f32>(&p, i, paged),
            1 => varlen_vs_alone::<f16>(&p, i, paged),
            _ => varlen_vs_alone::<bf16>(&p, i, paged),
        }
    }
}

#[test]
fn a_varlen_batch_with_empty_sequences_and_both_alignments() {
    // Fixed cases for what the random loop may miss: Sq = 0, L = 0, Sq > L, a decode row.
    for align in [CausalAlign::BottomRight, CausalAlign::TopLeft] {
        let p = varlen_problem(
            (4, 2),
            &[0, 3, 1, 20, 5],
            &[7, 0, 100, 5, 70],
            64,
            Some(align),
            NonFinitePolicy::Reject,
        );
        varlen_vs_alone::<f32>(&p, 9, None);
        varlen_vs_alone::<f32>(&p, 9, Some(32));
    }
}

/// log Σ_j exp(scale · q·k_j) over the valid keys, in f64 from the converted inputs; −inf for
/// none. Validity written out from numerics.md §1 (no mask here).
fn lse_reference(p: &Problem, q: &[f32], k: &[f32]) -> Vec<f64> {
    let s = p.shape();
    let (d, g) = (s.head_dim, s.group());
    let mut out = vec![];
    for b in 0..s.batch {
        let l = p.kv_lens().map_or(s.kv_len, |v| v[b]);
        for h in 0..s.q_heads {
            for i in 0..s.q_len {
                let qr = &q[((b * s.q_heads + h) * s.q_len + i) * d..][..d];
                let scores: Vec<f64> = (0..l)
                    .filter(|&j| match (p.causal(), p.causal_align()) {
                        (false, _) => true,
                        (true, CausalAlign::BottomRight) => j + s.q_len <= i + l,
                        (true, CausalAlign::TopLeft) => j <= i,
                    })
                    .map(|j| {
                        let kr = &k[((b * s.kv_heads + h / g) * s.kv_len + j) * d..][..d];
                        let dot: f64 = qr
                            .iter()
                            .zip(kr)
                            .map(|(a, c)| f64::from(*a) * f64::from(*c))
                            .sum();
                        dot * f64::from(p.scale())
                    })
                    .collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                out.push(if scores.is_empty() {
                    f64::NEG_INFINITY
                } else {
                    m + scores.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
                });
            }
        }
    }
    out
}

#[test]
fn lse_is_within_its_bound_of_an_f64_reference() {
    // numerics.md §10: |lse − ref| ≤ 2e-6 · max(1, |ref|) under §9's first conditions (D ≤ 256,
    // scale·Σ_d |q_d·k_d| ≤ 16); measured: about 2.2e-7.
    let mut rng = SplitMix64::new(0x15E);
    let mut worst = 0.0f64;
    let mut rows = 0;
    for i in 0..120u64 {
        let mut r = |n: usize| (rng.next_u64() % n as u64) as usize;
        let d = [1, 3, 16, 64, 128, 256][r(6)];
        let (b, sq, skv) = (1 + r(2), 1 + r(9), 1 + r(600));
        let mut pb = Problem::builder(Shape::new(b, 2, 1, sq, skv, d)).causal(r(2) == 0);
        if r(2) == 0 {
            pb = pb.kv_lens((0..b).map(|_| r(skv + 1)).collect());
        }
        let p = pb.build().unwrap();
        let mut x = generate::<f32>(&p, GenOptions::seed(i));
        // Values on [-2, 2): |q·k|·scale ≤ 4·D/sqrt(D); keep scale·Σ|q_d k_d| ≤ 16 by shrinking Q.
        let shrink = (4.0 * (d as f32).sqrt() / 16.0).max(1.0).log2().ceil();
        x.q.iter_mut()
            .for_each(|v| *v *= 2f32.powi(-(shrink as i32)));
        let (_, lse) = run_cache(&p, &x.q, contiguous(&p, &x.k, &x.v), None).unwrap();
        let want = lse_reference(&p, &x.q, &x.k);
        for (g, w) in lse.iter().zip(&want) {
            if w.is_infinite() {
                assert_eq!(*g, f32::NEG_INFINITY, "no valid key: −inf");
                continue;
            }
            let err = (f64::from(*g) - w).abs() / w.abs().max(1.0);
            worst = worst.max(err);
            rows += 1;
        }
    }
    assert!(rows > 1000, "{rows}");
    assert!(worst <= 2e-6, "worst relative error {worst:e}");
    eprintln!("lse: worst error {worst:e} (relative to max(1, |ref|)) over {rows} rows");
}

#[test]
fn lse_is_nan_on_exactly_the_poisoned_rows_and_minus_inf_without_keys() {
    let p = Problem::builder(Shape::new(2, 2, 1, 6, 40, 8))
        .causal(true)
        .kv_lens(vec![40, 0])
        .nonfinite(NonFinitePolicy::Propagate)
        .build()
        .unwrap();
    let mut x = generate::<f32>(&p, GenOptions::seed(3));
    x.q[8 * 2] = f32::NAN; // batch 0, head 0, row 2
    x.k[8 * 39 + 1] = f32::INFINITY; // key 39 of batch 0: seen by the last row only
    let (out, lse) = run_cache(&p, &x.q, contiguous(&p, &x.k, &x.v), None).unwrap();
    for (r, l) in lse.iter().enumerate() {
        let nan_row = out[r * 8..(r + 1) * 8].iter().all(|v| v.is_nan());
        assert_eq!(l.is_nan(), nan_row, "row {r}");
        if l.is_nan() {
            assert_eq!(l.to_bits(), 0x7FC0_0000, "the canonical NaN");
        }
        if r >= 12 {
            // batch 1 has no keys: +0 rows, −inf LSE.
            assert_eq!(*l, f32::NEG_INFINITY, "row {r}");
        }
    }
    assert!(lse[2].is_nan() && lse[5].is_nan() && lse[11].is_nan());
    assert!(lse[0].is_finite() && lse[4].is_finite());
}

// ---- typed errors ------------------------------------------------------------------------------

fn expect_err(p: &Problem, x: &QkvCache<'_, f32>, lse_len: Option<usize>) -> Error {
    let s = p.shape();
    let mut out = vec![f32::from_bits(0x5EED); s.q_elems()];
    let mut lse = vec![f32::from_bits(0x5EED); lse_len.unwrap_or(0)];
    let e = Engine::cpu()
        .run_cache(
            p,
            x,
            TensorMut::new(&mut out, Layout::bhsd(s.q_heads, s.q_len, s.head_dim)),
            lse_len.map(|_| &mut lse[..]),
        )
        .expect_err("this call must be rejected");
    assert!(
        out.iter().chain(&lse).all(|v| v.to_bits() == 0x5EED),
        "{e}: something was written"
    );
    e
}

/// A paged call of 2 sequences with key lengths 40 and 17, page size 16: 3 + 2 pages used.
fn paged_setup() -> (Problem, Vec<f32>, detattn::inputs::Paged<f32>) {
    let p = Problem::builder(Shape::new(2, 2, 1, 3, 48, 4))
        .kv_lens(vec![40, 17])
        .build()
        .unwrap();
    let x = generate::<f32>(&p, GenOptions::seed(1));
    let c = paginate(&p, &x.k, &x.v, 16, 2).unwrap();
    (p, x.q, c)
}

fn with<'a>(q: &'a [f32], c: PagedKv<'a, f32>) -> QkvCache<'a, f32> {
    QkvCache {
        q: Tensor::new(q, Layout::bhsd(2, 3, 4)),
        kv: KvCache::Paged(c),
        mask: None,
    }
}

#[test]
fn page_size_must_be_a_power_of_two_in_16_to_256() {
    let (p, q, c) = paged_setup();
    for bad in [0, 8, 15, 48, 512, 1000] {
        let e = expect_err(
            &p,
            &with(
                &q,
                PagedKv {
                    page_size: bad,
                    ..c.cache()
                },
            ),
            None,
        );
        assert_eq!(e, Error::PageSize { value: bad });
        assert_eq!(
            e.to_string(),
            format!("page_size must be a power of two in 16..=256, got {bad}")
        );
        assert!(matches!(
            paginate(&p, &q, &q, bad, 0),
            Err(Error::PageSize { value }) if value == bad
        ));
    }
}

#[test]
fn a_used_block_table_entry_outside_the_cache_is_an_error() {
    let (p, q, c) = paged_setup();
    // Sequence 1 (17 keys) uses entries 0 and 1 of its row; entry 2 is not read.
    for (index, value) in [(1, -1), (0, c.num_pages as i32), (1, i32::MAX)] {
        let mut table = c.block_table.clone();
        table[c.max_pages + index] = value;
        let e = expect_err(
            &p,
            &with(
                &q,
                PagedKv {
                    block_table: &table,
                    ..c.cache()
                },
            ),
            None,
        );
        assert_eq!(
            e,
            Error::BlockTableEntry {
                seq: 1,
                index,
                value,
                num_pages: c.num_pages,
                used: 2
            }
        );
        assert_eq!(
            e.to_string(),
            format!(
                "block_table[1][{index}] is {value}, not a page of the cache (0..{}); sequence 1 \
                 uses its first 2 entries",
                c.num_pages
            )
        );
    }
}

#[test]
fn block_table_length_and_capacity() {
    let (p, q, c) = paged_setup();
    let short = &c.block_table[1..];
    let e = expect_err(
        &p,
        &with(
            &q,
            PagedKv {
                block_table: short,
                ..c.cache()
            },
        ),
        None,
    );
    assert!(matches!(
        e,
        Error::TensorLength { tensor: TensorName::BlockTable, expected, got, .. }
            if expected == 2 * c.max_pages && got == expected - 1
    ));
    // Two columns of 16 hold 32 keys; sequence 0 has 40.
    let table: Vec<i32> = vec![0, 1, 2, 3];
    let e = expect_err(
        &p,
        &with(
            &q,
            PagedKv {
                block_table: &table,
                max_pages: 2,
                ..c.cache()
            },
        ),
        None,
    );
    assert_eq!(
        e,
        Error::CacheCapacity {
            seq: 0,
            len: 40,
            max_pages: 2,
            page_size: 16,
            capacity: 32
        }
    );
    assert_eq!(
        e.to_string(),
        "sequence 0 has 40 keys, more than its block-table row holds (2 pages of 16 = 32)"
    );
    // Pages that do not fit their buffer.
    let e = expect_err(
        &p,
        &with(
            &q,
            PagedKv {
                num_pages: c.num_pages + 1,
                ..c.cache()
            },
        ),
        None,
    );
    assert!(
        matches!(
            e,
            Error::TensorExtent {
                tensor: TensorName::K,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn the_lse_buffer_must_hold_one_value_per_query_row() {
    let (p, q, c) = paged_setup();
    for bad in [0, 11, 13] {
        let e = expect_err(&p, &with(&q, c.cache()), Some(bad));
        assert_eq!(
            e,
            Error::TensorLength {
                tensor: TensorName::Lse,
                expected: 12,
                got: bad,
                shape: "[2, 2, 3]".into()
            }
        );
        assert_eq!(
            e.to_string(),
            format!("lse must have 12 elements ([2, 2, 3]), got {bad}")
        );
    }
}

#[test]
fn cu_seqlens_must_be_offsets_of_the_packed_rows() {
    let build = |q: Vec<usize>, k: Vec<usize>| {
        Problem::builder(Shape::new(1, 2, 2, 10, 20, 8))
            .varlen(q, k)
            .build()
    };
    let cases: [(Vec<usize>, Vec<usize>, &str, &str); 6] = [
        (
            vec![0, 10],
            vec![0, 5, 20],
            "cu_seqlens_k",
            "must have as many entries as cu_seqlens_q (2), got 3",
        ),
        (
            vec![0],
            vec![0],
            "cu_seqlens_q",
            "must have at least 2 entries (B + 1 for B ≥ 1 sequences), got 1",
        ),
        (
            vec![1, 10],
            vec![0, 20],
            "cu_seqlens_q",
            "must start at 0, got 1",
        ),
        (
            vec![0, 9],
            vec![0, 20],
            "cu_seqlens_q",
            "must end at the packed length 10, got 9",
        ),
        (
            vec![0, 6, 4, 10],
            vec![0, 5, 5, 20],
            "cu_seqlens_q",
            "must be nondecreasing: entry 1 is 6, entry 2 is 4",
        ),
        (
            vec![0, 4, 10],
            vec![0, 21, 20],
            "cu_seqlens_k",
            "must be nondecreasing: entry 1 is 21, entry 2 is 20",
        ),
    ];
    for (q, k, name, reason) in cases {
        let e = build(q, k).expect_err("rejected");
        assert_eq!(
            e,
            Error::CuSeqlens {
                name,
                reason: reason.into()
            }
        );
        assert_eq!(e.to_string(), format!("{name} {reason}"));
    }
    assert!(build(vec![0, 0, 10, 10], vec![0, 20, 20, 20]).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Any lengths make valid offsets; any decrease is named at its first place.
    #[test]
    fn cu_seqlens_accepts_offsets_and_names_the_first_decrease(
        lens in proptest::collection::vec(0usize..50, 1..8),
        at in 0usize..8,
        by in 1usize..5,
    ) {
        let cu = detattn::golden::cumulative(&lens);
        let total = *cu.last().unwrap();
        let p = |q: Vec<usize>| Problem::builder(Shape::new(1, 1, 1, total.max(1), total.max(1), 4))
            .varlen(q.clone(), q)
            .build();
        if total > 0 {
            prop_assert!(p(cu.clone()).is_ok());
        }
        let i = 1 + at % (cu.len() - 1);
        let mut bad = cu.clone();
        if i + 1 < bad.len() && bad[i] + by > bad[i + 1] && total > 0 {
            bad[i] += by; // now larger than its successor
            let first = bad.windows(2).position(|w| w[1] < w[0]).unwrap();
            let e = p(bad.clone()).unwrap_err();
            let want = format!("must be nondecreasing: entry {} is {}, entry {} is {}",
                first, bad[first], first + 1, bad[first + 1]);
            prop_assert_eq!(e, Error::CuSeqlens { name: "cu_seqlens_q", reason: want });
        }
    }
}

#[test]
fn varlen_options_that_do_not_combine_are_typed_errors() {
    let v = |pb: detattn::ProblemBuilder| pb.varlen(vec![0, 4], vec![0, 8]).build().unwrap_err();
    let first = "a variable-length batch (cu_seqlens)";
    let e = v(Problem::builder(Shape::new(2, 1, 1, 4, 8, 4)));
    assert!(
        matches!(e, Error::IncompatibleOptions { first: f, second } if f == first && second.starts_with("batch > 1")),
        "{e}"
    );
    let e = v(Problem::builder(Shape::new(1, 1, 1, 4, 8, 4)).kv_lens(vec![8]));
    assert!(
        matches!(e, Error::IncompatibleOptions { second, .. } if second.starts_with("kv_lens")),
        "{e}"
    );
    let e = v(Problem::builder(Shape::new(1, 1, 1, 4, 8, 4)).mask(MaskLayout::FULL));
    assert_eq!(
        e.to_string(),
        "a variable-length batch (cu_seqlens) cannot be combined with a boolean mask"
    );
}

#[cfg(feature = "cuda")]
#[test]
fn the_gpu_paths_check_a_varlen_problem_as_its_sequences() {
    use detattn::{DType, Path};
    // Without a GPU: what each path takes of each sequence alone (tests/cuda_kvcache.rs runs them).
    let p = varlen_problem((2, 2), &[1, 3], &[5, 3], 64, None, NonFinitePolicy::Reject);
    for path in Path::ALL {
        detattn::cuda::check_path(path, &p, DType::F16).unwrap();
    }
    let e = detattn::cuda::check_path(Path::TensorCore, &p, DType::F32).unwrap_err();
    assert!(matches!(e, Error::DTypeUnsupported { .. }), "{e:?}");
    let p80 = varlen_problem((2, 2), &[1, 3], &[5, 3], 80, None, NonFinitePolicy::Reject);
    let e = detattn::cuda::check_path(Path::TensorCore, &p80, DType::F16).unwrap_err();
    assert!(
        matches!(e, Error::HeadDimUnsupported { head_dim: 80, .. }),
        "{e:?}"
    );
    detattn::cuda::check_path(Path::Exact, &p80, DType::F32).unwrap();
}
