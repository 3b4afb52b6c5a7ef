//! The input classes. Each is compared with a random baseline of the same problem (same shapes,
//! same mask shape), so a significant difference in time can only come from the values.

use detattn::inputs::SplitMix64;

/// One input class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Q, K, V uniform on [−2, 2): the baseline of the value classes.
    Random,
    /// All zeros.
    Zeros,
    /// Random subnormal f32 values (random sign and significand, exponent field 0).
    Subnormals,
    /// Huge finite values: ±FLT_MAX·u, u uniform on [0.5, 1).
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

/// One input set: Q, K, V (f32) and the mask (masked classes only).
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

/// Generate one set of `class` for the sizes given (`[q, kv, mask]` elements, the KV layout
/// `(kv_heads·batch, kv_len, head_dim)` for the one-hot class).
pub fn generate(
    class: Class,
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
            let mut sub = |g: &mut SplitMix64| {
                let r = g.next_u64();
                // Significand 1..=0x7FFFFF (never zero), sign from another bit.
                let m = ((r & 0x7F_FFFF) as u32).max(1);
                f32::from_bits(m | (((r >> 63) as u32) << 31))
            };
            (
                vals(g, qn, &mut sub),
                vals(g, kvn, &mut sub),
                vals(g, kvn, &mut sub),
            )
        }
        Class::Huge => {
            let mut huge = |g: &mut SplitMix64| {
                let r = g.next_u64();
                let u = 0.5 + ((r >> 40) as f32) * f32::from_bits((127 - 25) << 23);
                let x = f32::MAX * u;
                if r & 1 == 1 { -x } else { x }
            };
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
