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
use crate::error::{Error, Result, TensorName};
use crate::problem::{NonFinitePolicy, Problem};
use rayon::prelude::*;

/// Query rows per work item: large enough that a K/V tile staged in L1/L2 is reused by many rows.
const ROWS_PER_ITEM: usize = 16;

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
    pub fn with_threads(threads: usize) -> Result<Self> {
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

    /// Compute into `out`. Inputs must already have passed [`Problem::check_inputs`] and
    /// [`Problem::check_output`].
    pub(crate) fn run<T: Element>(
        &self,
        p: &Problem,
        q: &[T],
        k: &[T],
        v: &[T],
        mask: Option<&[bool]>,
        out: &mut [T],
    ) -> Result<()> {
        match &self.pool {
            Some(pool) => pool.install(|| run_in_pool(p, q, k, v, mask, out)),
            None => run_in_pool(p, q, k, v, mask, out),
        }
    }
}

/// The instruction set the CPU kernel uses on this machine (`portable`, `avx2+fma`, `avx512`).
/// Every variant computes the same bits (a unit test holds them equal); only the speed differs.
pub fn instruction_set() -> &'static str {
    kernel::Isa::best().name()
}

/// Under `Reject`: read every element of q, k and v, then decide once (numerics.md §7).
pub(crate) fn reject_nonfinite<T: Element>(q: &[T], k: &[T], v: &[T]) -> Result<()> {
    let scan = |xs: &[T]| -> u32 {
        xs.par_chunks(1 << 16)
            .map(|c| {
                c.iter()
                    .fold(0u32, |a, x| a | crate::numerics::nonfinite_mask(x.to_f32()))
            })
            .reduce(|| 0, |a, b| a | b)
    };
    let flags = [
        (TensorName::Q, scan(q)),
        (TensorName::K, scan(k)),
        (TensorName::V, scan(v)),
    ];
    match flags.iter().find(|(_, f)| *f != 0) {
        Some((tensor, _)) => Err(Error::NonFinite { tensor: *tensor }),
        None => Ok(()),
    }
}

fn run_in_pool<T: Element>(
    p: &Problem,
    q: &[T],
    k: &[T],
    v: &[T],
    mask: Option<&[bool]>,
    out: &mut [T],
) -> Result<()> {
    if p.nonfinite() == NonFinitePolicy::Reject {
        reject_nonfinite(q, k, v)?;
    }
    let s = *p.shape();
    let kv_stride = s.kv_len * s.head_dim;
    // One prepared copy of each (batch, KV head), shared by its query heads (GQA/MQA).
    let prepared: Vec<prepare::PreparedKv> = (0..s.batch * s.kv_heads)
        .into_par_iter()
        .map(|bh| {
            let r = bh * kv_stride..(bh + 1) * kv_stride;
            prepare::PreparedKv::new(&k[r.clone()], &v[r], s.kv_len, s.head_dim)
        })
        .collect();

    let row_len = s.head_dim;
    let head_len = s.q_len * row_len;
    out.par_chunks_mut(head_len)
        .enumerate()
        .for_each(|(bh, out_head)| {
            let (b, h) = (bh / s.q_heads, bh % s.q_heads);
            let kv = &prepared[b * s.kv_heads + h / s.group()];
            let q_head = &q[bh * head_len..(bh + 1) * head_len];
            out_head
                .par_chunks_mut(ROWS_PER_ITEM * row_len)
                .enumerate()
                .for_each(|(blk, out_rows)| {
                    let i0 = blk * ROWS_PER_ITEM;
                    let rows = out_rows.len() / row_len;
                    let q_rows = &q_head[i0 * row_len..(i0 + rows) * row_len];
                    let item = kernel::Item {
                        problem: p,
                        b,
                        h,
                        i0,
                        rows,
                        kv,
                        mask,
                    };
                    kernel::run_item(&item, q_rows, out_rows);
                });
        });
    Ok(())
}
