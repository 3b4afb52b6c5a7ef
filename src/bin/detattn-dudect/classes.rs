//! The input classes. Each is compared with a random baseline of the same problem (same shapes,
//! same mask shape), so a significant difference in time can only come from the values.
//!
//! Classes are generated for an element type (f32, f16, bf16) and mean the same thing in each:
//! "huge" is within a factor 2 of *that type's* largest finite value, "subnormals" are *that
//! type's* subnormals (an f32 subnormal would round to 0 in f16, and ±FLT_MAX to ±inf). Every value
//! is generated as an f32 that the type holds exactly, so converting it ([`ClassElement`]) loses
//! nothing and the class arrives on the device as generated.

use detattn::inputs::SplitMix64;
use detattn::{DType, bf16, f16};

/// One input class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Q, K, V uniform on [−2, 2): the baseline of the value classes.
    Random,
    /// All zeros.
    Zeros,
    /// Random subnormals of the element type (random sign and significand, exponent field 0).
    Subnormals,
    /// Huge finite values of the element type, within a factor 2 of its largest: f32
    /// ±FLT_MAX·u, u uniform on [0.5, 1); f16 and bf16 a random significand under the largest
    /// finite exponent (f16 [2^15, 65504], bf16 [2^127, 0x7F7F]).
    Huge,
    /// Random values with half of the elements NaN, +inf or −inf (the `Propagate` policy, so
    /// the work proceeds and every row is poisoned).
    NonFinite,
    /// One-hot peaked scores: every query row is the same sign pattern ±1 and one random key
    /// (per KV head) is that pattern times 100, the other keys small: that key's score is about
    /// 800 above the others, so after the softmax one weight is 1 and every other underflows.
    OneHot,
    /// Random values and a random mask (3/4 true): the baseline of the mask class.
    RandomMask,
    /// Random values and a mask that is all false (every row has no valid key).
    AllMasked,
    /// Random values and a mask that is all true (a diagnostic next to `AllMasked`: if both
    /// differ from the random mask the same way, the mask's randomness is what costs).
    AllAttend,
}

impl Class {
    /// Every class, baselines first.
    pub const ALL: [Class; 9] = [
        Class::Random,
        Class::RandomMask,
        Class::Zeros,
        Class::Subnormals,
        Class::Huge,
        Class::NonFinite,
        Class::OneHot,
        Class::AllMasked,
        Class::AllAttend,
    ];

    /// The class name on the command line and in the output.
    pub fn name(self) -> &'static str {
        match self {
            Class::Random => "random",
            Class::Zeros => "zeros",
            Class::Subnormals => "subnormals",
            Class::Huge => "huge",
            Class::NonFinite => "nonfinite",
            Class::OneHot => "onehot",
            Class::RandomMask => "random-mask",
            Class::AllMasked => "all-masked",
            Class::AllAttend => "all-attend",
        }
    }

    /// Whether the class runs on the masked problem.
    pub fn masked(self) -> bool {
        matches!(
            self,
            Class::RandomMask | Class::AllMasked | Class::AllAttend
        )
    }

    /// The class it is compared with (`None` for a baseline).
    pub fn baseline(self) -> Option<Class> {
        match self {
            Class::Random | Class::RandomMask => None,
            Class::AllMasked | Class::AllAttend => Some(Class::RandomMask),
            _ => Some(Class::Random),
        }
    }
}

impl std::str::FromStr for Class {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Class::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Class::ALL.iter().map(|c| c.name()).collect();
                format!("unknown class {s:?}: expected one of {}", names.join(", "))
            })
    }
}

/// Exact conversion of a class value (an f32 the element type holds, or a NaN or infinity) into
/// the element type the harness times.
// Only the GPU timer converts (the CPU harness times f32): unused in a build without CUDA.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub trait ClassElement: Copy {
    /// The value in this type; exact for every value [`generate`] produces for it.
    fn from_class_value(x: f32) -> Self;
}

impl ClassElement for f32 {
    fn from_class_value(x: f32) -> Self {
        x
    }
}

impl ClassElement for f16 {
    fn from_class_value(x: f32) -> Self {
        // `half` rounds to nearest even and keeps NaN and ±inf: exact on values f16 holds.
        f16::from_f32(x)
    }
}

impl ClassElement for bf16 {
    fn from_class_value(x: f32) -> Self {
        bf16::from_f32(x)
    }
}

/// `x` rounded to the nearest value of `dtype` (NaN and ±inf kept), as an f32.
fn round_to(dtype: DType, x: f32) -> f32 {
    match dtype {
        DType::F32 => x,
        DType::F16 => f16::from_f32(x).to_f32(),
        DType::Bf16 => bf16::from_f32(x).to_f32(),
    }
}

/// A random subnormal of `dtype` (never zero), as an f32.
fn subnormal(dtype: DType, r: u64) -> f32 {
    let sign = (r >> 63) as u32;
    match dtype {
        // Significand 1..=0x7FFFFF, exponent field 0.
        DType::F32 => f32::from_bits(((r & 0x7F_FFFF) as u32).max(1) | (sign << 31)),
        DType::F16 => {
            let m = ((r & 0x3FF) as u16).max(1);
            f16::from_bits(m | ((sign as u16) << 15)).to_f32()
        }
        DType::Bf16 => {
            let m = ((r & 0x7F) as u16).max(1);
            bf16::from_bits(m | ((sign as u16) << 15)).to_f32()
        }
    }
}

/// A random finite value of `dtype` within a factor 2 of its largest, as an f32.
fn huge(dtype: DType, r: u64) -> f32 {
    let sign = (r & 1) as u16;
    match dtype {
        DType::F32 => {
            let u = 0.5 + ((r >> 40) as f32) * f32::from_bits((127 - 25) << 23);
            let x = f32::MAX * u;
            if sign == 1 { -x } else { x }
        }
        // The largest finite exponent field (30 of 31 in f16, 254 of 255 in bf16), any
        // significand: [2^15, 65504] and [2^127, max].
        DType::F16 => {
            f16::from_bits((sign << 15) | (30 << 10) | ((r >> 20) as u16 & 0x3FF)).to_f32()
        }
        DType::Bf16 => {
            bf16::from_bits((sign << 15) | (254 << 7) | ((r >> 20) as u16 & 0x7F)).to_f32()
        }
    }
}

/// One input set: Q, K, V (as f32 values the element type holds exactly) and the mask (masked
/// classes only).
#[derive(Clone, Debug)]
pub struct InputSet {
    /// `[B, Hq, Sq, D]`.
    pub q: Vec<f32>,
    /// `[B, Hkv, Skv, D]`.
    pub k: Vec<f32>,
    /// `[B, Hkv, Skv, D]`.
    pub v: Vec<f32>,
    /// `[B, Hq, Sq, Skv]`.
    pub mask: Option<Vec<bool>>,
}

fn vals(g: &mut SplitMix64, n: usize, f: &mut dyn FnMut(&mut SplitMix64) -> f32) -> Vec<f32> {
    (0..n).map(|_| f(g)).collect()
}

fn uniform(g: &mut SplitMix64) -> f32 {
    // [−2, 2) on a 2⁻²² grid, like detattn::inputs.
    ((g.next_u64() >> 40) as f32) * f32::from_bits((127 - 22) << 23) - 2.0
}

/// Generate one set of `class` in element type `dtype` for the sizes given (`[q, kv, mask]`
/// elements, the KV layout `(kv_heads·batch, kv_len, head_dim)` for the one-hot class).
pub fn generate(
    class: Class,
    dtype: DType,
    g: &mut SplitMix64,
    qn: usize,
    kvn: usize,
    maskn: usize,
    kv_rows: (usize, usize, usize),
) -> InputSet {
    let mut set = generate_values(class, dtype, g, qn, kvn, maskn, kv_rows);
    // Random draws (on a 2^-22 grid) and the one-hot class's small keys are rounded to the
    // type here, so that converting later is exact; the subnormal and huge values are built in
    // the type already and stay as they are.
    if dtype != DType::F32 {
        for x in set.q.iter_mut().chain(&mut set.k).chain(&mut set.v) {
            *x = round_to(dtype, *x);
        }
    }
    set
}

fn generate_values(
    class: Class,
    dtype: DType,
    g: &mut SplitMix64,
    qn: usize,
    kvn: usize,
    maskn: usize,
    kv_rows: (usize, usize, usize),
) -> InputSet {
    let (q, k, v) = match class {
        Class::Random | Class::RandomMask | Class::AllMasked | Class::AllAttend => (
            vals(g, qn, &mut uniform),
            vals(g, kvn, &mut uniform),
            vals(g, kvn, &mut uniform),
        ),
        Class::Zeros => (vec![0.0; qn], vec![0.0; kvn], vec![0.0; kvn]),
        Class::Subnormals => {
            let mut sub = |g: &mut SplitMix64| subnormal(dtype, g.next_u64());
            (
                vals(g, qn, &mut sub),
                vals(g, kvn, &mut sub),
                vals(g, kvn, &mut sub),
            )
        }
        Class::Huge => {
            let mut huge = |g: &mut SplitMix64| huge(dtype, g.next_u64());
            (
                vals(g, qn, &mut huge),
                vals(g, kvn, &mut huge),
                vals(g, kvn, &mut huge),
            )
        }
        Class::NonFinite => {
            let mut nf = |g: &mut SplitMix64| {
                let r = g.next_u64();
                match r % 6 {
                    0 => f32::NAN,
                    1 => f32::INFINITY,
                    2 => f32::NEG_INFINITY,
                    _ => uniform(g),
                }
            };
            (
                vals(g, qn, &mut nf),
                vals(g, kvn, &mut nf),
                vals(g, kvn, &mut nf),
            )
        }
        Class::OneHot => {
            let (heads, kv_len, d) = kv_rows;
            let pattern: Vec<f32> = (0..d)
                .map(|_| if g.next_u64() & 1 == 1 { -1.0 } else { 1.0 })
                .collect();
            let q: Vec<f32> = (0..qn).map(|i| pattern[i % d]).collect();
            let mut k: Vec<f32> = (0..kvn).map(|_| uniform(g) * 0.01).collect();
            for h in 0..heads {
                let j = (g.next_u64() % kv_len as u64) as usize;
                let o = (h * kv_len + j) * d;
                for (x, p) in k[o..o + d].iter_mut().zip(&pattern) {
                    *x = 100.0 * p;
                }
            }
            let v = vals(g, kvn, &mut uniform);
            (q, k, v)
        }
    };
    let mask = class.masked().then(|| match class {
        Class::AllMasked => vec![false; maskn],
        Class::AllAttend => vec![true; maskn],
        _ => (0..maskn).map(|_| g.next_u64() >> 62 != 0).collect(),
    });
    InputSet { q, k, v, mask }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(class: Class, dtype: DType) -> InputSet {
        let mut g = SplitMix64::new(7);
        // 2 KV heads × 130 keys × 8 dims; 5 queries per head; a [1, 2, 5, 130] mask.
        generate(
            class,
            dtype,
            &mut g,
            2 * 5 * 8,
            2 * 130 * 8,
            2 * 5 * 130,
            (2, 130, 8),
        )
    }

    fn values(s: &InputSet) -> impl Iterator<Item = f32> + '_ {
        s.q.iter().chain(&s.k).chain(&s.v).copied()
    }

    /// Every value converts to the element type and back unchanged (NaN stays NaN).
    fn exact_in<T: ClassElement>(s: &InputSet, back: impl Fn(T) -> f32) {
        for x in values(s) {
            let y = back(T::from_class_value(x));
            assert!(
                y.to_bits() == x.to_bits() || (x.is_nan() && y.is_nan()),
                "{x:e} -> {y:e}"
            );
        }
    }

    #[test]
    fn f16_classes_hold_f16_values_of_the_intended_kind() {
        let max = f32::from(f16::MAX);
        let conv = |x: f32| f16::from_class_value(x);
        for c in Class::ALL {
            exact_in::<f16>(&set(c, DType::F16), |h| h.to_f32());
        }
        assert!(values(&set(Class::Huge, DType::F16)).all(|x| {
            let h = conv(x);
            h.is_finite() && h.to_f32().abs() >= max / 2.0 && h.to_f32().abs() <= max
        }));
        assert!(values(&set(Class::Subnormals, DType::F16)).all(|x| {
            let h = conv(x);
            h.classify() == std::num::FpCategory::Subnormal
        }));
        // Both signs occur, and more than a handful of distinct values.
        let hs: Vec<f32> = values(&set(Class::Huge, DType::F16)).collect();
        assert!(hs.iter().any(|&x| x < 0.0) && hs.iter().any(|&x| x > 0.0));
        let mut bits: Vec<u32> = hs.iter().map(|x| x.to_bits()).collect();
        bits.sort_unstable();
        bits.dedup();
        assert!(bits.len() > 100, "{}", bits.len());
        let r = set(Class::Random, DType::F16);
        assert!(values(&r).all(|x| (-2.0..=2.0).contains(&x)));
        assert!(values(&r).any(|x| x != 0.0));
        assert!(values(&set(Class::Zeros, DType::F16)).all(|x| x.to_bits() == 0));
        let nf = set(Class::NonFinite, DType::F16);
        assert!(values(&nf).any(|x| x.is_nan()) && values(&nf).any(|x| x.is_infinite()));
        assert!(values(&nf).any(|x| x.is_finite()));
    }

    #[test]
    fn bf16_classes_hold_bf16_values_of_the_intended_kind() {
        let max = f32::from(bf16::MAX);
        for c in Class::ALL {
            exact_in::<bf16>(&set(c, DType::Bf16), |h| h.to_f32());
        }
        assert!(values(&set(Class::Huge, DType::Bf16)).all(|x| {
            let h = bf16::from_class_value(x);
            h.is_finite() && h.to_f32().abs() >= max / 2.0 && h.to_f32().abs() <= max
        }));
        assert!(
            values(&set(Class::Subnormals, DType::Bf16)).all(|x| {
                bf16::from_class_value(x).classify() == std::num::FpCategory::Subnormal
            })
        );
        // The one-hot class: the peaked keys are ±100 exactly, the query pattern ±1.
        let oh = set(Class::OneHot, DType::Bf16);
        assert!(oh.q.iter().all(|&x| x.abs() == 1.0));
        assert_eq!(
            oh.k.chunks(8)
                .filter(|r| r.iter().all(|x| x.abs() == 100.0))
                .count(),
            2
        );
    }

    #[test]
    fn f32_classes_are_unchanged_by_the_dtype_parameter() {
        // The Exact harness's classes, as before: f32 subnormals and values near FLT_MAX.
        let h = set(Class::Huge, DType::F32);
        assert!(values(&h).all(|x| x.is_finite() && x.abs() >= f32::MAX / 2.0));
        let s = set(Class::Subnormals, DType::F32);
        assert!(values(&s).all(f32::is_subnormal));
        exact_in::<f32>(&h, |x| x);
    }
}
