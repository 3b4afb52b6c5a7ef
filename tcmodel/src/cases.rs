//! Seeded case generators for the MMA harness: one tile (M×16 A, 16×8 B stored as Bt[n][k], M×8 C)
//! from (format, class, tile seed). Each tile has its own SplitMix64 stream, so tiles can be made
//! in parallel and anyone can regenerate any case from (seed, class, tile index).
//!
//! The classes aim at the places where a model can be wrong (docs/tensorcore-cpu-model.md §4):
//! where the alignment truncates, where the final rounding decides, where the accumulator's
//! exponent range ends (subnormals, the floor of the alignment exponent, overflow), signed zeros,
//! and the special values. Where a class needs C relative to the products of its output, A and B
//! are drawn first and C is derived per output from them.

use crate::mma::InType;

/// SplitMix64 (the same generator the main crate's inputs use).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi] (inclusive).
    pub fn range(&mut self, lo: i32, hi: i32) -> i32 {
        debug_assert!(lo <= hi);
        lo + (self.next_u64() % ((hi - lo + 1) as u64)) as i32
    }
    /// True with probability num/den.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next_u64() % den < num
    }
    pub fn bit(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }
}

/// The seed of tile `tile` of `class` for format `t` and instruction `instr` (0 mma, 1 wgmma).
pub fn tile_seed(base: u64, t: InType, instr: u32, class: Class, tile: u64) -> u64 {
    let mut r =
        Rng::new(base ^ ((class as u64) << 40) ^ ((instr as u64) << 56) ^ ((t as u64) << 60));
    r.next_u64();
    r.next_u64() ^ tile.wrapping_mul(0xd134_2543_de82_ef95)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    Rand = 0,
    WideExp,
    WindowEdge,
    Cancel,
    Ties,
    Subnormal,
    NearFloor,
    CDominant,
    CTiny,
    Zeros,
    Special,
    Extreme,
    RandomBits,
}

pub const CLASSES: [Class; 13] = [
    Class::Rand,
    Class::WideExp,
    Class::WindowEdge,
    Class::Cancel,
    Class::Ties,
    Class::Subnormal,
    Class::NearFloor,
    Class::CDominant,
    Class::CTiny,
    Class::Zeros,
    Class::Special,
    Class::Extreme,
    Class::RandomBits,
];

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Rand => "random",
            Class::WideExp => "mixed-exponents",
            Class::WindowEdge => "alignment-edge",
            Class::Cancel => "cancellation",
            Class::Ties => "rounding-ties",
            Class::Subnormal => "subnormals",
            Class::NearFloor => "underflow-floor",
            Class::CDominant => "c-large",
            Class::CTiny => "c-tiny",
            Class::Zeros => "signed-zeros",
            Class::Special => "inf-nan",
            Class::Extreme => "overflow",
            Class::RandomBits => "random-bits",
        }
    }
}

fn emax(t: InType) -> i32 {
    match t {
        InType::F16 => 15,
        InType::Bf16 => 127,
    }
}

/// A normal value 2^e · (1 + mant/2^F) of format t (e clamped to the normal range).
pub fn normal(t: InType, neg: bool, e: i32, mant: u32) -> u16 {
    let f = t.frac();
    let e = e.clamp(t.emin(), emax(t));
    let field = (e - t.emin() + 1) as u32;
    (((neg as u32) << 15) | (field << f) | (mant & ((1 << f) - 1))) as u16
}

/// Any finite value with exponent e: normal if e ≥ emin, else the subnormal nearest below
/// (mantissa shifted right), possibly zero.
fn value(t: InType, neg: bool, e: i32, mant: u32) -> u16 {
    if e >= t.emin() {
        return normal(t, neg, e, mant);
    }
    let f = t.frac();
    let sh = (t.emin() - e) as u32;
    let full = (1u32 << f) | (mant & ((1 << f) - 1));
    let m = if sh > f { 0 } else { full >> sh };
    (((neg as u32) << 15) | m) as u16
}

fn rnd(t: InType, r: &mut Rng, lo: i32, hi: i32) -> u16 {
    let e = r.range(lo, hi);
    let neg = r.bit();
    let m = r.next_u64() as u32;
    value(t, neg, e, m)
}

fn f32_bits(neg: bool, e: i32, mant: u32) -> u32 {
    let s = (neg as u32) << 31;
    if e >= -126 {
        let e = e.min(127);
        s | (((e + 127) as u32) << 23) | (mant & 0x7f_ffff)
    } else {
        let sh = (-126 - e) as u32;
        let full = 0x80_0000 | (mant & 0x7f_ffff);
        s | if sh > 23 { 0 } else { full >> sh }
    }
}

fn rnd_f32(r: &mut Rng, lo: i32, hi: i32) -> u32 {
    let e = r.range(lo, hi);
    let neg = r.bit();
    f32_bits(neg, e, r.next_u64() as u32)
}

/// Unbiased exponent `ea + eb` of the largest nonzero product of row `a` and column `b`
/// (None if all products are zero or non-finite).
fn max_pe(t: InType, a: &[u16], b: &[u16]) -> Option<i32> {
    use crate::mma::Operand::Finite;
    let mut m = None;
    for (&x, &y) in a.iter().zip(b) {
        if let (
            Finite {
                sig: s1, exp: e1, ..
            },
            Finite {
                sig: s2, exp: e2, ..
            },
        ) = (t.decode(x), t.decode(y))
            && s1 != 0
            && s2 != 0
        {
            m = Some(m.map_or(e1 + e2, |v: i32| v.max(e1 + e2)));
        }
    }
    m
}

/// One tile of `class` into `a` (m×16, row-major), `bt` (8×16: column n of B is bt[n*16..]) and
/// `c` (m×8, row-major, f32 bits).
pub fn tile(
    t: InType,
    class: Class,
    seed: u64,
    m: usize,
    a: &mut [u16],
    bt: &mut [u16],
    c: &mut [u32],
) {
    assert!(a.len() == m * 16 && bt.len() == 128 && c.len() == m * 8);
    let r = &mut Rng::new(seed);
    let (lo, hi) = (t.emin(), emax(t));
    // Exponent range whose products stay well inside f32 (bf16 would overflow otherwise).
    let (wlo, whi) = match t {
        InType::F16 => (lo, hi),
        InType::Bf16 => (-63, 63),
    };
    let zero = |r: &mut Rng| if r.bit() { 0x8000u16 } else { 0 };
    match class {
        Class::Rand => {
            for x in a.iter_mut().chain(bt.iter_mut()) {
                *x = if r.chance(1, 25) {
                    zero(r)
                } else {
                    rnd(t, r, -6, 6)
                };
            }
            for x in c.iter_mut() {
                *x = match r.range(0, 3) {
                    0 => (r.bit() as u32) << 31,
                    1 => rnd_f32(r, -30, 30),
                    _ => rnd_f32(r, -8, 12),
                };
            }
        }
        Class::WideExp => {
            for x in a.iter_mut().chain(bt.iter_mut()) {
                *x = if r.chance(1, 20) {
                    value(t, r.bit(), lo - r.range(1, 9), r.next_u64() as u32)
                } else {
                    rnd(t, r, wlo, whi)
                };
            }
            for x in c.iter_mut() {
                *x = if r.chance(1, 10) {
                    0
                } else {
                    rnd_f32(r, (2 * wlo).max(-140), (2 * whi + 2).min(127))
                };
            }
        }
        Class::WindowEdge => {
            // Row and column base exponents; elements 0..14 below them, so the products of one
            // output spread over the 25-bit window and past its end.
            let (blo, bhi) = match t {
                InType::F16 => (0, 15),
                InType::Bf16 => (-40, 40),
            };
            let rb: Vec<i32> = (0..m).map(|_| r.range(blo, bhi)).collect();
            let cb: Vec<i32> = (0..8).map(|_| r.range(blo, bhi)).collect();
            for i in 0..m {
                for k in 0..16 {
                    let d = if r.chance(1, 8) { 0 } else { r.range(0, 14) };
                    a[i * 16 + k] = normal(t, r.bit(), rb[i] - d, r.next_u64() as u32);
                }
            }
            for j in 0..8 {
                for k in 0..16 {
                    let d = if r.chance(1, 8) { 0 } else { r.range(0, 14) };
                    bt[j * 16 + k] = normal(t, r.bit(), cb[j] - d, r.next_u64() as u32);
                }
            }
            for i in 0..m {
                for j in 0..8 {
                    c[i * 8 + j] = if r.chance(1, 10) {
                        0
                    } else {
                        rnd_f32(r, rb[i] + cb[j] - 30, rb[i] + cb[j] + 4)
                    };
                }
            }
        }
        Class::Cancel => {
            // B's columns hold equal pairs (k = 2q, 2q+1); A's rows hold opposite pairs for
            // q < 6 (sometimes one ulp apart), small values for q = 6, 7: the big products cancel
            // exactly or to one ulp and the small ones decide, truncated against the big ones'
            // alignment exponent.
            for j in 0..8 {
                for q in 0..8 {
                    let v = rnd(t, r, -4, 4);
                    bt[j * 16 + 2 * q] = v;
                    bt[j * 16 + 2 * q + 1] = v;
                }
            }
            for i in 0..m {
                for q in 0..8 {
                    let (x, y) = if q < 6 {
                        let x = rnd(t, r, -4, 4);
                        let mut y = x ^ 0x8000;
                        if r.chance(1, 2) && (y & 0x7fff) != 0 {
                            y = if r.bit() { y + 1 } else { y - 1 };
                        }
                        (x, y)
                    } else {
                        let e = match t {
                            InType::F16 => r.range(lo - 3, -8),
                            InType::Bf16 => r.range(-30, -8),
                        };
                        (
                            value(t, r.bit(), e, r.next_u64() as u32),
                            value(t, r.bit(), e - r.range(0, 4), r.next_u64() as u32),
                        )
                    };
                    a[i * 16 + 2 * q] = x;
                    a[i * 16 + 2 * q + 1] = y;
                }
            }
            for i in 0..m {
                for j in 0..8 {
                    c[i * 8 + j] = match r.range(0, 2) {
                        // Minus one of the big products, exactly (16-bit products fit f32).
                        0 => {
                            let p = crate::reference::value(t, a[i * 16])
                                * crate::reference::value(t, bt[j * 16]);
                            (-(p as f32)).to_bits()
                        }
                        1 => (r.bit() as u32) << 31,
                        _ => rnd_f32(r, -40, -10),
                    };
                }
            }
        }
        Class::Ties => {
            // B: powers of two; A: a few nonzero entries per row with significand 1, 1.25, 1.5
            // or 1.75; C per output placed so that the products fall at 1/2, 1/4, 1/8 ulp of C
            // (or exactly one ulp, or one more than the window): the final rounding decides.
            let (elo, ehi) = match t {
                InType::F16 => (-7, 7),
                InType::Bf16 => (-30, 30),
            };
            for x in bt.iter_mut() {
                *x = normal(t, r.bit(), r.range(elo, ehi), 0);
            }
            let f = t.frac();
            for i in 0..m {
                let nz = r.range(1, 4);
                for k in 0..16 {
                    a[i * 16 + k] = 0;
                }
                for _ in 0..nz {
                    let k = r.range(0, 15) as usize;
                    let mant = (r.range(0, 3) as u32) << (f - 2);
                    a[i * 16 + k] = normal(t, r.bit(), r.range(elo, ehi), mant);
                }
            }
            for i in 0..m {
                for j in 0..8 {
                    let pe =
                        max_pe(t, &a[i * 16..i * 16 + 16], &bt[j * 16..j * 16 + 16]).unwrap_or(0);
                    let d = r.range(-1, 4); // product at 2^(ec − 23 − d): d = 1 is half an ulp
                    c[i * 8 + j] = f32_bits(r.bit(), pe + 23 + d, r.next_u64() as u32);
                }
            }
        }
        Class::Subnormal => {
            match t {
                InType::F16 => {
                    for x in a.iter_mut().chain(bt.iter_mut()) {
                        *x = match r.range(0, 4) {
                            0 | 1 => value(t, r.bit(), lo - r.range(1, 10), r.next_u64() as u32),
                            2 | 3 => rnd(t, r, lo, lo + 4),
                            _ => zero(r),
                        };
                    }
                }
                InType::Bf16 => {
                    let regime = r.range(0, 2);
                    for x in a.iter_mut().chain(bt.iter_mut()) {
                        *x = match regime {
                            0 => value(t, r.bit(), lo - r.range(-25, 7), r.next_u64() as u32),
                            1 => rnd(t, r, -82, -58),
                            _ => rnd(t, r, -126, -30),
                        };
                    }
                }
            }
            for x in c.iter_mut() {
                *x = match r.range(0, 3) {
                    0 => (r.bit() as u32) << 31,
                    1 => f32_bits(r.bit(), -126 - r.range(1, 23), r.next_u64() as u32),
                    2 => rnd_f32(r, -126, -110),
                    _ => rnd_f32(r, -60, -20),
                };
            }
        }
        Class::NearFloor => {
            // bf16: products between 2^-175 and 2^-128, c mostly ±0, so that the alignment
            // exponent sits below −126 and bits between 2^-160 and 2^-149 decide the smallest
            // subnormals (this is where a floor of the alignment exponent shows). f16 cannot make
            // products this small; its version puts subnormal and tiny c against tiny products.
            match t {
                InType::Bf16 => {
                    for x in a.iter_mut() {
                        *x = rnd(t, r, -80, -66);
                    }
                    for x in bt.iter_mut() {
                        *x = rnd(t, r, -95, -62);
                    }
                }
                InType::F16 => {
                    for x in a.iter_mut().chain(bt.iter_mut()) {
                        *x = if r.bit() {
                            value(t, r.bit(), lo - r.range(1, 10), r.next_u64() as u32)
                        } else {
                            rnd(t, r, lo, lo + 6)
                        };
                    }
                }
            }
            for x in c.iter_mut() {
                *x = match r.range(0, 5) {
                    0..=2 => (r.bit() as u32) << 31,
                    3 => f32_bits(r.bit(), -126 - r.range(1, 23), r.next_u64() as u32),
                    4 => r.range(1, 64) as u32 | ((r.bit() as u32) << 31),
                    _ => rnd_f32(r, -126, -120),
                };
            }
        }
        Class::CDominant | Class::CTiny => {
            for x in a.iter_mut().chain(bt.iter_mut()) {
                *x = if r.chance(1, 25) {
                    zero(r)
                } else {
                    rnd(t, r, -6, 6)
                };
            }
            for i in 0..m {
                for j in 0..8 {
                    let pe =
                        max_pe(t, &a[i * 16..i * 16 + 16], &bt[j * 16..j * 16 + 16]).unwrap_or(0);
                    let ec = if class == Class::CDominant {
                        pe + r.range(1, 40)
                    } else {
                        pe - r.range(1, 60)
                    };
                    c[i * 8 + j] = f32_bits(r.bit(), ec, r.next_u64() as u32);
                }
            }
        }
        Class::Zeros => {
            // A quarter of the tiles: every product a negative zero (A +0, B −0), c = ±0, the
            // case where IEEE addition would keep −0.
            if r.chance(1, 4) {
                a.fill(0);
                bt.fill(0x8000);
                for x in c.iter_mut() {
                    *x = (r.bit() as u32) << 31;
                }
                return;
            }
            for i in 0..m {
                let all_zero = r.chance(1, 4);
                for k in 0..16 {
                    a[i * 16 + k] = if all_zero || r.bit() {
                        zero(r)
                    } else {
                        rnd(t, r, -4, 4)
                    };
                }
            }
            for x in bt.iter_mut() {
                *x = if r.bit() { zero(r) } else { rnd(t, r, -4, 4) };
            }
            // Some rows cancel exactly: a[k+1] = −a[k] where b[k+1] = b[k] for every column.
            if r.bit() {
                for j in 0..8 {
                    bt[j * 16 + 1] = bt[j * 16];
                }
                for i in 0..m {
                    a[i * 16 + 1] = a[i * 16] ^ 0x8000;
                }
            }
            for x in c.iter_mut() {
                *x = if r.chance(3, 4) {
                    (r.bit() as u32) << 31
                } else {
                    rnd_f32(r, -10, 4)
                };
            }
        }
        Class::Special => {
            let special = |t: InType, r: &mut Rng| -> u16 {
                let f = t.frac();
                let field = (1u32 << (15 - f)) - 1;
                let mant = if r.bit() {
                    0
                } else {
                    (r.next_u64() as u32 & ((1 << f) - 1)).max(1)
                };
                (((r.bit() as u32) << 15) | (field << f) | mant) as u16
            };
            for x in a.iter_mut().chain(bt.iter_mut()) {
                *x = if r.chance(1, 25) {
                    special(t, r)
                } else if r.chance(1, 10) {
                    zero(r)
                } else {
                    rnd(t, r, -6, 6)
                };
            }
            for x in c.iter_mut() {
                *x = match r.range(0, 9) {
                    0 => 0x7f80_0000 | ((r.bit() as u32) << 31),
                    1 => 0x7f80_0000 | ((r.next_u64() as u32) & 0x807f_ffff).max(1),
                    _ => rnd_f32(r, -8, 12),
                };
            }
        }
        Class::Extreme => {
            let (elo, ehi) = match t {
                InType::F16 => (hi - 3, hi),
                InType::Bf16 => (58, 66),
            };
            for x in a.iter_mut().chain(bt.iter_mut()) {
                *x = if r.chance(1, 8) {
                    rnd(t, r, hi - 2, hi)
                } else {
                    rnd(t, r, elo, ehi)
                };
            }
            for x in c.iter_mut() {
                *x = match r.range(0, 3) {
                    0 => 0x7f7f_ffff ^ ((r.bit() as u32) << 31) ^ (r.range(0, 3) as u32),
                    1 => rnd_f32(r, 120, 127),
                    _ => rnd_f32(r, 20, 40),
                };
            }
        }
        Class::RandomBits => {
            for x in a.iter_mut().chain(bt.iter_mut()) {
                *x = r.next_u64() as u16;
            }
            for x in c.iter_mut() {
                *x = r.next_u64() as u32;
            }
        }
    }
}
