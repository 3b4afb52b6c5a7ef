//! The `Exact` numerics contract, one function per step of `docs/numerics.md`.
//!
//! `kernels/numerics.cuh` mirrors this file function for function, with the same names; each
//! function here names the section it implements. Only IEEE add, subtract, multiply, fma
//! (`f32::mul_add`), max/min on non-NaN values and integer/bit operations are used, in the order
//! written, so the results are the same bits on every machine. Nothing branches on a value:
//! selections go through [`sel`], a bit mask.
//!
//! One thing here has no counterpart in the kernel: [`mul`], [`fma`] and [`fma_wide`], the
//! document's binary32 multiply and fma computed through binary64 (numerics.md §8). x86 cores
//! take microcode assists, tens of cycles, for binary32 multiplies and fmas with a subnormal
//! operand or result, and that time revealed the values (docs/audit.md, Timing); no binary64
//! value formed from binary32 operands here is subnormal. NVIDIA's FMA pipe has no such penalty.

// `x.max(lo).min(hi)` is the document's operation sequence (IEEE maxNum then minNum), mirrored
// by fmaxf/fminf in the kernel; `f32::clamp` is a different operation (it passes NaN through).
#![allow(clippy::manual_clamp)]

/// The version of docs/numerics.md these functions implement: the `Exact` path's bits are those
/// of this version of the document. A change to any operation, constant or order of it is a new
/// version (and new golden digests).
pub const CONTRACT_VERSION: u32 = 1;

/// Keys per tile (§4).
pub const TILE: usize = 64;
/// Largest key length accepted (§4: keeps `l ≤ 1/4`).
pub const MAX_KV_LEN: usize = 1 << 24;

/// Largest finite f32.
pub const FLT_MAX: f32 = f32::MAX;
/// log2(e) (§6).
pub const L2E: f32 = f32::from_bits(0x3FB8_AA3B);
/// 1.5·2²³: adding it rounds to an integer (§6).
pub const SHIFTER: f32 = f32::from_bits(0x4B40_0000);
/// ln 2, high part (§6).
pub const LN2_HI: f32 = f32::from_bits(0x3F31_7200);
/// ln 2, low part (§6).
pub const LN2_LO: f32 = f32::from_bits(0x35BF_BE8E);
/// Polynomial coefficients of e^r, degree 7 down to 2 (§6).
pub const P7: f32 = f32::from_bits(0x3950_6967);
#[allow(missing_docs)]
pub const P6: f32 = f32::from_bits(0x3AB7_43CE);
#[allow(missing_docs)]
pub const P5: f32 = f32::from_bits(0x3C08_8908);
#[allow(missing_docs)]
pub const P4: f32 = f32::from_bits(0x3D2A_A9C1);
#[allow(missing_docs)]
pub const P3: f32 = f32::from_bits(0x3E2A_AAAA);
#[allow(missing_docs)]
pub const P2: f32 = f32::from_bits(0x3F00_0000);
/// Lower clamp of exp's argument (§4).
pub const ZMIN: f32 = f32::from_bits(0xC2A0_0000);
/// Weight scale 2⁻²⁶ (§4).
pub const W: f32 = f32::from_bits(0x3280_0000);
/// Reciprocal seed slope, −32/17 (§5).
pub const R1: f32 = f32::from_bits(0xBFF0_F0F1);
/// Reciprocal seed intercept, 48/17 (§5).
pub const R0: f32 = f32::from_bits(0x4034_B4B5);

/// §10 Reduction point of `log`: `f32(0x3F2AAAAB)` ≈ 2/3, so the reduced argument lies in
/// [2/3, 4/3).
pub const LOG_SPLIT: u32 = 0x3F2A_AAAB;
/// §10 Coefficients of `log1p(f) ≈ f + f²·(G0 + G1·f + … + G8·f⁸)` on [−1/3, 1/3), `G0` first
/// (a weighted least-squares fit rounded to f32; under 1 ulp of `log1p` on the range).
pub const LOG_G: [f32; 9] = [
    f32::from_bits(0xBF00_0000),
    f32::from_bits(0x3EAA_AA81),
    f32::from_bits(0xBE7F_FF42),
    f32::from_bits(0x3E4C_E8F9),
    f32::from_bits(0xBE2A_D3A8),
    f32::from_bits(0x3E0F_5F33),
    f32::from_bits(0xBDF9_2F17),
    f32::from_bits(0x3E0F_68A7),
    f32::from_bits(0xBE04_9899),
];
/// §10 `−log2(W)`: the weights carry `W = 2⁻²⁶`, which the log-sum-exp takes back out.
pub const LOG2_W_INV: i32 = 26;

/// All ones when `c`, else zero: the mask behind every selection.
#[inline(always)]
pub fn mask_of(c: bool) -> u32 {
    (c as u32).wrapping_neg()
}

/// `c ? a : b` without a branch (notation of the document).
#[inline(always)]
pub fn sel(c: bool, a: f32, b: f32) -> f32 {
    let m = mask_of(c);
    f32::from_bits((a.to_bits() & m) | (b.to_bits() & !m))
}

/// §8 The document's binary32 `x * y` on the CPU: the exact product, formed in binary64 (48
/// significant bits; at least 2⁻²⁹⁸ in magnitude when not zero, so never subnormal there), rounded
/// once to binary32 — the same bits as a binary32 multiply, subnormal results included, except
/// that an exact zero product is +0 (see numerics.md §8 on why that sign never reaches an output).
#[inline(always)]
pub fn mul(x: f32, y: f32) -> f32 {
    // As `fma_wide(x, y, +0)`, not `(x as f64 * y as f64) as f32`: LLVM narrows the latter back
    // into a binary32 multiply (the value is the same), the slow instruction; `+ 0.0` stopped it
    // only while it could not prove the product never −0, and it did prove that in places (the
    // f16 widening, the AVX2 variant: docs/audit.md). The round-to-odd step's bit arithmetic is
    // opaque to it; for an exact product it changes nothing (the error is 0). About 6 % on W1.
    fma_wide(f64::from(x), f64::from(y), 0.0) as f32
}

/// §8 The document's binary32 `fma(a, b, c)` on the CPU (see [`fma_wide`]).
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    fma_wide(f64::from(a), f64::from(b), f64::from(c)) as f32
}

/// §8 `fma(a, b, c)` rounded once to binary32, for binary32 values held in binary64; the result
/// again held in binary64 (exactly), so that an fma chain stays in binary64 between its steps.
/// An infinite operand gives the infinity (or NaN) as IEEE does: `mul` meets one where a product
/// of `score_finish` overflowed (§3 saturates it afterwards).
///
/// The product is exact in binary64; the sum is rounded there to nearest, its error recovered
/// exactly (Knuth's TwoSum), and the sum moved to the odd neighbour when the error is not zero:
/// that is `p + c` rounded to odd in 53 bits, and rounding a round-to-odd value of at least
/// p + 2 bits to p bits gives the correctly rounded result (Boldo and Melquiond, "Emulation of
/// FMA and correctly rounded sums", 2008), here by the binary64 → binary32 conversion, which
/// also rounds on the binary32 subnormal grid. Every step is an add, a multiply or integer
/// arithmetic on bits, none of them on a subnormal value; no compare, so no select that could
/// become a branch.
#[inline(always)]
pub fn fma_wide(a: f64, b: f64, c: f64) -> f64 {
    let p = a * b;
    let s = p + c;
    let bb = s - p;
    let e = (p - (s - bb)) + (c - bb);
    let sb = s.to_bits();
    let eb = e.to_bits() << 1;
    // 1 when s is ±inf or NaN (an infinite operand: the error is NaN then, and s is the result).
    let special = (((sb >> 52) & 0x7FF) + 1) >> 11;
    // 1 when the rounding was inexact (e ≠ 0), from the bits alone.
    let inexact = ((eb | eb.wrapping_neg()) >> 63) & (special ^ 1);
    // 1 when the exact sum lies towards zero from s (e and s of opposite signs; s ≠ 0 then).
    let toward_zero = ((e.to_bits() ^ sb) >> 63) & inexact;
    let odd = sb.wrapping_sub(toward_zero) | inexact;
    f64::from(f64::from_bits(odd) as f32)
}

/// §2.1 The biased exponent field.
#[inline(always)]
pub fn expfield(x: f32) -> u32 {
    (x.to_bits() >> 23) & 0xFF
}

/// §2.2 All ones when `x` is NaN or ±inf.
#[inline(always)]
pub fn nonfinite_mask(x: f32) -> u32 {
    mask_of(expfield(x) == 0xFF)
}

/// §2.2 NaN and ±inf become +0.
#[inline(always)]
pub fn sanitize(x: f32) -> f32 {
    f32::from_bits(x.to_bits() & !nonfinite_mask(x))
}

/// §2.3 The row shift from the largest exponent field of the (sanitised) row.
#[inline(always)]
pub fn row_shift(max_expfield: u32) -> i32 {
    let e = max_expfield.max(1) as i32;
    (127 - e).max(-126)
}

/// §2.4 2^k for k in [−126, 127], built from bits.
#[inline(always)]
pub fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

/// §2.2–2.5 Sanitise a row in place, scale it by its power of two; returns (shift, bad).
/// `scale_row = false` sanitises only (V rows).
#[inline(always)]
pub fn prepare_row(row: &mut [f32], scale_row: bool) -> (i32, bool) {
    let mut bad = 0u32;
    let mut emax = 0u32;
    for x in row.iter_mut() {
        bad |= nonfinite_mask(*x);
        *x = sanitize(*x);
        emax = emax.max(expfield(*x));
    }
    if !scale_row {
        return (0, bad != 0);
    }
    let shift = row_shift(emax);
    let f = pow2(shift);
    for x in row.iter_mut() {
        *x = mul(*x, f);
    }
    (shift, bad != 0)
}

/// §3 From the fma chain `s` to the saturated, scaled score.
#[inline(always)]
pub fn score_finish(s: f32, scale: f32, sq: i32, sk: i32) -> f32 {
    let u = -(sq + sk);
    let a = u >> 1;
    let b = u - a;
    let x = mul(mul(mul(s, scale), pow2(a)), pow2(b));
    x.max(-FLT_MAX).min(FLT_MAX)
}

/// §4 `clamp(z) = min(max(z, ZMIN), 0)`.
#[inline(always)]
pub fn clamp_z(z: f32) -> f32 {
    z.max(ZMIN).min(0.0)
}

/// The bits of 2⁻³⁰: [`exp`] takes a z of smaller magnitude as 0 (the same result, 1).
const EXP_FLUSH_BITS: u32 = 0x3080_0000;

/// §6 Software e^z for z in [−80, 0].
///
/// Every operation below is a plain binary32 one: none of them meets a subnormal value once a z
/// below 2⁻³⁰ in magnitude is taken as 0, which gives the same bits (numerics.md §8 shows both).
#[inline(always)]
pub fn exp(z: f32) -> f32 {
    // All ones when |z| < 2⁻³⁰, from a subtraction's sign (no compare the optimiser could turn
    // into a branch).
    let tiny = ((z.to_bits() & 0x7FFF_FFFF).wrapping_sub(EXP_FLUSH_BITS) as i32 >> 31) as u32;
    let z = f32::from_bits(z.to_bits() & !tiny);
    let t = z.mul_add(L2E, SHIFTER);
    let nf = t - SHIFTER;
    let n = (t.to_bits() as i32) - 0x4B40_0000;
    let r = nf.mul_add(-LN2_HI, z);
    let r = nf.mul_add(-LN2_LO, r);
    let mut p = P7;
    p = p.mul_add(r, P6);
    p = p.mul_add(r, P5);
    p = p.mul_add(r, P4);
    p = p.mul_add(r, P3);
    p = p.mul_add(r, P2);
    p = p.mul_add(r, 1.0);
    p = p.mul_add(r, 1.0);
    p * pow2(n)
}

/// §5 1/l for a normal positive l, by a fixed Newton sequence.
#[inline(always)]
pub fn recip(l: f32) -> f32 {
    let bits = l.to_bits();
    let e = bits >> 23;
    let m = f32::from_bits((bits & 0x007F_FFFF) | 0x3F00_0000);
    let mut r = m.mul_add(R1, R0);
    r = r.mul_add((-m).mul_add(r, 1.0), r);
    r = r.mul_add((-m).mul_add(r, 1.0), r);
    r = r.mul_add((-m).mul_add(r, 1.0), r);
    r * f32::from_bits((253 - e) << 23)
}

/// §5 a / l, as a fixed sequence with one correction step.
#[inline(always)]
pub fn div(a: f32, l: f32) -> f32 {
    let r = recip(l);
    let q = mul(a, r).max(-FLT_MAX).min(FLT_MAX);
    let e = fma(-q, l, a);
    fma(e, r, q)
}

/// §5 `lsafe`: the divisor, 1 when no key was valid.
#[inline(always)]
pub fn l_safe(l: f32) -> f32 {
    sel(l > 0.0, l, 1.0)
}

/// §5 One output element before rounding: divide, canonicalise zero, saturate to `maxt`.
#[inline(always)]
pub fn finalize(acc: f32, lsafe: f32, maxt: f32) -> f32 {
    let o = div(acc, lsafe) + 0.0;
    o.max(-maxt).min(maxt)
}

/// §10 `ln(l) − ln(W)` for a normal positive `l` (here `l` is §4's final weight sum, in
/// [W, 1/4], or 1): the exponent and a polynomial, from fma, add, multiply and bit operations
/// only (no libm, the same bits everywhere).
#[inline(always)]
pub fn log_unweighted(l: f32) -> f32 {
    let b = l.to_bits();
    let e = b.wrapping_sub(LOG_SPLIT) & 0xFF80_0000;
    let f = f32::from_bits(b.wrapping_sub(e)) - 1.0;
    let k = (e as i32) >> 23;
    let mut p = LOG_G[8];
    for &g in LOG_G[..8].iter().rev() {
        p = p.mul_add(f, g);
    }
    let r = p.mul_add(f * f, f);
    let kf = (k + LOG2_W_INV) as f32;
    let y = kf.mul_add(LN2_LO, r);
    kf.mul_add(LN2_HI, y)
}

/// §10 The log-sum-exp of a row from §4's final state: `m + ln(l) − ln(W)`, and −inf when no
/// key was valid (`l = 0`). A bad row's NaN (§7) is the caller's selection.
#[inline(always)]
pub fn lse(m: f32, l: f32) -> f32 {
    let y = log_unweighted(l_safe(l));
    sel(l > 0.0, m + y, f32::NEG_INFINITY)
}

/// The default scale, `RN_f32(1/sqrt(D))` computed in f64 (§3).
pub fn default_scale(head_dim: usize) -> f32 {
    (1.0f64 / (head_dim as f64).sqrt()) as f32
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Operands for the binary64 realisations of the binary32 multiply and fma, built so that the
    /// cases that break a naive emulation come up often: every exponent (subnormals included),
    /// significands with few bits (exact products, ties), sums that cancel, and sums a hair away
    /// from a binary32 midpoint (where rounding twice, first to binary64, would go wrong).
    pub(crate) fn fma_cases(n: usize) -> Vec<(f32, f32, f32)> {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut cases = Vec::with_capacity(n);
        while cases.len() < n {
            let r = next();
            let bits = |r: u64| {
                // Random sign and exponent (0..=254, so subnormals and zeros too), significand
                // either random or with only its top 1–12 bits.
                let sign = ((r >> 63) as u32) << 31;
                let exp = ((r >> 40) % 255) as u32;
                let keep = 1 + (r >> 56) % 12;
                let mant = r as u32 & 0x7F_FFFF;
                let mant = if r & (1 << 32) == 0 {
                    mant
                } else {
                    mant & !(0x7F_FFFF >> keep)
                };
                f32::from_bits(sign | (exp << 23) | mant)
            };
            let (a, b) = (bits(r), bits(next()));
            let c = match r % 4 {
                // Independent.
                0 => bits(next()),
                // Cancels the product to within the last bits of c.
                1 => -((f64::from(a) * f64::from(b)) as f32),
                // The product's binary64 midpoint plus or minus a binary32 far below it: the
                // exact sum is not a midpoint but rounds to one in binary64.
                _ => {
                    let p = f64::from(a) * f64::from(b);
                    let tiny =
                        f32::from_bits(((p.abs().to_bits() >> 29) as u32).saturating_sub(30 << 23));
                    if r % 4 == 2 { tiny } else { -tiny }
                }
            };
            // Finite operands only: the contract never feeds an infinity to an fma (§2, §4).
            if c.is_finite() {
                cases.push((a, b, c));
            }
        }
        // The double-rounding trap, explicitly: (1 + 2⁻¹²)² = 1 + 2⁻¹¹ + 2⁻²⁴ is a binary32
        // midpoint; ± 2⁻⁶⁰ decides the rounding. Again scaled into the subnormal range.
        let a = 1.0 + f32::EPSILON * 2048.0;
        for (s, t) in [
            (1.0f32, 1.0f32),
            (pow2(-70), pow2(-56)),
            (pow2(-75), pow2(-75)),
        ] {
            for c in [pow2(-60), -pow2(-60), 0.0] {
                cases.push((a * s, a * t, mul(c, mul(s, t))));
            }
        }
        cases
    }

    #[test]
    fn mul_and_fma_are_the_binary32_operations() {
        let mut subnormal = 0;
        for (a, b, c) in fma_cases(2_000_000) {
            let want = a.mul_add(b, c);
            let got = fma(a, b, c);
            // The hardware fma is the oracle; zeros' signs follow it too.
            assert_eq!(got.to_bits(), want.to_bits(), "fma({a:e}, {b:e}, {c:e})");
            let want = a.mul_add(b, 0.0);
            assert_eq!(mul(a, b).to_bits(), want.to_bits(), "{a:e} * {b:e}");
            // An infinite operand (a product that overflowed before, as in `score_finish`).
            let inf = f32::INFINITY.copysign(c);
            if b != 0.0 {
                assert_eq!(mul(inf, b).to_bits(), (inf * b).to_bits(), "{inf} * {b:e}");
            }
            subnormal += usize::from(got != 0.0 && got.abs() < f32::MIN_POSITIVE);
        }
        // The cases reach the subnormal results they are there for.
        assert!(subnormal > 10_000, "only {subnormal} subnormal results");
    }

    /// §6 as written before [`exp`] took tiny z as 0: the reference the flush is held to.
    fn exp_unflushed(z: f32) -> f32 {
        let t = z.mul_add(L2E, SHIFTER);
        let nf = t - SHIFTER;
        let n = (t.to_bits() as i32) - 0x4B40_0000;
        let r = nf.mul_add(-LN2_LO, nf.mul_add(-LN2_HI, z));
        let p = [P6, P5, P4, P3, P2, 1.0, 1.0]
            .iter()
            .fold(P7, |p, &c| p.mul_add(r, c));
        p * pow2(n)
    }

    #[test]
    fn exp_flush_of_tiny_z_changes_no_bit() {
        // Every z of magnitude below 2^-30 (both signs; only ≤ 0 occurs in use), on a grid that
        // visits every exponent, and the boundary itself from both sides.
        let lim = EXP_FLUSH_BITS;
        for b in (0..lim).step_by(251).chain(lim - 4..lim + 4) {
            for z in [f32::from_bits(b), -f32::from_bits(b)] {
                assert_eq!(exp(z).to_bits(), exp_unflushed(z).to_bits(), "z = {z:e}");
            }
        }
        // And across the range in use.
        for i in 0..=200_000 {
            let z = ZMIN * (i as f32 / 200_000.0);
            assert_eq!(exp(z).to_bits(), exp_unflushed(z).to_bits(), "z = {z:e}");
        }
    }

    #[test]
    fn exp_is_exact_at_zero_and_accurate_on_its_range() {
        assert_eq!(exp(0.0).to_bits(), 1.0f32.to_bits());
        assert_eq!(exp(-0.0).to_bits(), 1.0f32.to_bits());
        let mut worst = 0.0f64;
        let n = 2_000_000;
        for i in 0..=n {
            let z = ZMIN * (i as f32 / n as f32);
            let got = exp(z) as f64;
            let want = (z as f64).exp();
            let ulp = f64::from(f32::EPSILON) * want; // ulp of a value in [want, 2·want)
            worst = worst.max((got - want).abs() / ulp);
        }
        // numerics.md §6 promises under 4 ulp.
        assert!(worst < 4.0, "worst error {worst} ulp");
    }

    #[test]
    fn log_is_accurate_on_the_weight_sums() {
        // ln(l) − ln(W) against f64 for l on [W, 1/4] (every 97th f32 there) and l = 1.
        let (lo, hi) = (W.to_bits(), 0.25f32.to_bits());
        let mut worst = 0.0f64;
        for b in (lo..=hi).step_by(97).chain([hi, 1.0f32.to_bits()]) {
            let l = f32::from_bits(b);
            let got = f64::from(log_unweighted(l));
            let want = f64::from(l).ln() + 26.0 * std::f64::consts::LN_2;
            // ulps of the result (≥ 2^-24 absolute: the result near 0 is a difference of logs).
            let ulp = f64::from(f32::EPSILON) * want.abs().max(0.5);
            worst = worst.max((got - want).abs() / ulp);
        }
        // numerics.md §10 promises under 2 ulp.
        assert!(worst < 2.0, "worst error {worst} ulp");
        assert_eq!(log_unweighted(W).to_bits(), 0);
    }

    #[test]
    fn lse_of_no_valid_key_is_minus_infinity() {
        assert_eq!(lse(-FLT_MAX, 0.0), f32::NEG_INFINITY);
        // One valid key at the maximum: l = W, so the LSE is m itself.
        for m in [0.0f32, -3.5, 1e30, -FLT_MAX, FLT_MAX] {
            assert_eq!(lse(m, W).to_bits(), m.to_bits(), "{m}");
        }
    }

    #[test]
    fn exp_is_monotone_non_increasing_towards_zmin() {
        let mut prev = exp(0.0);
        let mut z = 0.0f32;
        while z > ZMIN {
            z -= 1.0 / 1024.0;
            let e = exp(z);
            assert!(e <= prev, "exp not monotone at {z}");
            prev = e;
        }
    }

    #[test]
    fn div_is_within_one_ulp_of_ieee_division() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..1_000_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // l in [2^-26, 1/4], a anywhere in ±2^100.
            let l = f32::from_bits(0x3280_0000 + ((x as u32) % (0x3E80_0000 - 0x3280_0000)));
            let a = f32::from_bits(((x >> 32) as u32) & 0xB1FF_FFFF);
            let got = div(a, l);
            let want = a / l;
            let d = (got.to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(d <= 1, "{a:e}/{l:e}: {got:e} vs {want:e}");
        }
    }

    #[test]
    fn div_never_yields_nan_or_inf_at_the_extremes() {
        for &a in &[FLT_MAX, -FLT_MAX, FLT_MAX / 3.0, 0.0, -0.0, 1e-45] {
            for &l in &[W, 0.25, 1.0, 0.999_999_9, W * 3.0] {
                let q = div(a, l);
                assert!(!q.is_nan(), "{a}/{l}");
                let o = finalize(a, l, FLT_MAX);
                assert!(o.is_finite(), "{a}/{l} -> {o}");
            }
        }
    }

    #[test]
    fn pow2_and_row_shift_cover_their_ranges() {
        for k in -126..=127 {
            assert_eq!(pow2(k), 2f64.powi(k) as f32);
        }
        assert_eq!(row_shift(0), 126);
        assert_eq!(row_shift(1), 126);
        assert_eq!(row_shift(127), 0);
        assert_eq!(row_shift(254), -126);
    }

    #[test]
    fn score_finish_is_exact_for_ordinary_rows() {
        // With shifts that cancel to zero the score is RN(s·scale), the unscaled product.
        for &(s, sc) in &[(3.5f32, 0.125f32), (-1234.5, 0.088_388_35), (1e-3, 0.3)] {
            assert_eq!(score_finish(s, sc, 1, -1).to_bits(), (s * sc).to_bits());
        }
        assert_eq!(score_finish(f32::MAX, 8.0, -126, -126), f32::MAX);
        assert_eq!(score_finish(-f32::MAX, 8.0, -126, -126), -f32::MAX);
    }

    #[test]
    fn sanitize_and_selection() {
        assert_eq!(sanitize(f32::NAN).to_bits(), 0);
        assert_eq!(sanitize(f32::NEG_INFINITY).to_bits(), 0);
        assert_eq!(sanitize(-2.5), -2.5);
        assert_eq!(sel(true, 1.0, 2.0), 1.0);
        assert_eq!(sel(false, 1.0, 2.0), 2.0);
    }
}
