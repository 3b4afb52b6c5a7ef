//! Helpers shared by the fuzz targets: input values of every kind, and an independent statement
//! of which keys a row attends to (written from docs/numerics.md §1, not from the library's code).

use detattn::inputs::SplitMix64;
use detattn::{DType, Element, MaskLayout};

/// How the values of one tensor are drawn.
#[derive(Clone, Copy, Debug)]
pub enum ValueMode {
    /// Any bit pattern of the dtype: NaN, ±inf, subnormals, ±0, the extremes, anything.
    RawBits,
    /// Finite values with |x| < 4 and a random significand (the accuracy bound's home ground).
    Bounded,
    /// Mostly bounded, now and then a special value from [`special`].
    BoundedWithSpecials,
    /// Only special values.
    Specials,
}

impl ValueMode {
    /// From a fuzzer byte.
    pub fn from_byte(b: u8) -> Self {
        match b % 4 {
            0 => ValueMode::RawBits,
            1 => ValueMode::Bounded,
            2 => ValueMode::BoundedWithSpecials,
            _ => ValueMode::Specials,
        }
    }
}

/// The special values of a dtype, as f32 (each exact in the dtype): zeros, the smallest and
/// largest subnormals, the smallest normal, ±1, ± the largest finite value, NaN and ±inf.
pub fn specials(dt: DType) -> [f32; 12] {
    let (min_sub, max_sub, min_norm) = match dt {
        DType::F32 => (
            f32::from_bits(1),
            f32::from_bits(0x007F_FFFF),
            f32::MIN_POSITIVE,
        ),
        // 2^-24, 1023·2^-24, 2^-14 (powers of two and small integers: exact in f32).
        DType::F16 => (
            f32::from_bits((127 - 24) << 23),
            1023.0 * f32::from_bits((127 - 24) << 23),
            f32::from_bits((127 - 14) << 23),
        ),
        // bf16 keeps f32's exponent range: its subnormals are f32's top-7-bit subnormals.
        DType::Bf16 => (
            f32::from_bits(0x0001_0000),
            f32::from_bits(0x007F_0000),
            f32::MIN_POSITIVE,
        ),
    };
    let max = dt.max_finite();
    [
        0.0,
        -0.0,
        min_sub,
        -max_sub,
        min_norm,
        1.0,
        -1.0,
        max,
        -max,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ]
}

/// An f32 made exact in `T`, keeping NaN and ±inf (the library's own rounding is only defined
/// for finite values, so non-finite values are encoded by hand).
pub fn to_elem<T: Element>(x: f32) -> T {
    if x.is_nan() {
        return T::from_bits_u32(match T::DTYPE {
            DType::F32 => 0x7FC0_0000,
            DType::F16 => 0x7E00,
            DType::Bf16 => 0x7FC0,
        });
    }
    if x.is_infinite() {
        let s = x.is_sign_negative();
        return T::from_bits_u32(match (T::DTYPE, s) {
            (DType::F32, _) => x.to_bits(),
            (DType::F16, false) => 0x7C00,
            (DType::F16, true) => 0xFC00,
            (DType::Bf16, false) => 0x7F80,
            (DType::Bf16, true) => 0xFF80,
        });
    }
    T::from_f32_rne(x)
}

/// One value of `T` drawn in `mode`.
pub fn draw<T: Element>(rng: &mut SplitMix64, mode: ValueMode) -> T {
    let r = rng.next_u64();
    let sp = specials(T::DTYPE);
    let special = |r: u64| to_elem::<T>(sp[(r % sp.len() as u64) as usize]);
    let bounded = |r: u64| {
        // sign · 1.m · 2^e with e in [-8, 1]: |x| < 4, a full significand.
        let m = 1.0 + ((r >> 40) & 0x7F_FFFF) as f32 / 8_388_608.0;
        let e = (r >> 32) as u8 % 10;
        let x = m * f32::from_bits((127 + u32::from(e) - 8) << 23);
        to_elem::<T>(if r & 1 == 1 { -x } else { x })
    };
    match mode {
        ValueMode::RawBits => T::from_bits_u32(r as u32),
        ValueMode::Bounded => bounded(r),
        ValueMode::BoundedWithSpecials => {
            if (r >> 59) == 0 {
                special(r)
            } else {
                bounded(r)
            }
        }
        ValueMode::Specials => special(r),
    }
}

/// `n` values of `T`.
pub fn draw_vec<T: Element>(seed: u64, mode: ValueMode, n: usize) -> Vec<T> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| draw(&mut rng, mode)).collect()
}

/// A mask of `n` entries, each true with probability `num/8`.
pub fn draw_mask(seed: u64, num: u8, n: usize) -> Vec<bool> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|_| (rng.next_u64() % 8) < u64::from(num))
        .collect()
}

/// NaN or ±inf, from the raw encoding (no conversion involved).
pub fn is_nonfinite<T: Element>(x: T) -> bool {
    let b = x.to_bits_u32();
    match T::DTYPE {
        DType::F32 => (b >> 23) & 0xFF == 0xFF,
        DType::F16 => (b >> 10) & 0x1F == 0x1F,
        DType::Bf16 => (b >> 7) & 0xFF == 0xFF,
    }
}

/// The canonical quiet NaN's encoding (numerics.md §7).
pub fn canonical_nan_bits(dt: DType) -> u32 {
    match dt {
        DType::F32 => 0x7FC0_0000,
        DType::F16 => 0x7E00,
        DType::Bf16 => 0x7FC0,
    }
}

/// The parameters of a problem, restated for the oracle (independent of `detattn::Problem`).
#[derive(Clone, Debug)]
pub struct Spec {
    /// B, Hq, Hkv, Sq, Skv, D.
    pub b: usize,
    /// Query heads.
    pub hq: usize,
    /// KV heads.
    pub hkv: usize,
    /// Sq.
    pub sq: usize,
    /// Skv.
    pub skv: usize,
    /// D.
    pub d: usize,
    /// Causal, bottom-right aligned.
    pub causal: bool,
    /// Per-batch key lengths.
    pub kv_lens: Option<Vec<usize>>,
    /// Mask layout.
    pub mask: Option<MaskLayout>,
}

impl Spec {
    /// numerics.md §1: key `j` is valid for row `(b, h, i)`.
    pub fn valid(&self, mask: Option<&[bool]>, b: usize, h: usize, i: usize, j: usize) -> bool {
        let l = self.kv_lens.as_ref().map_or(self.skv, |v| v[b]);
        if j >= l {
            return false;
        }
        if self.causal && j + self.sq > i + l {
            return false;
        }
        match (self.mask, mask) {
            (Some(layout), Some(m)) => {
                let bm = if layout.per_batch { b } else { 0 };
                let hm = if layout.per_head { h } else { 0 };
                let hdim = if layout.per_head { self.hq } else { 1 };
                m[((bm * hdim + hm) * self.sq + i) * self.skv + j]
            }
            _ => true,
        }
    }
}
