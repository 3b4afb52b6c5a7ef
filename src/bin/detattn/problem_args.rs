//! The flags that describe one problem (shared by `run` and `bench`) and what they turn into: a
//! validated [`Problem`], an [`Engine`], and seeded inputs.

use crate::Failure;
use clap::{Args, ValueEnum};
use detattn::golden::cumulative;
use detattn::inputs::GenOptions;
use detattn::{
    Backend, CausalAlign, DType, Engine, MaskLayout, NonFinitePolicy, Order, Path, Problem, Shape,
};

/// Which boolean mask to declare (its values come from the seeded generator).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum MaskArg {
    /// No mask.
    None,
    /// `[B, Hq, Sq, Skv]`.
    Full,
    /// `[1, 1, Sq, Skv]`, shared by every batch element and head.
    Shared,
    /// `[B, 1, Sq, Skv]`.
    PerBatch,
    /// `[1, Hq, Sq, Skv]`.
    PerHead,
}

impl MaskArg {
    fn layout(self) -> Option<MaskLayout> {
        let l = |per_batch, per_head| MaskLayout {
            per_batch,
            per_head,
        };
        match self {
            MaskArg::None => None,
            MaskArg::Full => Some(MaskLayout::FULL),
            MaskArg::Shared => Some(MaskLayout::SHARED),
            MaskArg::PerBatch => Some(l(true, false)),
            MaskArg::PerHead => Some(l(false, true)),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            MaskArg::None => "none",
            MaskArg::Full => "full",
            MaskArg::Shared => "shared",
            MaskArg::PerBatch => "per-batch",
            MaskArg::PerHead => "per-head",
        }
    }
}

/// The causal alignment, as a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum AlignArg {
    /// j + Sq <= i + L: the last query row sees every key.
    BottomRight,
    /// j <= i, as PyTorch's is_causal.
    TopLeft,
}

/// The non-finite input policy, as a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum NonFiniteArg {
    /// Refuse inputs holding NaN or ±inf (the library's default).
    Reject,
    /// Write the canonical NaN to exactly the affected rows.
    Propagate,
}

/// One problem, from flags. The defaults are workload W1 (B=1, H=16, S=1024, D=64) in f32.
#[derive(Args, Debug, Clone)]
pub(crate) struct ProblemArgs {
    /// Batch size B.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Query heads Hq.
    #[arg(long, default_value_t = 16)]
    pub q_heads: usize,
    /// KV heads Hkv (Hq must be a multiple of it) [default: Hq].
    #[arg(long)]
    pub kv_heads: Option<usize>,
    /// Query length Sq.
    #[arg(long, default_value_t = 1024)]
    pub q_len: usize,
    /// KV length Skv [default: Sq].
    #[arg(long)]
    pub kv_len: Option<usize>,
    /// Head dimension D.
    #[arg(long, default_value_t = 64)]
    pub head_dim: usize,
    /// Element type: f32, f16 or bf16.
    #[arg(long, default_value = "f32")]
    pub dtype: DType,
    /// Causal masking, bottom-right aligned by default (the last query row sees every key).
    #[arg(long)]
    pub causal: bool,
    /// Where the causal diagonal sits: bottom-right (a KV cache: the last query row sees every
    /// key) or top-left (PyTorch's is_causal: row i sees keys 0..=i).
    #[arg(long, value_enum, default_value_t = AlignArg::BottomRight, requires = "causal")]
    pub causal_align: AlignArg,
    /// Memory layout of Q, K, V and the output: bhsd ([B, H, S, D]) or bshd ([B, S, H, D]). The
    /// inputs are generated as always and placed in that layout; the digest is of the logical
    /// [B, H, S, D] output, so it is the same for every layout.
    #[arg(long, default_value = "bhsd")]
    pub layout: Order,
    /// Boolean mask layout; its values are drawn from the seed (3/4 attend).
    #[arg(long, value_enum, default_value_t = MaskArg::None)]
    pub mask: MaskArg,
    /// With a mask: every N-th query row (i % N == N-1) is fully masked.
    #[arg(long, value_name = "N")]
    pub blank_rows_every: Option<usize>,
    /// Per-batch key lengths, comma-separated (one per batch element, each ≤ Skv).
    #[arg(long, value_delimiter = ',', value_name = "A,B,..")]
    pub kv_lens: Option<Vec<usize>>,
    /// A variable-length batch: the query rows of each sequence, comma-separated (0 allowed).
    /// The sequences are packed into one batch element ([1, H, total, D]); each one's rows are
    /// those of the sequence alone. Replaces --batch, --q-len, --kv-len and --kv-lens.
    #[arg(long, value_delimiter = ',', value_name = "A,B,..", requires = "seqlens_k",
          conflicts_with_all = ["batch", "q_len", "kv_len", "kv_lens"])]
    pub seqlens_q: Option<Vec<usize>>,
    /// The keys of each sequence of a variable-length batch (as many as --seqlens-q; 0 allowed).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "A,B,..",
        requires = "seqlens_q"
    )]
    pub seqlens_k: Option<Vec<usize>>,
    /// Softmax scale (finite, > 0) [default: the f32 nearest 1/sqrt(D)].
    #[arg(long, allow_negative_numbers = true)]
    pub scale: Option<f32>,
    /// Seed of the input generator (SplitMix64; see the `inputs` module docs).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Inputs are uniform on [-2, 2) times 2^AMP.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = clap::value_parser!(i32).range(-1000..=1000))]
    pub amp: i32,
    /// What to do with NaN or ±inf in the inputs (only reachable with a large --amp).
    #[arg(long, value_enum, default_value_t = NonFiniteArg::Reject)]
    pub nonfinite: NonFiniteArg,
    /// Arithmetic path: exact or tensorcore.
    #[arg(long, default_value = "exact")]
    pub path: Path,
    /// Backend: cpu, cuda (= cuda:0), cuda:N, or auto (GPU 0 if usable, else the CPU).
    #[arg(long, default_value = "auto")]
    pub backend: Backend,
    /// Print one JSON document on stdout instead of the human report.
    #[arg(long)]
    pub json: bool,
}

impl ProblemArgs {
    /// Validate the flags into a problem (every error is the library's typed one).
    pub(crate) fn problem(&self) -> Result<Problem, Failure> {
        let mut shape = Shape::new(
            self.batch,
            self.q_heads,
            self.kv_heads.unwrap_or(self.q_heads),
            self.q_len,
            self.kv_len.unwrap_or(self.q_len),
            self.head_dim,
        );
        let varlen = self.seqlens_q.as_ref().zip(self.seqlens_k.as_ref());
        if let Some((q, k)) = varlen {
            // One packed batch element of the sequences' totals (ProblemBuilder::varlen).
            (shape.batch, shape.q_len, shape.kv_len) = (1, q.iter().sum(), k.iter().sum());
        }
        let mut b = Problem::builder(shape)
            .causal(self.causal)
            .causal_align(match self.causal_align {
                AlignArg::BottomRight => CausalAlign::BottomRight,
                AlignArg::TopLeft => CausalAlign::TopLeft,
            })
            .nonfinite(match self.nonfinite {
                NonFiniteArg::Reject => NonFinitePolicy::Reject,
                NonFiniteArg::Propagate => NonFinitePolicy::Propagate,
            });
        if let Some(l) = &self.kv_lens {
            b = b.kv_lens(l.clone());
        }
        if let Some(m) = self.mask.layout() {
            b = b.mask(m);
        } else if self.blank_rows_every.is_some() {
            return Err(Failure::Usage(
                "--blank-rows-every needs a mask (--mask full|shared|per-batch|per-head)".into(),
            ));
        }
        if let Some(s) = self.scale {
            b = b.scale(s);
        }
        if let Some((q, k)) = varlen {
            b = b.varlen(cumulative(q), cumulative(k));
        }
        Ok(b.build()?)
    }

    /// Place logical `[B, H, S, D]` q (`q == true`, also the output's layout) or k/v data in the
    /// chosen layout: the buffer and its layout.
    pub(crate) fn placed<T: Copy + Default>(
        &self,
        p: &Problem,
        logical: &[T],
        q: bool,
    ) -> (Vec<T>, detattn::Layout) {
        let s = p.shape();
        let (heads, seq) = if q {
            (s.q_heads, s.q_len)
        } else {
            (s.kv_heads, s.kv_len)
        };
        let dims = [s.batch, heads, seq, s.head_dim];
        let l = detattn::Layout::contiguous(self.layout, heads, seq, s.head_dim);
        let buf = detattn::tensor::scatter(logical, dims, l, logical.len(), T::default());
        (buf, l)
    }

    /// The input generator's options.
    pub(crate) fn gen_options(&self, seed: u64) -> GenOptions {
        GenOptions {
            seed,
            amp: self.amp,
            blank_rows_every: self.blank_rows_every,
        }
    }

    /// Resolve the backend and path. What the path takes (`check_path`) is checked first, so that
    /// `--path tensorcore --dtype f32` says so on every machine, not only on one with a GPU.
    pub(crate) fn engine(&self, p: &Problem) -> Result<Engine, Failure> {
        self.check_path(p)?;
        Ok(Engine::new(self.backend, self.path)?)
    }

    /// The path's own limits (element type, head dim, policy), with the library's typed errors,
    /// before any backend is opened: they do not depend on the machine.
    fn check_path(&self, p: &Problem) -> Result<(), Failure> {
        match self.path {
            Path::Exact => Ok(()),
            #[cfg(feature = "cuda")]
            Path::TensorCore => Ok(detattn::cuda::check_path(Path::TensorCore, p, self.dtype)?),
            // Without the feature no backend offers the path; `Engine::new` says why.
            #[cfg(not(feature = "cuda"))]
            Path::TensorCore => {
                let _ = p;
                Ok(())
            }
        }
    }
}

/// Refuse, before allocating, a problem whose `sets` input sets plus output and the CPU's staged
/// f32 copy of K and V would not fit in the memory the kernel reports as available: an allocation
/// failure would abort the process instead of printing an error.
pub(crate) fn check_memory(p: &Problem, dtype: DType, sets: usize) -> Result<(), Failure> {
    let s = p.shape();
    let elem = match dtype {
        DType::F32 => 4u128,
        _ => 2,
    };
    let (q, kv) = (s.q_elems() as u128, s.kv_elems() as u128);
    let mask = p
        .mask()
        .map_or(0, |_| p.mask_dims().iter().map(|&d| d as u128).product());
    let per_set = (q + 2 * kv) * elem + mask;
    let need = per_set * sets as u128 + q * elem + 2 * kv * 4 + 2 * q * 4;
    let Some(avail) = mem_available() else {
        return Ok(());
    };
    if need > avail {
        return Err(Failure::Usage(format!(
            "this problem needs about {:.1} GiB of memory; {:.1} GiB are available",
            need as f64 / (1u64 << 30) as f64,
            avail as f64 / (1u64 << 30) as f64
        )));
    }
    Ok(())
}

fn mem_available() -> Option<u128> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `B=1 Hq=16 Hkv=16 Sq=1024 Skv=1024 D=64` (a variable-length batch: its sequences' lengths).
pub(crate) fn shape_text(p: &Problem) -> String {
    let s = p.shape();
    let text = format!(
        "B={} Hq={} Hkv={} Sq={} Skv={} D={}",
        s.batch, s.q_heads, s.kv_heads, s.q_len, s.kv_len, s.head_dim
    );
    match p.varlen() {
        None => text,
        Some(v) => {
            let lens = |cu: &[usize]| {
                cu.windows(2)
                    .map(|w| (w[1] - w[0]).to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            format!(
                "{text} (varlen: {} sequences, Sq {}, Skv {})",
                v.sequences(),
                lens(v.cu_seqlens_q()),
                lens(v.cu_seqlens_k())
            )
        }
    }
}

/// The shape as a JSON object.
pub(crate) fn shape_json(p: &Problem) -> serde_json::Value {
    let s = p.shape();
    serde_json::json!({
        "batch": s.batch, "q_heads": s.q_heads, "kv_heads": s.kv_heads,
        "q_len": s.q_len, "kv_len": s.kv_len, "head_dim": s.head_dim,
    })
}

/// FLOPs of the problem by the usual convention (docs/design.md §9): 4·B·Hq·Sq·Skv·D, halved for a
/// causal square problem; for a variable-length batch the sum of that over its sequences (batch 1,
/// their own lengths). Counts the nominal work, not what masking or key lengths skip.
pub(crate) fn flops(p: &Problem) -> f64 {
    let s = p.shape();
    // Per sequence: a variable-length batch's sequences each meet only their own keys.
    let per = |q_len: usize, kv_len: usize| {
        let f = 4.0 * s.q_heads as f64 * q_len as f64 * kv_len as f64 * s.head_dim as f64;
        if p.causal() && q_len == kv_len {
            f / 2.0
        } else {
            f
        }
    };
    match p.varlen() {
        None => s.batch as f64 * per(s.q_len, s.kv_len),
        Some(_) => (0..p.sequences())
            .map(|b| {
                let q = p.sequence(b);
                per(q.q_len, q.key_len)
            })
            .sum(),
    }
}

/// Bytes one call must move at least: Q, K and V read once and O written once, in the element
/// type (the mask and the key lengths are not counted). The figure GB/s is computed from, to be
/// read against the device's copy bandwidth on memory-bound problems (decode).
pub(crate) fn bytes_moved(p: &Problem, dtype: DType) -> f64 {
    let s = p.shape();
    (2.0 * s.q_elems() as f64 + 2.0 * s.kv_elems() as f64) * dtype.size() as f64
}

/// Human-readable duration from microseconds.
pub(crate) fn fmt_us(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.3} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.3} ms", us / 1e3)
    } else {
        format!("{us:.1} µs")
    }
}
