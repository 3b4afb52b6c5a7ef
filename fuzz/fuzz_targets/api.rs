//! Fuzz target `api`: the public API with arbitrary shapes (huge ones included), options, key
//! lengths, mask layouts, slice lengths, engines and dtypes. It must never panic; every failure
//! must be a typed [`detattn::Error`], and the right one:
//!
//! - `ProblemBuilder::build` succeeds iff every rule restated in [`violations`] holds, and when it
//!   fails the error is one of the violated rules (checked for every shape, huge ones too: build
//!   allocates nothing);
//! - `Engine::run`/`run_into` fail iff a slice length is wrong, the mask's presence does not match
//!   the problem, or (under `Reject`) an input holds NaN/±inf — and on failure `run_into` leaves
//!   the output untouched. Shapes whose tensors are too big to allocate here are still run with
//!   short slices, which must be rejected before the library allocates anything.
//!
//! Inputs only ever hold at most `CAP_ELEMS` elements and `CAP_WORK` multiply-adds, so each run is
//! fast.

#![no_main]

use arbitrary::{Result, Unstructured};
use detattn::numerics::{MAX_KV_LEN, default_scale};
use detattn::problem::{MAX_DIM, MAX_HEAD_DIM};
use detattn::{
    Backend, Element, Engine, Error, MaskLayout, NonFinitePolicy, Path, Problem, Shape, TensorName,
    bf16, f16,
};
use detattn_fuzz::{ValueMode, draw_mask, draw_vec, is_nonfinite};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

/// Largest number of elements (Q + K + V + mask + out) this target allocates.
const CAP_ELEMS: usize = 1 << 13;
/// Largest B·Hq·Sq·Skv·D run (keeps one input well under a millisecond or so).
const CAP_WORK: usize = 1 << 18;

fuzz_target!(|data: &[u8]| {
    let _ = fuzz(&mut Unstructured::new(data));
});

/// A dimension: mostly small, sometimes a boundary or a huge value.
fn dim(u: &mut Unstructured<'_>) -> Result<usize> {
    Ok(match u.int_in_range(0u8..=15)? {
        0 => 0,
        1 => usize::MAX,
        2 => MAX_DIM,
        3 => MAX_DIM + 1,
        4 => MAX_HEAD_DIM,
        5 => MAX_HEAD_DIM + 1,
        6 => u.arbitrary()?,
        7 => 1usize << u.int_in_range(0..=63)?,
        8 => 64 * u.int_in_range(1..=3)? + u.int_in_range(0..=2)? - 1,
        _ => u.int_in_range(1..=6)?,
    })
}

/// The validation rules, restated from the docs of `ProblemBuilder` and `Error`.
#[derive(Debug, PartialEq)]
enum Rule {
    Dim(&'static str),
    HeadsNotDivisible,
    Scale,
    KvLensCount,
    KvLenOutOfRange(usize),
    Overflow(TensorName),
}

fn violations(
    s: &Shape,
    scale: Option<f32>,
    kv_lens: Option<&[usize]>,
    mask: Option<MaskLayout>,
) -> Vec<Rule> {
    let mut v = Vec::new();
    for (name, value, max) in [
        ("batch", s.batch, MAX_DIM),
        ("q_heads", s.q_heads, MAX_DIM),
        ("kv_heads", s.kv_heads, MAX_DIM),
        ("q_len", s.q_len, MAX_DIM),
        ("kv_len", s.kv_len, MAX_KV_LEN),
        ("head_dim", s.head_dim, MAX_HEAD_DIM),
    ] {
        if !(1..=max).contains(&value) {
            v.push(Rule::Dim(name));
        }
    }
    if !v.is_empty() {
        // Later rules divide by or multiply these; they only apply to in-range dimensions.
        return v;
    }
    if !s.q_heads.is_multiple_of(s.kv_heads) {
        v.push(Rule::HeadsNotDivisible);
    }
    let sc = scale.unwrap_or_else(|| default_scale(s.head_dim));
    if !(sc.is_finite() && sc > 0.0) {
        v.push(Rule::Scale);
    }
    if let Some(l) = kv_lens {
        if l.len() != s.batch {
            v.push(Rule::KvLensCount);
        } else if let Some(b) = l.iter().position(|&x| x > s.kv_len) {
            v.push(Rule::KvLenOutOfRange(b));
        }
    }
    let prod = |xs: &[usize]| xs.iter().try_fold(1usize, |a, &x| a.checked_mul(x));
    let q = prod(&[s.batch, s.q_heads, s.q_len, s.head_dim]);
    if q.is_none() {
        v.push(Rule::Overflow(TensorName::Q));
    }
    if prod(&[s.batch, s.kv_heads, s.kv_len, s.head_dim]).is_none() {
        v.push(Rule::Overflow(TensorName::K));
    }
    if q.and_then(|q| q.checked_mul(4)).is_none() {
        v.push(Rule::Overflow(TensorName::Out));
    }
    if let Some(l) = mask {
        let bm = if l.per_batch { s.batch } else { 1 };
        let hm = if l.per_head { s.q_heads } else { 1 };
        if prod(&[bm, hm, s.q_len, s.kv_len]).is_none() {
            v.push(Rule::Overflow(TensorName::Mask));
        }
    }
    v
}

fn rule_of(e: &Error) -> Option<Rule> {
    Some(match e {
        Error::DimensionOutOfRange { name, .. } => Rule::Dim(name),
        Error::HeadsNotDivisible { .. } => Rule::HeadsNotDivisible,
        Error::InvalidScale { .. } => Rule::Scale,
        Error::KvLensCount { .. } => Rule::KvLensCount,
        Error::KvLenOutOfRange { batch, .. } => Rule::KvLenOutOfRange(*batch),
        Error::SizeOverflow { tensor, .. } => Rule::Overflow(*tensor),
        _ => return None,
    })
}

fn engine(which: u8) -> &'static Engine {
    static E: OnceLock<[Engine; 3]> = OnceLock::new();
    &E.get_or_init(|| {
        [
            Engine::cpu_with_threads(1).expect("pool"),
            Engine::cpu_with_threads(2).expect("pool"),
            // Auto without the `cuda` feature (as this crate builds detattn) is the CPU.
            Engine::new(Backend::Auto, Path::Exact).expect("auto falls back to the CPU"),
        ]
    })[usize::from(which % 3)]
}

fn fuzz(u: &mut Unstructured<'_>) -> Result<()> {
    // Engines that must refuse: the TensorCore path on the CPU, CUDA in a build without it.
    match u.int_in_range(0u8..=15)? {
        0 => assert!(matches!(
            Engine::new(Backend::Cpu, Path::TensorCore),
            Err(Error::PathUnavailable { .. })
        )),
        1 => {
            let n = u.arbitrary::<usize>()?;
            let p = if u.arbitrary()? {
                Path::Exact
            } else {
                Path::TensorCore
            };
            assert!(matches!(
                Engine::new(Backend::Cuda(n), p),
                Err(Error::NoCudaDriver { .. })
            ));
        }
        _ => {}
    }

    let shape = Shape::new(dim(u)?, dim(u)?, dim(u)?, dim(u)?, dim(u)?, dim(u)?);
    let scale = match u.int_in_range(0u8..=3)? {
        0 => Some(f32::from_bits(u.arbitrary()?)),
        1 => Some(*u.choose(&[0.0, -0.0, -1.0, f32::NAN, f32::INFINITY, 1e-45, f32::MAX])?),
        _ => None,
    };
    let kv_lens = if u.arbitrary()? {
        let n = if u.arbitrary()? && shape.batch <= 64 {
            shape.batch
        } else {
            u.int_in_range(0..=8)?
        };
        let mut l = Vec::with_capacity(n);
        for _ in 0..n {
            l.push(match u.int_in_range(0u8..=5)? {
                0 => 0,
                1 => shape.kv_len,
                2 => shape.kv_len.wrapping_add(1),
                3 => u.arbitrary()?,
                _ => u.int_in_range(0..=shape.kv_len.min(200))?,
            });
        }
        Some(l)
    } else {
        None
    };
    let mask_layout = if u.arbitrary()? {
        Some(MaskLayout {
            per_batch: u.arbitrary()?,
            per_head: u.arbitrary()?,
        })
    } else {
        None
    };
    let policy = if u.arbitrary()? {
        NonFinitePolicy::Propagate
    } else {
        NonFinitePolicy::Reject
    };
    let causal: bool = u.arbitrary()?;

    let mut b = Problem::builder(shape).causal(causal).nonfinite(policy);
    if let Some(s) = scale {
        b = b.scale(s);
    }
    if let Some(l) = &kv_lens {
        b = b.kv_lens(l.clone());
    }
    if let Some(m) = mask_layout {
        b = b.mask(m);
    }
    let broken = violations(&shape, scale, kv_lens.as_deref(), mask_layout);
    let problem = match b.build() {
        Ok(p) => {
            assert!(
                broken.is_empty(),
                "build accepted {shape:?}, breaking {broken:?}"
            );
            p
        }
        Err(e) => {
            let r = rule_of(&e);
            assert!(
                r.as_ref().is_some_and(|r| broken.contains(r)),
                "build of {shape:?} failed with {e:?}, but the broken rules are {broken:?}"
            );
            assert!(!e.to_string().is_empty());
            return Ok(());
        }
    };

    // Accessors of a valid problem.
    assert_eq!(*problem.shape(), shape);
    assert_eq!(problem.causal(), causal);
    assert_eq!(problem.nonfinite(), policy);
    assert_eq!(
        problem.scale().to_bits(),
        scale
            .unwrap_or_else(|| default_scale(shape.head_dim))
            .to_bits()
    );
    let bi = u.int_in_range(0..=shape.batch - 1)?;
    let i = u.int_in_range(0..=shape.q_len - 1)?;
    let limit = problem.key_limit(bi, i);
    assert!(limit <= problem.kv_len_of(bi) && problem.kv_len_of(bi) <= shape.kv_len);

    let (qn, kn) = (shape.q_elems(), shape.kv_elems());
    let mn = mask_layout.map(|_| problem.mask_dims().iter().product::<usize>());
    let small = qn
        .checked_mul(2)
        .and_then(|x| x.checked_add(kn.checked_mul(2)?))
        .and_then(|x| x.checked_add(mn.unwrap_or(0)))
        .is_some_and(|x| x <= CAP_ELEMS);
    let work = [
        shape.q_len,
        shape.kv_len.next_multiple_of(64),
        shape.head_dim,
    ]
    .iter()
    .try_fold(shape.batch * shape.q_heads, |a, &x| a.checked_mul(x))
    .is_some_and(|w| w <= CAP_WORK);

    // Slice lengths: the right ones nudged by a small delta, or (too big to allocate) short ones.
    let alloc = small && work;
    let lq = slice_len(u, qn, alloc)?;
    let lk = slice_len(u, kn, alloc)?;
    let lv = slice_len(u, kn, alloc)?;
    let lo = slice_len(u, qn, alloc)?;
    let give_mask = match u.int_in_range(0u8..=7)? {
        0 => mask_layout.is_none(),
        _ => mask_layout.is_some(),
    };
    let lm = if give_mask {
        let want = match mn {
            Some(m) => m,
            None => u.int_in_range(0..=16)?,
        };
        Some(slice_len(u, want, alloc)?)
    } else {
        None
    };
    let which = u.arbitrary::<u8>()?;
    let into: bool = u.arbitrary()?;
    let modes = [u.arbitrary::<u8>()?, u.arbitrary()?, u.arbitrary()?].map(ValueMode::from_byte);
    let seed: u64 = u.arbitrary()?;
    let density = u.int_in_range(0u8..=8)?;
    let lengths_ok = lq == qn
        && lk == kn
        && lv == kn
        && (!into || lo == qn)
        && match (mn, lm) {
            (Some(m), Some(l)) => l == m,
            (None, None) => true,
            _ => false,
        };
    let e = engine(which);
    match u.int_in_range(0u8..=2)? {
        0 => run::<f32>(
            e,
            &problem,
            [lq, lk, lv, lo],
            lm,
            into,
            modes,
            seed,
            density,
            lengths_ok,
        ),
        1 => run::<f16>(
            e,
            &problem,
            [lq, lk, lv, lo],
            lm,
            into,
            modes,
            seed,
            density,
            lengths_ok,
        ),
        _ => run::<bf16>(
            e,
            &problem,
            [lq, lk, lv, lo],
            lm,
            into,
            modes,
            seed,
            density,
            lengths_ok,
        ),
    }
    Ok(())
}

/// A slice length near `want` when it may be allocated, else a short one (at most 64).
fn slice_len(u: &mut Unstructured<'_>, want: usize, alloc: bool) -> Result<usize> {
    if alloc {
        Ok(match u.int_in_range(0u8..=7)? {
            0 => want.saturating_sub(1),
            1 => want + 1,
            2 => 0,
            _ => want,
        })
    } else {
        u.int_in_range(0..=64)
    }
}

#[allow(clippy::too_many_arguments)]
fn run<T: Element>(
    e: &Engine,
    p: &Problem,
    [lq, lk, lv, lo]: [usize; 4],
    lm: Option<usize>,
    into: bool,
    modes: [ValueMode; 3],
    seed: u64,
    density: u8,
    lengths_ok: bool,
) {
    let q: Vec<T> = draw_vec(seed, modes[0], lq);
    let k: Vec<T> = draw_vec(seed ^ 1, modes[1], lk);
    let v: Vec<T> = draw_vec(seed ^ 2, modes[2], lv);
    let mask = lm.map(|n| draw_mask(seed ^ 3, density, n));
    let nonfinite = [&q, &k, &v]
        .iter()
        .any(|xs| xs.iter().any(|x| is_nonfinite(*x)));
    let reject = lengths_ok && nonfinite && p.nonfinite() == NonFinitePolicy::Reject;
    let res = if into {
        let sentinel = T::from_bits_u32(0xA5A5_A5A5);
        let mut out = vec![sentinel; lo];
        let r = e.run_into(p, &q, &k, &v, mask.as_deref(), &mut out);
        if r.is_err() {
            assert!(
                out.iter()
                    .all(|o| o.to_bits_u32() == sentinel.to_bits_u32()),
                "run_into wrote to the output and then failed: {r:?}"
            );
        } else if !nonfinite {
            assert!(out.iter().all(|o| !is_nonfinite(*o)), "non-finite output");
        }
        r
    } else {
        e.run(p, &q, &k, &v, mask.as_deref()).map(|out| {
            assert_eq!(out.len(), p.shape().q_elems());
            if !nonfinite {
                assert!(out.iter().all(|o| !is_nonfinite(*o)), "non-finite output");
            }
        })
    };
    match (&res, lengths_ok, reject) {
        (Ok(()), true, false) => {}
        (Err(Error::TensorLength { .. } | Error::MaskPresence { .. }), false, _) => {}
        (Err(Error::NonFinite { .. }), true, true) => {}
        _ => panic!("lengths ok: {lengths_ok}, reject expected: {reject}, result {res:?}"),
    }
    if let Err(err) = &res {
        assert!(!err.to_string().is_empty());
    }
}
