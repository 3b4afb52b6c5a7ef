//! Shared helpers of the property, accuracy and error tests.
//!
//! - [`Spec`]: a problem's public description, with the valid-key rule of docs/numerics.md §1
//!   written out again here from the document (not taken from the crate), so that a test can say
//!   which keys a row sees without asking the code under test.
//! - [`reference`]: softmax(scale·QKᵀ)V in f64 on the converted inputs, with the same valid-key
//!   rule. It shares nothing with the crate's numerics (no `detattn::numerics`, no
//!   `Element::to_f32`): inputs are widened with `half` directly.
//! - [`TElem`]: what the tests need to know about f32, f16 and bf16, again from `half` and the
//!   IEEE formats rather than from the crate.
//! - Strategies: [`CaseLimits`] and [`case`] draw a problem (shape, causal, scale, key lengths,
//!   mask layout) plus a [`Gen`] from which [`generate`] makes the inputs.
//!
//! Each test binary uses a different part of this module.
#![allow(dead_code)]

use detattn::{Element, Engine, MaskLayout, NonFinitePolicy, Problem, Shape, bf16, f16};
use proptest::prelude::*;

/// What the tests need of an element type, written from `half` and the IEEE formats.
pub trait TElem: Element {
    /// The dtype's name, for messages.
    const NAME: &'static str;
    /// The canonical quiet NaN of numerics.md §7.
    const NAN_BITS: u32;
    /// Half an ulp relative: 2^-p with p significand bits (numerics.md §9).
    const HALF_ULP_REL: f64;
    /// Half the smallest subnormal's ulp (the absolute rounding error floor).
    const HALF_ULP_ABS_MIN: f64;
    /// The largest finite value.
    const MAX: f64;
    /// The smallest positive subnormal.
    const MIN_SUB: f64;
    /// The smallest positive normal.
    const MIN_NORMAL: f64;
    /// Exact widening.
    fn f64(self) -> f64;
    /// Round to nearest even (inputs only; any finite f64 in range).
    fn of_f64(x: f64) -> Self;
    /// The raw bits.
    fn bits(self) -> u32;
    /// From raw bits.
    fn of_bits(b: u32) -> Self;
    /// Bit patterns of NaN and ±inf to inject (a few NaN payloads and signs).
    fn nonfinite_patterns() -> Vec<u32>;
}

impl TElem for f32 {
    const NAME: &'static str = "f32";
    const NAN_BITS: u32 = 0x7FC0_0000;
    const HALF_ULP_REL: f64 = 0.0; // the f32 result is the output: nothing is added
    const HALF_ULP_ABS_MIN: f64 = 0.0;
    const MAX: f64 = f32::MAX as f64;
    const MIN_SUB: f64 = 1.401298464324817e-45;
    const MIN_NORMAL: f64 = f32::MIN_POSITIVE as f64;
    fn f64(self) -> f64 {
        f64::from(self)
    }
    fn of_f64(x: f64) -> Self {
        x as f32
    }
    fn bits(self) -> u32 {
        self.to_bits()
    }
    fn of_bits(b: u32) -> Self {
        f32::from_bits(b)
    }
    fn nonfinite_patterns() -> Vec<u32> {
        vec![
            0x7FC0_0000,
            0xFFC0_0000,
            0x7F80_0001,
            0x7FFF_FFFF,
            0x7F80_0000,
            0xFF80_0000,
        ]
    }
}

impl TElem for f16 {
    const NAME: &'static str = "f16";
    const NAN_BITS: u32 = 0x7E00;
    const HALF_ULP_REL: f64 = 1.0 / 2048.0; // 2^-11
    const HALF_ULP_ABS_MIN: f64 = 2.9802322387695312e-8; // 2^-25, half of f16's 2^-24
    const MAX: f64 = 65504.0;
    const MIN_SUB: f64 = 5.960464477539063e-8;
    const MIN_NORMAL: f64 = 6.103515625e-5;
    fn f64(self) -> f64 {
        self.to_f64()
    }
    fn of_f64(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn bits(self) -> u32 {
        u32::from(self.to_bits())
    }
    fn of_bits(b: u32) -> Self {
        f16::from_bits(b as u16)
    }
    fn nonfinite_patterns() -> Vec<u32> {
        vec![0x7E00, 0xFE00, 0x7C01, 0x7FFF, 0x7C00, 0xFC00]
    }
}

impl TElem for bf16 {
    const NAME: &'static str = "bf16";
    const NAN_BITS: u32 = 0x7FC0;
    const HALF_ULP_REL: f64 = 1.0 / 256.0; // 2^-8
    const HALF_ULP_ABS_MIN: f64 = 4.591774807899561e-41; // 2^-134
    const MAX: f64 = 3.3895313892515355e38; // 0x7F7F
    const MIN_SUB: f64 = 9.183549615799121e-41; // 2^-133
    const MIN_NORMAL: f64 = f32::MIN_POSITIVE as f64;
    fn f64(self) -> f64 {
        self.to_f64()
    }
    fn of_f64(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn bits(self) -> u32 {
        u32::from(self.to_bits())
    }
    fn of_bits(b: u32) -> Self {
        bf16::from_bits(b as u16)
    }
    fn nonfinite_patterns() -> Vec<u32> {
        vec![0x7FC0, 0xFFC0, 0x7F81, 0x7FFF, 0x7F80, 0xFF80]
    }
}

/// SplitMix64, re-typed here so that test inputs do not depend on the crate's generator.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// The next 64 bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, n) (n > 0; the modulo bias is irrelevant here).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// Uniform in [-1, 1).
    pub fn sym(&mut self) -> f64 {
        (self.next() >> 11) as f64 * 2f64.powi(-52) - 1.0
    }
}

/// A problem's public description. Everything the valid-key rule needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// B, Hq, Hkv, Sq, Skv, D.
    pub shape: Shape,
    /// Bottom-right causal masking.
    pub causal: bool,
    /// `None`: the default scale.
    pub scale: Option<f32>,
    /// Per-batch key lengths.
    pub kv_lens: Option<Vec<usize>>,
    /// The mask layout, if any.
    pub mask: Option<MaskLayout>,
    /// The non-finite policy.
    pub policy: NonFinitePolicy,
}

impl Spec {
    /// The validated problem (the spec is valid by construction; a failure is a test bug).
    pub fn problem(&self) -> Problem {
        let mut b = Problem::builder(self.shape)
            .causal(self.causal)
            .nonfinite(self.policy);
        if let Some(s) = self.scale {
            b = b.scale(s);
        }
        if let Some(l) = &self.kv_lens {
            b = b.kv_lens(l.clone());
        }
        if let Some(m) = self.mask {
            b = b.mask(m);
        }
        b.build().expect("test spec must be valid")
    }

    /// The scale actually used: the caller's, or RN_f32(1/sqrt(D)) from f64 (numerics.md §3).
    pub fn scale_f32(&self) -> f32 {
        self.scale
            .unwrap_or((1.0f64 / (self.shape.head_dim as f64).sqrt()) as f32)
    }

    /// The key length of batch element `b`.
    pub fn len_of(&self, b: usize) -> usize {
        self.kv_lens.as_ref().map_or(self.shape.kv_len, |l| l[b])
    }

    /// `[Bm, Hm, Sq, Skv]`.
    pub fn mask_dims(&self) -> [usize; 4] {
        let m = self.mask.unwrap_or(MaskLayout::SHARED);
        let s = &self.shape;
        [
            if m.per_batch { s.batch } else { 1 },
            if m.per_head { s.q_heads } else { 1 },
            s.q_len,
            s.kv_len,
        ]
    }

    /// Elements of the mask.
    pub fn mask_len(&self) -> usize {
        self.mask_dims().iter().product()
    }

    /// Index of mask entry `(b, h, i, j)` (h the **query** head), with broadcasting (§1).
    pub fn mask_index(&self, b: usize, h: usize, i: usize, j: usize) -> usize {
        let m = self.mask.expect("mask_index without a mask");
        let [_, hm, sq, skv] = self.mask_dims();
        let bi = if m.per_batch { b } else { 0 };
        let hi = if m.per_head { h } else { 0 };
        ((bi * hm + hi) * sq + i) * skv + j
    }

    /// numerics.md §1: key `j` is valid for row `(b, h, i)` iff `j < L`, (not causal or
    /// `j + Sq ≤ i + L`), and (no mask or the mask entry is true).
    pub fn valid(&self, mask: Option<&[bool]>, b: usize, h: usize, i: usize, j: usize) -> bool {
        let l = self.len_of(b);
        let sq = self.shape.q_len;
        let by_len = j < l;
        let by_causal = !self.causal || j + sq <= i + l;
        let by_mask = match (self.mask, mask) {
            (Some(_), Some(m)) => m[self.mask_index(b, h, i, j)],
            (None, None) => true,
            _ => panic!("mask presence differs between spec and data"),
        };
        by_len && by_causal && by_mask
    }

    /// The KV head query head `h` reads.
    pub fn kv_head(&self, h: usize) -> usize {
        h / (self.shape.q_heads / self.shape.kv_heads)
    }

    /// Output rows, in order `(b, h, i)`.
    pub fn rows(&self) -> impl Iterator<Item = (usize, usize, usize)> + use<> {
        let s = self.shape;
        (0..s.batch).flat_map(move |b| {
            (0..s.q_heads).flat_map(move |h| (0..s.q_len).map(move |i| (b, h, i)))
        })
    }

    /// Index of row `(b, h, i)` in the output (in rows of D elements).
    pub fn row_index(&self, b: usize, h: usize, i: usize) -> usize {
        (b * self.shape.q_heads + h) * self.shape.q_len + i
    }

    /// Index of K/V row `(b, kvh, j)` (in rows of D elements).
    pub fn kv_row_index(&self, b: usize, kvh: usize, j: usize) -> usize {
        (b * self.shape.kv_heads + kvh) * self.shape.kv_len + j
    }
}

/// Q, K, V and the mask of one problem.
#[derive(Clone, Debug, PartialEq)]
pub struct Data<T> {
    /// `[B, Hq, Sq, D]`.
    pub q: Vec<T>,
    /// `[B, Hkv, Skv, D]`.
    pub k: Vec<T>,
    /// `[B, Hkv, Skv, D]`.
    pub v: Vec<T>,
    /// `[Bm, Hm, Sq, Skv]`.
    pub mask: Option<Vec<bool>>,
}

/// How to fill a problem's inputs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gen {
    /// The test-local PRNG seed.
    pub seed: u64,
    /// Magnitude exponents of Q, K, V: values are uniform on (−2^e, 2^e).
    pub exps: [i32; 3],
    /// 0: continuous values; 1: small integers times 2^e (many ties and exact sums).
    pub mode: u8,
    /// Probability, in 1/8, that a mask entry is true.
    pub mask_true_8ths: u8,
    /// Probability, in 1/8, that a whole mask row is false.
    pub blank_row_8ths: u8,
}

/// One value of magnitude < 2^e, rounded into `T`.
fn value<T: TElem>(rng: &mut Rng, e: i32, mode: u8) -> T {
    let x = match mode {
        1 => (rng.below(9) as f64 - 4.0) / 4.0,
        _ => rng.sym(),
    };
    T::of_f64(x * 2f64.powi(e))
}

/// Fill a problem's inputs from `g`.
pub fn generate<T: TElem>(spec: &Spec, g: &Gen) -> Data<T> {
    let mut rng = Rng::new(g.seed);
    let s = spec.shape;
    let mut fill = |n: usize, e: i32| (0..n).map(|_| value::<T>(&mut rng, e, g.mode)).collect();
    let q = fill(s.q_elems(), g.exps[0]);
    let k = fill(s.kv_elems(), g.exps[1]);
    let v = fill(s.kv_elems(), g.exps[2]);
    let mask = spec.mask.map(|_| {
        let [bm, hm, sq, skv] = spec.mask_dims();
        let mut m = Vec::with_capacity(bm * hm * sq * skv);
        for _ in 0..bm * hm * sq {
            let blank = rng.below(8) < g.blank_row_8ths as usize;
            for _ in 0..skv {
                m.push(!blank && rng.below(8) < g.mask_true_8ths as usize);
            }
        }
        m
    });
    Data { q, k, v, mask }
}

/// Run a spec on an engine.
pub fn run<T: TElem>(engine: &Engine, spec: &Spec, d: &Data<T>) -> detattn::Result<Vec<T>> {
    engine.run(&spec.problem(), &d.q, &d.k, &d.v, d.mask.as_deref())
}

/// The raw bits of a slice.
pub fn bits<T: TElem>(xs: &[T]) -> Vec<u32> {
    xs.iter().map(|x| x.bits()).collect()
}

/// One row of the f64 reference: the output row and `max_j |v_j|` over its valid keys
/// (`None` when the row has no valid key; numerics.md §5 then promises exactly 0).
#[derive(Clone, Debug)]
pub struct RefRow {
    /// softmax(scale·q·Kᵀ)·V over the valid keys, in f64.
    pub out: Vec<f64>,
    /// The largest |v_{j,d}| over valid keys j and all d.
    pub vmax: f64,
    /// The largest |scale·q·k_j| over valid keys j.
    pub smax: f64,
}

/// softmax(scale·QKᵀ)V in f64 on the converted inputs, row by row, over the valid keys of §1.
/// Inputs must be finite. Products of two f32 values are exact in f64; the sums round at 2^-53.
pub fn reference<T: TElem>(spec: &Spec, d: &Data<T>) -> Vec<Option<RefRow>> {
    let s = spec.shape;
    let dim = s.head_dim;
    let scale = f64::from(spec.scale_f32());
    let mask = d.mask.as_deref();
    spec.rows()
        .map(|(b, h, i)| {
            let qr = &d.q[spec.row_index(b, h, i) * dim..][..dim];
            let kvh = spec.kv_head(h);
            let mut scores = Vec::new();
            let mut rows = Vec::new();
            for j in 0..s.kv_len {
                if !spec.valid(mask, b, h, i, j) {
                    continue;
                }
                let r = spec.kv_row_index(b, kvh, j) * dim;
                let kr = &d.k[r..r + dim];
                let dot: f64 = qr.iter().zip(kr).map(|(a, c)| a.f64() * c.f64()).sum();
                scores.push(scale * dot);
                rows.push(r);
            }
            if scores.is_empty() {
                return None;
            }
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
            let l: f64 = w.iter().sum();
            let mut out = vec![0.0f64; dim];
            let mut vmax = 0.0f64;
            for (wj, &r) in w.iter().zip(&rows) {
                for (o, x) in out.iter_mut().zip(&d.v[r..r + dim]) {
                    *o += wj * x.f64();
                    vmax = vmax.max(x.f64().abs());
                }
            }
            for o in &mut out {
                *o /= l;
            }
            let smax = scores.iter().fold(0.0f64, |a, x| a.max(x.abs()));
            Some(RefRow { out, vmax, smax })
        })
        .collect()
}

/// Bounds of the drawn problems.
#[derive(Clone, Debug)]
pub struct CaseLimits {
    /// Largest batch.
    pub batch: usize,
    /// Largest KV head count.
    pub kv_heads: usize,
    /// Largest group (query heads per KV head).
    pub group: usize,
    /// Largest query length.
    pub q_len: usize,
    /// Largest KV length.
    pub kv_len: usize,
    /// Head dims to choose from.
    pub dims: Vec<usize>,
    /// Range of the magnitude exponents.
    pub exps: (i32, i32),
    /// Whether to draw explicit scales (else always the default).
    pub explicit_scale: bool,
}

impl CaseLimits {
    /// Small problems: fast enough for ≥ 256 cases of every property on 2 cores.
    pub fn small() -> Self {
        CaseLimits {
            batch: 3,
            kv_heads: 2,
            group: 3,
            q_len: 20,
            kv_len: 150,
            dims: vec![1, 2, 3, 4, 5, 7, 8, 16, 17, 32, 64, 80],
            exps: (-4, 4),
            explicit_scale: true,
        }
    }
}

/// A mask layout or none.
pub fn mask_layout() -> impl Strategy<Value = Option<MaskLayout>> {
    prop_oneof![
        3 => Just(None),
        1 => Just(Some(MaskLayout::FULL)),
        1 => Just(Some(MaskLayout::SHARED)),
        1 => Just(Some(MaskLayout { per_batch: true, per_head: false })),
        1 => Just(Some(MaskLayout { per_batch: false, per_head: true })),
    ]
}

/// The inputs' generator parameters.
pub fn gen_strategy(exps: (i32, i32)) -> impl Strategy<Value = Gen> {
    (
        any::<u64>(),
        [exps.0..=exps.1, exps.0..=exps.1, exps.0..=exps.1],
        prop_oneof![3 => Just(0u8), 1 => Just(1u8)],
        1u8..=8,
        prop_oneof![2 => Just(0u8), 1 => 1u8..=3],
    )
        .prop_map(|(seed, exps, mode, t, b)| Gen {
            seed,
            exps,
            mode,
            mask_true_8ths: t,
            blank_row_8ths: b,
        })
}

/// A problem within `lim` (policy `Reject`) and its generator.
pub fn case(lim: CaseLimits) -> impl Strategy<Value = (Spec, Gen)> {
    let dims = lim.dims.clone();
    let scale = if lim.explicit_scale {
        prop_oneof![
            3 => Just(None),
            1 => (1u32..=64).prop_map(|n| Some(n as f32 / 32.0)),
        ]
        .boxed()
    } else {
        Just(None).boxed()
    };
    (
        (
            1..=lim.batch,
            1..=lim.kv_heads,
            1..=lim.group,
            1..=lim.q_len,
            1..=lim.kv_len,
            proptest::sample::select(dims),
        ),
        any::<bool>(),
        scale,
        proptest::option::weighted(0.4, proptest::collection::vec(any::<u32>(), 8)),
        mask_layout(),
        gen_strategy(lim.exps),
    )
        .prop_map(|((b, hkv, g, sq, skv, d), causal, scale, lens, mask, gn)| {
            // Key lengths: 0..=Skv, with 0 and Skv more likely than the rest.
            let kv_lens = lens.map(|raw| {
                raw[..b]
                    .iter()
                    .map(|&r| match r % 8 {
                        0 => 0,
                        1 => skv,
                        _ => (r as usize / 8) % (skv + 1),
                    })
                    .collect()
            });
            let spec = Spec {
                shape: Shape::new(b, hkv * g, hkv, sq, skv, d),
                causal,
                scale,
                kv_lens,
                mask,
                policy: NonFinitePolicy::Reject,
            };
            (spec, gn)
        })
}
