//! A software `exp2` on FMA and integer operations only, the same bits on a CPU (this file) and on
//! the GPU (`tcmodel/kernels/sw_math.cuh`, `sw_exp2`), step for step; and a software reciprocal
//! for the TensorCore epilogue. docs/tensorcore-cpu-model.md §5 states the algorithm and its
//! measured error bound.
//!
//! Every step is an IEEE-754 binary32 operation with round-to-nearest-even (add, subtract,
//! multiply, fused multiply-add) or an integer operation on the bit pattern, so any conforming
//! implementation gives the same bits: on the GPU the build's `--fmad=false` and the explicit
//! `__fadd_rn/__fsub_rn/__fmul_rn/__fmaf_rn` keep the compiler from contracting or reordering.
//! No selection depends on a branch: the clamp is a bitwise select here and `max.NaN` there.

/// 1.5 · 2^23: adding it to |x| < 2^22 rounds x to an integer (ties to even) in the low bits.
pub const SHIFTER: f32 = 12_582_912.0;
/// Below this the result is +0 (the scale 2^j is built from the exponent field, j ≥ −127).
pub const LOW: f32 = -127.0;

/// p(r) = Σ C[k] r^k ≈ 2^r on [−1/2, 1/2] (tcmodel/scripts/fit_exp2.py 5: a near-minimax fit of
/// the relative error, constant term exactly 1 so that exp2(0) = 1 exactly).
pub const C: [f32; 6] = [
    1.0,
    f32::from_bits(0x3f31_7215), // 0.69314700
    f32::from_bits(0x3e75_fcde), // 0.24022242
    f32::from_bits(0x3d63_5baa), // 0.05550734
    f32::from_bits(0x3c1e_7556), // 0.00967153
    f32::from_bits(0x3aad_dcf8), // 0.00132647
];

/// A cheaper degree-3 polynomial (relative error 1e-4, enough for P rounded to bf16), measured as
/// a variant in the A/B (fit_exp2.py 3).
pub const C3: [f32; 4] = [
    1.0,
    f32::from_bits(0x3f31_7b00),
    f32::from_bits(0x3e78_0621),
    f32::from_bits(0x3d61_4fb8),
];

#[inline(always)]
fn select(cond: bool, a: f32, b: f32) -> f32 {
    // cond ? a : b as a bit select (no branch on the value).
    let m = (cond as u32).wrapping_neg();
    f32::from_bits((m & a.to_bits()) | (!m & b.to_bits()))
}

/// 2^x. For x in [−126, 127] the result is normal and within the bound of §5; for x < −126.5 it
/// is +0 (with gradual subnormals between), −inf gives +0, NaN gives a NaN (payload unspecified).
/// The TensorCore kernel only passes x ≤ 1 or −inf.
#[inline(always)]
pub fn exp2(x: f32) -> f32 {
    exp2_with(x, &C)
}

/// The same algorithm with any polynomial (C or C3).
#[inline(always)]
pub fn exp2_with(x: f32, c: &[f32]) -> f32 {
    // 1. x below −127 (−inf included) becomes −127; NaN stays NaN (the comparison is false).
    let xc = select(x < LOW, LOW, x);
    // 2. j = round(xc) by the shifter; r = xc − j is exact and lies in [−1/2, 1/2].
    let t = xc + SHIFTER;
    let j = t - SHIFTER;
    let r = xc - j;
    // 3. Horner with FMA, highest degree first.
    let n = c.len();
    let mut p = c[n - 1];
    for k in (0..n - 1).rev() {
        p = p.mul_add(r, c[k]);
    }
    // 4. 2^j from the exponent field: bits(t) = 0x4B400000 + j, and the low 9 bits of
    //    0x4B400000 are zero, so (bits(t) + 127) << 23 is (j + 127) << 23 modulo 2^32:
    //    j = −127 gives +0.0 (so the result is +0), j = 128 gives +inf.
    let s = f32::from_bits(t.to_bits().wrapping_add(127) << 23);
    p * s
}

/// Seed of the reciprocal: 1/x within 12% for positive normal x (magic-constant subtraction).
pub const RCP_MAGIC: u32 = 0x7ef3_11c3;

/// 1/x for positive normal x whose reciprocal is normal (the TensorCore epilogue's row sums
/// l ∈ [2^-27, 2^25]): a magic-constant seed and three Newton steps with FMA. Not correctly
/// rounded (measured bound in §5), but the same bits everywhere. Other inputs: unspecified
/// (the kernel selects 0 for l = 0 after the call).
#[inline(always)]
pub fn rcp(x: f32) -> f32 {
    let mut y = f32::from_bits(RCP_MAGIC.wrapping_sub(x.to_bits()));
    for _ in 0..3 {
        let e = (-x).mul_add(y, 1.0);
        y = y.mul_add(e, y);
    }
    y
}

/// The TensorCore cap of the row scale, `2^(23 − ⌊log2 |mu|⌋)` from the exponent field
/// (clamped to [2^-126, 2^127]): |mu · cap| < 2^24 exactly as the `rcp.approx` form intends,
/// but a power of two computed with integer operations (V2 of the A/B).
#[inline(always)]
pub fn cap_pow2(mu: f32) -> f32 {
    let e = ((mu.to_bits() >> 23) & 0xff) as i32 - 127; // −127 for 0 and subnormals
    let k = (23 - e).clamp(-126, 127);
    f32::from_bits(((k + 127) as u32) << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_points() {
        // r = 0 gives p = C[0] = 1 and the scale is exact: every integer is exact.
        for j in -126..=127 {
            assert_eq!(exp2(j as f32), 2f32.powi(j), "2^{j}");
        }
        assert_eq!(exp2(0.0), 1.0);
        assert_eq!(exp2(-0.0), 1.0);
        assert_eq!(exp2(f32::NEG_INFINITY).to_bits(), 0);
        assert_eq!(exp2(-127.0).to_bits(), 0);
        assert_eq!(exp2(-1.0e30).to_bits(), 0);
        assert!(exp2(f32::NAN).is_nan());
        // Between −126.5 and −126 the result is a subnormal: 2^-126.25 ≈ 0.84 · 2^-126.
        let y = exp2(-126.25);
        assert!(y > 0.0 && y < f32::MIN_POSITIVE);
    }

    #[test]
    fn accuracy_spot() {
        // The exhaustive bound is `tcharness exp2-bound`; here a coarse sweep.
        let mut worst = 0.0f64;
        let mut x = -126.0f32;
        while x <= 1.0 {
            let y = exp2(x) as f64;
            let e = (x as f64).exp2();
            worst = worst.max(((y - e) / e).abs());
            x += 0.001_37;
        }
        assert!(worst < 2.5e-7, "relative error {worst:e}");
    }

    #[test]
    fn rcp_and_cap() {
        let mut worst = 0.0f64;
        let mut x = 2f32.powi(-27);
        while x < 2f32.powi(25) {
            let y = rcp(x) as f64;
            worst = worst.max((y * x as f64 - 1.0).abs());
            x *= 1.000_731;
        }
        assert!(
            worst < 2.0 * f32::EPSILON as f64,
            "rcp relative error {worst:e}"
        );
        for mu in [1.0f32, 3.0, 1.0e-30, 2.5e30, 65504.0] {
            let c = cap_pow2(mu);
            assert!((mu as f64) * (c as f64) < 2f64.powi(24));
            assert!((mu as f64) * (c as f64) >= 2f64.powi(23));
        }
        assert_eq!(cap_pow2(0.0), 2f32.powi(127));
    }
}
