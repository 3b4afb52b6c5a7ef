//! What a valid problem is. A [`Problem`] can only be built through [`ProblemBuilder::build`],
//! which checks every public parameter; the tensors are checked against it by
//! [`crate::tensor`] before any work, so an error never leaves a partial output behind.

use crate::error::{Error, Result, TensorName};
use crate::numerics::{MAX_KV_LEN, default_scale};

/// Largest head dimension of the `Exact` path.
pub const MAX_HEAD_DIM: usize = 8192;
/// Largest batch, head count or query length accepted (keeps every index in 32 bits on the GPU).
pub const MAX_DIM: usize = 1 << 24;

/// The logical shape of one attention problem. Q is `[batch, q_heads, q_len, head_dim]`; K and V
/// are `[batch, kv_heads, kv_len, head_dim]`; the output has Q's shape. How each tensor is laid out
/// in memory (`[B, H, S, D]`, `[B, S, H, D]`, a strided view) is a [`crate::Layout`]; the bits do
/// not depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// B.
    pub batch: usize,
    /// Hq, a multiple of `kv_heads` (equal: MHA; larger: GQA; `kv_heads == 1`: MQA).
    pub q_heads: usize,
    /// Hkv.
    pub kv_heads: usize,
    /// Sq.
    pub q_len: usize,
    /// Skv, the length of the K and V tensors.
    pub kv_len: usize,
    /// D.
    pub head_dim: usize,
}

impl Shape {
    /// A shape; checked when the problem is built.
    pub fn new(
        batch: usize,
        q_heads: usize,
        kv_heads: usize,
        q_len: usize,
        kv_len: usize,
        head_dim: usize,
    ) -> Self {
        Shape {
            batch,
            q_heads,
            kv_heads,
            q_len,
            kv_len,
            head_dim,
        }
    }

    /// Elements of Q and of the output. Saturates at `usize::MAX` for a shape too large to
    /// address (such a shape never passes [`ProblemBuilder::build`]), so it never panics.
    pub fn q_elems(&self) -> usize {
        [self.q_heads, self.q_len, self.head_dim]
            .iter()
            .fold(self.batch, |a, &d| a.saturating_mul(d))
    }

    /// Elements of K and of V. Saturates like [`q_elems`](Shape::q_elems).
    pub fn kv_elems(&self) -> usize {
        [self.kv_heads, self.kv_len, self.head_dim]
            .iter()
            .fold(self.batch, |a, &d| a.saturating_mul(d))
    }

    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        self.q_heads / self.kv_heads
    }
}

/// Where the causal diagonal sits when `q_len` and the key length differ (docs/numerics.md §1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CausalAlign {
    /// Query row `i` sees key `j` iff `j + q_len ≤ i + L` (`L` the batch element's key length):
    /// the last query row sees every key, as when decoding against a KV cache. The default.
    #[default]
    BottomRight,
    /// Query row `i` sees key `j` iff `j ≤ i`: PyTorch's `is_causal=True`
    /// (`torch.ones(Sq, Skv).tril()`). A row whose `i` is past the key length sees `L` keys.
    TopLeft,
}

impl CausalAlign {
    /// `bottom-right` or `top-left`.
    pub fn name(self) -> &'static str {
        match self {
            CausalAlign::BottomRight => "bottom-right",
            CausalAlign::TopLeft => "top-left",
        }
    }
}

/// Which dimensions of the boolean mask are present; an absent one is broadcast (size 1).
/// The mask is `[batch or 1, q_heads or 1, q_len, kv_len]`, `true` meaning "attend".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MaskLayout {
    /// The mask has a batch dimension of size `batch` (else 1, shared by all batch elements).
    pub per_batch: bool,
    /// The mask has a head dimension of size `q_heads` (else 1, shared by all heads).
    pub per_head: bool,
}

impl MaskLayout {
    /// `[batch, q_heads, q_len, kv_len]`.
    pub const FULL: MaskLayout = MaskLayout {
        per_batch: true,
        per_head: true,
    };
    /// `[1, 1, q_len, kv_len]`, one mask for every batch element and head.
    pub const SHARED: MaskLayout = MaskLayout {
        per_batch: false,
        per_head: false,
    };
}

/// What to do with NaN or ±inf in Q, K or V (docs/numerics.md §7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum NonFinitePolicy {
    /// Return [`Error::NonFinite`] naming the first tensor (q, k, v) holding one; write nothing.
    /// The scan reads every element and decides once, so it takes the same time whatever it finds.
    #[default]
    Reject,
    /// Write the canonical NaN to exactly the rows whose query row, or some valid key's K or V
    /// row, holds a non-finite value; compute every other row normally.
    Propagate,
}

/// A validated problem: shape and options. Build it with [`Problem::builder`].
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    shape: Shape,
    causal: bool,
    align: CausalAlign,
    scale: f32,
    kv_lens: Option<Vec<usize>>,
    mask: Option<MaskLayout>,
    nonfinite: NonFinitePolicy,
    varlen: Option<Varlen>,
}

/// Collects a problem's options; [`build`](ProblemBuilder::build) validates them all.
#[derive(Clone, Debug)]
pub struct ProblemBuilder {
    shape: Shape,
    causal: bool,
    align: CausalAlign,
    scale: Option<f32>,
    kv_lens: Option<Vec<usize>>,
    mask: Option<MaskLayout>,
    nonfinite: NonFinitePolicy,
    varlen: Option<Varlen>,
}

/// A variable-length batch (as FlashAttention's `flash_attn_varlen_func`): the problem's one
/// batch element holds `B` sequences packed one after another along the sequence dimension.
/// Sequence `b` owns query rows `cu_seqlens_q[b] .. cu_seqlens_q[b+1]` and key rows
/// `cu_seqlens_k[b] .. cu_seqlens_k[b+1]`, and its output rows are, bit for bit, those of the
/// problem of that sequence alone (batch 1, its own query and key lengths, the same options;
/// causal alignment uses its own lengths). Offsets are `usize`, as every length of the crate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Varlen {
    cu_seqlens_q: Vec<usize>,
    cu_seqlens_k: Vec<usize>,
}

impl Varlen {
    /// The query offsets, `B + 1` entries from 0 to `q_len`.
    pub fn cu_seqlens_q(&self) -> &[usize] {
        &self.cu_seqlens_q
    }
    /// The key offsets, `B + 1` entries from 0 to `kv_len`.
    pub fn cu_seqlens_k(&self) -> &[usize] {
        &self.cu_seqlens_k
    }
    /// The number of sequences `B`.
    pub fn sequences(&self) -> usize {
        self.cu_seqlens_q.len() - 1
    }
}

/// Where one sequence of a problem lies: its query rows and keys. Without
/// [`ProblemBuilder::varlen`] sequence `b` is batch element `b` (rows from 0, `key_len` its key
/// length); with it, the packed rows of [`Varlen`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sequence {
    /// The batch element holding its rows.
    pub batch: usize,
    /// Its first query row.
    pub q_start: usize,
    /// Its query rows.
    pub q_len: usize,
    /// Its first key row.
    pub k_start: usize,
    /// Its keys (`L`).
    pub key_len: usize,
}

/// One cumulative-length array: `B + 1` entries, the first 0, nondecreasing, the last `total`.
fn check_cu_seqlens(name: &'static str, cu: &[usize], total: usize) -> Result<()> {
    let bad = |reason: String| Err(Error::CuSeqlens { name, reason });
    match (cu.first(), cu.last()) {
        _ if cu.len() < 2 => bad(format!(
            "must have at least 2 entries (B + 1 for B ≥ 1 sequences), got {}",
            cu.len()
        )),
        (Some(&first), _) if first != 0 => bad(format!("must start at 0, got {first}")),
        (_, Some(&last)) if last != total => {
            bad(format!("must end at the packed length {total}, got {last}"))
        }
        _ => match cu.windows(2).position(|w| w[1] < w[0]) {
            Some(i) => bad(format!(
                "must be nondecreasing: entry {} is {}, entry {} is {}",
                i,
                cu[i],
                i + 1,
                cu[i + 1]
            )),
            None => Ok(()),
        },
    }
}

impl ProblemBuilder {
    /// Causal masking, by default **bottom-right aligned**: query row `i` sees key `j` iff
    /// `j + q_len ≤ i + L` (L the batch element's key length). The last query row sees every key,
    /// as when decoding against a KV cache. PyTorch's `is_causal` is top-left aligned (`j ≤ i`):
    /// ask for it with [`causal_align`](ProblemBuilder::causal_align). The two agree only when
    /// `q_len == L`.
    pub fn causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }

    /// Where the causal diagonal sits (default [`CausalAlign::BottomRight`]); only matters when
    /// [`causal`](ProblemBuilder::causal) is set.
    pub fn causal_align(mut self, align: CausalAlign) -> Self {
        self.align = align;
        self
    }

    /// The softmax scale (finite, > 0). Default: the f32 nearest to `1/sqrt(head_dim)`.
    pub fn scale(mut self, scale: f32) -> Self {
        self.scale = Some(scale);
        self
    }

    /// Per-batch key lengths (each ≤ `kv_len`): keys at or past `kv_lens[b]` are masked for
    /// batch element `b`. A length of 0 gives an all-zero output for that batch element.
    pub fn kv_lens(mut self, kv_lens: Vec<usize>) -> Self {
        self.kv_lens = Some(kv_lens);
        self
    }

    /// Declare a boolean mask of this layout; its values are passed with the inputs.
    pub fn mask(mut self, layout: MaskLayout) -> Self {
        self.mask = Some(layout);
        self
    }

    /// The non-finite input policy (default [`NonFinitePolicy::Reject`]).
    pub fn nonfinite(mut self, policy: NonFinitePolicy) -> Self {
        self.nonfinite = policy;
        self
    }

    /// A variable-length batch ([`Varlen`]): the shape's batch must be 1, `q_len` the packed
    /// query length (`cu_seqlens_q`'s last entry) and `kv_len` the packed key length; the
    /// tensors are the packed `[1, H, total, D]` ones (packed `[total, H, D]` memory is
    /// [`crate::Layout::bshd`]). Sequences may have 0 query rows or 0 keys (their rows are then
    /// +0, §5). Combines with causal (either alignment, per sequence), GQA/MQA, the scale and
    /// either non-finite policy; not with `kv_lens` or a mask
    /// ([`Error::IncompatibleOptions`]: the lengths are the offsets' differences, and a dense
    /// mask has no per-sequence shape).
    pub fn varlen(mut self, cu_seqlens_q: Vec<usize>, cu_seqlens_k: Vec<usize>) -> Self {
        self.varlen = Some(Varlen {
            cu_seqlens_q,
            cu_seqlens_k,
        });
        self
    }

    /// Check every parameter and return the problem.
    pub fn build(self) -> Result<Problem> {
        let s = self.shape;
        let dims: [(&'static str, usize, usize); 6] = [
            ("batch", s.batch, MAX_DIM),
            ("q_heads", s.q_heads, MAX_DIM),
            ("kv_heads", s.kv_heads, MAX_DIM),
            ("q_len", s.q_len, MAX_DIM),
            ("kv_len", s.kv_len, MAX_KV_LEN),
            ("head_dim", s.head_dim, MAX_HEAD_DIM),
        ];
        for (name, value, max) in dims {
            if value < 1 || value > max {
                return Err(Error::DimensionOutOfRange {
                    name,
                    value,
                    min: 1,
                    max,
                });
            }
        }
        if !s.q_heads.is_multiple_of(s.kv_heads) {
            return Err(Error::HeadsNotDivisible {
                q_heads: s.q_heads,
                kv_heads: s.kv_heads,
            });
        }
        let scale = self.scale.unwrap_or_else(|| default_scale(s.head_dim));
        if !(scale.is_finite() && scale > 0.0) {
            return Err(Error::InvalidScale { value: scale });
        }
        if let Some(lens) = &self.kv_lens {
            if lens.len() != s.batch {
                return Err(Error::KvLensCount {
                    expected: s.batch,
                    got: lens.len(),
                });
            }
            if let Some((batch, &value)) = lens.iter().enumerate().find(|(_, l)| **l > s.kv_len) {
                return Err(Error::KvLenOutOfRange {
                    batch,
                    value,
                    max: s.kv_len,
                });
            }
        }
        if let Some(v) = &self.varlen {
            let incompatible = |second| {
                Err(Error::IncompatibleOptions {
                    first: "a variable-length batch (cu_seqlens)",
                    second,
                })
            };
            if s.batch != 1 {
                return incompatible(
                    "batch > 1 (the sequences are packed into one batch element: batch must be 1)",
                );
            }
            if self.kv_lens.is_some() {
                return incompatible("kv_lens (the key lengths are cu_seqlens_k's differences)");
            }
            if self.mask.is_some() {
                return incompatible("a boolean mask");
            }
            check_cu_seqlens("cu_seqlens_q", &v.cu_seqlens_q, s.q_len)?;
            check_cu_seqlens("cu_seqlens_k", &v.cu_seqlens_k, s.kv_len)?;
            if v.cu_seqlens_q.len() != v.cu_seqlens_k.len() {
                return Err(Error::CuSeqlens {
                    name: "cu_seqlens_k",
                    reason: format!(
                        "must have as many entries as cu_seqlens_q ({}), got {}",
                        v.cu_seqlens_q.len(),
                        v.cu_seqlens_k.len()
                    ),
                });
            }
        }
        // Sizes must fit in usize (and so in the GPU's 64-bit offsets).
        let q = checked_product(TensorName::Q, &[s.batch, s.q_heads, s.q_len, s.head_dim])?;
        checked_product(TensorName::K, &[s.batch, s.kv_heads, s.kv_len, s.head_dim])?;
        q.checked_mul(4).ok_or(Error::SizeOverflow {
            tensor: TensorName::Out,
            what: "bytes of the output".into(),
        })?;
        let p = Problem {
            shape: s,
            causal: self.causal,
            align: self.align,
            scale,
            kv_lens: self.kv_lens,
            mask: self.mask,
            nonfinite: self.nonfinite,
            varlen: self.varlen,
        };
        if p.mask.is_some() {
            let dims = p.mask_dims();
            checked_product(TensorName::Mask, &dims)?;
        }
        Ok(p)
    }
}

fn checked_product(tensor: TensorName, dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::SizeOverflow {
            tensor,
            what: format!("{dims:?}"),
        })
}

impl Problem {
    /// Start describing a problem of this shape.
    pub fn builder(shape: Shape) -> ProblemBuilder {
        ProblemBuilder {
            shape,
            causal: false,
            align: CausalAlign::BottomRight,
            scale: None,
            kv_lens: None,
            mask: None,
            nonfinite: NonFinitePolicy::default(),
            varlen: None,
        }
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }
    /// Whether causal masking applies.
    pub fn causal(&self) -> bool {
        self.causal
    }
    /// Where the causal diagonal sits (meaningful when [`causal`](Problem::causal)).
    pub fn causal_align(&self) -> CausalAlign {
        self.align
    }
    /// The scale actually used (the default already resolved).
    pub fn scale(&self) -> f32 {
        self.scale
    }
    /// Per-batch key lengths, if given.
    pub fn kv_lens(&self) -> Option<&[usize]> {
        self.kv_lens.as_deref()
    }
    /// The key length of batch element `b`.
    ///
    /// # Panics
    /// If `b >= batch`: an index of the caller's, not an input the library validates.
    pub fn kv_len_of(&self, b: usize) -> usize {
        self.kv_lens.as_ref().map_or(self.shape.kv_len, |l| l[b])
    }
    /// The declared mask layout.
    pub fn mask(&self) -> Option<MaskLayout> {
        self.mask
    }
    /// The non-finite policy.
    pub fn nonfinite(&self) -> NonFinitePolicy {
        self.nonfinite
    }
    /// The variable-length batch, if the problem is one.
    pub fn varlen(&self) -> Option<&Varlen> {
        self.varlen.as_ref()
    }

    /// The number of sequences: `B` of the [`Varlen`] batch, else the shape's batch.
    pub fn sequences(&self) -> usize {
        self.varlen
            .as_ref()
            .map_or(self.shape.batch, Varlen::sequences)
    }

    /// Where sequence `b` lies (see [`Sequence`]).
    ///
    /// # Panics
    /// If `b >= sequences()`, as [`kv_len_of`](Problem::kv_len_of).
    pub fn sequence(&self, b: usize) -> Sequence {
        match &self.varlen {
            None => Sequence {
                batch: b,
                q_start: 0,
                q_len: self.shape.q_len,
                k_start: 0,
                key_len: self.kv_len_of(b),
            },
            Some(v) => Sequence {
                batch: 0,
                q_start: v.cu_seqlens_q[b],
                q_len: v.cu_seqlens_q[b + 1] - v.cu_seqlens_q[b],
                k_start: v.cu_seqlens_k[b],
                key_len: v.cu_seqlens_k[b + 1] - v.cu_seqlens_k[b],
            },
        }
    }

    /// Sequence `b` of a variable-length problem as a problem of its own: batch 1, its query
    /// and key lengths, the same options. A length of 0 becomes a length of 1 (the smallest
    /// shape) with a key length of 0 (no key is read: §5 makes its rows +0); a sequence of
    /// no query rows has nothing to compute. Without varlen, the problem itself.
    pub(crate) fn sequence_problem(&self, b: usize) -> Problem {
        let Some(_) = &self.varlen else {
            return self.clone();
        };
        let q = self.sequence(b);
        let mut shape = self.shape;
        shape.q_len = q.q_len.max(1);
        shape.kv_len = q.key_len.max(1);
        Problem {
            shape,
            kv_lens: (q.key_len == 0).then(|| vec![0]),
            varlen: None,
            ..self.clone()
        }
    }

    /// A variable-length problem's packed tensors as one rectangular problem (batch 1, every
    /// packed query row against every packed key, no causality): what the `Reject` scan reads,
    /// since every packed row is an input (the CPU's scan reads them all too). Without varlen,
    /// the problem itself.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the GPU paths' scan
    pub(crate) fn packed(&self) -> Problem {
        Problem {
            varlen: None,
            causal: false,
            ..self.clone()
        }
    }

    /// The mask's dimensions `[Bm, Hm, Sq, Skv]` (only meaningful when a mask is declared).
    pub fn mask_dims(&self) -> [usize; 4] {
        let l = self.mask.unwrap_or(MaskLayout::SHARED);
        let s = &self.shape;
        [
            if l.per_batch { s.batch } else { 1 },
            if l.per_head { s.q_heads } else { 1 },
            s.q_len,
            s.kv_len,
        ]
    }

    /// Offset of mask row `(b, h, i)` (start of its `kv_len` entries). Indices out of range give
    /// an offset outside the mask; the caller's slice indexing then panics.
    pub fn mask_row_offset(&self, b: usize, h: usize, i: usize) -> usize {
        let [_, hm, sq, skv] = self.mask_dims();
        let l = self.mask.unwrap_or(MaskLayout::SHARED);
        let bi = if l.per_batch { b } else { 0 };
        let hi = if l.per_head { h } else { 0 };
        ((bi * hm + hi) * sq + i) * skv
    }

    /// One past the last key row `i` of batch element `b` may see, by position alone (key
    /// length and causality, both public); 0 when it sees none.
    ///
    /// # Panics
    /// If `b >= batch`, as [`kv_len_of`](Problem::kv_len_of).
    pub fn key_limit(&self, b: usize, i: usize) -> usize {
        let l = self.kv_len_of(b);
        match (self.causal, self.align) {
            (false, _) => l,
            // j + Sq ≤ i + L  ⇔  j < i + L + 1 − Sq
            (true, CausalAlign::BottomRight) => (i + l + 1).saturating_sub(self.shape.q_len).min(l),
            // j ≤ i  ⇔  j < i + 1
            (true, CausalAlign::TopLeft) => (i + 1).min(l),
        }
    }
}
