//! Bit-exact CPU model of one output element of the H100 tensor-core MMA with 16-bit inputs and
//! an f32 accumulator: `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`
//! (SASS `HMMA.16816.F32[.BF16]`) and, as measured, `wgmma.mma_async.sync.aligned.m64nNk16.f32.*`
//! (SASS `HGMMA.64xNx16.F32[.BF16]`) on sm_90a. docs/tensorcore-cpu-model.md §2 states the model
//! in words; this file and that section are kept step for step alike.
//!
//! One output is `d = fdp(a[0..16], b[0..16], c)`: every output element of the 16×8 (or 64×N) tile
//! is computed from its own row of A, its own column of B and its own element of C, and the same
//! function applies at every lane and register position (checked on the GPU, harness `mma`).
//!
//! The model (Khattak & Mikaitis 2025, "Accurate Models of NVIDIA Tensor Cores", and MMA-Sim,
//! Microsoft 2025, agree on it for Hopper, except for the floor of the alignment exponent, which
//! the H100 decided (−133), and the sign of a truncated-to-zero result, where both say −0 and the
//! H100 writes +0; docs/tensorcore-cpu-model.md §3):
//!
//! 1. Specials first: a NaN input, an `inf × 0` product, or `+inf` and `-inf` both present
//!    (products and c) give NaN (`0x7FFFFFFF`); otherwise an infinite product or c gives that inf.
//! 2. Products are exact: for `a = sa·2^(ea−F)`, `b = sb·2^(eb−F)` (sa, sb the integer
//!    significands with F fraction bits, subnormals with the format's minimum exponent) the product
//!    is `sa·sb` with exponent `ea + eb` — *not* renormalised (its significand lies in [1, 4)).
//! 3. The alignment exponent `E` is the largest of these `ea + eb` over the nonzero products and
//!    `ec` of a nonzero c (f32 exponent, −126 for subnormals), raised to `e_floor` if below it.
//! 4. Every term (16 products and c) is truncated toward zero to a multiple of `2^(E − 25)`
//!    (25 fraction bits below the leading position of the largest exponent: 23 + 2 extra bits).
//! 5. The truncated terms are added exactly (a fixed-point sum; no intermediate rounding).
//! 6. The sum is rounded toward zero to f32 (subnormals kept, truncated the same way); a result
//!    of 2^128 or more is ±inf; a zero result is +0, whether the sum is exactly zero or a
//!    negative sum truncated to zero below 2^-149 (measured: IEEE arithmetic would give −0 there).
//!
//! Everything here is integer arithmetic on bit patterns: no host floating point is involved,
//! so the model gives the same bits on every machine.

/// Input format of A and B.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InType {
    /// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 fraction bits.
    F16,
    /// bfloat16: 1 sign, 8 exponent (bias 127), 7 fraction bits.
    Bf16,
}

impl InType {
    /// Fraction bits of the format.
    pub const fn frac(self) -> u32 {
        match self {
            InType::F16 => 10,
            InType::Bf16 => 7,
        }
    }
    const fn exp_bits(self) -> u32 {
        match self {
            InType::F16 => 5,
            InType::Bf16 => 8,
        }
    }
    const fn bias(self) -> i32 {
        (1 << (self.exp_bits() - 1)) - 1
    }
    /// Smallest normal exponent (also the exponent the format gives its subnormals).
    pub const fn emin(self) -> i32 {
        1 - self.bias()
    }
    pub fn name(self) -> &'static str {
        match self {
            InType::F16 => "f16",
            InType::Bf16 => "bf16",
        }
    }
    /// Decode a 16-bit pattern.
    pub fn decode(self, x: u16) -> Operand {
        let f = self.frac();
        let neg = x >> 15 != 0;
        let field = ((x >> f) as u32) & ((1 << self.exp_bits()) - 1);
        let mant = (x as u32) & ((1 << f) - 1);
        if field == (1 << self.exp_bits()) - 1 {
            return if mant == 0 {
                Operand::Inf { neg }
            } else {
                Operand::Nan
            };
        }
        if field == 0 {
            // Subnormal (or zero): significand without the hidden bit, minimum exponent.
            Operand::Finite {
                neg,
                sig: mant,
                exp: self.emin(),
            }
        } else {
            Operand::Finite {
                neg,
                sig: mant | (1 << f),
                exp: field as i32 - self.bias(),
            }
        }
    }
}

/// A decoded operand: `value = (−1)^neg · sig · 2^(exp − F)` with F the format's fraction bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    Finite { neg: bool, sig: u32, exp: i32 },
    Inf { neg: bool },
    Nan,
}

/// Decode an f32 pattern the same way (F = 23).
pub fn decode_f32(x: u32) -> Operand {
    let neg = x >> 31 != 0;
    let field = (x >> 23) & 0xff;
    let mant = x & 0x7f_ffff;
    match field {
        0xff if mant == 0 => Operand::Inf { neg },
        0xff => Operand::Nan,
        0 => Operand::Finite {
            neg,
            sig: mant,
            exp: -126,
        },
        _ => Operand::Finite {
            neg,
            sig: mant | 0x80_0000,
            exp: field as i32 - 127,
        },
    }
}

/// The NaN the tensor cores write (measured on the H100: every NaN output is this pattern).
pub const NAN_BITS: u32 = 0x7fff_ffff;
const INF_BITS: u32 = 0x7f80_0000;

/// Final rounding of the fixed-point sum to f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rounding {
    /// Toward zero (the H100).
    Rz,
    /// To nearest, ties to even (a candidate the harness rules out).
    Rne,
}

/// Model parameters. [`H100`] is the measured model; the other values exist so that the harness
/// can show which alternatives the hardware rules out (docs/tensorcore-cpu-model.md §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Params {
    /// Fraction bits kept below 2^E when aligning (23 + extra alignment bits). H100: 25.
    pub frac_bits: u32,
    /// Lower bound of the alignment exponent E (`i32::MIN`: none). Only matters when every
    /// nonzero term has an exponent below it, i.e. c = ±0 and bf16 products below 2^-126.
    /// H100: −133 (no floor, −126 and every other value in −160..−120 disagree with it).
    pub e_floor: i32,
    /// Rounding of the sum to f32.
    pub rounding: Rounding,
    /// Align to the product's *normalised* exponent (`ea + eb + 1` when `sa·sb ≥ 2`) instead of
    /// `ea + eb`.
    pub normalized_exp: bool,
    /// Products fused per block: 16 (one block, H100) or 8 (two chained blocks, as the A100's
    /// m16n8k16 is modelled), the second block taking the first block's rounded f32 as its c.
    pub block: usize,
    /// Overflow of the rounded result gives ±inf (`true`) or ±FLT_MAX (`false`, IEEE RZ).
    pub overflow_inf: bool,
    /// An exact zero sum is +0 (`true`), or −0 when every term is a negative zero (`false`,
    /// IEEE-like).
    pub zero_plus: bool,
    /// A nonzero sum that rounds to zero (below 2^-149) keeps its sign (`true`: −0 for a negative
    /// sum, what truncation toward zero gives) or is +0 (`false`).
    pub underflow_signed: bool,
}

/// The H100 model, as measured (docs/tensorcore-cpu-model.md).
pub const H100: Params = Params {
    frac_bits: 25,
    e_floor: -133,
    rounding: Rounding::Rz,
    normalized_exp: false,
    block: 16,
    overflow_inf: true,
    zero_plus: true,
    // Measured on the H100 (2026-11-24, first GPU run): the published models' −0 for a negative
    // sum that truncates to zero disagreed with the hardware in 607 of 1.1e8 bf16 mma.sync cases
    // (and 601 wgmma), every one of them hw +0 / model −0; with +0 there: 0 disagreements.
    underflow_signed: false,
};

/// Result of the fused dot product before the final rounding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Raw {
    Nan,
    Inf {
        neg: bool,
    },
    /// `value = s · 2^lsb` exactly (s already holds the truncated terms' exact sum).
    /// `all_neg_zero`: no nonzero term and every term (products and c) is a negative zero.
    /// `e_max`: the largest term exponent before the floor (`i32::MIN` if every term is zero),
    /// so that a caller can tell whether another floor would change anything.
    Sum {
        s: i64,
        lsb: i32,
        all_neg_zero: bool,
        e_max: i32,
    },
}

/// One output element: `d = a[0..K]·b[0..K] + c` (K = 16, or a multiple of `p.block`).
pub fn mma_elem(t: InType, a: &[u16], b: &[u16], c: u32, p: &Params) -> u32 {
    assert_eq!(a.len(), b.len());
    assert!(p.block > 0 && a.len().is_multiple_of(p.block));
    let mut acc = c;
    for k0 in (0..a.len()).step_by(p.block) {
        let raw = fused(t, &a[k0..k0 + p.block], &b[k0..k0 + p.block], acc, p);
        acc = finish(raw, p);
    }
    acc
}

/// Steps 1–5: the specials, then the exact sum of the truncated, aligned terms.
pub fn fused(t: InType, a: &[u16], b: &[u16], c: u32, p: &Params) -> Raw {
    let f = t.frac();
    // Terms: (neg, significand, exponent of its unit-in-the-first-place, fraction bits).
    let mut terms: [(bool, u64, i32, u32); 33] = [(false, 0, 0, 0); 33];
    let mut n = 0;
    let (mut nan, mut pinf, mut ninf) = (false, false, false);
    let mut all_neg_zero = true;
    for (&x, &y) in a.iter().zip(b) {
        match (t.decode(x), t.decode(y)) {
            (Operand::Nan, _) | (_, Operand::Nan) => nan = true,
            (Operand::Inf { neg: n1 }, Operand::Inf { neg: n2 }) => {
                if n1 ^ n2 {
                    ninf = true
                } else {
                    pinf = true
                }
            }
            (Operand::Inf { neg: n1 }, Operand::Finite { neg: n2, sig, .. })
            | (Operand::Finite { neg: n2, sig, .. }, Operand::Inf { neg: n1 }) => {
                if sig == 0 {
                    nan = true; // inf · 0
                } else if n1 ^ n2 {
                    ninf = true
                } else {
                    pinf = true
                }
            }
            (
                Operand::Finite {
                    neg: n1,
                    sig: s1,
                    exp: e1,
                },
                Operand::Finite {
                    neg: n2,
                    sig: s2,
                    exp: e2,
                },
            ) => {
                let neg = n1 ^ n2;
                let sig = s1 as u64 * s2 as u64;
                if sig != 0 || !neg {
                    all_neg_zero = false;
                }
                terms[n] = (neg, sig, e1 + e2, 2 * f);
                n += 1;
            }
        }
    }
    match decode_f32(c) {
        Operand::Nan => nan = true,
        Operand::Inf { neg } => {
            if neg {
                ninf = true
            } else {
                pinf = true
            }
        }
        Operand::Finite { neg, sig, exp } => {
            if sig != 0 || !neg {
                all_neg_zero = false;
            }
            terms[n] = (neg, sig as u64, exp, 23);
            n += 1;
        }
    }
    if nan || (pinf && ninf) {
        return Raw::Nan;
    }
    if pinf || ninf {
        return Raw::Inf { neg: ninf };
    }
    let terms = &terms[..n];

    // Step 3: the alignment exponent. A term's own exponent is that of 2^0 of its significand
    // (`ea + eb` for a product, not renormalised), unless the `normalized_exp` candidate is asked.
    let own_exp = |&(_, sig, e, fr): &(bool, u64, i32, u32)| -> i32 {
        if p.normalized_exp && sig >> (fr + 1) != 0 {
            e + 1
        } else {
            e
        }
    };
    let mut e_max = i32::MIN;
    for term in terms.iter().filter(|t| t.1 != 0) {
        e_max = e_max.max(own_exp(term));
    }
    if e_max == i32::MIN {
        // Every term is zero.
        return Raw::Sum {
            s: 0,
            lsb: 0,
            all_neg_zero,
            e_max,
        };
    }
    let e = e_max.max(p.e_floor);
    let lsb = e - p.frac_bits as i32;

    // Step 4–5: truncate each term to a multiple of 2^lsb and add exactly. A term's value is
    // sig · 2^(exp − fr); in units of 2^lsb that is sig · 2^(exp − fr − lsb).
    let mut s: i64 = 0;
    for &(neg, sig, exp, fr) in terms.iter().filter(|t| t.1 != 0) {
        let sh = exp - fr as i32 - lsb;
        let mag = if sh >= 0 {
            // At most 25 − 14 = 11 for bf16 products (exp ≤ e), so no overflow of u64.
            sig << sh
        } else if sh > -64 {
            sig >> (-sh)
        } else {
            0
        };
        s += if neg { -(mag as i64) } else { mag as i64 };
    }
    Raw::Sum {
        s,
        lsb,
        all_neg_zero,
        e_max,
    }
}

/// Step 6: round the exact sum to an f32 bit pattern.
pub fn finish(raw: Raw, p: &Params) -> u32 {
    match raw {
        Raw::Nan => NAN_BITS,
        Raw::Inf { neg } => INF_BITS | ((neg as u32) << 31),
        Raw::Sum {
            s,
            lsb,
            all_neg_zero,
            ..
        } => {
            if s == 0 {
                return if !p.zero_plus && all_neg_zero {
                    0x8000_0000
                } else {
                    0
                };
            }
            let neg = s < 0;
            let sign = (neg as u32) << 31;
            let bits = round_f32(s.unsigned_abs(), lsb, p.rounding);
            match bits {
                Some(0) if !p.underflow_signed => 0,
                Some(m) => sign | m,
                None if p.overflow_inf => sign | INF_BITS,
                None => sign | 0x7f7f_ffff,
            }
        }
    }
}

/// |value| = mag · 2^lsb (mag > 0) rounded to an f32 magnitude pattern; `None` on overflow.
fn round_f32(mag: u64, lsb: i32, r: Rounding) -> Option<u32> {
    let len = 64 - mag.leading_zeros() as i32; // bit length
    let top = lsb + len - 1; // exponent of the leading bit
    // Units of the result's last place: 2^(top − 23) for normals, 2^-149 for subnormals.
    let ulp = if top >= -126 { top - 23 } else { -149 };
    let sh = ulp - lsb; // bits of mag below the last place
    let mut m = if sh <= 0 {
        mag << (-sh) // exact (len + (-sh) ≤ 24)
    } else if sh >= 64 {
        0
    } else {
        mag >> sh
    };
    // Round to nearest even (candidate only). Past 64 dropped bits everything is below half.
    if r == Rounding::Rne && sh > 0 && sh <= 64 {
        let rem = if sh == 64 {
            mag
        } else {
            mag & ((1u64 << sh) - 1)
        };
        let half = 1u64 << (sh - 1);
        if rem > half || (rem == half && m & 1 == 1) {
            m += 1;
        }
    }
    // m < 2^24 for normals (2^24 after rounding up: carries into the exponent, same encoding),
    // m < 2^23 for subnormals (2^23 after rounding up: the smallest normal, same encoding).
    let bits = if top >= -126 {
        let biased = (top + 127) as u64;
        (biased << 23) + (m - (1 << 23))
    } else {
        m
    };
    if bits >= INF_BITS as u64 {
        None
    } else {
        Some(bits as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32b(x: f32) -> u32 {
        x.to_bits()
    }

    #[test]
    fn decode_formats() {
        assert_eq!(
            InType::F16.decode(0x3c00),
            Operand::Finite {
                neg: false,
                sig: 1024,
                exp: 0
            }
        );
        assert_eq!(
            InType::F16.decode(0x0001),
            Operand::Finite {
                neg: false,
                sig: 1,
                exp: -14
            }
        );
        assert_eq!(InType::F16.decode(0xfc00), Operand::Inf { neg: true });
        assert_eq!(InType::F16.decode(0x7e00), Operand::Nan);
        assert_eq!(
            InType::Bf16.decode(0x3f80),
            Operand::Finite {
                neg: false,
                sig: 128,
                exp: 0
            }
        );
        assert_eq!(
            InType::Bf16.decode(0x8001),
            Operand::Finite {
                neg: true,
                sig: 1,
                exp: -126
            }
        );
        assert_eq!(
            decode_f32(0x0000_0001),
            Operand::Finite {
                neg: false,
                sig: 1,
                exp: -126
            }
        );
    }

    #[test]
    fn round_f32_cases() {
        // 1 + 2^-23 + 2^-24 (in units of 2^-25: 2^25 + 4 + 2): RZ drops the half.
        let mag = (1u64 << 25) + 4 + 2;
        assert_eq!(
            round_f32(mag, -25, Rounding::Rz),
            Some(f32b(1.0 + f32::EPSILON))
        );
        // RNE: tie at an odd last place rounds up to 1 + 2^-22.
        assert_eq!(
            round_f32(mag, -25, Rounding::Rne),
            Some(f32b(1.0 + 2.0 * f32::EPSILON))
        );
        // Smallest subnormal and half of it.
        assert_eq!(round_f32(1, -149, Rounding::Rz), Some(1));
        assert_eq!(round_f32(1, -150, Rounding::Rz), Some(0));
        assert_eq!(round_f32(3, -150, Rounding::Rne), Some(2)); // 1.5 ulp -> 2 (even)
        // Overflow at 2^128.
        assert_eq!(round_f32(1, 128, Rounding::Rz), None);
        assert_eq!(
            round_f32((1 << 24) - 1, 104, Rounding::Rz),
            Some(0x7f7f_ffff)
        );
    }
}
