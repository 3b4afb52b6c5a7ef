//! A second, independent implementation of the MMA model for the tests: each term is an exact
//! `f64` (16-bit products have at most 22 significant bits and exponents in [−276, 256]; f32 c is
//! exact), the truncation is `trunc(term / 2^lsb) · 2^lsb` (power-of-two scaling: exact), the
//! sum of at most 17 truncated terms is a multiple of 2^lsb below 2^(lsb + 34) (exact in f64),
//! and the conversion to f32 uses the host's correctly rounded `as f32` plus a step toward zero.
//! It shares no code with `mma.rs` (not even the decoding), so a bug has to be made twice to pass.

use crate::mma::{InType, Params, Rounding};

/// The exact value of a 16-bit pattern (NaN/inf included), decoded with f64 arithmetic.
pub fn value(t: InType, x: u16) -> f64 {
    let (eb, fb, bias) = match t {
        InType::F16 => (5u32, 10u32, 15i32),
        InType::Bf16 => (8, 7, 127),
    };
    let s = if x & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = ((x as u32) >> fb) & ((1 << eb) - 1);
    let m = (x as u32) & ((1 << fb) - 1);
    if e == (1 << eb) - 1 {
        return if m == 0 { s * f64::INFINITY } else { f64::NAN };
    }
    let (sig, ex) = if e == 0 {
        (m as f64, 1 - bias)
    } else {
        ((m + (1 << fb)) as f64, e as i32 - bias)
    };
    s * sig * 2f64.powi(ex - fb as i32)
}

/// Exponent of the significand's 2^0 as the tensor core sees it: floor(log2 |x|) for normals,
/// the format's minimum for subnormals.
fn exp_of(t: InType, x: f64) -> i32 {
    let emin = match t {
        InType::F16 => -14,
        InType::Bf16 => -126,
    };
    let e = x.abs().log2().floor() as i32;
    // log2 of an exact power-of-two boundary could round: correct it.
    let e = if 2f64.powi(e) > x.abs() {
        e - 1
    } else if 2f64.powi(e + 1) <= x.abs() {
        e + 1
    } else {
        e
    };
    e.max(emin)
}

/// `d = a·b + c` by the model with parameters `p` (block = 16 only).
pub fn mma_elem(t: InType, a: &[u16], b: &[u16], c: u32, p: &Params) -> u32 {
    assert_eq!(p.block, a.len());
    let cv = f32::from_bits(c) as f64;
    let mut terms = Vec::new();
    let mut exps = Vec::new();
    let (mut nan, mut pinf, mut ninf) = (cv.is_nan(), cv == f64::INFINITY, cv == f64::NEG_INFINITY);
    let mut all_neg_zero = cv == 0.0 && cv.is_sign_negative();
    for (&x, &y) in a.iter().zip(b) {
        let (u, v) = (value(t, x), value(t, y));
        let prod = u * v; // exact for finite values; NaN for inf·0
        if prod.is_nan() {
            nan = true;
            continue;
        }
        if prod.is_infinite() {
            if prod > 0.0 {
                pinf = true
            } else {
                ninf = true
            }
            continue;
        }
        if prod != 0.0 || prod.is_sign_positive() {
            all_neg_zero = false;
        }
        if prod != 0.0 {
            let mut e = exp_of(t, u) + exp_of(t, v);
            if p.normalized_exp && prod.abs() >= 2f64.powi(e + 1) {
                e += 1;
            }
            terms.push(prod);
            exps.push(e);
        }
    }
    if nan || (pinf && ninf) {
        return 0x7fff_ffff;
    }
    if pinf || ninf {
        return if ninf { 0xff80_0000 } else { 0x7f80_0000 };
    }
    if cv != 0.0 {
        terms.push(cv);
        exps.push(exp_of_f32(cv));
    }
    if terms.is_empty() {
        return if !p.zero_plus && all_neg_zero {
            0x8000_0000
        } else {
            0
        };
    }
    let e = (*exps.iter().max().unwrap()).max(p.e_floor);
    let unit = 2f64.powi(e - p.frac_bits as i32); // may be subnormal-small but > 0 in f64
    let sum: f64 = terms.iter().map(|x| (x / unit).trunc() * unit).sum();
    if sum == 0.0 {
        return 0;
    }
    to_f32(sum, p)
}

fn exp_of_f32(x: f64) -> i32 {
    let e = x.abs().log2().floor() as i32;
    let e = if 2f64.powi(e) > x.abs() {
        e - 1
    } else if 2f64.powi(e + 1) <= x.abs() {
        e + 1
    } else {
        e
    };
    e.max(-126)
}

fn to_f32(v: f64, p: &Params) -> u32 {
    if v.abs() >= 2f64.powi(128) {
        let s = (v < 0.0) as u32;
        return if p.overflow_inf {
            0x7f80_0000 | (s << 31)
        } else {
            0x7f7f_ffff | (s << 31)
        };
    }
    let y = v as f32; // nearest even, subnormals included; may round up to 2^128 = inf
    match p.rounding {
        Rounding::Rne => y.to_bits(),
        Rounding::Rz => {
            // Step toward zero if the nearest value is farther from zero than v.
            let bits = if (y as f64).abs() > v.abs() {
                y.to_bits() - 1
            } else {
                y.to_bits()
            };
            if bits & 0x7fff_ffff == 0 && !p.underflow_signed {
                0
            } else {
                bits
            }
        }
    }
}
