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
use crate::tensor::{Layout, Qkv, TensorMut, reject_nonfinite};
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

    /// Compute into `out`. The tensors must already have passed [`crate::tensor::check_call`].
    pub(crate) fn run<T: Element>(
        &self,
        p: &Problem,
        x: &Qkv<'_, T>,
        out: TensorMut<'_, T>,
    ) -> Result<()> {
        match &self.pool {
            Some(pool) => pool.install(|| run_in_pool(p, x, out)),
            None => run_in_pool(p, x, out),
        }
    }
}

/// The instruction set the CPU kernel uses on this machine (`portable`, `avx2+fma`, `avx512`).
/// Every variant computes the same bits (a unit test holds them equal); only the speed differs.
pub fn instruction_set() -> &'static str {
    kernel::Isa::best().name()
}

fn run_in_pool<T: Element>(p: &Problem, x: &Qkv<'_, T>, out: TensorMut<'_, T>) -> Result<()> {
    if p.nonfinite() == NonFinitePolicy::Reject {
        reject_nonfinite(p, x)?;
    }
    let s = *p.shape();
    let d = s.head_dim;
    // One prepared copy of each (batch, KV head), shared by its query heads (GQA/MQA).
    let prepared: Vec<prepare::PreparedKv> = (0..s.batch * s.kv_heads)
        .into_par_iter()
        .map(|bh| {
            let (b, h) = (bh / s.kv_heads, bh % s.kv_heads);
            let (k, v) = (x.k, x.v);
            kernel::prepare_kv(
                |j| &k.data[k.layout.row(b, h, j)..][..d],
                |j| &v.data[v.layout.row(b, h, j)..][..d],
                s.kv_len,
                d,
            )
        })
        .collect();

    // The rows are computed into a contiguous [B, Hq, Sq, D] buffer (the output itself when it
    // has that layout), each from its own inputs, then placed: the layout moves bits, it never
    // changes them.
    let head_len = s.q_len * d;
    let compute = |dense: &mut [T]| {
        dense
            .par_chunks_mut(head_len)
            .enumerate()
            .for_each(|(bh, out_head)| {
                let (b, h) = (bh / s.q_heads, bh % s.q_heads);
                let kv = &prepared[b * s.kv_heads + h / s.group()];
                let q_head: Cow<'_, [T]> =
                    if x.q.layout.head_stride == d * s.q_len && x.q.layout.seq_stride == d {
                        let r = x.q.layout.row(b, h, 0);
                        Cow::Borrowed(&x.q.data[r..r + head_len])
                    } else {
                        Cow::Owned(
                            (0..s.q_len)
                                .flat_map(|i| {
                                    let r = x.q.layout.row(b, h, i);
                                    x.q.data[r..r + d].iter().copied()
                                })
                                .collect(),
                        )
                    };
                out_head
                    .par_chunks_mut(ROWS_PER_ITEM * d)
                    .enumerate()
                    .for_each(|(blk, out_rows)| {
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
                            mask: x.mask,
                        };
                        kernel::run_item(&item, q_rows, out_rows);
                    });
            });
    };
    let TensorMut { data, layout } = out;
    if layout == Layout::bhsd(s.q_heads, s.q_len, d) {
        compute(&mut data[..s.q_elems()]);
    } else {
        let mut staged = vec![T::default(); s.q_elems()];
        compute(&mut staged);
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
    Ok(())
}
