//! The golden problems (seeded problems whose output digests are pinned) and the data files that
//! pin them.
//!
//! The digests live in `golden/<path>.<architecture>.txt`, one format with a header (path,
//! architecture, contract version, how they were recorded) read by one parser, [`parse`]:
//! `golden/exact.txt` (computed by the CPU; every GPU of the `Exact` path must reproduce it) and
//! `golden/tensorcore.sm_90.txt` (the `TensorCore` path's bits are per architecture; none is
//! recorded for another). `tests/golden.rs` checks the CPU against them and `detattn selftest`
//! checks every available backend against the same files, compiled into the binary.

use crate::digest::{Digest, digest, lse_digest};
use crate::dtype::{DType, Element};
use crate::engine::Engine;
use crate::error::Result;
use crate::inputs::{GenOptions, generate, paginate};
use crate::path::Path;
use crate::problem::{CausalAlign, MaskLayout, NonFinitePolicy, Problem, Shape};
use crate::tensor::{KvCache, Layout, QkvCache, Tensor, TensorMut};
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
    /// Causal.
    pub causal: bool,
    /// Where the causal diagonal sits.
    pub align: CausalAlign,
    /// Per-batch key lengths.
    pub kv_lens: Option<&'static [usize]>,
    /// Mask layout, if any.
    pub mask: Option<MaskLayout>,
    /// Explicit scale (default 1/sqrt(D) otherwise).
    pub scale: Option<f32>,
    /// Input generation.
    pub inputs: GenOptions,
    /// K and V placed in a paged cache of this page size ([`crate::inputs::paginate`], shuffled
    /// by the case's seed): the digest is that of the contiguous problem by construction.
    pub page_size: Option<usize>,
    /// A variable-length batch: the sequences' query and key lengths (`dims` then holds batch 1
    /// and the packed totals).
    pub seqlens: Option<(&'static [usize], &'static [usize])>,
    /// The digest is of the log-sum-exp output (`crate::lse_digest`), not of the output.
    pub lse: bool,
}

impl GoldenCase {
    /// The problem.
    pub fn problem(&self) -> Problem {
        let (b, hq, hkv, sq, skv, d) = self.dims;
        let mut pb = Problem::builder(Shape::new(b, hq, hkv, sq, skv, d))
            .causal(self.causal)
            .causal_align(self.align)
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
        if let Some((q, k)) = self.seqlens {
            pb = pb.varlen(cumulative(q), cumulative(k));
        }
        pb.build().expect("golden problems are valid")
    }

    /// Whether `path` takes this problem (the `TensorCore` path: f16/bf16, head_dim 64, 128 or
    /// 256).
    pub fn runs_on(&self, path: Path) -> bool {
        match path {
            Path::Exact => true,
            Path::TensorCore => self.dtype != DType::F32 && [64, 128, 256].contains(&self.dims.5),
        }
    }

    /// Whether the case's digest is of the log-sum-exp rather than of the output.
    pub fn asks_lse(&self) -> bool {
        self.lse
    }

    /// Whether the case uses a paged cache, a variable-length batch or the log-sum-exp: the
    /// interfaces of `Engine::run_cache`.
    pub fn uses_cache_features(&self) -> bool {
        self.page_size.is_some() || self.seqlens.is_some() || self.lse
    }

    /// Generate the inputs, run on `engine`, return the digest (tagged with the engine's path).
    pub fn digest_on(&self, engine: &Engine) -> Result<Digest> {
        match self.dtype {
            DType::F32 => self.run_typed::<f32>(engine),
            DType::F16 => self.run_typed::<f16>(engine),
            DType::Bf16 => self.run_typed::<bf16>(engine),
        }
    }

    fn run_typed<T: Element>(&self, engine: &Engine) -> Result<Digest> {
        let p = self.problem();
        let x = generate::<T>(&p, self.inputs);
        let s = p.shape();
        let dims = [s.batch, s.q_heads, s.q_len, s.head_dim];
        if !self.uses_cache_features() {
            let out = engine.run(&p, &x.q, &x.k, &x.v, x.mask.as_deref())?;
            return digest(engine.path(), dims, &out);
        }
        let paged = match self.page_size {
            Some(ps) => Some(paginate(&p, &x.k, &x.v, ps, self.inputs.seed)?),
            None => None,
        };
        let kl = Layout::bhsd(s.kv_heads, s.kv_len, s.head_dim);
        let kv = match &paged {
            Some(c) => KvCache::Paged(c.cache()),
            None => KvCache::Tensors {
                k: Tensor::new(&x.k, kl),
                v: Tensor::new(&x.v, kl),
            },
        };
        let inputs = QkvCache {
            q: Tensor::new(&x.q, Layout::bhsd(s.q_heads, s.q_len, s.head_dim)),
            kv,
            mask: x.mask.as_deref(),
        };
        let mut out = vec![T::default(); s.q_elems()];
        let mut lse = vec![0.0f32; s.batch * s.q_heads * s.q_len];
        let layout = Layout::bhsd(s.q_heads, s.q_len, s.head_dim);
        engine.run_cache(
            &p,
            &inputs,
            TensorMut::new(&mut out, layout),
            self.lse.then_some(&mut lse[..]),
        )?;
        match self.lse {
            true => lse_digest(engine.path(), &p, &lse),
            false => digest(engine.path(), dims, &out),
        }
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
        align: CausalAlign::BottomRight,
        kv_lens: None,
        mask: None,
        scale: None,
        inputs: GenOptions {
            seed,
            amp: 0,
            blank_rows_every: None,
        },
        page_size: None,
        seqlens: None,
        lse: false,
    }
}

/// `[0, l0, l0 + l1, …]`: the offsets of packed sequences of these lengths.
pub fn cumulative(lens: &[usize]) -> Vec<usize> {
    std::iter::once(0)
        .chain(lens.iter().scan(0, |acc, &l| {
            *acc += l;
            Some(*acc)
        }))
        .collect()
}

const fn causal(mut c: GoldenCase) -> GoldenCase {
    c.causal = true;
    c
}
const fn top_left(mut c: GoldenCase) -> GoldenCase {
    c.causal = true;
    c.align = CausalAlign::TopLeft;
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
const fn paged(mut c: GoldenCase, page_size: usize) -> GoldenCase {
    c.page_size = Some(page_size);
    c
}
/// A variable-length batch of sequences with these query and key lengths (batch 1, the packed
/// totals as `q_len` and `kv_len`).
const fn varlen(
    name: &'static str,
    heads: (usize, usize),
    q: &'static [usize],
    k: &'static [usize],
    head_dim: usize,
    dtype: DType,
    seed: u64,
) -> GoldenCase {
    let mut c = case(
        name,
        (1, heads.0, heads.1, sum(q), sum(k), head_dim),
        dtype,
        seed,
    );
    c.seqlens = Some((q, k));
    c
}
const fn sum(x: &[usize]) -> usize {
    let (mut i, mut t) = (0, 0);
    while i < x.len() {
        t += x[i];
        i += 1;
    }
    t
}
const fn with_lse(mut c: GoldenCase) -> GoldenCase {
    c.lse = true;
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
        // PyTorch's is_causal alignment (CausalAlign::TopLeft): fewer queries than keys (row i
        // sees i + 1 keys), and more queries than keys with key lengths (rows past L see all L).
        top_left(case(
            "f16_top_left_fewer_queries",
            (2, 4, 2, 5, 70, 64),
            F16,
            31,
        )),
        lens(
            top_left(case(
                "bf16_top_left_more_queries_kv_lens",
                (2, 4, 4, 40, 33, 128),
                Bf16,
                32,
            )),
            &[33, 12],
        ),
        top_left(case("f32_top_left_d80", (1, 2, 1, 17, 70, 80), F32, 33)),
        // Past 2048 keys, the TensorCore path's key split (docs/tensorcore-numerics.md §9): a
        // split decode with ragged key lengths (one batch element within one chunk), a prefill of
        // three chunks (on sm_90 one launch folding at each boundary), and a masked d256 decode
        // with empty mask rows.
        lens(
            case("f16_decode_split_gqa", (2, 8, 2, 1, 5000, 128), F16, 46),
            &[5000, 2000],
        ),
        causal(case(
            "bf16_prefill_split_causal",
            (1, 2, 1, 80, 4200, 64),
            Bf16,
            47,
        )),
        masked(
            case("f16_d256_split_mask", (1, 2, 2, 3, 3000, 256), F16, 48),
            MaskLayout::FULL,
            Some(2),
        ),
        // Paged KV caches: the same problems as above with K and V in shuffled pages; their
        // digests are those problems' by construction (a paged cache is a layout).
        paged(
            lens(
                case(
                    "f32_kv_lens_with_zero_paged16",
                    (3, 2, 2, 17, 100, 64),
                    F32,
                    11,
                ),
                &[100, 37, 0],
            ),
            16,
        ),
        paged(
            lens(
                causal(case(
                    "bf16_kv_lens_causal_paged32",
                    (3, 2, 2, 9, 80, 64),
                    Bf16,
                    12,
                )),
                &[80, 9, 3],
            ),
            32,
        ),
        paged(
            masked(
                lens(
                    causal(case(
                        "f16_everything_d3_mqa_paged16",
                        (2, 4, 1, 17, 40, 3),
                        F16,
                        30,
                    )),
                    &[40, 20],
                ),
                MaskLayout::FULL,
                Some(5),
            ),
            16,
        ),
        paged(
            case("f32_decode_s1_paged256", (4, 4, 4, 1, 1000, 64), F32, 16),
            256,
        ),
        // Variable-length batches: mixed decode and prefill, empty sequences, GQA, both causal
        // alignments (per sequence); one paged.
        causal(varlen(
            "f32_varlen_mixed_causal",
            (4, 2),
            &[1, 7, 0, 40, 1],
            &[70, 12, 5, 40, 0],
            64,
            F32,
            40,
        )),
        top_left(varlen(
            "bf16_varlen_top_left",
            (2, 2),
            &[5, 33, 17],
            &[9, 33, 3],
            80,
            Bf16,
            41,
        )),
        varlen(
            "f16_varlen_mqa_d3",
            (4, 1),
            &[3, 0, 20],
            &[0, 4, 65],
            3,
            F16,
            42,
        ),
        paged(
            causal(varlen(
                "f16_varlen_causal_paged64",
                (4, 2),
                &[1, 30, 1],
                &[150, 30, 64],
                128,
                F16,
                43,
            )),
            64,
        ),
        // The log-sum-exp output (numerics.md §10, tensorcore-numerics.md §10): rows with no
        // valid key (−inf), causal, GQA, a mask with blank rows, a varlen batch, and past the
        // TensorCore key chunk (2048 keys) a split decode (its merge) and a prefill of two
        // chunks.
        with_lse(lens(
            causal(case(
                "f32_lse_gqa_kv_lens_causal",
                (3, 4, 2, 9, 80, 64),
                F32,
                44,
            )),
            &[80, 9, 0],
        )),
        with_lse(masked(
            case("bf16_lse_mask_blank_rows", (2, 2, 2, 17, 70, 32), Bf16, 45),
            MaskLayout::SHARED,
            Some(4),
        )),
        with_lse(causal(varlen(
            "f16_lse_varlen_causal",
            (2, 2),
            &[1, 7, 0, 20],
            &[70, 12, 5, 0],
            64,
            F16,
            46,
        ))),
        with_lse(lens(
            case(
                "bf16_lse_decode_split_gqa",
                (2, 8, 2, 1, 4500, 128),
                Bf16,
                47,
            ),
            &[4500, 0],
        )),
        with_lse(causal(case(
            "f16_lse_d256_prefill_split_causal",
            (1, 2, 1, 40, 2500, 256),
            F16,
            48,
        ))),
    ]
}

/// One golden data file: its header and its `(case, digest)` lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoldenFile {
    /// The path whose bits it pins.
    pub path: Path,
    /// `any` (the `Exact` path: the same bits everywhere) or `sm_XY`.
    pub architecture: String,
    /// The contract version the bits follow.
    pub contract: String,
    /// How and when the digests were recorded.
    pub recorded: String,
    /// `(case name, lowercase hex digest)`, in file order.
    pub digests: Vec<(String, String)>,
}

impl GoldenFile {
    /// The digest recorded for `case`, if any.
    pub fn digest(&self, case: &str) -> Option<&str> {
        self.digests
            .iter()
            .find(|(n, _)| n == case)
            .map(|(_, d)| d.as_str())
    }
}

/// The golden data files compiled into the crate: `(file name, text)`.
pub const FILES: [(&str, &str); 2] = [
    ("exact.txt", include_str!("../golden/exact.txt")),
    (
        "tensorcore.sm_90.txt",
        include_str!("../golden/tensorcore.sm_90.txt"),
    ),
];

/// Parse a golden data file (the format is written at the top of each file in `golden/`): header
/// lines `key: value` (`path`, `architecture`, `contract`, `recorded` required) up to a line
/// `---`, then `case digest` lines; `#` starts a comment line. Every malformed line is an error
/// naming its line number.
pub fn parse(text: &str) -> std::result::Result<GoldenFile, String> {
    let mut header = std::collections::BTreeMap::new();
    let mut digests = Vec::new();
    let mut in_body = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let n = i + 1;
        if !in_body {
            if line == "---" {
                in_body = true;
                continue;
            }
            let (k, v) = line
                .split_once(':')
                .ok_or(format!("line {n}: expected `key: value` or `---`"))?;
            header.insert(k.trim().to_string(), v.trim().to_string());
            continue;
        }
        let (name, hex) = line
            .split_once(char::is_whitespace)
            .ok_or(format!("line {n}: expected `case-name digest`"))?;
        let hex = hex.trim();
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            return Err(format!(
                "line {n}: {hex:?} is not a lowercase SHA-256 in hex"
            ));
        }
        if digests.iter().any(|(d, _): &(String, String)| d == name) {
            return Err(format!("line {n}: {name} is recorded twice"));
        }
        digests.push((name.to_string(), hex.to_string()));
    }
    if !in_body {
        return Err("no `---` line ends the header".into());
    }
    let mut field = |k: &str| {
        header
            .remove(k)
            .ok_or(format!("the header has no `{k}:` line"))
    };
    let path = field("path")?.parse::<Path>()?;
    Ok(GoldenFile {
        path,
        architecture: field("architecture")?,
        contract: field("contract")?,
        recorded: field("recorded")?,
        digests,
    })
}

/// The compiled-in golden file of `path` for `arch` (`sm_90`; any architecture for the `Exact`
/// path), or `None` where none is recorded. A file that does not parse is a build defect the
/// tests catch (`tests/golden.rs`); here it reads as "none".
pub fn expected(path: Path, arch: &str) -> Option<GoldenFile> {
    FILES
        .iter()
        .filter_map(|(_, text)| parse(text).ok())
        .find(|f| f.path == path && (f.architecture == "any" || f.architecture == arch))
}

/// The text of a golden file: the header fields, then one `case digest` line per result.
pub fn render(
    path: Path,
    architecture: &str,
    contract: &str,
    recorded: &str,
    results: &[(&str, Digest)],
) -> String {
    let mut s = String::from(
        "# detattn golden digests. One parser reads this format (src/golden.rs, `golden::parse`):\n\
         # header lines `key: value` up to the line `---`, then one `case-name digest` line per\n\
         # golden problem. Lines starting with `#` are comments.\n",
    );
    s += &format!(
        "path: {}\narchitecture: {architecture}\ncontract: {contract}\ndigest-format: {}\nrecorded: {recorded}\n---\n",
        path.name(),
        crate::DIGEST_VERSION
    );
    for (n, d) in results {
        s += &format!("{n} {d}\n");
    }
    s
}
