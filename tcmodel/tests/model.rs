//! The MMA model against cases derived by hand (each with its arithmetic in the comment), and
//! against the independent f64 implementation (`reference`) on every generator class and every
//! parameter variant the harness counts.

use tcmodel::cases::{self, CLASSES};
use tcmodel::mma::{self, H100, InType, Params, Rounding};
use tcmodel::reference;

const F16_ONE: u16 = 0x3c00;
const BF16_ONE: u16 = 0x3f80;

/// f16 2^e for e in [-14, 15].
fn h(e: i32) -> u16 {
    ((e + 15) as u16) << 10
}
/// bf16 (−1)^neg · (1 + m/128) · 2^e, e in [−126, 127].
fn bf(neg: bool, e: i32, m: u16) -> u16 {
    ((neg as u16) << 15) | (((e + 127) as u16) << 7) | m
}

fn run(t: InType, a: &[u16; 16], b: &[u16; 16], c: f32, p: &Params) -> u32 {
    let x = mma::mma_elem(t, a, b, c.to_bits(), p);
    let y = reference::mma_elem(t, a, b, c.to_bits(), p);
    assert_eq!(x, y, "model {x:#010x} vs reference {y:#010x}");
    x
}

#[test]
fn sixteen_ones() {
    // 16 · (1·1) + 0 = 16: exact in every variant.
    let a = [F16_ONE; 16];
    assert_eq!(run(InType::F16, &a, &a, 0.0, &H100), 16f32.to_bits());
    let a = [BF16_ONE; 16];
    assert_eq!(run(InType::Bf16, &a, &a, 0.5, &H100), 16.5f32.to_bits());
}

#[test]
fn window_is_25_bits_below_the_largest_exponent() {
    // c = 1 (E = 0, window unit 2^-25). Eight products 2^-13·2^-13 = 2^-26 lie below the unit:
    // each truncates to 0, so d = 1 exactly, although their exact sum 2^-23 is one ulp of 1.
    let mut a = [0u16; 16];
    for x in a.iter_mut().take(8) {
        *x = h(-13);
    }
    assert_eq!(run(InType::F16, &a, &a, 1.0, &H100), 1f32.to_bits());
    // With 26 fraction bits they would count: 1 + 2^-23.
    let p26 = Params {
        frac_bits: 26,
        ..H100
    };
    assert_eq!(
        run(InType::F16, &a, &a, 1.0, &p26),
        (1.0f32 + f32::EPSILON).to_bits()
    );
    // Products 2^-25 (= 2^-12 · 2^-13) sit on the unit and are kept: 1 + 8·2^-25 = 1 + 2^-22.
    let mut b = [0u16; 16];
    for (x, y) in a.iter_mut().zip(b.iter_mut()).take(8) {
        *x = h(-12);
        *y = h(-13);
    }
    assert_eq!(
        run(InType::F16, &a, &b, 1.0, &H100),
        (1.0f32 + 2.0 * f32::EPSILON).to_bits()
    );
}

#[test]
fn alignment_uses_the_unnormalised_product_exponent() {
    // a0·b0 = 1.5·1.5 = 2.25 with ea + eb = 0 (significand in [2, 4)), a2·b2 = −2.25, c = 0:
    // E = 0 and the unit is 2^-25, not 2^-24. A third product 2^-25 (= 2^-12·2^-13) is kept, the
    // big ones cancel exactly, d = 2^-25.
    let mut a = [0u16; 16];
    let mut b = [0u16; 16];
    a[0] = 0x3e00; // 1.5
    b[0] = 0x3e00;
    a[2] = 0xbe00; // −1.5
    b[2] = 0x3e00;
    a[1] = h(-12);
    b[1] = h(-13);
    assert_eq!(
        run(InType::F16, &a, &b, 0.0, &H100),
        2f32.powi(-25).to_bits()
    );
    // Aligned to the normalised exponent (E = 1, unit 2^-24), 2^-25 would vanish: d = +0.
    let pn = Params {
        normalized_exp: true,
        ..H100
    };
    assert_eq!(run(InType::F16, &a, &b, 0.0, &pn), 0);
    // A c of exponent 1 (c = 2: 2^1) moves E to 1 in every variant: 2 + 2^-25 − ... = 2 exactly.
    assert_eq!(run(InType::F16, &a, &b, 2.0, &H100), 2f32.to_bits());
}

#[test]
fn c_is_truncated_like_a_product() {
    // Product 2^15·2^15 = 2^30 (E = 30, unit 2^5); c = 33 = 2^5 + 1 loses its 1 in the alignment.
    // 2^30 + 32 then rounds toward zero to 2^30 (the f32 ulp at 2^30 is 2^7).
    let mut a = [0u16; 16];
    a[0] = h(15);
    assert_eq!(
        run(InType::F16, &a, &a, 33.0, &H100),
        2f32.powi(30).to_bits()
    );
    // A negative c reveals the truncation toward zero of the term: 2^30 − trunc(200/32)·32
    // = 2^30 − 192 (the exact value 2^30 − 200 would round toward zero to 2^30 − 256).
    // 2^30 − 192 needs 24 significant bits: 2^30 − 192 = (2^24 − 3)·2^6, exact in f32.
    assert_eq!(
        run(InType::F16, &a, &a, -200.0, &H100),
        (2f32.powi(30) - 192.0).to_bits()
    );
}

#[test]
fn final_rounding_is_toward_zero() {
    // c = 1 + 2^-23 (odd last bit), product 2^-24: exact sum 1 + 1.5 ulp. RZ: 1 + 2^-23; RNE: tie
    // of 1 + 2^-23 + 2^-24 -> 1 + 2^-22 (even).
    let mut a = [0u16; 16];
    let mut b = [0u16; 16];
    a[0] = h(-12);
    b[0] = h(-12);
    let c = 1.0f32 + f32::EPSILON;
    assert_eq!(run(InType::F16, &a, &b, c, &H100), c.to_bits());
    let rne = Params {
        rounding: Rounding::Rne,
        ..H100
    };
    assert_eq!(
        run(InType::F16, &a, &b, c, &rne),
        (1.0f32 + 2.0 * f32::EPSILON).to_bits()
    );
    // Negative: toward zero is up: −(1 + 2^-23) − 2^-24 -> −(1 + 2^-23).
    b[0] |= 0x8000;
    assert_eq!(run(InType::F16, &a, &b, -c, &H100), (-c).to_bits());
}

#[test]
fn zeros_and_signs() {
    // x − x + (+0) = +0; all products −0 and c = −0: +0 on the H100 model, −0 in IEEE.
    let mut a = [0u16; 16];
    let mut b = [0u16; 16];
    a[0] = F16_ONE;
    a[1] = F16_ONE | 0x8000;
    b[0] = F16_ONE;
    b[1] = F16_ONE;
    assert_eq!(run(InType::F16, &a, &b, 0.0, &H100), 0);
    let a = [0x8000u16; 16];
    let b = [F16_ONE; 16];
    assert_eq!(run(InType::F16, &a, &b, -0.0, &H100), 0);
    let ieee = Params {
        zero_plus: false,
        ..H100
    };
    assert_eq!(run(InType::F16, &a, &b, -0.0, &ieee), 0x8000_0000);
}

#[test]
fn specials() {
    let mut a = [F16_ONE; 16];
    let b = [F16_ONE; 16];
    a[3] = 0x7c00; // +inf
    assert_eq!(run(InType::F16, &a, &b, 1.0, &H100), 0x7f80_0000);
    assert_eq!(
        run(InType::F16, &a, &b, f32::NEG_INFINITY, &H100),
        mma::NAN_BITS
    );
    let mut b0 = b;
    b0[3] = 0; // inf · 0
    assert_eq!(run(InType::F16, &a, &b0, 1.0, &H100), mma::NAN_BITS);
    a[3] = 0x7e01; // NaN with a payload: the output NaN is canonical
    assert_eq!(run(InType::F16, &a, &b, 1.0, &H100), mma::NAN_BITS);
}

#[test]
fn bf16_overflow_and_underflow() {
    // 2^64 · 2^64 = 2^128 overflows f32: +inf (not FLT_MAX).
    let mut a = [0u16; 16];
    a[0] = bf(false, 64, 0);
    assert_eq!(run(InType::Bf16, &a, &a, 0.0, &H100), 0x7f80_0000);
    let p = Params {
        overflow_inf: false,
        ..H100
    };
    assert_eq!(run(InType::Bf16, &a, &a, 0.0, &p), 0x7f7f_ffff);
    // 2^-70 · 2^-70 = 2^-140: a subnormal result (2^9 units of 2^-149).
    a[0] = bf(false, -70, 0);
    assert_eq!(run(InType::Bf16, &a, &a, 0.0, &H100), 1 << 9);
    // −2^-75 · 2^-75 = −2^-150: E = −133 (the floor), unit 2^-158, the sum is −256 units, exactly
    // −2^-150; toward zero in f32 (subnormal unit 2^-149) that is zero, and the H100 writes +0
    // (measured), where IEEE truncation would keep −0.
    let mut b = [0u16; 16];
    a[0] = bf(true, -75, 0);
    b[0] = bf(false, -75, 0);
    assert_eq!(run(InType::Bf16, &a, &b, 0.0, &H100), 0);
    let signed = Params {
        underflow_signed: true,
        ..H100
    };
    assert_eq!(run(InType::Bf16, &a, &b, 0.0, &signed), 0x8000_0000);
    // The same with c = −0 and with c = −(smallest subnormal) = −2^-149: −2^-150 − 2^-149 =
    // −1.5 · 2^-149 truncates to −2^-149 (a nonzero result keeps its sign).
    assert_eq!(run(InType::Bf16, &a, &b, -0.0, &H100), 0);
    assert_eq!(
        run(InType::Bf16, &a, &b, -f32::from_bits(1), &H100),
        0x8000_0001
    );
}

#[test]
fn floor_of_the_alignment_exponent() {
    // c = 0. p0 = 1.96875 · 2^-150 (63 · 2^-155: just below the smallest subnormal 2^-149),
    // p1..p15 = 1.09375 · 2^-159 each (15 · 1.09375 = 16.40625 units of 2^-159 > 2^-155).
    // Exact sum ≥ 2^-149: without a floor (E = −150, unit 2^-175, all exact) d = 2^-149 (bits 1).
    // With the floor −133 (unit 2^-158) every p_k, k ≥ 1, is 0.55 units and vanishes: the sum
    // 63 · 2^-155 < 2^-149 truncates to +0. With the floor −126 (unit 2^-151) p0 = 3.9375 units
    // -> 3 units = 0.75 · 2^-149 -> +0 too.
    let mut a = [0u16; 16];
    let mut b = [0u16; 16];
    a[0] = bf(false, -75, 0b111_1100); // 1.96875 · 2^-75
    b[0] = bf(false, -75, 0);
    for k in 1..16 {
        a[k] = bf(false, -80, 0b000_1100); // 1.09375 · 2^-80
        b[k] = bf(false, -79, 0);
    }
    let floor = |e_floor| Params { e_floor, ..H100 };
    let none = floor(i32::MIN);
    assert_eq!(run(InType::Bf16, &a, &b, 0.0, &none), 1);
    assert_eq!(run(InType::Bf16, &a, &b, 0.0, &floor(-133)), 0);
    assert_eq!(run(InType::Bf16, &a, &b, 0.0, &floor(-126)), 0);
    // A case that separates −133 from −126: eight products 2^-156 and one 1.875 · 2^-150
    // (= 15 · 2^-153): exact sum 16 · 2^-153 = 2^-149. Floor −133: unit 2^-158, all kept -> 1.
    // Floor −126: unit 2^-151: 2^-156 -> 0, 15·2^-153 = 3.75 units -> 3 -> 0.75 · 2^-149 -> 0.
    let mut a = [0u16; 16];
    let mut b = [0u16; 16];
    for k in 0..8 {
        a[k] = bf(false, -78, 0);
        b[k] = bf(false, -78, 0);
    }
    a[8] = bf(false, -75, 0b111_0000); // 1.875
    b[8] = bf(false, -75, 0);
    assert_eq!(run(InType::Bf16, &a, &b, 0.0, &floor(-133)), 1);
    assert_eq!(run(InType::Bf16, &a, &b, 0.0, &floor(-126)), 0);
    assert_eq!(run(InType::Bf16, &a, &b, 0.0, &none), 1);
}

/// Every parameter variant the harness counts.
fn variants() -> Vec<Params> {
    let mut v = vec![H100];
    for floor in [i32::MIN, -126, -140] {
        v.push(Params {
            e_floor: floor,
            ..H100
        });
    }
    for fb in [24, 26] {
        v.push(Params {
            frac_bits: fb,
            ..H100
        });
    }
    v.push(Params {
        rounding: Rounding::Rne,
        ..H100
    });
    v.push(Params {
        normalized_exp: true,
        ..H100
    });
    v.push(Params {
        overflow_inf: false,
        ..H100
    });
    v.push(Params {
        zero_plus: false,
        ..H100
    });
    v.push(Params {
        underflow_signed: true,
        ..H100
    });
    v
}

#[test]
fn model_equals_reference_on_every_class() {
    for t in [InType::F16, InType::Bf16] {
        for class in CLASSES {
            let (mut a, mut bt, mut c) = (vec![0u16; 256], vec![0u16; 128], vec![0u32; 128]);
            let mut n = 0;
            for tile in 0..24 {
                cases::tile(
                    t,
                    class,
                    cases::tile_seed(7, t, 0, class, tile),
                    16,
                    &mut a,
                    &mut bt,
                    &mut c,
                );
                for p in variants() {
                    for i in 0..16 {
                        for j in 0..8 {
                            let (ar, bc) = (&a[i * 16..i * 16 + 16], &bt[j * 16..j * 16 + 16]);
                            let x = mma::mma_elem(t, ar, bc, c[i * 8 + j], &p);
                            let y = reference::mma_elem(t, ar, bc, c[i * 8 + j], &p);
                            // NaN results: both canonical.
                            assert_eq!(
                                x,
                                y,
                                "{} {} tile {tile} ({i},{j}) {p:?}",
                                t.name(),
                                class.name()
                            );
                            n += 1;
                        }
                    }
                }
            }
            assert!(n > 0);
        }
    }
}

#[test]
fn planted_fault_is_caught() {
    // The differential test must be able to fail: a reference with 26 fraction bits against the
    // model with 25 disagrees on the alignment-edge class.
    let t = InType::F16;
    let (mut a, mut bt, mut c) = (vec![0u16; 256], vec![0u16; 128], vec![0u32; 128]);
    let mut differ = 0;
    for tile in 0..8 {
        cases::tile(
            t,
            cases::Class::WindowEdge,
            cases::tile_seed(1, t, 0, cases::Class::WindowEdge, tile),
            16,
            &mut a,
            &mut bt,
            &mut c,
        );
        for i in 0..16 {
            for j in 0..8 {
                let (ar, bc) = (&a[i * 16..i * 16 + 16], &bt[j * 16..j * 16 + 16]);
                let x = mma::mma_elem(t, ar, bc, c[i * 8 + j], &H100);
                let y = reference::mma_elem(
                    t,
                    ar,
                    bc,
                    c[i * 8 + j],
                    &Params {
                        frac_bits: 26,
                        ..H100
                    },
                );
                differ += (x != y) as usize;
            }
        }
    }
    assert!(differ > 10, "only {differ} differences");
}

/// Known answers from the hardware: every case where the first GPU run (NVIDIA H100 80GB HBM3,
/// driver 580.159.04, 2026-11-24) disagreed with the model as published (−0 for a negative sum
/// truncated to zero). Records of 88 bytes (tcharness mma's dump format): dtype, instruction,
/// class, pad, tile u32, i u16, j u16, a[16] u16, b[16] u16, c u32, hardware d u32, old model u32.
/// The measured model must give the hardware's bits on every one of them.
#[test]
fn hardware_known_answers_from_the_first_run() {
    let mut n = 0;
    for f in [
        "h100-2026-11-24-run1-bf16-mma.bin",
        "h100-2026-11-24-run1-bf16-wgmma.bin",
    ] {
        let b = std::fs::read(format!("{}/tests/data/{f}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        assert_eq!(b.len() % 88, 0);
        for r in b.chunks(88) {
            let t = if r[0] == 1 { InType::Bf16 } else { InType::F16 };
            let u16s: Vec<u16> = r[12..76]
                .chunks(2)
                .map(|x| u16::from_le_bytes([x[0], x[1]]))
                .collect();
            let w = |o: usize| u32::from_le_bytes(r[o..o + 4].try_into().unwrap());
            let (c, hw, old) = (w(76), w(80), w(84));
            assert_ne!(hw, old);
            assert_eq!(
                mma::mma_elem(t, &u16s[..16], &u16s[16..], c, &H100),
                hw,
                "record {n}"
            );
            assert_eq!(
                reference::mma_elem(t, &u16s[..16], &u16s[16..], c, &H100),
                hw,
                "record {n}"
            );
            n += 1;
        }
    }
    assert_eq!(n, 607 + 1803);
}
