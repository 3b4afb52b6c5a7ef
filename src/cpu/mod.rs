//! The CPU `Exact` backend: the reference that defines the bits (docs/numerics.md).
//!
//! Fused (no `Sq × Skv` score matrix), row-parallel with rayon, vectorised by the compiler: the
//! score chains of a tile run side by side across 64 keys (§3), the value accumulation across the
//! head dimension (§4). Every output row is computed from its own inputs only, so the result does
//! not depend on the thread count or on how rows are grouped into work items (D2, D4, D5).
//! Nothing branches on a value; the only branches are on shapes, lengths and the causal flag.

mod kernel;
mod prepare;

use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::problem::{NonFinitePolicy, Problem};
use crate::tensor::{KvSource, Layout, QkvCache, Tensor, TensorMut, lse_len, reject_nonfinite};
use rayon::prelude::*;
use std::borrow::Cow;

/// Query rows per work item: large enough that a K/V tile staged in L1/L2 is reused by many rows.
const ROWS_PER_ITEM: usize = 16;

/// The largest private pool [`CpuBackend::with_threads`] builds. More threads than this only
/// cost memory and start-up time (the work is split into rows, not threads), and a request for
/// many thousands is far more likely a mistake than a plan.
pub const MAX_THREADS: usize = 1024;

/// The CPU backend. Holds an optional private thread pool; by default rayon's global pool.
#[derive(Debug, Default)]
pub struct CpuBackend {
    pool: Option<rayon::ThreadPool>,
}

impl CpuBackend {
    /// Use rayon's global pool.
    pub fn new() -> Self {
        CpuBackend { pool: None }
    }

    /// Use a private pool of exactly `threads` threads (1 gives a single-threaded run).
    /// `threads` must be in `1..=`[`MAX_THREADS`] ([`Error::DimensionOutOfRange`] otherwise: 0
    /// does not mean "the default" here, use [`CpuBackend::new`] for that).
    pub fn with_threads(threads: usize) -> Result<Self> {
        if !(1..=MAX_THREADS).contains(&threads) {
            return Err(Error::DimensionOutOfRange {
                name: "threads",
                value: threads,
                min: 1,
                max: MAX_THREADS,
            });
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| Error::ThreadPool {
                threads,
                reason: e.to_string(),
            })?;
        Ok(CpuBackend { pool: Some(pool) })
    }

    /// Threads this backend runs on.
    pub fn threads(&self) -> usize {
        self.pool
            .as_ref()
            .map_or_else(rayon::current_num_threads, |p| p.current_num_threads())
    }

    /// Compute into `out` (and the log-sum-exp into `lse`, `[B, Hq, Sq]`, when given). The
    /// tensors must already have passed [`crate::tensor::check_cache_call`].
    pub(crate) fn run<T: Element>(
        &self,
        p: &Problem,
        x: &QkvCache<'_, T>,
        out: TensorMut<'_, T>,
        lse: Option<&mut [f32]>,
    ) -> Result<()> {
        match &self.pool {
            Some(pool) => pool.install(|| run_in_pool(p, x, out, lse)),
            None => run_in_pool(p, x, out, lse),
        }
    }
}

/// The instruction set the CPU kernel uses on this machine (`portable`, `avx2+fma`, `avx512`).
/// Every variant computes the same bits (a unit test holds them equal); only the speed differs.
pub fn instruction_set() -> &'static str {
    kernel::Isa::best().name()
}

fn run_in_pool<'a, T: Element>(
    p: &Problem,
    x: &QkvCache<'a, T>,
    out: TensorMut<'_, T>,
    lse: Option<&mut [f32]>,
) -> Result<()> {
    if p.nonfinite() == NonFinitePolicy::Reject {
        reject_nonfinite(p, x)?;
    }
    let (k, v) = x.sources();
    let s = *p.shape();
    let d = s.head_dim;
    let TensorMut { data, layout } = out;
    let Some(varlen) = p.varlen() else {
        // The rows are computed into a contiguous [B, Hq, Sq, D] buffer (the output itself when
        // it has that layout), each from its own inputs, then placed: the layout moves bits, it
        // never changes them.
        let mut lse_rows = vec![0.0f32; lse_len(p)];
        let call = Call {
            p,
            q: x.q,
            k,
            v,
            mask: x.mask,
        };
        if layout == Layout::bhsd(s.q_heads, s.q_len, d) {
            compute(&call, &mut data[..s.q_elems()], &mut lse_rows);
        } else {
            let mut staged = vec![T::default(); s.q_elems()];
            compute(&call, &mut staged, &mut lse_rows);
            for (r, row) in staged.chunks_exact(d).enumerate() {
                let (b, h, i) = (
                    r / (s.q_heads * s.q_len),
                    (r / s.q_len) % s.q_heads,
                    r % s.q_len,
                );
                let o = layout.row(b, h, i);
                data[o..o + d].copy_from_slice(row);
            }
        }
        if let Some(l) = lse {
            l.copy_from_slice(&lse_rows);
        }
        return Ok(());
    };
    // A variable-length batch: each sequence is its own problem (batch 1, its own lengths: so its
    // rows are by construction those of the sequence computed alone), the sequences side by side,
    // then placed at their packed rows.
    let parts: Vec<(Vec<T>, Vec<f32>)> = (0..varlen.sequences())
        .into_par_iter()
        .map(|b| {
            let seq = p.sequence(b);
            let rows = s.q_heads * seq.q_len;
            let mut o = vec![T::default(); rows * d];
            let mut l = vec![0.0f32; rows];
            if rows > 0 {
                let sub = p.sequence_problem(b);
                let of = |src: &KvSource<'a, T>| KvSource {
                    rows: src.rows.of_sequence(p, b),
                    ..*src
                };
                let call = Call {
                    p: &sub,
                    q: Tensor::new(
                        x.q.data,
                        x.q.layout.with_offset(x.q.layout.row(0, 0, seq.q_start)),
                    ),
                    k: of(&k),
                    v: of(&v),
                    mask: None,
                };
                compute(&call, &mut o, &mut l);
            }
            (o, l)
        })
        .collect();
    let mut lse = lse;
    for (b, (o, l)) in parts.iter().enumerate() {
        let seq = p.sequence(b);
        for h in 0..s.q_heads {
            for i in 0..seq.q_len {
                let r = h * seq.q_len + i;
                let at = layout.row(0, h, seq.q_start + i);
                data[at..at + d].copy_from_slice(&o[r * d..(r + 1) * d]);
                if let Some(lse) = lse.as_deref_mut() {
                    lse[h * s.q_len + seq.q_start + i] = l[r];
                }
            }
        }
    }
    Ok(())
}

/// One problem's inputs as the kernel reads them (for a variable-length batch, one sequence's).
struct Call<'a, T> {
    p: &'a Problem,
    q: Tensor<'a, T>,
    k: KvSource<'a, T>,
    v: KvSource<'a, T>,
    mask: Option<&'a [bool]>,
}

/// Every row of `c` into `dense` (contiguous `[B, Hq, Sq, D]`) and its log-sum-exp into `lse`
/// (`[B, Hq, Sq]`).
fn compute<T: Element>(c: &Call<'_, T>, dense: &mut [T], lse: &mut [f32]) {
    let (p, x) = (c.p, &c.q);
    let s = *p.shape();
    let d = s.head_dim;
    // One prepared copy of each (batch, KV head), shared by its query heads (GQA/MQA). Only the
    // rows below the key length are staged: the others are invalid by position (§4), so leaving
    // them out changes no bit, and a paged cache has no place for them.
    let prepared: Vec<prepare::PreparedKv> = (0..s.batch * s.kv_heads)
        .into_par_iter()
        .map(|bh| {
            let (b, h) = (bh / s.kv_heads, bh % s.kv_heads);
            let (k, v) = (c.k, c.v);
            kernel::prepare_kv(
                |j| k.row(b, h, j, d),
                |j| v.row(b, h, j, d),
                p.kv_len_of(b),
                d,
            )
        })
        .collect();

    let head_len = s.q_len * d;
    dense
        .par_chunks_mut(head_len)
        .zip(lse.par_chunks_mut(s.q_len))
        .enumerate()
        .for_each(|(bh, (out_head, lse_head))| {
            let (b, h) = (bh / s.q_heads, bh % s.q_heads);
            let kv = &prepared[b * s.kv_heads + h / s.group()];
            let q_head: Cow<'_, [T]> =
                if x.layout.head_stride == d * s.q_len && x.layout.seq_stride == d {
                    let r = x.layout.row(b, h, 0);
                    Cow::Borrowed(&x.data[r..r + head_len])
                } else {
                    Cow::Owned(
                        (0..s.q_len)
                            .flat_map(|i| {
                                let r = x.layout.row(b, h, i);
                                x.data[r..r + d].iter().copied()
                            })
                            .collect(),
                    )
                };
            out_head
                .par_chunks_mut(ROWS_PER_ITEM * d)
                .zip(lse_head.par_chunks_mut(ROWS_PER_ITEM))
                .enumerate()
                .for_each(|(blk, (out_rows, lse_rows))| {
                    let i0 = blk * ROWS_PER_ITEM;
                    let rows = out_rows.len() / d;
                    let q_rows = &q_head[i0 * d..(i0 + rows) * d];
                    let item = kernel::Item {
                        problem: p,
                        b,
                        h,
                        i0,
                        rows,
                        kv,
                        mask: c.mask,
                    };
                    kernel::run_item(&item, q_rows, out_rows, lse_rows);
                });
        });
}
