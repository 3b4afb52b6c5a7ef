//! Known answers for the contract's scalar steps, computed by the independent Python
//! re-implementation of docs/numerics.md (`scripts/gen_numerics_kat.py`, which uses
//! `scripts/numerics_ref.py`), §10 `lse` included. The golden digests cannot tell an IEEE division from §5's `div`, a
//! double-rounded fma from a true one, or an f32 default scale from the f64 one; these can.

use detattn::numerics::{default_scale, div, exp, lse};

fn hex(s: &str) -> u32 {
    u32::from_str_radix(s, 16).expect("hex")
}

fn rows(text: &str) -> impl Iterator<Item = Vec<u32>> + '_ {
    text.lines()
        .map(|l| l.split_whitespace().map(hex).collect())
}

#[test]
fn div_matches_the_reference_bit_for_bit() {
    let mut n = 0;
    for r in rows(include_str!("data/div_kat.txt")) {
        let got = div(f32::from_bits(r[0]), f32::from_bits(r[1])).to_bits();
        assert_eq!(got, r[2], "div({:08x}, {:08x})", r[0], r[1]);
        n += 1;
    }
    assert_eq!(n, 4000);
}

#[test]
fn exp_matches_the_reference_bit_for_bit() {
    let mut n = 0;
    for r in rows(include_str!("data/exp_kat.txt")) {
        assert_eq!(
            exp(f32::from_bits(r[0])).to_bits(),
            r[1],
            "exp({:08x})",
            r[0]
        );
        n += 1;
    }
    assert_eq!(n, 4000);
}

#[test]
fn fma_is_a_single_rounding() {
    // f32::mul_add must be a true fma on every build (hardware or libm); a double-rounded
    // emulation fails some of these.
    let mut n = 0;
    for r in rows(include_str!("data/fma_kat.txt")) {
        let (a, b, c) = (
            f32::from_bits(r[0]),
            f32::from_bits(r[1]),
            f32::from_bits(r[2]),
        );
        let got = a.mul_add(b, c);
        // NaN from inf − inf is possible for arbitrary operands; compare NaN-ness then bits.
        if got.is_nan() {
            assert!(f32::from_bits(r[3]).is_nan());
        } else {
            assert_eq!(got.to_bits(), r[3], "fma({a:e}, {b:e}, {c:e})");
        }
        n += 1;
    }
    assert_eq!(n, 4000);
}

#[test]
fn default_scale_is_rounded_from_f64() {
    for r in include_str!("data/scale_kat.txt").lines() {
        let (d, bits) = r.split_once(' ').expect("row");
        let d: usize = d.parse().expect("D");
        assert_eq!(default_scale(d).to_bits(), hex(bits), "D = {d}");
    }
}

#[test]
fn lse_matches_the_reference_bit_for_bit() {
    // §10 from a row's final (m, l), including l = 0 (no valid key: −inf) and m = ±FLT_MAX.
    let mut n = 0;
    for r in rows(include_str!("data/lse_kat.txt")) {
        let got = lse(f32::from_bits(r[0]), f32::from_bits(r[1])).to_bits();
        assert_eq!(got, r[2], "lse({:08x}, {:08x})", r[0], r[1]);
        n += 1;
    }
    assert_eq!(n, 4000);
}
