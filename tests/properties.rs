//! Property tests of the CPU `Exact` path (docs/design.md §4, D1–D5;
//! docs/numerics.md §1, §4, §5, §7). Every property compares bits, never values with a tolerance.
//!
//! - D1: the same call twice, and `run` vs `run_into`, give the same bits.
//! - D2: a problem's rows are the same bits alone and inside a larger batch with other KV/query
//!   heads around it (an all-true mask there changes nothing either).
//! - D3: row i of a causal prefill (Sq = Skv) equals decoding that token alone (Sq = 1) against
//!   the KV cache it sees, given either by `kv_lens` or by truncating K and V.
//! - D4: a contiguous slice of query rows (causal: with the key lengths shifted so that the
//!   bottom-right diagonal stays put), or rows gathered in any order (not causal, mask rows
//!   gathered alike) give the same bits.
//! - D5: 1 thread, rayon's global pool and 3 threads give the same bits.
//! - A row with no valid key is exactly +0 in every element.
//! - Finite inputs at the extremes of each dtype never give NaN or ±inf.
//! - Non-finite inputs: `Reject` names the first tensor (q, k, v) and writes nothing;
//!   `Propagate` writes the canonical NaN to exactly the rows §7 names and leaves every other row
//!   bit-identical to the run with those values replaced by +0.
//!
//! The valid-key rule used to decide which rows must be zero or NaN is the test suite's own
//! (tests/common `Spec::valid`, written from numerics.md §1).

mod common;

use common::{CaseLimits, Data, Gen, Rng, Spec, TElem, bits, case, generate, run};
use detattn::{Engine, Error, MaskLayout, NonFinitePolicy, Shape, TensorName, bf16, f16};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const CASES: u32 = 256;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: CASES,
        ..ProptestConfig::default()
    }
}

/// Run a generic check for the dtype `dt` (0: f32, 1: f16, 2: bf16).
macro_rules! per_dtype {
    ($dt:expr, $f:ident ( $($arg:expr),* )) => {
        match $dt {
            0 => $f::<f32>($($arg),*),
            1 => $f::<f16>($($arg),*),
            _ => $f::<bf16>($($arg),*),
        }
    };
}

fn out_row<T: TElem>(spec: &Spec, out: &[T], b: usize, h: usize, i: usize) -> Vec<u32> {
    let d = spec.shape.head_dim;
    bits(&out[spec.row_index(b, h, i) * d..][..d])
}

fn ok<T>(r: detattn::Result<T>) -> Result<T, TestCaseError> {
    r.map_err(|e| TestCaseError::fail(format!("unexpected error: {e}")))
}

// ---------------------------------------------------------------------------------------------
// D1

fn d1<T: TElem>(spec: &Spec, g: &Gen) -> Result<(), TestCaseError> {
    let data = generate::<T>(spec, g);
    let engine = Engine::cpu();
    let a = ok(run(&engine, spec, &data))?;
    let b = ok(run(&engine, spec, &data))?;
    prop_assert_eq!(bits(&a), bits(&b));
    let mut c = vec![T::of_bits(0x5A5A); a.len()];
    ok(engine.run_into(
        &spec.problem(),
        &data.q,
        &data.k,
        &data.v,
        data.mask.as_deref(),
        &mut c,
    ))?;
    prop_assert_eq!(bits(&a), bits(&c));
    Ok(())
}

proptest! {
    #![proptest_config(config())]
    #[test]
    fn d1_repeated_runs_same_bits((spec, g) in case(CaseLimits::small()), dt in 0u8..3) {
        per_dtype!(dt, d1(&spec, &g))?;
    }
}

// ---------------------------------------------------------------------------------------------
// D2

/// Where to embed a one-batch, one-KV-head problem inside a larger one.
#[derive(Clone, Debug)]
struct Embed {
    batch: usize,
    kv_heads: usize,
    pos: (usize, usize),
    seed: u64,
    lens: Option<Vec<u32>>,
    /// With no mask in the small problem: give the big one an all-true mask at the small
    /// problem's rows (random elsewhere).
    true_mask: bool,
}

fn embed_strategy() -> impl Strategy<Value = Embed> {
    (
        1usize..=3,
        1usize..=3,
        (any::<usize>(), any::<usize>()),
        any::<u64>(),
        proptest::option::of(proptest::collection::vec(any::<u32>(), 3)),
        any::<bool>(),
    )
        .prop_map(|(batch, kv_heads, pos, seed, lens, true_mask)| Embed {
            batch,
            kv_heads,
            pos,
            seed,
            lens,
            true_mask,
        })
}

fn d2<T: TElem>(small: &Spec, g: &Gen, e: &Embed) -> Result<(), TestCaseError> {
    let s = small.shape;
    let grp = s.q_heads; // the small problem has one KV head
    let (b0, c0) = (e.pos.0 % e.batch, e.pos.1 % e.kv_heads);
    let kv_lens = match (&small.kv_lens, &e.lens) {
        (None, None) => None,
        (_, raw) => Some(
            (0..e.batch)
                .map(|b| match (b == b0, raw) {
                    (true, _) => small.len_of(0),
                    (false, Some(r)) => r[b] as usize % (s.kv_len + 1),
                    (false, None) => s.kv_len,
                })
                .collect(),
        ),
    };
    let mask = match (small.mask, e.true_mask) {
        (Some(_), _) | (None, true) => Some(MaskLayout::FULL),
        (None, false) => None,
    };
    let big = Spec {
        shape: Shape::new(
            e.batch,
            e.kv_heads * grp,
            e.kv_heads,
            s.q_len,
            s.kv_len,
            s.head_dim,
        ),
        causal: small.causal,
        scale: small.scale,
        kv_lens,
        mask,
        policy: small.policy,
    };
    let sd = generate::<T>(small, g);
    let mut bd = generate::<T>(&big, &Gen { seed: e.seed, ..*g });
    let d = s.head_dim;
    for h in 0..grp {
        for i in 0..s.q_len {
            let (src, dst) = (
                small.row_index(0, h, i) * d,
                big.row_index(b0, c0 * grp + h, i) * d,
            );
            bd.q[dst..dst + d].copy_from_slice(&sd.q[src..src + d]);
            if let Some(m) = &mut bd.mask {
                for j in 0..s.kv_len {
                    m[big.mask_index(b0, c0 * grp + h, i, j)] = match &sd.mask {
                        Some(sm) => sm[small.mask_index(0, h, i, j)],
                        None => true,
                    };
                }
            }
        }
    }
    for j in 0..s.kv_len {
        let (src, dst) = (
            small.kv_row_index(0, 0, j) * d,
            big.kv_row_index(b0, c0, j) * d,
        );
        bd.k[dst..dst + d].copy_from_slice(&sd.k[src..src + d]);
        bd.v[dst..dst + d].copy_from_slice(&sd.v[src..src + d]);
    }
    let engine = Engine::cpu();
    let so = ok(run(&engine, small, &sd))?;
    let bo = ok(run(&engine, &big, &bd))?;
    for h in 0..grp {
        for i in 0..s.q_len {
            prop_assert_eq!(
                out_row(small, &so, 0, h, i),
                out_row(&big, &bo, b0, c0 * grp + h, i),
                "row (0,{},{}) alone vs at ({},{},{}) in {:?}",
                h,
                i,
                b0,
                c0 * grp + h,
                i,
                big
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]
    #[test]
    fn d2_rows_same_alone_and_in_a_batch(
        (small, g) in case(CaseLimits { batch: 1, kv_heads: 1, ..CaseLimits::small() }),
        e in embed_strategy(),
        dt in 0u8..3,
    ) {
        per_dtype!(dt, d2(&small, &g, &e))?;
    }
}

// ---------------------------------------------------------------------------------------------
// D3

fn d3<T: TElem>(pre: &Spec, g: &Gen, truncate: bool) -> Result<(), TestCaseError> {
    let s = pre.shape;
    prop_assert!(pre.causal && s.q_len == s.kv_len);
    let data = generate::<T>(pre, g);
    let engine = Engine::cpu();
    let out = ok(run(&engine, pre, &data))?;
    let d = s.head_dim;
    // Truncating K and V only works when every batch element sees the same cache length.
    let truncate = truncate && pre.kv_lens.is_none();
    for i in 0..s.q_len {
        // The cache row i sees: keys j < i + L + 1 − Sq (bottom-right), at most L.
        let lim: Vec<usize> = (0..s.batch)
            .map(|b| {
                let l = pre.len_of(b);
                (i + l + 1).saturating_sub(s.q_len).min(l)
            })
            .collect();
        let skv = if truncate { i + 1 } else { s.kv_len };
        let dec = Spec {
            shape: Shape::new(s.batch, s.q_heads, s.kv_heads, 1, skv, d),
            causal: i % 2 == 0, // with Sq = 1 causal masks nothing: try both
            scale: pre.scale,
            kv_lens: if truncate { None } else { Some(lim.clone()) },
            mask: pre.mask,
            policy: pre.policy,
        };
        let mut q = Vec::new();
        for b in 0..s.batch {
            for h in 0..s.q_heads {
                let r = pre.row_index(b, h, i) * d;
                q.extend_from_slice(&data.q[r..r + d]);
            }
        }
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for b in 0..s.batch {
            for c in 0..s.kv_heads {
                let r = pre.kv_row_index(b, c, 0) * d;
                k.extend_from_slice(&data.k[r..r + skv * d]);
                v.extend_from_slice(&data.v[r..r + skv * d]);
            }
        }
        let mask = data.mask.as_ref().map(|m| {
            let [bm, hm, _, _] = pre.mask_dims();
            let mut out = Vec::new();
            for b in 0..bm {
                for h in 0..hm {
                    let o = pre.mask_index(b, h, i, 0);
                    out.extend_from_slice(&m[o..o + skv]);
                }
            }
            out
        });
        let dd = Data { q, k, v, mask };
        let dout = ok(run(&engine, &dec, &dd))?;
        for b in 0..s.batch {
            for h in 0..s.q_heads {
                prop_assert_eq!(
                    out_row(pre, &out, b, h, i),
                    out_row(&dec, &dout, b, h, 0),
                    "prefill row ({},{},{}) vs decode (truncate={}, lim {:?})",
                    b,
                    h,
                    i,
                    truncate,
                    lim
                );
            }
        }
    }
    Ok(())
}

fn prefill_case() -> impl Strategy<Value = (Spec, Gen)> {
    (
        case(CaseLimits {
            batch: 2,
            kv_heads: 2,
            group: 2,
            q_len: 1,
            kv_len: 70,
            ..CaseLimits::small()
        }),
        proptest::option::weighted(0.3, proptest::collection::vec(any::<u32>(), 2)),
    )
        .prop_map(|((mut spec, g), lens)| {
            let s = spec.shape;
            let l = s.kv_len;
            spec.shape = Shape::new(s.batch, s.q_heads, s.kv_heads, l, l, s.head_dim);
            spec.causal = true;
            spec.kv_lens = lens.map(|r| (0..s.batch).map(|b| r[b] as usize % (l + 1)).collect());
            (spec, g)
        })
}

proptest! {
    #![proptest_config(config())]
    #[test]
    fn d3_prefill_row_equals_decode((pre, g) in prefill_case(), truncate in any::<bool>(), dt in 0u8..3) {
        per_dtype!(dt, d3(&pre, &g, truncate))?;
    }
}

// ---------------------------------------------------------------------------------------------
// D4

/// The rows `idx` of a spec's Q (and mask) as a problem with Sq = idx.len(). Causal problems
/// take a contiguous `idx` and shift the key lengths (bottom-right diagonal).
fn sub_problem<T: TElem>(spec: &Spec, data: &Data<T>, idx: &[usize]) -> (Spec, Data<T>) {
    let s = spec.shape;
    let d = s.head_dim;
    let sq = idx.len();
    let kv_lens = if spec.causal {
        let end = idx[sq - 1] + 1;
        Some(
            (0..s.batch)
                .map(|b| spec.len_of(b).saturating_sub(s.q_len - end))
                .collect(),
        )
    } else {
        spec.kv_lens.clone()
    };
    let sub = Spec {
        shape: Shape::new(s.batch, s.q_heads, s.kv_heads, sq, s.kv_len, d),
        kv_lens,
        ..spec.clone()
    };
    let mut q = Vec::new();
    for b in 0..s.batch {
        for h in 0..s.q_heads {
            for &i in idx {
                let r = spec.row_index(b, h, i) * d;
                q.extend_from_slice(&data.q[r..r + d]);
            }
        }
    }
    let mask = data.mask.as_ref().map(|m| {
        let [bm, hm, _, skv] = spec.mask_dims();
        let mut out = Vec::new();
        for b in 0..bm {
            for h in 0..hm {
                for &i in idx {
                    let o = spec.mask_index(b, h, i, 0);
                    out.extend_from_slice(&m[o..o + skv]);
                }
            }
        }
        out
    });
    let sd = Data {
        q,
        k: data.k.clone(),
        v: data.v.clone(),
        mask,
    };
    (sub, sd)
}

fn d4<T: TElem>(spec: &Spec, g: &Gen, pick: &[u32], gather: bool) -> Result<(), TestCaseError> {
    let sq = spec.shape.q_len;
    let idx: Vec<usize> = if gather && !spec.causal {
        // Any rows, any order, repeats allowed.
        let n = 1 + pick[0] as usize % sq;
        pick[1..=n].iter().map(|&r| r as usize % sq).collect()
    } else {
        let a = pick[0] as usize % sq;
        let c = a + 1 + pick[1] as usize % (sq - a);
        (a..c).collect()
    };
    let data = generate::<T>(spec, g);
    let engine = Engine::cpu();
    let out = ok(run(&engine, spec, &data))?;
    let (sub, sd) = sub_problem(spec, &data, &idx);
    let sout = ok(run(&engine, &sub, &sd))?;
    for b in 0..spec.shape.batch {
        for h in 0..spec.shape.q_heads {
            for (n, &i) in idx.iter().enumerate() {
                prop_assert_eq!(
                    out_row(spec, &out, b, h, i),
                    out_row(&sub, &sout, b, h, n),
                    "row ({},{},{}) vs sub row {} of rows {:?}",
                    b,
                    h,
                    i,
                    n,
                    idx
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]
    #[test]
    fn d4_any_subset_of_rows_same_bits(
        (spec, g) in case(CaseLimits { q_len: 40, ..CaseLimits::small() }),
        pick in proptest::collection::vec(any::<u32>(), 41),
        gather in any::<bool>(),
        dt in 0u8..3,
    ) {
        per_dtype!(dt, d4(&spec, &g, &pick, gather))?;
    }
}

// ---------------------------------------------------------------------------------------------
// D5

fn d5<T: TElem>(spec: &Spec, g: &Gen) -> Result<(), TestCaseError> {
    let data = generate::<T>(spec, g);
    let one = ok(Engine::cpu_with_threads(1))?;
    let three = ok(Engine::cpu_with_threads(3))?;
    let a = ok(run(&one, spec, &data))?;
    let b = ok(run(&Engine::cpu(), spec, &data))?;
    let c = ok(run(&three, spec, &data))?;
    prop_assert_eq!(bits(&a), bits(&b), "1 thread vs the global pool");
    prop_assert_eq!(bits(&a), bits(&c), "1 thread vs 3 threads");
    Ok(())
}

proptest! {
    #![proptest_config(config())]
    #[test]
    fn d5_thread_count_does_not_change_bits(
        // Sq up to 70 and several heads: several 16-row work items to spread over threads.
        (spec, g) in case(CaseLimits { q_len: 70, kv_len: 100, ..CaseLimits::small() }),
        dt in 0u8..3,
    ) {
        per_dtype!(dt, d5(&spec, &g))?;
    }
}

// ---------------------------------------------------------------------------------------------
// Fully masked rows

/// Returns how many rows with no valid key the case had.
fn fully_masked<T: TElem>(spec: &Spec, g: &Gen) -> Result<usize, TestCaseError> {
    let data = generate::<T>(spec, g);
    let out = ok(run(&Engine::cpu(), spec, &data))?;
    let mut n = 0;
    for (b, h, i) in spec.rows() {
        let none = (0..spec.shape.kv_len).all(|j| !spec.valid(data.mask.as_deref(), b, h, i, j));
        if none {
            n += 1;
            prop_assert!(
                out_row(spec, &out, b, h, i).iter().all(|&x| x == 0),
                "row ({},{},{}) has no valid key but is {:?}",
                b,
                h,
                i,
                out_row(spec, &out, b, h, i)
            );
        }
    }
    Ok(n)
}

/// Cases biased towards empty rows: blank mask rows, key lengths of 0, causal with Sq > L.
fn masked_case() -> impl Strategy<Value = (Spec, Gen, u8)> {
    (case(CaseLimits::small()), 0u8..3, 0u8..3).prop_map(|((mut spec, mut g), how, dt)| {
        let s = spec.shape;
        match how {
            0 => {
                spec.mask.get_or_insert(MaskLayout::FULL);
                g.blank_row_8ths = g.blank_row_8ths.max(2);
            }
            1 => {
                let mut l = spec.kv_lens.take().unwrap_or(vec![s.kv_len; s.batch]);
                l[(g.seed % s.batch as u64) as usize] = 0;
                spec.kv_lens = Some(l);
            }
            _ => {
                spec.causal = true;
                spec.shape = Shape::new(
                    s.batch,
                    s.q_heads,
                    s.kv_heads,
                    s.q_len + s.kv_len.min(20),
                    s.kv_len,
                    s.head_dim,
                );
            }
        }
        (spec, g, dt)
    })
}

#[test]
fn fully_masked_rows_are_exactly_positive_zero() {
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        ..Config::default()
    });
    let total = std::cell::Cell::new(0usize);
    runner
        .run(&masked_case(), |(spec, g, dt)| {
            total.set(total.get() + per_dtype!(dt, fully_masked(&spec, &g))?);
            Ok(())
        })
        .unwrap();
    // The property is only as good as the rows it saw.
    assert!(total.get() >= 1000, "only {} empty rows seen", total.get());
    eprintln!("fully masked: {} empty rows checked", total.get());
}

// ---------------------------------------------------------------------------------------------
// Extreme magnitudes

/// One finite value from the edges of `T`'s range.
fn extreme<T: TElem>(rng: &mut Rng, prev: T) -> T {
    let sign = if rng.next() & 1 == 0 { 1.0 } else { -1.0 };
    let x = match rng.below(9) {
        0 => T::MAX,
        1 => -T::MAX,
        2 => sign * T::MAX * (0.5 + rng.sym().abs() / 2.0),
        3 => sign * T::MIN_SUB * (1 + rng.below(4)) as f64,
        4 => sign * T::MIN_NORMAL * (1.0 + rng.sym().abs()),
        5 => sign * rng.sym() * 2f64.powi(rng.below(20) as i32 - 10),
        6 => 0.0,
        7 => -0.0,
        _ => return prev,
    };
    // Rounding near MAX may not leave the finite range: MAX·(0.5..1) ≤ MAX.
    T::of_f64(x)
}

/// `v_const`: V is one value everywhere (+MAX or −MAX), so that every output is a convex
/// combination of MAX alone and rounding overshoot past MAX is most likely (§5 saturates it).
fn extremes<T: TElem>(
    spec: &Spec,
    seed: u64,
    all_max: bool,
    v_const: Option<bool>,
) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let mut fill = |n: usize| {
        let mut v: Vec<T> = Vec::with_capacity(n);
        let mut prev = T::of_f64(T::MAX);
        for _ in 0..n {
            let x = if all_max {
                T::of_f64(if rng.next() & 1 == 0 { T::MAX } else { -T::MAX })
            } else {
                extreme(&mut rng, prev)
            };
            v.push(x);
            prev = x;
        }
        v
    };
    let s = spec.shape;
    let (q, k, mut v) = (fill(s.q_elems()), fill(s.kv_elems()), fill(s.kv_elems()));
    if let Some(pos) = v_const {
        v = vec![T::of_f64(if pos { T::MAX } else { -T::MAX }); v.len()];
    }
    for x in q.iter().chain(&k).chain(&v) {
        prop_assert!(x.f64().is_finite());
    }
    let mask = spec.mask.map(|_| {
        (0..spec.mask_len())
            .map(|_| rng.below(4) != 0)
            .collect::<Vec<_>>()
    });
    let data = Data { q, k, v, mask };
    let out = ok(run(&Engine::cpu(), spec, &data))?;
    for (n, x) in out.iter().enumerate() {
        prop_assert!(
            x.f64().is_finite(),
            "element {} is {:?} (bits {:#x})",
            n,
            x,
            x.bits()
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]
    #[test]
    fn finite_extreme_inputs_never_give_nan_or_inf(
        (mut spec, g) in case(CaseLimits { dims: vec![1, 2, 3, 8, 16, 64, 128, 256], ..CaseLimits::small() }),
        scale in prop_oneof![
            Just(None),
            Just(Some(1.0f32)),
            Just(Some(f32::MAX)),
            Just(Some(f32::from_bits(1))),
            Just(Some(1e30f32)),
        ],
        all_max in proptest::bool::weighted(0.2),
        v_const in proptest::option::weighted(0.3, any::<bool>()),
        dt in 0u8..3,
    ) {
        spec.scale = scale;
        per_dtype!(dt, extremes(&spec, g.seed, all_max, v_const))?;
    }
}

// ---------------------------------------------------------------------------------------------
// Non-finite inputs

/// Where to put the non-finite values: (tensor 0..3 = q, k, v; a position; a pattern index).
/// Half the K/V injections go to keys at or past a batch element's key length.
type Injections = Vec<(u8, u64, u64, u8)>;

fn injections(max: usize) -> impl Strategy<Value = Injections> {
    proptest::collection::vec((0u8..3, any::<u64>(), any::<u64>(), any::<u8>()), 0..=max)
}

/// Place the injections; returns the dirty data and the list of (tensor, element index).
fn inject<T: TElem>(spec: &Spec, data: &Data<T>, inj: &Injections) -> (Data<T>, Vec<(u8, usize)>) {
    let s = spec.shape;
    let d = s.head_dim;
    let pats = T::nonfinite_patterns();
    let mut dirty = data.clone();
    let mut at = Vec::new();
    for &(t, pos, pos2, pat) in inj {
        let x = T::of_bits(pats[pat as usize % pats.len()]);
        let idx = match t {
            0 => pos as usize % s.q_elems(),
            _ => {
                let b = pos as usize % s.batch;
                let c = (pos as usize / 7) % s.kv_heads;
                let l = spec.len_of(b);
                let j = if pos2 & 1 == 1 && l < s.kv_len {
                    l + (pos2 as usize >> 1) % (s.kv_len - l)
                } else {
                    (pos2 as usize >> 1) % s.kv_len
                };
                spec.kv_row_index(b, c, j) * d + (pos as usize / 13) % d
            }
        };
        match t {
            0 => dirty.q[idx] = x,
            1 => dirty.k[idx] = x,
            _ => dirty.v[idx] = x,
        }
        at.push((t, idx));
    }
    (dirty, at)
}

fn reject<T: TElem>(spec: &Spec, g: &Gen, inj: &Injections) -> Result<(), TestCaseError> {
    let data = generate::<T>(spec, g);
    let (dirty, at) = inject(spec, &data, inj);
    let first = at.iter().map(|&(t, _)| t).min();
    let sentinel = T::of_bits(0x3C01);
    let mut out = vec![sentinel; spec.shape.q_elems()];
    let r = Engine::cpu().run_into(
        &spec.problem(),
        &dirty.q,
        &dirty.k,
        &dirty.v,
        dirty.mask.as_deref(),
        &mut out,
    );
    match first {
        None => {
            ok(r)?;
            let want = ok(run(&Engine::cpu(), spec, &data))?;
            prop_assert_eq!(bits(&out), bits(&want));
        }
        Some(t) => {
            let tensor = [TensorName::Q, TensorName::K, TensorName::V][t as usize];
            let e = r.expect_err("non-finite input under Reject must fail");
            prop_assert!(
                matches!(e, Error::NonFinite { tensor: x } if x == tensor),
                "{:?}",
                e
            );
            prop_assert_eq!(
                e.to_string(),
                format!(
                    "{} holds a NaN or infinity (policy: reject; nothing was computed or written)",
                    ["q", "k", "v"][t as usize]
                )
            );
            prop_assert!(
                out.iter().all(|x| x.bits() == sentinel.bits()),
                "out was written"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]
    #[test]
    fn nonfinite_reject_names_first_tensor_and_writes_nothing(
        (spec, g) in case(CaseLimits::small()),
        inj in injections(4),
        dt in 0u8..3,
    ) {
        per_dtype!(dt, reject(&spec, &g, &inj))?;
    }
}

/// Tallies of what the propagate cases exercised.
#[derive(Default, Debug)]
struct Seen {
    poisoned_rows: usize,
    clean_rows_beside_poisoned: usize,
    harmless_kv_injections: usize,
}

fn propagate<T: TElem>(
    spec: &Spec,
    g: &Gen,
    inj: &Injections,
    seen: &mut Seen,
) -> Result<(), TestCaseError> {
    let spec = Spec {
        policy: NonFinitePolicy::Propagate,
        ..spec.clone()
    };
    let s = spec.shape;
    let d = s.head_dim;
    let data = generate::<T>(&spec, g);
    let (dirty, at) = inject(&spec, &data, inj);
    // The same data with the injected values replaced by +0.
    let mut zeroed = dirty.clone();
    for &(t, idx) in &at {
        match t {
            0 => zeroed.q[idx] = T::of_bits(0),
            1 => zeroed.k[idx] = T::of_bits(0),
            _ => zeroed.v[idx] = T::of_bits(0),
        }
    }
    // Bad rows by numerics.md §7, with the suite's own valid-key rule.
    let bad_q = |r: usize| at.iter().any(|&(t, idx)| t == 0 && idx / d == r);
    let bad_kv = |r: usize| at.iter().any(|&(t, idx)| t != 0 && idx / d == r);
    let mask = dirty.mask.as_deref();
    let engine = Engine::cpu();
    let got = ok(run(&engine, &spec, &dirty))?;
    let want = ok(run(&engine, &spec, &zeroed))?;
    let mut any_bad = false;
    let mut clean = 0;
    for (b, h, i) in spec.rows() {
        let c = spec.kv_head(h);
        let bad = bad_q(spec.row_index(b, h, i))
            || (0..s.kv_len)
                .any(|j| spec.valid(mask, b, h, i, j) && bad_kv(spec.kv_row_index(b, c, j)));
        let row = out_row(&spec, &got, b, h, i);
        if bad {
            any_bad = true;
            seen.poisoned_rows += 1;
            prop_assert!(
                row.iter().all(|&x| x == T::NAN_BITS),
                "row ({},{},{}) must be canonical NaN {:#x}: {:x?}",
                b,
                h,
                i,
                T::NAN_BITS,
                row
            );
        } else {
            clean += 1;
            prop_assert_eq!(
                row,
                out_row(&spec, &want, b, h, i),
                "row ({},{},{}) must equal the zero-substituted run",
                b,
                h,
                i
            );
        }
    }
    if any_bad {
        seen.clean_rows_beside_poisoned += clean;
    }
    // K/V injections that no row's valid keys reach (masked, past the key length, causal).
    for &(t, idx) in &at {
        if t == 0 {
            continue;
        }
        let r = idx / d;
        let (b, c, j) = (
            r / (s.kv_heads * s.kv_len),
            (r / s.kv_len) % s.kv_heads,
            r % s.kv_len,
        );
        let reached = (0..s.q_heads)
            .filter(|&h| spec.kv_head(h) == c)
            .any(|h| (0..s.q_len).any(|i| spec.valid(mask, b, h, i, j)));
        if !reached {
            seen.harmless_kv_injections += 1;
        }
    }
    Ok(())
}

#[test]
fn nonfinite_propagate_poisons_exactly_the_documented_rows() {
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        ..Config::default()
    });
    let seen = std::cell::RefCell::new(Seen::default());
    runner
        .run(
            &(case(CaseLimits::small()), injections(4), 0u8..3),
            |((spec, g), inj, dt)| {
                per_dtype!(dt, propagate(&spec, &g, &inj, &mut seen.borrow_mut()))
            },
        )
        .unwrap();
    let seen = seen.into_inner();
    eprintln!("propagate: {seen:?}");
    assert!(seen.poisoned_rows >= 200, "{seen:?}");
    assert!(seen.clean_rows_beside_poisoned >= 200, "{seen:?}");
    assert!(seen.harmless_kv_injections >= 50, "{seen:?}");
}
