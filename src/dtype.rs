//! Element types: f32, f16 and bf16 (from `half`). Inputs are widened to f32 exactly; the output is
//! rounded once, to nearest even, at the end (docs/numerics.md §7).

use half::{bf16, f16};
use std::fmt;

/// The element type of Q, K, V and the output (all four share it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16 (the upper half of a binary32).
    Bf16,
}

impl DType {
    /// All dtypes, in a fixed order.
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::Bf16];

    /// The name used by the CLI and in digests' documentation (`f32`, `f16`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::Bf16 => 2,
        }
    }

    /// The code of this dtype in the digest encoding and the kernel ABI.
    pub fn code(self) -> u8 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Bf16 => 2,
        }
    }

    /// Significand bits of the format, counting the implicit one (24, 11, 8).
    pub fn precision_bits(self) -> u32 {
        match self {
            DType::F32 => 24,
            DType::F16 => 11,
            DType::Bf16 => 8,
        }
    }

    /// The largest finite value, as f32 (numerics.md §5 `MAXT`).
    pub fn max_finite(self) -> f32 {
        match self {
            DType::F32 => f32::MAX,
            DType::F16 => 65504.0,
            DType::Bf16 => f32::from_bits(0x7F7F_0000),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(DType::F32),
            "f16" => Ok(DType::F16),
            "bf16" => Ok(DType::Bf16),
            _ => Err(format!("unknown dtype {s:?}: expected f32, f16 or bf16")),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// An element type the library computes on. Implemented for `f32`, `half::f16`, `half::bf16` only.
pub trait Element:
    Copy + Send + Sync + Default + fmt::Debug + PartialEq + bytemuck::Pod + 'static + sealed::Sealed
{
    /// The runtime tag.
    const DTYPE: DType;
    /// Exact widening to f32.
    fn to_f32(self) -> f32;
    /// Round a finite f32 (already saturated to this type's range) to nearest even.
    fn from_f32_rne(x: f32) -> Self;
    /// The canonical quiet NaN written to rows poisoned under the propagate policy.
    fn canonical_nan() -> Self;
    /// Little-endian bytes of the raw encoding (for digests).
    fn write_le(self, out: &mut Vec<u8>);
    /// The raw bits, widened (for bit-for-bit comparisons in tests and the CLI).
    fn to_bits_u32(self) -> u32;
    /// The inverse of [`to_bits_u32`](Element::to_bits_u32) (upper bits ignored for 16-bit types).
    fn from_bits_u32(bits: u32) -> Self;
}

/// f16 → f32, exact, without a branch on the value (`half`'s software fallback, used where F16C
/// is missing, branches on the exponent; docs/threat-model.md), and without a binary32 multiply
/// or fma on a subnormal value (x86 cores take far longer on those, numerics.md §8). Normal
/// values: the exponent rebiased by adding 112 to its field. Subnormals and zeros: the
/// significand, an integer below 2¹⁰ converted exactly, times 2⁻²⁴ (a normal product). The two
/// are selected by bit mask, as are infinities and NaNs (exponent 31).
#[inline(always)]
fn f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    let mag = h & 0x7FFF;
    let normal = (mag << 13) + (112 << 23);
    // (Written as a product of normal values on purpose: the earlier form, a subnormal times 2¹¹²
    // through binary64, was narrowed back into a binary32 multiply by LLVM, which proved the
    // product never −0, and the f16 subnormals class of the CPU dudect run saw it.)
    let small = ((mag & 0x03FF) as f32 * f32::from_bits(0x3380_0000)).to_bits();
    let special = 0x7F80_0000 | ((mag & 0x03FF) << 13);
    let is_small = crate::numerics::mask_of(mag < 0x0400);
    let is_special = crate::numerics::mask_of(mag >= 0x7C00);
    let finite = (small & is_small) | (normal & !is_small);
    f32::from_bits(sign | (special & is_special) | (finite & !is_special))
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32_rne(x: f32) -> Self {
        x
    }
    fn canonical_nan() -> Self {
        f32::from_bits(0x7FC0_0000)
    }
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bits().to_le_bytes());
    }
    fn to_bits_u32(self) -> u32 {
        self.to_bits()
    }
    #[inline(always)]
    fn from_bits_u32(bits: u32) -> Self {
        f32::from_bits(bits)
    }
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16_to_f32(self.to_bits())
    }
    #[inline(always)]
    fn from_f32_rne(x: f32) -> Self {
        // `half` rounds to nearest even (IEEE conversion), as numerics.md §7 requires.
        f16::from_f32(x)
    }
    fn canonical_nan() -> Self {
        f16::from_bits(0x7E00)
    }
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bits().to_le_bytes());
    }
    fn to_bits_u32(self) -> u32 {
        u32::from(self.to_bits())
    }
    #[inline(always)]
    fn from_bits_u32(bits: u32) -> Self {
        f16::from_bits(bits as u16)
    }
}

impl Element for bf16 {
    const DTYPE: DType = DType::Bf16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        // bf16 is the upper half of a binary32: widening is a shift, for every pattern.
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }
    #[inline(always)]
    fn from_f32_rne(x: f32) -> Self {
        // Written out rather than delegated so that the rule is the one numerics.md §7 states,
        // for finite inputs: add 0x7FFF plus the lowest kept bit, truncate.
        let b = x.to_bits();
        bf16::from_bits(((b + 0x7FFF + ((b >> 16) & 1)) >> 16) as u16)
    }
    fn canonical_nan() -> Self {
        bf16::from_bits(0x7FC0)
    }
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bits().to_le_bytes());
    }
    fn to_bits_u32(self) -> u32 {
        u32::from(self.to_bits())
    }
    #[inline(always)]
    fn from_bits_u32(bits: u32) -> Self {
        bf16::from_bits(bits as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding_matches_half_for_finite_values() {
        // An independent implementation (half's) must agree on every finite pattern we try.
        let mut x: u32 = 0x1234_5678;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let f = f32::from_bits(x);
            if !f.is_finite() || f.abs() > DType::Bf16.max_finite() {
                continue;
            }
            assert_eq!(
                <bf16 as Element>::from_f32_rne(f).to_bits(),
                bf16::from_f32(f).to_bits(),
                "{f:e}"
            );
        }
    }

    #[test]
    fn widening_agrees_with_half_on_every_pattern() {
        // Exhaustive: all 65 536 patterns of each 16-bit type against `half`'s conversion.
        for b in 0..=u16::MAX {
            for (ours, theirs) in [
                (
                    <f16 as Element>::to_f32(f16::from_bits(b)),
                    f16::from_bits(b).to_f32(),
                ),
                (
                    <bf16 as Element>::to_f32(bf16::from_bits(b)),
                    bf16::from_bits(b).to_f32(),
                ),
            ] {
                if theirs.is_nan() {
                    assert!(ours.is_nan(), "{b:#06x}: {ours}");
                } else {
                    assert_eq!(ours.to_bits(), theirs.to_bits(), "{b:#06x}");
                }
            }
        }
    }

    #[test]
    fn saturated_values_never_round_to_infinity() {
        for dt in DType::ALL {
            let m = dt.max_finite();
            let r = match dt {
                DType::F32 => f32::from_f32_rne(m),
                DType::F16 => f16::from_f32_rne(m).to_f32(),
                DType::Bf16 => bf16::from_f32_rne(m).to_f32(),
            };
            assert!(r.is_finite() && r == m, "{dt}: {r}");
        }
    }
}
