//! How the tensors of a call lie in memory, and the one check of them against a [`Problem`].
//!
//! Every tensor is logically `[B, H, S, D]` (Q and the output: `H = q_heads`, `S = q_len`; K and
//! V: `H = kv_heads`, `S = kv_len`). A [`Layout`] says where element `(b, h, s, d)` is:
//! `offset + b·batch_stride + h·head_stride + s·seq_stride + d` — the head dimension D is always
//! contiguous. That covers contiguous `[B, H, S, D]` ([`Layout::bhsd`]), contiguous
//! `[B, S, H, D]` ([`Layout::bshd`], what FlashAttention, vLLM and most model code hold), and
//! views, e.g. Q, K and V as three views into one fused QKV buffer ([`Layout::with_offset`]).
//! **The output bits never depend on the layouts**: every path reads the same logical elements
//! and writes the same logical rows (a test holds the layouts to the same bits).
//!
//! Input views may overlap or repeat (a stride of 0 reads the same row again); the output's rows
//! must not overlap ([`Error::OutputOverlap`]), and nothing outside the output's rows is written
//! (elements between them are left as they were).
//!
//! K and V may also be a **paged cache** ([`PagedKv`], as vLLM's and FlashAttention's
//! `block_table`): `num_pages` pages of `page_size` key rows, each tensor logically
//! `[num_pages, Hkv, page_size, D]` with a [`Layout`] whose batch dimension is the page, and a
//! block table of `i32` page numbers, one row per sequence. Key row `(b, h, j)` is row
//! `j % page_size` of head `h` of page `block_table[b][j / page_size]`. Paging is a layout too:
//! the bits are those of the contiguous K and V.
//!
//! `check_call` is the validation every entry point runs first, host or device, CPU or GPU,
//! in one order: the extents of q, k, v against their buffers (for a paged cache: the page size,
//! the pages' extents, the block table's length, then each sequence's capacity and the table
//! entries it uses), then the mask, then the output's extent and its rows' disjointness, then the
//! log-sum-exp output's length. The path's own limits (dtype, head dim, alignment) follow, then
//! (device entry points) the devices, then the non-finite policy.

use crate::dtype::Element;
use crate::error::{Error, Result, TensorName};
use crate::problem::Problem;

/// Where the elements of a logical `[B, H, S, D]` tensor lie in its buffer (element units; D is
/// contiguous). See the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Element index of `(0, 0, 0, 0)`.
    pub offset: usize,
    /// Elements between batch elements.
    pub batch_stride: usize,
    /// Elements between heads.
    pub head_stride: usize,
    /// Elements between sequence positions (rows).
    pub seq_stride: usize,
}

/// The two contiguous orders of a `[B, H, S, D]` tensor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Order {
    /// `[B, H, S, D]`, row-major: heads outermost after the batch.
    #[default]
    Bhsd,
    /// `[B, S, H, D]`, row-major: the heads of one position side by side.
    Bshd,
}

impl Order {
    /// `bhsd` or `bshd`.
    pub fn name(self) -> &'static str {
        match self {
            Order::Bhsd => "bhsd",
            Order::Bshd => "bshd",
        }
    }
}

impl std::str::FromStr for Order {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "bhsd" => Ok(Order::Bhsd),
            "bshd" => Ok(Order::Bshd),
            _ => Err(format!("unknown layout {s:?}: expected bhsd or bshd")),
        }
    }
}

impl Layout {
    /// Contiguous `[B, H, S, D]` for `heads` heads of `seq` rows of `head_dim` elements.
    pub fn bhsd(heads: usize, seq: usize, head_dim: usize) -> Layout {
        Layout {
            offset: 0,
            batch_stride: heads.saturating_mul(seq).saturating_mul(head_dim),
            head_stride: seq.saturating_mul(head_dim),
            seq_stride: head_dim,
        }
    }

    /// Contiguous `[B, S, H, D]`.
    pub fn bshd(heads: usize, seq: usize, head_dim: usize) -> Layout {
        Layout {
            offset: 0,
            batch_stride: seq.saturating_mul(heads).saturating_mul(head_dim),
            head_stride: head_dim,
            seq_stride: heads.saturating_mul(head_dim),
        }
    }

    /// The contiguous layout of `order`.
    pub fn contiguous(order: Order, heads: usize, seq: usize, head_dim: usize) -> Layout {
        match order {
            Order::Bhsd => Layout::bhsd(heads, seq, head_dim),
            Order::Bshd => Layout::bshd(heads, seq, head_dim),
        }
    }

    /// The same strides, starting `offset` elements into the buffer.
    pub fn with_offset(self, offset: usize) -> Layout {
        Layout { offset, ..self }
    }

    /// The element index of `(b, h, s, 0)`: the start of that row. Only meaningful for indices
    /// inside a shape the layout was checked against (then it cannot overflow).
    pub fn row(&self, b: usize, h: usize, s: usize) -> usize {
        self.offset + b * self.batch_stride + h * self.head_stride + s * self.seq_stride
    }

    /// One past the largest element index of a `[b, h, s, d]` tensor, or `None` if it overflows.
    /// `Some(0)` when any dimension is 0.
    pub fn extent(&self, [b, h, s, d]: [usize; 4]) -> Option<usize> {
        if b == 0 || h == 0 || s == 0 || d == 0 {
            return Some(0);
        }
        let last = [
            (b, self.batch_stride),
            (h, self.head_stride),
            (s, self.seq_stride),
        ]
        .iter()
        .try_fold(self.offset, |acc, &(n, st)| {
            acc.checked_add((n - 1).checked_mul(st)?)
        })?;
        last.checked_add(d)
    }

    /// Whether the rows of a `[b, h, s, d]` tensor are pairwise disjoint (each row's D elements
    /// belong to it alone). Dimensions of size 1 are ignored; the others, sorted by stride, must
    /// each step over everything the smaller ones span.
    pub fn rows_disjoint(&self, [b, h, s, d]: [usize; 4]) -> bool {
        let mut dims: Vec<(usize, usize)> = [(b, self.batch_stride), (h, self.head_stride)]
            .into_iter()
            .chain([(s, self.seq_stride)])
            .filter(|&(n, _)| n > 1)
            .map(|(n, st)| (st, n))
            .collect();
        dims.sort_unstable();
        let mut span = d; // elements one row (then one block of rows) covers
        for (stride, n) in dims {
            if stride < span {
                return false;
            }
            match stride.checked_mul(n - 1).and_then(|x| x.checked_add(span)) {
                Some(x) => span = x,
                None => return false,
            }
        }
        true
    }

    /// `[b, h, s]` strides and offset, for messages.
    pub(crate) fn describe(&self) -> String {
        format!(
            "strides (b {}, h {}, s {}, d 1) from offset {}",
            self.batch_stride, self.head_stride, self.seq_stride, self.offset
        )
    }

    /// Whether this is the contiguous `[B, H, S, D]` layout of `dims`, from offset 0.
    pub fn is_bhsd(&self, [_, h, s, d]: [usize; 4]) -> bool {
        *self == Layout::bhsd(h, s, d)
    }
}

/// A tensor on the host: its buffer and where its elements lie in it.
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a, T> {
    /// The buffer (it may hold more than this tensor, e.g. a fused QKV buffer).
    pub data: &'a [T],
    /// Where the elements are.
    pub layout: Layout,
}

/// The output on the host: its buffer and where its rows go. Only the rows are written.
#[derive(Debug)]
pub struct TensorMut<'a, T> {
    /// The buffer.
    pub data: &'a mut [T],
    /// Where the rows go.
    pub layout: Layout,
}

impl<'a, T> Tensor<'a, T> {
    /// A tensor with this layout.
    pub fn new(data: &'a [T], layout: Layout) -> Self {
        Tensor { data, layout }
    }
}

impl<'a, T> TensorMut<'a, T> {
    /// An output with this layout.
    pub fn new(data: &'a mut [T], layout: Layout) -> Self {
        TensorMut { data, layout }
    }
}

/// The inputs of one call on the host: Q, K, V (any layouts) and the optional boolean mask
/// (dense `[B or 1, Hq or 1, Sq, Skv]`, `true` = attend).
#[derive(Clone, Copy, Debug)]
pub struct Qkv<'a, T> {
    /// Queries, logically `[B, Hq, Sq, D]`.
    pub q: Tensor<'a, T>,
    /// Keys, logically `[B, Hkv, Skv, D]`.
    pub k: Tensor<'a, T>,
    /// Values, logically `[B, Hkv, Skv, D]`.
    pub v: Tensor<'a, T>,
    /// The mask, if the problem declares one.
    pub mask: Option<&'a [bool]>,
}

impl<'a, T> Qkv<'a, T> {
    /// Contiguous `[B, H, S, D]` slices of `p`'s shape.
    pub fn bhsd(p: &Problem, q: &'a [T], k: &'a [T], v: &'a [T], mask: Option<&'a [bool]>) -> Self {
        let s = p.shape();
        Qkv {
            q: Tensor::new(q, Layout::bhsd(s.q_heads, s.q_len, s.head_dim)),
            k: Tensor::new(k, Layout::bhsd(s.kv_heads, s.kv_len, s.head_dim)),
            v: Tensor::new(v, Layout::bhsd(s.kv_heads, s.kv_len, s.head_dim)),
            mask,
        }
    }
}

/// Smallest page size of a paged cache.
pub const MIN_PAGE_SIZE: usize = 16;
/// Largest page size of a paged cache.
pub const MAX_PAGE_SIZE: usize = 256;

/// A paged KV cache (module docs), wherever its two tensors live: [`PagedKv`] on the host,
/// `cuda::DevicePagedKv` in device memory. `k` and `v` are logically `[num_pages, Hkv,
/// page_size, D]` at their layouts (`[num_pages, page_size, Hkv, D]` contiguous is
/// `Layout::bshd(Hkv, page_size, D)`). `block_table` is `[sequences, max_pages]`, row-major, one
/// row per sequence of the problem ([`Problem::sequences`]), on the host in both cases. Only the
/// entries a sequence's keys use are read and checked (the first `ceil(L / page_size)` of its
/// row); the others may hold anything (e.g. −1). The table and the key lengths are public: they
/// decide addresses.
#[derive(Clone, Copy, Debug)]
pub struct PagedCache<'a, X> {
    /// The key pages.
    pub k: X,
    /// The value pages.
    pub v: X,
    /// Pages in the cache.
    pub num_pages: usize,
    /// Key rows per page: a power of two in 16..=256.
    pub page_size: usize,
    /// `[sequences, max_pages]` page numbers.
    pub block_table: &'a [i32],
    /// Columns of the block table.
    pub max_pages: usize,
}

/// A paged KV cache in host memory.
pub type PagedKv<'a, T> = PagedCache<'a, Tensor<'a, T>>;

/// K and V of a call: tensors of any [`Layout`], or a paged cache.
#[derive(Clone, Copy, Debug)]
pub enum KvCache<'a, T> {
    /// K and V as `[B, Hkv, Skv, D]` tensors.
    Tensors {
        /// Keys.
        k: Tensor<'a, T>,
        /// Values.
        v: Tensor<'a, T>,
    },
    /// A paged cache.
    Paged(PagedKv<'a, T>),
}

/// The inputs of a call whose K and V may be a paged cache: Q (any layout), the [`KvCache`], and
/// the optional mask as in [`Qkv`].
#[derive(Clone, Copy, Debug)]
pub struct QkvCache<'a, T> {
    /// Queries, logically `[B, Hq, Sq, D]`.
    pub q: Tensor<'a, T>,
    /// Keys and values.
    pub kv: KvCache<'a, T>,
    /// The mask, if the problem declares one.
    pub mask: Option<&'a [bool]>,
}

impl<'a, T> From<Qkv<'a, T>> for QkvCache<'a, T> {
    fn from(x: Qkv<'a, T>) -> Self {
        QkvCache {
            q: x.q,
            kv: KvCache::Tensors { k: x.k, v: x.v },
            mask: x.mask,
        }
    }
}

/// Where key (or value) row `(b, h, j)` lies, for a tensor or a paged cache. Only built for
/// inputs that passed [`check_call`] (then every row a problem reads is inside its buffer).
#[derive(Clone, Copy, Debug)]
pub(crate) enum KvRows<'a> {
    Layout(Layout),
    Paged {
        layout: Layout,
        table: &'a [i32],
        max_pages: usize,
        page_size: usize,
    },
}

impl KvRows<'_> {
    /// The element index of row `(b, h, j)`; `b` is the sequence for a paged cache.
    #[inline]
    pub(crate) fn row(&self, b: usize, h: usize, j: usize) -> usize {
        match *self {
            KvRows::Layout(l) => l.row(b, h, j),
            KvRows::Paged {
                layout,
                table,
                max_pages,
                page_size,
            } => layout.row(
                table[b * max_pages + j / page_size] as usize,
                h,
                j % page_size,
            ),
        }
    }

    /// The rows of sequence `seq` of `p` alone, as sequence 0 (for [`Problem::sequence_problem`]).
    pub(crate) fn of_sequence(&self, p: &Problem, seq: usize) -> Self {
        let s = p.sequence(seq);
        match *self {
            // Sequence `seq` becomes batch element 0 of its own problem.
            KvRows::Layout(l) => KvRows::Layout(l.with_offset(l.row(s.batch, 0, s.k_start))),
            KvRows::Paged {
                layout,
                table,
                max_pages,
                page_size,
            } => KvRows::Paged {
                layout,
                table: &table[seq * max_pages..(seq + 1) * max_pages],
                max_pages,
                page_size,
            },
        }
    }
}

/// One input of K or V as the backends read it: its buffer and where its rows are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KvSource<'a, T> {
    pub data: &'a [T],
    pub rows: KvRows<'a>,
}

impl<'a, T> KvSource<'a, T> {
    /// Row `(b, h, j)`, `d` elements.
    #[inline]
    pub(crate) fn row(&self, b: usize, h: usize, j: usize, d: usize) -> &'a [T] {
        &self.data[self.rows.row(b, h, j)..][..d]
    }
}

impl<'a, T> QkvCache<'a, T> {
    /// K and V as row sources.
    pub(crate) fn sources(&self) -> (KvSource<'a, T>, KvSource<'a, T>) {
        let src = |t: &Tensor<'a, T>, rows| KvSource { data: t.data, rows };
        match &self.kv {
            KvCache::Tensors { k, v } => (
                src(k, KvRows::Layout(k.layout)),
                src(v, KvRows::Layout(v.layout)),
            ),
            KvCache::Paged(c) => {
                let paged = |l| KvRows::Paged {
                    layout: l,
                    table: c.block_table,
                    max_pages: c.max_pages,
                    page_size: c.page_size,
                };
                (src(&c.k, paged(c.k.layout)), src(&c.v, paged(c.v.layout)))
            }
        }
    }
}

impl<T: Element> PagedKv<'_, T> {
    /// K and V as contiguous `[B, Hkv, Skv, D]` tensors holding exactly the rows `p` reads (each
    /// sequence's first `L` keys, at its packed rows for a variable-length batch) and +0
    /// elsewhere: the tensors this cache stands for. The rows not read change no output bit and
    /// are finite, so the `Reject` scan of these tensors finds what the cache's own scan
    /// ([`reject_nonfinite`]) finds. For entry points that take K and V as tensors (the GPU's
    /// host entry). The cache has passed [`check_cache_call`] for `p`.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the GPU's host entry
    pub(crate) fn as_tensors(&self, p: &Problem) -> (Vec<T>, Vec<T>, Layout) {
        let (_, [b, hkv, skv, d]) = dims(p);
        let layout = Layout::bhsd(hkv, skv, d);
        let rows = |t: &Tensor<'_, T>| KvRows::Paged {
            layout: t.layout,
            table: self.block_table,
            max_pages: self.max_pages,
            page_size: self.page_size,
        };
        let (kr, vr) = (rows(&self.k), rows(&self.v));
        let n = b * hkv * skv * d;
        let (mut k, mut v) = (vec![T::default(); n], vec![T::default(); n]);
        for i in 0..p.sequences() {
            let seq = p.sequence(i);
            for h in 0..hkv {
                for j in 0..seq.key_len {
                    let at = layout.row(seq.batch, h, seq.k_start + j);
                    let (ka, va) = (kr.row(i, h, j), vr.row(i, h, j));
                    k[at..at + d].copy_from_slice(&self.k.data[ka..ka + d]);
                    v[at..at + d].copy_from_slice(&self.v.data[va..va + d]);
                }
            }
        }
        (k, v, layout)
    }
}

/// What [`check_call`] checks of a paged cache beyond its two tensors' operands.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Paging<'a> {
    pub num_pages: usize,
    pub page_size: usize,
    pub block_table: &'a [i32],
    pub max_pages: usize,
}

impl<'a, X> From<&PagedCache<'a, X>> for Paging<'a> {
    fn from(c: &PagedCache<'a, X>) -> Self {
        Paging {
            num_pages: c.num_pages,
            page_size: c.page_size,
            block_table: c.block_table,
            max_pages: c.max_pages,
        }
    }
}

/// One tensor of a call as [`check_call`] sees it: its buffer length and layout.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Operand {
    pub len: usize,
    pub layout: Layout,
}

impl<T> From<&Tensor<'_, T>> for Operand {
    fn from(t: &Tensor<'_, T>) -> Self {
        Operand {
            len: t.data.len(),
            layout: t.layout,
        }
    }
}

impl<T> From<&TensorMut<'_, T>> for Operand {
    fn from(t: &TensorMut<'_, T>) -> Self {
        Operand {
            len: t.data.len(),
            layout: t.layout,
        }
    }
}

/// The operands of one call, whatever memory they live in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Operands {
    pub q: Operand,
    pub k: Operand,
    pub v: Operand,
    /// The mask's length in entries, if one was given.
    pub mask: Option<usize>,
    pub out: Operand,
}

/// How strictly a buffer must fit its tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fit {
    /// The slice is exactly the contiguous tensor (the `&[T]` entry points: a longer slice is a
    /// caller's mistake worth reporting).
    Exact,
    /// The buffer holds at least every element the layout reaches (views into larger buffers).
    AtLeast,
}

/// The dims `[B, H, S, D]` of q (and out), and of k and v.
pub(crate) fn dims(p: &Problem) -> ([usize; 4], [usize; 4]) {
    let s = p.shape();
    (
        [s.batch, s.q_heads, s.q_len, s.head_dim],
        [s.batch, s.kv_heads, s.kv_len, s.head_dim],
    )
}

/// The one validation of a call's tensors (module docs), before any work and any write.
pub(crate) fn check_call(p: &Problem, ops: &Operands, fit: Fit) -> Result<()> {
    check_cache_call(p, ops, None, None, fit)
}

/// [`check_call`] for a call whose K and V may be a paged cache (`paging`; `ops.k` and `ops.v`
/// are then the pages) and which may ask for the log-sum-exp (`lse`: the output slice's length).
pub(crate) fn check_cache_call(
    p: &Problem,
    ops: &Operands,
    paging: Option<Paging<'_>>,
    lse: Option<usize>,
    fit: Fit,
) -> Result<()> {
    let (qd, kd) = dims(p);
    check_one(TensorName::Q, qd, &ops.q, fit)?;
    match paging {
        None => {
            check_one(TensorName::K, kd, &ops.k, fit)?;
            check_one(TensorName::V, kd, &ops.v, fit)?;
        }
        Some(c) => check_paging(p, ops, c)?,
    }
    check_mask(p, ops.mask)?;
    match fit {
        Fit::AtLeast => check_output_extent(qd, ops.out)?,
        // A contiguous [B, H, S, D] slice: its rows are disjoint by construction.
        Fit::Exact => check_one(TensorName::Out, qd, &ops.out, fit)?,
    }
    match lse {
        Some(got) if got != lse_len(p) => Err(Error::TensorLength {
            tensor: TensorName::Lse,
            expected: lse_len(p),
            got,
            shape: format!("{:?}", &qd[..3]),
        }),
        _ => Ok(()),
    }
}

/// A page size must be a power of two in [`MIN_PAGE_SIZE`]`..=`[`MAX_PAGE_SIZE`]
/// ([`Error::PageSize`]).
pub fn check_page_size(page_size: usize) -> Result<()> {
    if page_size.is_power_of_two() && (MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&page_size) {
        Ok(())
    } else {
        Err(Error::PageSize { value: page_size })
    }
}

/// Entries of the log-sum-exp output: one per query row, `[B, Hq, Sq]` row-major.
pub(crate) fn lse_len(p: &Problem) -> usize {
    let s = p.shape();
    s.batch * s.q_heads * s.q_len
}

/// The paged cache's part of [`check_cache_call`]: the page size, the pages against their
/// buffers, the table's length, then per sequence its capacity and the entries it uses.
fn check_paging(p: &Problem, ops: &Operands, c: Paging<'_>) -> Result<()> {
    check_page_size(c.page_size)?;
    let s = p.shape();
    let pd = [c.num_pages, s.kv_heads, c.page_size, s.head_dim];
    check_one(TensorName::K, pd, &ops.k, Fit::AtLeast)?;
    check_one(TensorName::V, pd, &ops.v, Fit::AtLeast)?;
    let seqs = p.sequences();
    let expected = seqs.checked_mul(c.max_pages).ok_or(Error::SizeOverflow {
        tensor: TensorName::BlockTable,
        what: format!("[{seqs}, {}]", c.max_pages),
    })?;
    if c.block_table.len() != expected {
        return Err(Error::TensorLength {
            tensor: TensorName::BlockTable,
            expected,
            got: c.block_table.len(),
            shape: format!("[{seqs}, {}]", c.max_pages),
        });
    }
    for seq in 0..seqs {
        let len = p.sequence(seq).key_len;
        let capacity = c.max_pages.saturating_mul(c.page_size);
        if len > capacity {
            return Err(Error::CacheCapacity {
                seq,
                len,
                max_pages: c.max_pages,
                page_size: c.page_size,
                capacity,
            });
        }
        let used = len.div_ceil(c.page_size);
        let row = &c.block_table[seq * c.max_pages..][..used];
        if let Some((index, &value)) = row
            .iter()
            .enumerate()
            .find(|(_, e)| usize::try_from(**e).map_or(true, |e| e >= c.num_pages))
        {
            return Err(Error::BlockTableEntry {
                seq,
                index,
                value,
                num_pages: c.num_pages,
                used,
            });
        }
    }
    Ok(())
}

/// The output check of [`check_call`] alone (extent and disjoint rows), for readers of an output
/// such as [`crate::digest_of`].
pub(crate) fn check_output_extent(d: [usize; 4], out: Operand) -> Result<()> {
    check_one(TensorName::Out, d, &out, Fit::AtLeast)?;
    if !out.layout.rows_disjoint(d) {
        return Err(Error::OutputOverlap {
            layout: out.layout.describe(),
        });
    }
    Ok(())
}

fn check_one(tensor: TensorName, d: [usize; 4], op: &Operand, fit: Fit) -> Result<()> {
    let needed = op.layout.extent(d).ok_or_else(|| Error::SizeOverflow {
        tensor,
        what: format!("{d:?} with {}", op.layout.describe()),
    })?;
    let shape = format!("{d:?}");
    match fit {
        Fit::Exact if op.len != needed => Err(Error::TensorLength {
            tensor,
            expected: needed,
            got: op.len,
            shape,
        }),
        Fit::AtLeast if op.len < needed => Err(Error::TensorExtent {
            tensor,
            needed,
            got: op.len,
            shape,
            layout: op.layout.describe(),
        }),
        _ => Ok(()),
    }
}

fn check_mask(p: &Problem, mask: Option<usize>) -> Result<()> {
    match (p.mask().is_some(), mask) {
        (true, Some(got)) => {
            let d = p.mask_dims();
            let expected = d.iter().product();
            if got != expected {
                return Err(Error::TensorLength {
                    tensor: TensorName::Mask,
                    expected,
                    got,
                    shape: format!("{d:?}"),
                });
            }
            Ok(())
        }
        (false, None) => Ok(()),
        (declared, _) => Err(Error::MaskPresence {
            declared: if declared {
                "declares"
            } else {
                "does not declare"
            },
            given: if declared { "do not give" } else { "give" },
        }),
    }
}

/// §7 `Reject`: read every (logical) element of q, k and v, then decide once:
/// [`Error::NonFinite`] naming the first of q, k, v that holds a NaN or ±inf. Whatever the
/// layouts, only the tensors' own elements are read (a fused buffer's other parts are not); of a
/// paged cache, the key rows of each sequence's length (the rows past it have no defined place:
/// their table entries are not read). Inputs must have passed [`check_call`].
/// (docs/numerics.md §7)
pub(crate) fn reject_nonfinite<T: Element>(p: &Problem, x: &QkvCache<'_, T>) -> Result<()> {
    use rayon::prelude::*;
    let (qd, [_, hkv, skv, d]) = dims(p);
    let row_flags = |row: &[T]| {
        row.iter()
            .fold(0u32, |a, e| a | crate::numerics::nonfinite_mask(e.to_f32()))
    };
    let [b, h, s, _] = qd;
    let q = (0..b * h * s)
        .into_par_iter()
        .with_min_len(256)
        .map(|r| {
            let start = x.q.layout.row(r / (h * s), (r / s) % h, r % s);
            row_flags(&x.q.data[start..start + d])
        })
        .reduce(|| 0, |a, b| a | b);
    // The K and V rows read, as (batch element or sequence, head, rows j0..j1) in pieces of at
    // most 256 rows (work items of the scan).
    let lens: Vec<usize> = match &x.kv {
        KvCache::Tensors { .. } => vec![skv; qd[0]],
        KvCache::Paged(_) => (0..p.sequences()).map(|b| p.sequence(b).key_len).collect(),
    };
    let pieces: Vec<(usize, usize, usize, usize)> = lens
        .iter()
        .enumerate()
        .flat_map(|(b, &n)| {
            (0..hkv).flat_map(move |hh| {
                (0..n)
                    .step_by(256)
                    .map(move |j0| (b, hh, j0, n.min(j0 + 256)))
            })
        })
        .collect();
    let scan = |src: &KvSource<'_, T>| -> u32 {
        pieces
            .par_iter()
            .map(|&(b, hh, j0, j1)| (j0..j1).fold(0u32, |a, j| a | row_flags(src.row(b, hh, j, d))))
            .reduce(|| 0, |a, b| a | b)
    };
    let (k, v) = x.sources();
    let flags = [
        (TensorName::Q, q),
        (TensorName::K, scan(&k)),
        (TensorName::V, scan(&v)),
    ];
    match flags.iter().find(|(_, f)| *f != 0) {
        Some((tensor, _)) => Err(Error::NonFinite { tensor: *tensor }),
        None => Ok(()),
    }
}

/// `logical` (contiguous `[B, H, S, D]` of `dims`) placed into a new buffer of `len` elements
/// (at least the layout's extent; the rest `fill`) at `layout`. For tests, the CLI and
/// benchmarks that want inputs in another layout.
pub fn scatter<T: Copy>(
    logical: &[T],
    dims: [usize; 4],
    layout: Layout,
    len: usize,
    fill: T,
) -> Vec<T> {
    let mut buf = vec![fill; len];
    let [b, h, s, d] = dims;
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                let src = ((bi * h + hi) * s + si) * d;
                let dst = layout.row(bi, hi, si);
                buf[dst..dst + d].copy_from_slice(&logical[src..src + d]);
            }
        }
    }
    buf
}

/// The logical contiguous `[B, H, S, D]` elements of a tensor at `layout` in `buf`.
pub fn gather<T: Copy>(buf: &[T], dims: [usize; 4], layout: Layout) -> Vec<T> {
    let [b, h, s, d] = dims;
    let mut out = Vec::with_capacity(b * h * s * d);
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                let r = layout.row(bi, hi, si);
                out.extend_from_slice(&buf[r..r + d]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_layouts_address_every_element_once() {
        let dims = [2, 3, 5, 4];
        for l in [Layout::bhsd(3, 5, 4), Layout::bshd(3, 5, 4)] {
            assert_eq!(l.extent(dims), Some(120));
            assert!(l.rows_disjoint(dims));
            let mut seen = [0u8; 120];
            for b in 0..2 {
                for h in 0..3 {
                    for s in 0..5 {
                        for d in 0..4 {
                            seen[l.row(b, h, s) + d] += 1;
                        }
                    }
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "{l:?}");
        }
    }

    #[test]
    fn fused_qkv_views_are_disjoint_and_reach_their_extent() {
        // [B=2, S=5, 3, H=4, D=8]: Q, K, V interleaved per position.
        let (b, s, h, d) = (2, 5, 4, 8);
        let row = 3 * h * d;
        let base = Layout {
            offset: 0,
            batch_stride: s * row,
            head_stride: d,
            seq_stride: row,
        };
        for which in 0..3 {
            let l = base.with_offset(which * h * d);
            assert!(l.rows_disjoint([b, h, s, d]));
            assert_eq!(
                l.extent([b, h, s, d]),
                Some(b * s * row - (2 - which) * h * d)
            );
        }
    }

    #[test]
    fn overlapping_rows_are_detected() {
        let d = 8;
        // seq stride shorter than a row
        let l = Layout {
            offset: 0,
            batch_stride: 1000,
            head_stride: 100,
            seq_stride: 4,
        };
        assert!(!l.rows_disjoint([1, 1, 2, d]));
        // a stride of 0 repeats rows
        let l = Layout {
            offset: 0,
            batch_stride: 0,
            head_stride: 8,
            seq_stride: 16,
        };
        assert!(!l.rows_disjoint([2, 2, 2, d]));
        // heads interleaved inside the sequence stride but colliding with the next position
        let l = Layout {
            offset: 0,
            batch_stride: 1000,
            head_stride: 8,
            seq_stride: 16,
        };
        assert!(!l.rows_disjoint([1, 3, 2, d]));
        assert!(l.rows_disjoint([1, 2, 2, d]));
        // size-1 dimensions may have any stride
        let l = Layout {
            offset: 0,
            batch_stride: 0,
            head_stride: 0,
            seq_stride: 8,
        };
        assert!(l.rows_disjoint([1, 1, 7, d]));
    }

    #[test]
    fn extent_overflow_is_none() {
        let l = Layout {
            offset: 1,
            batch_stride: usize::MAX,
            head_stride: 1,
            seq_stride: 1,
        };
        assert_eq!(l.extent([2, 1, 1, 1]), None);
        assert_eq!(l.extent([1, 1, 1, 1]), Some(2));
    }

    #[test]
    fn scatter_then_gather_is_the_identity() {
        let dims = [2, 3, 4, 5];
        let logical: Vec<u32> = (0..120).collect();
        let l = Layout::bshd(3, 4, 5).with_offset(7);
        let buf = scatter(&logical, dims, l, 7 + 120 + 3, u32::MAX);
        assert_eq!(buf[..7], [u32::MAX; 7]);
        assert_eq!(gather(&buf, dims, l), logical);
    }
}
