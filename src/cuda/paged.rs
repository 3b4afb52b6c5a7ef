//! Paged KV caches in device memory, where the path does not read the pages itself
//! (`GpuPath::reads_pages`: every call but the TensorCore decode kernels'): the rows a problem
//! reads are gathered, on the caller's stream, into the contiguous `[B, Hkv, Skv, D]` tensors the
//! cache stands for (zero elsewhere), and the path then runs on those (`entry::run_device_paged`).
//! A paged cache is a layout, so the bits are the contiguous ones by construction, on both paths
//! and with a variable-length batch. The price: one extra read and write of the used rows, and
//! device memory for two contiguous tensors.
//!
//! The gather kernel (`detattn_kv_gather_*`, kernels/exact.cu) lives in the Exact module, which
//! every backend loads, and serves both paths. Its addresses depend on the block table and the
//! sequences' rows and lengths only (public); it copies values without looking at them.

use super::launch::{Kernel, Launch, Module, ParamBytes, within_grid_yz};
use crate::error::{Error, Result};
use crate::problem::Problem;
use crate::tensor::{Layout, Paging};

/// Threads of one gather block (`GATHER_THREADS` in kernels/exact.cu).
const THREADS: u32 = 256;
/// Rows one gather block copies (`GATHER_ROWS`).
const ROWS: usize = 32;

/// The kernel's one parameter (`struct Gather` in kernels/exact.cu, same field order; the byte
/// ranges of its audit/rules.toml entry: src 0, dst 8, table 16, seqs 24, strides from 32).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
struct GatherArgs {
    src: u64,
    dst: u64,
    table: u64,
    seqs: u64,
    p_bs: i64,
    p_hs: i64,
    p_ss: i64,
    s: i32,
    hkv: i32,
    skv: i32,
    units: i32,
    max_pages: i32,
    page_shift: i32,
}

/// The gather kernels: copying in 2-byte units, or 16-byte units where every address and stride
/// allows.
#[derive(Debug)]
pub(crate) struct Gather {
    by_unit: [Kernel; 2],
}

/// Where one tensor of pages lies: its address (the layout's offset folded in) and its layout's
/// element strides.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pages {
    pub addr: u64,
    pub layout: Layout,
}

impl Gather {
    pub(crate) fn open(module: &Module) -> Result<Gather> {
        let abi = [std::mem::size_of::<GatherArgs>()];
        Ok(Gather {
            by_unit: [
                module.kernel("detattn_kv_gather_u16", 0, &abi)?,
                module.kernel("detattn_kv_gather_u128", 0, &abi)?,
            ],
        })
    }

    /// The `[sequences, 3]` ints the kernel reads per sequence: the batch element its rows go to,
    /// its first row there, its key length (public, like the block table).
    pub(crate) fn sequences(p: &Problem) -> Vec<i32> {
        (0..p.sequences())
            .flat_map(|b| {
                let q = p.sequence(b);
                [q.batch as i32, q.k_start as i32, q.key_len as i32]
            })
            .collect()
    }

    /// The launch copying the rows `p` reads of `src` (a paged cache's K or V, `elem` bytes per
    /// element, described by `paging`) into `dst`, contiguous `[B, Hkv, Skv, D]`. `table` and
    /// `seqs` are the device copies of `paging.block_table` and [`Gather::sequences`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch(
        &self,
        p: &Problem,
        paging: &Paging<'_>,
        elem: usize,
        src: Pages,
        dst: u64,
        table: u64,
        seqs: u64,
    ) -> Result<Launch> {
        let s = p.shape();
        within_grid_yz(&[("sequences", p.sequences()), ("kv_heads", s.kv_heads)])?;
        let l = src.layout;
        let row_bytes = s.head_dim * elem;
        let wide = [
            row_bytes,
            l.batch_stride * elem,
            l.head_stride * elem,
            l.seq_stride * elem,
        ]
        .iter()
        .all(|b| b.is_multiple_of(16))
            && src.addr.is_multiple_of(16)
            && dst.is_multiple_of(16);
        let unit = if wide { 16 } else { 2 };
        let per = |stride: usize| (stride * elem / unit) as i64;
        let too_large = |what: &str| Error::Cuda {
            op: "launch planning",
            message: format!("{what} exceeds what the gather kernel indexes (2^31 - 1)"),
        };
        let int = |x: usize, what: &str| i32::try_from(x).map_err(|_| too_large(what));
        let longest = (0..p.sequences())
            .map(|b| p.sequence(b).key_len)
            .max()
            .unwrap_or(0);
        let args = GatherArgs {
            src: src.addr,
            dst,
            table,
            seqs,
            p_bs: per(l.batch_stride),
            p_hs: per(l.head_stride),
            p_ss: per(l.seq_stride),
            s: int(p.sequences(), "sequences")?,
            hkv: int(s.kv_heads, "kv_heads")?,
            skv: int(s.kv_len, "kv_len")?,
            units: int(row_bytes / unit, "a row")?,
            max_pages: int(paging.max_pages, "max_pages")?,
            page_shift: paging.page_size.trailing_zeros() as i32,
        };
        let blocks = longest.div_ceil(ROWS).max(1);
        Ok(Launch {
            kernel: self.by_unit[usize::from(wide)].clone(),
            grid: (
                u32::try_from(blocks).map_err(|_| too_large("kv_len"))?,
                s.kv_heads as u32,
                p.sequences() as u32,
            ),
            block: THREADS,
            smem: 0,
            params: ParamBytes::one(&args),
            early: false,
        })
    }
}
