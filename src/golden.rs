//! The golden problems: seeded problems whose `Exact` output digests are pinned.
//!
//! The digests live in one insta snapshot, `tests/snapshots/golden__golden_digests_exact.snap`,
//! computed by the CPU backend; `tests/golden.rs` checks the CPU against it and `detattn selftest`
//! checks every available backend against the same file (it is compiled into the binary).

use crate::digest::{Digest, digest};
use crate::dtype::{DType, Element};
use crate::engine::{Engine, Path};
use crate::error::Result;
use crate::inputs::{GenOptions, generate};
use crate::problem::{MaskLayout, NonFinitePolicy, Problem, Shape};
use half::{bf16, f16};

/// One golden problem.
#[derive(Clone, Debug)]
pub struct GoldenCase {
    /// Unique name (the key in the snapshot).
    pub name: &'static str,
    /// `(B, Hq, Hkv, Sq, Skv, D)`.
    pub dims: (usize, usize, usize, usize, usize, usize),
    /// Element type.
    pub dtype: DType,
    /// Causal, bottom-right aligned.
    pub causal: bool,
    /// Per-batch key lengths.
    pub kv_lens: Option<&'static [usize]>,
    /// Mask layout, if any.
    pub mask: Option<MaskLayout>,
    /// Explicit scale (default 1/sqrt(D) otherwise).
    pub scale: Option<f32>,
    /// Input generation.
    pub inputs: GenOptions,
}

impl GoldenCase {
    /// The problem.
    pub fn problem(&self) -> Problem {
        let (b, hq, hkv, sq, skv, d) = self.dims;
        let mut pb = Problem::builder(Shape::new(b, hq, hkv, sq, skv, d))
            .causal(self.causal)
            .nonfinite(NonFinitePolicy::Reject);
        if let Some(l) = self.kv_lens {
            pb = pb.kv_lens(l.to_vec());
        }
        if let Some(m) = self.mask {
            pb = pb.mask(m);
        }
        if let Some(s) = self.scale {
            pb = pb.scale(s);
        }
        pb.build().expect("golden problems are valid")
    }

    /// Generate the inputs, run on `engine`, return the digest.
    pub fn run(&self, engine: &Engine) -> Result<Digest> {
        match self.dtype {
            DType::F32 => self.run_typed::<f32>(engine),
            DType::F16 => self.run_typed::<f16>(engine),
            DType::Bf16 => self.run_typed::<bf16>(engine),
        }
    }

    fn run_typed<T: Element>(&self, engine: &Engine) -> Result<Digest> {
        let p = self.problem();
        let x = generate::<T>(&p, self.inputs);
        let out = engine.run(&p, &x.q, &x.k, &x.v, x.mask.as_deref())?;
        let s = p.shape();
        Ok(digest(
            Path::Exact,
            [s.batch, s.q_heads, s.q_len, s.head_dim],
            &out,
        ))
    }
}

const fn case(
    name: &'static str,
    dims: (usize, usize, usize, usize, usize, usize),
    dtype: DType,
    seed: u64,
) -> GoldenCase {
    GoldenCase {
        name,
        dims,
        dtype,
        causal: false,
        kv_lens: None,
        mask: None,
        scale: None,
        inputs: GenOptions {
            seed,
            amp: 0,
            blank_rows_every: None,
        },
    }
}

const fn causal(mut c: GoldenCase) -> GoldenCase {
    c.causal = true;
    c
}
const fn lens(mut c: GoldenCase, l: &'static [usize]) -> GoldenCase {
    c.kv_lens = Some(l);
    c
}
const fn masked(mut c: GoldenCase, m: MaskLayout, blank_rows_every: Option<usize>) -> GoldenCase {
    c.mask = Some(m);
    c.inputs.blank_rows_every = blank_rows_every;
    c
}
const fn amp(mut c: GoldenCase, a: i32) -> GoldenCase {
    c.inputs.amp = a;
    c
}
const fn scaled(mut c: GoldenCase, s: f32) -> GoldenCase {
    c.scale = Some(s);
    c
}

const PER_BATCH: MaskLayout = MaskLayout {
    per_batch: true,
    per_head: false,
};
use DType::{Bf16, F16, F32};

/// The golden problems, in snapshot order.
pub fn cases() -> Vec<GoldenCase> {
    vec![
        case("f32_mha", (2, 4, 4, 33, 33, 64), F32, 1),
        case("f16_mha", (2, 4, 4, 33, 33, 64), F16, 2),
        case("bf16_mha", (2, 4, 4, 33, 33, 64), Bf16, 3),
        causal(case("f32_causal_square", (1, 2, 2, 17, 17, 64), F32, 4)),
        causal(case(
            "f16_causal_decode_window",
            (2, 4, 4, 5, 70, 64),
            F16,
            5,
        )),
        causal(case(
            "bf16_causal_more_queries_than_keys",
            (1, 2, 2, 40, 17, 32),
            Bf16,
            6,
        )),
        case("f32_gqa_d80", (1, 8, 2, 17, 100, 80), F32, 7),
        causal(case("f16_gqa_causal_d128", (2, 8, 4, 33, 33, 128), F16, 8)),
        case("bf16_mqa", (1, 8, 1, 17, 65, 64), Bf16, 9),
        causal(case("f32_mqa_causal_d128", (1, 4, 1, 64, 64, 128), F32, 10)),
        lens(
            case("f32_kv_lens_with_zero", (3, 2, 2, 17, 100, 64), F32, 11),
            &[100, 37, 0],
        ),
        lens(
            causal(case("bf16_kv_lens_causal", (3, 2, 2, 9, 80, 64), Bf16, 12)),
            &[80, 9, 3],
        ),
        masked(
            case("f16_mask_full", (2, 2, 2, 17, 70, 64), F16, 13),
            MaskLayout::FULL,
            None,
        ),
        masked(
            case("f32_mask_shared_blank_rows", (2, 2, 2, 17, 70, 64), F32, 14),
            MaskLayout::SHARED,
            Some(4),
        ),
        masked(
            causal(case(
                "bf16_mask_per_batch_causal",
                (2, 2, 2, 20, 20, 64),
                Bf16,
                15,
            )),
            PER_BATCH,
            Some(7),
        ),
        case("f32_decode_s1", (4, 4, 4, 1, 1000, 64), F32, 16),
        case("f16_s1000", (1, 2, 2, 1000, 1000, 64), F16, 17),
        causal(case(
            "bf16_s1000_causal",
            (1, 2, 1, 1000, 1000, 64),
            Bf16,
            18,
        )),
        case("f32_d1", (1, 2, 2, 17, 17, 1), F32, 19),
        case("f16_d3", (1, 2, 2, 17, 33, 3), F16, 20),
        case("bf16_d80", (1, 2, 2, 33, 33, 80), Bf16, 21),
        case("f32_d256", (1, 2, 2, 17, 130, 256), F32, 22),
        causal(case("f16_d256_causal", (1, 2, 1, 64, 64, 256), F16, 23)),
        case("f32_d8192", (1, 1, 1, 3, 70, 8192), F32, 24),
        amp(
            case("f32_scores_saturate", (1, 2, 2, 17, 17, 64), F32, 25),
            100,
        ),
        amp(case("bf16_near_max", (1, 2, 2, 17, 17, 64), Bf16, 26), 126),
        amp(case("f16_near_max", (1, 2, 2, 17, 17, 64), F16, 27), 14),
        amp(
            case(
                "f32_tiny_subnormal_products",
                (1, 2, 2, 17, 17, 64),
                F32,
                28,
            ),
            -120,
        ),
        scaled(
            case("f32_custom_scale", (1, 2, 2, 17, 33, 64), F32, 29),
            0.3,
        ),
        masked(
            lens(
                causal(case("f16_everything_d3_mqa", (2, 4, 1, 17, 40, 3), F16, 30)),
                &[40, 20],
            ),
            MaskLayout::FULL,
            Some(5),
        ),
    ]
}

/// The pinned digests, `(name, hex)`, parsed from the snapshot compiled into the crate.
pub fn expected_digests() -> Vec<(String, String)> {
    parse_snapshot(include_str!(
        "../tests/snapshots/golden__golden_digests_exact.snap"
    ))
}

/// The text the snapshot holds: one `name digest` line per case.
pub fn render(results: &[(&str, Digest)]) -> String {
    results.iter().map(|(n, d)| format!("{n} {d}\n")).collect()
}

fn parse_snapshot(text: &str) -> Vec<(String, String)> {
    // insta's header is a YAML block between two `---` lines; the body follows.
    let body = text.splitn(3, "---\n").nth(2).unwrap_or("");
    body.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, d)| (n.to_string(), d.trim().to_string()))
        .collect()
}
