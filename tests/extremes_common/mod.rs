//! Structured extreme inputs (not random draws): every element at the dtype's largest magnitude
//! with alternating signs along each row (which made q·k reach D·max² on the `TensorCore` path
//! before it was fixed), all +max, all −max, signs alternating per row, max interleaved with the
//! smallest subnormals, one ±max per row among zeros, and the smallest subnormals alone; in every
//! problem structure a kernel has (prefill causal with key lengths, decode, a boolean mask, 4097
//! keys, scale f32::MAX, scale 1e-30, causal top-left). Shared by the GPU tests of both paths.
#![allow(dead_code)]

use detattn::{CausalAlign, DType, Element, MaskLayout, Problem, Shape};

/// The patterns, by name.
pub const PATTERNS: [&str; 7] = [
    "alternating_max",
    "all_plus_max",
    "all_minus_max",
    "row_sign_max",
    "max_and_subnormal",
    "one_hot_max",
    "smallest_subnormal",
];

/// The structures, by name.
pub const STRUCTURES: [&str; 7] = [
    "prefill_causal_kv_lens",
    "decode",
    "mask",
    "keys_4097",
    "scale_flt_max",
    "scale_1e-30",
    "causal_top_left",
];

/// The largest finite value's bits and the smallest subnormal's, of `T`.
fn max_min<T: Element>() -> (u32, u32) {
    match T::DTYPE {
        DType::F16 => (0x7BFF, 0x0001),
        DType::Bf16 => (0x7F7F, 0x0001),
        DType::F32 => (0x7F7F_FFFF, 0x0000_0001),
    }
}

fn sign_bit<T: Element>() -> u32 {
    if T::DTYPE == DType::F32 {
        0x8000_0000
    } else {
        0x8000
    }
}

/// `rows` rows of `d` elements of `pattern`; `phase` flips the alternation (use 0 for Q and V, 1
/// for K to make q·k negative, or the same to make it maximal).
pub fn pattern<T: Element>(name: &str, rows: usize, d: usize, phase: usize) -> Vec<T> {
    let (max, min) = max_min::<T>();
    let neg = sign_bit::<T>();
    let mut out = Vec::with_capacity(rows * d);
    for r in 0..rows {
        for c in 0..d {
            let b = match name {
                "alternating_max" => max | if (c + phase) % 2 == 1 { neg } else { 0 },
                "all_plus_max" => max,
                "all_minus_max" => max | neg,
                "row_sign_max" => max | if (r + phase) % 2 == 1 { neg } else { 0 },
                "max_and_subnormal" => match (c + phase) % 4 {
                    0 => max,
                    1 => min,
                    2 => max | neg,
                    _ => min | neg,
                },
                "one_hot_max" => {
                    if c == (r * 7 + phase) % d {
                        max | if r % 2 == 1 { neg } else { 0 }
                    } else {
                        0
                    }
                }
                "smallest_subnormal" => min | if (c + r + phase) % 2 == 1 { neg } else { 0 },
                _ => panic!("unknown pattern {name}"),
            };
            out.push(T::from_bits_u32(b));
        }
    }
    out
}

/// The problem of structure `name` at head dim `d`.
pub fn structure(name: &str, d: usize) -> Problem {
    let b = |s: Shape| Problem::builder(s);
    let p = match name {
        "prefill_causal_kv_lens" => b(Shape::new(2, 4, 2, 33, 70, d))
            .causal(true)
            .kv_lens(vec![70, 31]),
        // G·Sq = 4 <= 16: the decode kernel on the TensorCore path.
        "decode" => b(Shape::new(2, 8, 2, 1, 300, d)).kv_lens(vec![300, 129]),
        "mask" => b(Shape::new(1, 4, 4, 20, 90, d)).mask(MaskLayout::FULL),
        "keys_4097" => b(Shape::new(1, 2, 1, 8, 4097, d)),
        "scale_flt_max" => b(Shape::new(1, 2, 2, 17, 65, d)).scale(f32::MAX),
        "scale_1e-30" => b(Shape::new(1, 2, 2, 17, 65, d)).scale(1e-30),
        "causal_top_left" => b(Shape::new(1, 4, 2, 40, 33, d))
            .causal(true)
            .causal_align(CausalAlign::TopLeft),
        _ => panic!("unknown structure {name}"),
    };
    p.build().expect("a valid structured problem")
}

/// A mask for `p` (when it declares one): every third key masked, every fifth query row fully.
pub fn mask(p: &Problem) -> Option<Vec<bool>> {
    p.mask().map(|_| {
        let [bm, hm, sq, skv] = p.mask_dims();
        (0..bm * hm * sq * skv)
            .map(|n| (n / skv) % sq % 5 != 4 && (n % skv) % 3 != 2)
            .collect()
    })
}

/// Whether row `(b, h, i)` of `p` sees at least one key.
pub fn sees_a_key(p: &Problem, mask: Option<&[bool]>, b: usize, h: usize, i: usize) -> bool {
    let lim = p.key_limit(b, i);
    match mask {
        Some(m) => {
            let o = p.mask_row_offset(b, h, i);
            m[o..o + lim].iter().any(|&x| x)
        }
        None => lim > 0,
    }
}

/// One structured case: a problem, its inputs in contiguous `[B, H, S, D]`, and a label.
pub struct Case<T> {
    pub problem: Problem,
    pub q: Vec<T>,
    pub k: Vec<T>,
    pub v: Vec<T>,
    pub mask: Option<Vec<bool>>,
    pub label: String,
}

/// Every structure × every Q pattern × `ks(pq)` (K pattern, phase) × `vs(pq)` (V pattern) at head
/// dim `d`, to `f`; returns how many cases ran.
pub fn for_each_case<T: Element>(
    d: usize,
    ks: impl Fn(&'static str) -> Vec<(&'static str, usize)>,
    vs: impl Fn(&'static str) -> Vec<&'static str>,
    mut f: impl FnMut(&Case<T>),
) -> usize {
    let mut n = 0;
    for st in STRUCTURES {
        let p = structure(st, d);
        let s = *p.shape();
        let m = mask(&p);
        for pq in PATTERNS {
            for (pk, kphase) in ks(pq) {
                for pv in vs(pq) {
                    let case = Case {
                        problem: p.clone(),
                        q: pattern(pq, s.batch * s.q_heads * s.q_len, d, 0),
                        k: pattern(pk, s.batch * s.kv_heads * s.kv_len, d, kphase),
                        v: pattern(pv, s.batch * s.kv_heads * s.kv_len, d, 0),
                        mask: m.clone(),
                        label: format!(
                            "{} d{d} {st}: q {pq}, k {pk} (phase {kphase}), v {pv}",
                            T::DTYPE
                        ),
                    };
                    f(&case);
                    n += 1;
                }
            }
        }
    }
    n
}

/// The promise on an output of `case` (contiguous `[B, Hq, Sq, D]`): every element finite, and
/// every row that sees no key exactly +0.
pub fn assert_finite_and_unseen_zero<T: Element>(case: &Case<T>, out: &[T]) {
    let p = &case.problem;
    let s = *p.shape();
    let d = s.head_dim;
    for b in 0..s.batch {
        for h in 0..s.q_heads {
            for i in 0..s.q_len {
                let row = &out[((b * s.q_heads + h) * s.q_len + i) * d..][..d];
                let what = format!("{}: row ({b}, {h}, {i})", case.label);
                assert!(
                    row.iter().all(|v| v.to_f32().is_finite()),
                    "{what} not finite"
                );
                if !sees_a_key(p, case.mask.as_deref(), b, h, i) {
                    assert!(
                        row.iter().all(|v| v.to_bits_u32() == 0),
                        "{what} sees no key, not +0"
                    );
                }
            }
        }
    }
}
