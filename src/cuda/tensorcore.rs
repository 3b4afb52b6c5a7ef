//! The `TensorCore` path on a GPU: the kernels of `kernels/tensorcore.cu` (design, operation
//! sequence and measured figures: docs/tensorcore.md).
//!
//! What it promises: f16/bf16 inputs, head_dim 64, 128 or 256, causal (either alignment),
//! per-batch key lengths, GQA/MQA, a boolean mask, any layout whose offsets and strides are
//! multiples of 8 elements; on one GPU architecture the output bits of a row depend only on that
//! row's own data (not on the run, the batch around it, decode or prefill, the other query rows
//! computed with it, the layout or the stream). What it does not: the bits are not the CPU's nor
//! the `Exact` path's (the error against `Exact` is bounded, docs/tensorcore.md), and they may
//! differ between architectures (golden digests are recorded per architecture).
//!
//! The keys are split into chunks of `tc_kchunk` (2048) keys, a constant of the bits
//! (docs/tensorcore-numerics.md §9). With more keys than that, a decode call with fewer than
//! [`DECODE_WHOLE_BLOCKS`] (batch × kv head) blocks splits: one block per (chunk, kv head, batch
//! element), then a merge launch that folds the chunks in order; with more, each block walks its
//! chunks and folds them itself. A prefill call on the TMA kernels (sm_90) is one launch whose
//! blocks walk their chunks, folding each into a state in scratch; on the others it is one launch
//! per chunk, in order, each folding its chunk into the state the previous one left there. Up to
//! one chunk of keys, a call is one attention launch. Every choice is the shape's, and none
//! changes a bit.
//!
//! A paged K/V cache on the device entry (`entry::run_device_paged`) is read through its block
//! table by the paged decode kernels (`tc_decp_*`, the same operations on rows found through the
//! table: the same bits) and by the scan and copies of the policy kernels (only the rows the
//! sequences use); prefill calls and the Blackwell cubins (no `tc_decp_*`) gather those rows first.
//!
//! Around the attention launches run the policy kernels where the `NonFinitePolicy`
//! needs them (docs/tensorcore.md, "Non-finite inputs"): `Check` is the flag scan of q, k, v and
//! their reduction to three words; under `Propagate`, `Compute` makes sanitised contiguous copies
//! with per-row flags, finds the first bad key per kv head (no mask), runs the kernel on the
//! copies and writes the canonical NaN over exactly the affected rows. Every launch is the same
//! whatever the values: only the policy and the shape choose them.

use super::launch::{
    Kernel, Launch, Module, ParamBytes, driver_version, tensor_map_2byte, within_grid_yz,
};
use super::path::{DevTensor, GpuPath, Io, PagedIo, Step};
use super::unread_pages;
use crate::dtype::DType;
use crate::error::{Error, Result, TensorName};
use crate::path::Path;
use crate::problem::{CausalAlign, NonFinitePolicy, Problem};
use crate::tensor::Operands;
use bytemuck::{Pod, Zeroable};

/// The head dims the `TensorCore` kernels are built for.
pub const TENSORCORE_HEAD_DIMS: [usize; 3] = [64, 128, 256];
const HEAD_DIMS_TEXT: &str = "64, 128, 256";
/// Threads per block of the sanitize, first-bad and poison kernels; of the flag reduction.
const POLICY_THREADS: u32 = 256;
const ANY_THREADS: u32 = 1024;
/// Output rows per poison block (one warp each).
const POISON_ROWS: usize = POLICY_THREADS as usize / 32;
/// Elements of one 16-byte chunk, the unit the kernels copy.
const CHUNK: usize = 8;
/// Rows of a decode partial record (the decode kernel's BM).
const DECODE_ROWS: usize = 16;
/// Decode blocks (batch × kv heads) from which one block per kv head fills the GPU (two per SM of
/// an H100, the decode kernels' occupancy): from there a decode call walks every key chunk in one
/// block, folding in registers, rather than splitting the keys over blocks and merging (same
/// bits; no partials through memory, no merge launch).
const DECODE_WHOLE_BLOCKS: usize = 256;
/// Bytes of a TMA descriptor (`CUtensorMap`).
const TMA_MAP_BYTES: usize = 128;
/// Keys per K/V tile of the TMA prefill kernels (`BN`) and columns per box (one 128-byte swizzle
/// panel of 2-byte elements).
const TMA_TILE_ROWS: u32 = 64;
const TMA_BOX_COLS: u32 = 64;

/// A kernel family's launch configuration, read from the cubin (`tc_cfg_d<D>`, `tc_cfg_dec_d<D>`).
#[derive(Clone, Copy, Debug)]
struct Cfg {
    /// Query rows per block.
    bm: usize,
    threads: u32,
    smem: u32,
}

/// The loaded `TensorCore` kernels of one device.
#[derive(Debug)]
pub(crate) struct TensorCore {
    /// `[dtype: f16, bf16][head dim: 64, 128, 256][causal: no, yes]`.
    fwd: [[[Kernel; 2]; 3]; 2],
    dec: [[[Kernel; 2]; 3]; 2],
    /// The decode kernels reading a paged cache through its block table (`tc_decp_*`), where the
    /// cubin has them (`tc_paged`: not on sm_100/sm_120, whose ptxas spilled them).
    decp: Option<[[[Kernel; 2]; 3]; 2]>,
    cfg_fwd: [Cfg; 3],
    cfg_dec: [Cfg; 3],
    /// The prefill kernels fed by TMA, where the cubin has them (`tc_tma`: sm_90a).
    tma: Option<Tma>,
    /// `[dtype: f16, bf16]`.
    sanitize: [Kernel; 2],
    /// `Reject`'s scan (`tc_scan_*`, one word a block), and its launch shape read from the cubin
    /// (`tc_scan_cfg`).
    scan: [Kernel; 2],
    scan_cfg: ScanCfg,
    poison: [Kernel; 2],
    merge: [Kernel; 2],
    /// The decode kernels let a split decode's merge launch early and the merge waits for them
    /// (`tc_pdl`: sm_90 and later), and the driver has cuLaunchKernelEx (CUDA 12.0 and later), so
    /// every split decode's merge goes with [`Launch::early`].
    pdl: bool,
    /// The device's streaming multiprocessors: the most blocks worth walking query tiles (the
    /// TMA prefill, [`tma_grid`]).
    sms: usize,
    /// Keys per chunk of the key split (`tc_kchunk`).
    kchunk: usize,
    first_bad: Kernel,
    any_flag: Kernel,
}

/// The launch shape of `tc_scan_*` (`tc_scan_cfg`): each block ORs `units` 16-byte units of its
/// tensor into one word, with `threads` threads.
#[derive(Clone, Copy, Debug)]
struct ScanCfg {
    units: usize,
    threads: u32,
}

impl ScanCfg {
    /// The blocks of the scans of Q, K and V of `p`, the words each writes: `Reject`'s flags
    /// buffer holds them back to back.
    fn words(&self, p: &Problem) -> [usize; 3] {
        let s = p.shape();
        let units = |rows: usize| (rows * (s.head_dim / CHUNK)).div_ceil(self.units);
        let kv = units(s.batch * s.kv_heads * s.kv_len);
        [units(s.batch * s.q_heads * s.q_len), kv, kv]
    }
}

/// The sm_90a prefill kernels whose K and V tiles a producer warpgroup moves by TMA (`tc_fwdt_*`,
/// kernels/tensorcore.cu): `[dtype: f16, bf16][head dim: 64, 128][causal: no, yes]`, and their
/// launch configurations (`tc_cfg_tma_d<D>`). The same bits as `tc_fwd_*`; a call takes them where
/// K's and V's layouts suit a tensor map (public facts: addresses and strides), else `tc_fwd_*`.
#[derive(Debug)]
struct Tma {
    fwd: [[[Kernel; 2]; 2]; 2],
    cfg: [Cfg; 2],
}

/// The grid of a TMA prefill launch (kernels/tensorcore.cu, `fwd_tma`): its blocks walk the query
/// tiles (`tiles` in all, `nqt` a head; a causal head's in pairs of about equal work, the heaviest
/// and the lightest left), at most one block per SM. A causal walk that would leave the blocks more
/// than 1/16 apart (pairs per block, rounded up, against their mean) takes a block per query tile
/// instead, heaviest first, as the other kernels do: the hardware's scheduling of unequal tiles then
/// fills the last wave better than whole pairs could. Scheduling only: no bit depends on the grid.
fn tma_grid(tiles: usize, nqt: usize, causal: bool, sms: usize) -> usize {
    let units = if causal {
        tiles / nqt.max(1) * nqt.div_ceil(2)
    } else {
        tiles
    };
    let grid = units.min(sms).max(1);
    if causal && units > grid && 16 * units.div_ceil(grid) * grid > 17 * units {
        return tiles;
    }
    grid
}

/// Which kernel a problem runs, from its shape alone.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    dt: usize,
    di: usize,
    decode: bool,
}

/// The attention kernels' parameters, in order (kernels/tensorcore.cu, `TcArgs`; the kernels take
/// them one by one). Change both together, and the `tc*_*` entry of audit/rules.toml.
#[derive(Clone, Copy, Debug, Default)]
struct TcArgs {
    q: u64,
    k: u64,
    v: u64,
    o: u64,
    kv_lens: u64,
    mask: u64,
    q_bs: i64,
    q_hs: i64,
    k_bs: i64,
    k_hs: i64,
    v_bs: i64,
    v_hs: i64,
    o_bs: i64,
    o_hs: i64,
    msb: i64,
    msh: i64,
    msq: i64,
    q_ss: i32,
    k_ss: i32,
    v_ss: i32,
    o_ss: i32,
    b: i32,
    hq: i32,
    hkv: i32,
    sq: i32,
    skv: i32,
    scale: f32,
    top_left: i32,
    part: u64,
    chunk: i32,
    lse: u64,
    lse_bs: i64,
    lse_hs: i64,
    table: u64,
    page_shift: i32,
    max_pages: i32,
}

impl TcArgs {
    /// Each parameter's bytes, in the kernels' order.
    fn params(&self) -> ParamBytes {
        let a = self;
        // Room for the TMA prefill's two 128-byte tensor maps after the 36 fields.
        let mut p = ParamBytes::with_capacity(38, 2 * 128 + std::mem::size_of::<TcArgs>());
        p.push(&a.q)
            .push(&a.k)
            .push(&a.v)
            .push(&a.o)
            .push(&a.kv_lens)
            .push(&a.mask)
            .push(&a.q_bs)
            .push(&a.q_hs)
            .push(&a.k_bs)
            .push(&a.k_hs)
            .push(&a.v_bs)
            .push(&a.v_hs)
            .push(&a.o_bs)
            .push(&a.o_hs)
            .push(&a.msb)
            .push(&a.msh)
            .push(&a.msq)
            .push(&a.q_ss)
            .push(&a.k_ss)
            .push(&a.v_ss)
            .push(&a.o_ss)
            .push(&a.b)
            .push(&a.hq)
            .push(&a.hkv)
            .push(&a.sq)
            .push(&a.skv)
            .push(&a.scale)
            .push(&a.top_left)
            .push(&a.part)
            .push(&a.chunk)
            .push(&a.lse)
            .push(&a.lse_bs)
            .push(&a.lse_hs)
            .push(&a.table)
            .push(&a.page_shift)
            .push(&a.max_pages);
        p
    }
}

/// The one by-value parameter of the `tc_sanitize_*`, `tc_scan_*`, `tc_first_bad`, `tc_poison_*`
/// and `tc_any_flag` kernels: field for field the `TcPolicy` struct of kernels/tensorcore.cu (11
/// device addresses, 11 `long long`s, 10 `int`s, then the log-sum-exp's address and its 2
/// `long long` strides, the block table's address and 2 `int`s: 256 bytes). Change both
/// together, and the byte ranges of their audit/rules.toml entries.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
struct TcPolicy {
    src: u64,
    dst: u64,
    flags: u64,
    badq: u64,
    badk: u64,
    badv: u64,
    firstbad: u64,
    out: u64,
    mask: u64,
    kv_lens: u64,
    words: u64,
    rows: i64,
    rows_kv: i64,
    msb: i64,
    msh: i64,
    msq: i64,
    s_bs: i64,
    s_hs: i64,
    s_ss: i64,
    o_bs: i64,
    o_hs: i64,
    o_ss: i64,
    d: i32,
    b: i32,
    hq: i32,
    hkv: i32,
    sq: i32,
    skv: i32,
    causal: i32,
    top_left: i32,
    s_heads: i32,
    s_seq: i32,
    lse: u64,
    lse_bs: i64,
    lse_hs: i64,
    table: u64,
    page_shift: i32,
    max_pages: i32,
}

const _: () = assert!(std::mem::size_of::<TcPolicy>() == 256);

/// The one by-value parameter of `tc_merge_*`: field for field the `TcMerge` struct of
/// kernels/tensorcore.cu (104 bytes; `_pad` is the padding before `lse`). Change both together, and
/// the byte ranges of its audit/rules.toml entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
struct TcMerge {
    part: u64,
    o: u64,
    kv_lens: u64,
    o_bs: i64,
    o_hs: i64,
    o_ss: i32,
    hq: i32,
    hkv: i32,
    sq: i32,
    skv: i32,
    d: i32,
    nch: i32,
    causal: i32,
    top_left: i32,
    _pad: i32,
    lse: u64,
    lse_bs: i64,
    lse_hs: i64,
}

const _: () = assert!(std::mem::size_of::<TcMerge>() == 104);

fn dtype_index(dtype: DType) -> Result<usize> {
    match dtype {
        DType::F16 => Ok(0),
        DType::Bf16 => Ok(1),
        DType::F32 => Err(Error::DTypeUnsupported {
            path: Path::TensorCore,
            dtype,
            supported: "f16, bf16",
        }),
    }
}

fn too_large(what: &str) -> Error {
    Error::Cuda {
        op: "launch planning",
        message: format!("{what} exceeds what the tensorcore kernels index (2^31 - 1)"),
    }
}

/// Every check of the `TensorCore` path beyond the problem's and the tensors' own validation,
/// before any work, without a GPU: element type, head dim, launch limits, and (given the operands)
/// the alignment of their layouts. For tools that report them on any machine.
pub(crate) fn validate(p: &Problem, dtype: DType, ops: Option<&Operands>) -> Result<Plan> {
    let dt = dtype_index(dtype)?;
    let s = p.shape();
    let di = TENSORCORE_HEAD_DIMS
        .iter()
        .position(|&d| d == s.head_dim)
        .ok_or(Error::HeadDimUnsupported {
            path: Path::TensorCore,
            head_dim: s.head_dim,
            supported: HEAD_DIMS_TEXT,
        })?;
    within_grid_yz(&[("batch", s.batch), ("q_heads", s.q_heads)])?;
    // The kernels index heads as `int` (b·Hq + h), and the policy kernels rows as 32-bit.
    let lim = i32::MAX as usize;
    if s.batch * s.q_heads > lim {
        return Err(too_large("batch × q_heads"));
    }
    let rows = (s.batch * s.q_heads * s.q_len).max(s.batch * s.kv_heads * s.kv_len);
    if rows > lim || (rows * (s.head_dim / CHUNK)).div_ceil(POLICY_THREADS as usize) > lim {
        return Err(too_large("the rows of q, k or v"));
    }
    if let Some(ops) = ops {
        for (tensor, op) in [
            (TensorName::Q, ops.q),
            (TensorName::K, ops.k),
            (TensorName::V, ops.v),
            (TensorName::Out, ops.out),
        ] {
            let l = op.layout;
            let bad = [l.offset, l.batch_stride, l.head_stride, l.seq_stride]
                .iter()
                .any(|x| x % CHUNK != 0);
            if bad {
                return Err(Error::Misaligned {
                    path: Path::TensorCore,
                    tensor,
                    need: "offsets and strides that are multiples of 8 elements (16 bytes)",
                    what: l.describe(),
                });
            }
            if l.seq_stride > lim {
                return Err(Error::Misaligned {
                    path: Path::TensorCore,
                    tensor,
                    need: "a row stride below 2^31 elements",
                    what: l.describe(),
                });
            }
        }
    }
    Ok(Plan {
        dt,
        di,
        decode: false,
    })
}

impl TensorCore {
    /// Look up the kernels of `module` (24 attention, 12 paged decode where `tc_paged` says the
    /// cubin has them, 10 policy and merge) and read the attention kernels' launch configurations.
    pub(crate) fn open(module: &Module) -> Result<TensorCore> {
        let read = |name: &str| -> Result<Cfg> {
            let [bm, threads, smem, _bn] = module.constant_i32::<4>(name)?;
            Ok(Cfg {
                bm: bm as usize,
                threads: threads as u32,
                smem: smem as u32,
            })
        };
        let cfg_fwd = [
            read("tc_cfg_d64")?,
            read("tc_cfg_d128")?,
            read("tc_cfg_d256")?,
        ];
        let cfg_dec = [
            read("tc_cfg_dec_d64")?,
            read("tc_cfg_dec_d128")?,
            read("tc_cfg_dec_d256")?,
        ];
        // The attention kernels take the fields of TcArgs one by one; the policy kernels one
        // TcPolicy.
        let abi = TcArgs::default().params().sizes();
        let policy_abi = [std::mem::size_of::<TcPolicy>()];
        let merge_abi = [std::mem::size_of::<TcMerge>()];
        let [kchunk] = module.constant_i32::<1>("tc_kchunk")?;
        let [paged] = module.constant_i32::<1>("tc_paged")?;
        let [tma] = module.constant_i32::<1>("tc_tma")?;
        let [pdl] = module.constant_i32::<1>("tc_pdl")?;
        let [scan_units, scan_threads] = module.constant_i32::<2>("tc_scan_cfg")?;
        if scan_units <= 0 || scan_threads <= 0 {
            return Err(Error::Cuda {
                op: "cubin launch table",
                message: format!(
                    "tc_scan_cfg is [{scan_units}, {scan_threads}] in the tensorcore cubin (want > 0)"
                ),
            });
        }
        if kchunk <= 0 {
            return Err(Error::Cuda {
                op: "cubin launch table",
                message: format!("tc_kchunk is {kchunk} in the tensorcore cubin (want > 0)"),
            });
        }
        let family = |stem: &str, cfg: &[Cfg; 3]| kernel_table(module, stem, cfg, &abi);
        let by_dt = |stem: &str, abi: &[usize]| -> Result<[Kernel; 2]> {
            Ok([
                module.kernel(&format!("{stem}_f16"), 0, abi)?,
                module.kernel(&format!("{stem}_bf16"), 0, abi)?,
            ])
        };
        let tma = match tma {
            0 => None,
            _ => {
                let cfg = [read("tc_cfg_tma_d64")?, read("tc_cfg_tma_d128")?];
                // TcArgs's fields, then the tensor maps of K and V (128 bytes each).
                let tabi: Vec<usize> = abi.iter().copied().chain([TMA_MAP_BYTES; 2]).collect();
                Some(Tma {
                    fwd: kernel_table(module, "tc_fwdt", &cfg, &tabi)?,
                    cfg,
                })
            }
        };
        Ok(TensorCore {
            fwd: family("tc_fwd", &cfg_fwd)?,
            dec: family("tc_dec", &cfg_dec)?,
            decp: match paged {
                0 => None,
                _ => Some(family("tc_decp", &cfg_dec)?),
            },
            cfg_fwd,
            cfg_dec,
            tma,
            sanitize: by_dt("tc_sanitize", &policy_abi)?,
            scan: by_dt("tc_scan", &policy_abi)?,
            scan_cfg: ScanCfg {
                units: scan_units as usize,
                threads: scan_threads as u32,
            },
            poison: by_dt("tc_poison", &policy_abi)?,
            merge: by_dt("tc_merge", &merge_abi)?,
            // cuLaunchKernelEx, which the early launch goes through, is CUDA 12.0's: an older driver
            // lacks the symbol (cudarc would panic), so there the merge is an ordinary launch.
            pdl: pdl != 0 && driver_version()? >= 12000,
            sms: module.sm_count()?,
            kchunk: kchunk as usize,
            first_bad: module.kernel("tc_first_bad", 0, &policy_abi)?,
            any_flag: module.kernel("tc_any_flag", 0, &policy_abi)?,
        })
    }
}

/// The kernels `{stem}_{f16,bf16}_d{D}[_causal]` of the first `N` head dims of
/// [`TENSORCORE_HEAD_DIMS`], as `[dtype][head dim][causal: no, yes]`, each allowed its head dim's
/// shared memory and checked against the parameter sizes `abi`.
fn kernel_table<const N: usize>(
    module: &Module,
    stem: &str,
    cfg: &[Cfg; N],
    abi: &[usize],
) -> Result<[[[Kernel; 2]; N]; 2]> {
    let one = |dt: &str, di: usize, causal: bool| {
        let d = TENSORCORE_HEAD_DIMS[di];
        let c = if causal { "_causal" } else { "" };
        module.kernel(&format!("{stem}_{dt}_d{d}{c}"), cfg[di].smem, abi)
    };
    let by_d = |dt: &str| -> Result<[[Kernel; 2]; N]> {
        let v = (0..N)
            .map(|di| Ok([one(dt, di, false)?, one(dt, di, true)?]))
            .collect::<Result<Vec<_>>>()?;
        // N entries by construction; the conversion cannot fail.
        v.try_into().map_err(|_| Error::Cuda {
            op: "cubin launch table",
            message: format!("{stem}: kernel table of the wrong length"),
        })
    };
    Ok([by_d("f16")?, by_d("bf16")?])
}

/// The byte strides (row, head, batch) of a tensor of 2-byte elements as a tensor map takes them,
/// where its layout suits one: a 16-byte aligned address and positive strides of whole 16-byte
/// units. `None` otherwise (the call then runs the `cp.async` kernels).
fn tma_strides(t: &DevTensor) -> Option<[u64; 3]> {
    let bytes = [t.ss, t.hs, t.bs].map(|x| u64::try_from(x).ok().map(|x| 2 * x));
    let [Some(ss), Some(hs), Some(bs)] = bytes else {
        return None;
    };
    let ok = |x: u64| x > 0 && x.is_multiple_of(16);
    (t.addr.is_multiple_of(16) && ok(ss) && ok(hs) && ok(bs)).then_some([ss, hs, bs])
}

/// The scratch buffers, in the order [`GpuPath::scratch`] lists them.
struct Scratch {
    words: u64,
    flags: u64,
    first: u64,
    copies: [u64; 3],
    /// The key split's partials (decode) or fold state (prefill).
    part: u64,
}

impl GpuPath for TensorCore {
    type Plan = Plan;
    const PATH: Path = Path::TensorCore;

    fn plan(&self, p: &Problem, dtype: DType, ops: &Operands) -> Result<Plan> {
        let mut plan = validate(p, dtype, Some(ops))?;
        // docs/tensorcore.md: the decode kernel holds the G·Sq rows of one kv head in one tile; it
        // gives the same bits as the prefill kernel, so this choice only changes the speed.
        let s = p.shape();
        plan.decode = s.group() * s.q_len <= self.cfg_dec[plan.di].bm;
        Ok(plan)
    }

    /// The paged decode kernels (`tc_decp_*`, where the cubin has them) read a paged cache's rows
    /// through the block table; a prefill call gathers them first.
    fn reads_pages(&self, _p: &Problem, plan: &Plan) -> bool {
        plan.decode && self.decp.is_some()
    }

    fn scratch(&self, p: &Problem, plan: &Plan, check: bool) -> Vec<usize> {
        let s = p.shape();
        let rows = s.batch * s.q_heads * s.q_len + 2 * s.batch * s.kv_heads * s.kv_len;
        let propagate = p.nonfinite() == NonFinitePolicy::Propagate;
        // Propagate: a flag a row (tc_sanitize_*); Reject's scan: a word a scan block.
        let flags = if propagate {
            4 * rows
        } else if check {
            4 * self.scan_cfg.words(p).iter().sum::<usize>()
        } else {
            4
        };
        let copy = |n: usize| if propagate { 2 * n } else { 4 };
        let nch = self.chunks(p);
        let part = if !self.uses_part(p, plan) {
            4
        } else if plan.decode {
            // [B, Hkv, nch, 16 rows, D + 4] f32 (kernels/tensorcore.cu, `TcMerge`).
            4 * s.batch * s.kv_heads * nch * DECODE_ROWS * (s.head_dim + 4)
        } else {
            // BM · (D + 8) f32 per block of the prefill grid, for whichever family the launch takes
            // (tc_fwd_* or, on sm_90, tc_fwdt_*, whose D 64 blocks hold 192 rows): the larger BM
            // (the larger grid's rows rounded up to it).
            let tma_bm = self
                .tma
                .as_ref()
                .and_then(|t| t.cfg.get(plan.di))
                .map_or(0, |c| c.bm);
            let bm = self.cfg_fwd[plan.di].bm.max(tma_bm).max(1);
            4 * s.batch * s.q_heads * s.q_len.div_ceil(bm) * bm * (s.head_dim + 8)
        };
        vec![
            16, // words (3 u32)
            flags,
            if propagate {
                4 * s.batch * s.kv_heads
            } else {
                4
            },
            copy(s.q_elems()),
            copy(s.kv_elems()),
            copy(s.kv_elems()),
            part,
        ]
    }

    /// Under `Propagate` the copies of Q, K and V (buffers 3, 4, 5): `tc_sanitize_*` writes every
    /// element of each (one thread a 16-byte chunk, every row of the tensor: kernels/tensorcore.cu,
    /// `sanitize`) before the attention kernel reads any. Under `Reject` they are 4-byte
    /// placeholders nothing reads.
    fn written_first(&self, p: &Problem, _plan: &Plan, _check: bool) -> Vec<bool> {
        let copies = p.nonfinite() == NonFinitePolicy::Propagate;
        vec![false, false, false, copies, copies, copies, false]
    }

    fn launches(
        &self,
        p: &Problem,
        plan: &Plan,
        io: &Io,
        scratch: &[u64],
        step: Step,
    ) -> Result<Vec<Launch>> {
        if io.pages.is_some() && !self.reads_pages(p, plan) {
            return Err(unread_pages("tensorcore"));
        }
        let sc = match *scratch {
            [words, flags, first, cq, ck, cv, part] => Scratch {
                words,
                flags,
                first,
                copies: [cq, ck, cv],
                part,
            },
            _ => {
                return Err(Error::Cuda {
                    op: "launch planning",
                    message: format!(
                        "tensorcore path: {} scratch buffers, expected 7",
                        scratch.len()
                    ),
                });
            }
        };
        for (tensor, t) in [
            (TensorName::Q, io.q),
            (TensorName::K, io.k),
            (TensorName::V, io.v),
            (TensorName::Out, io.out),
        ] {
            if t.addr % 16 != 0 {
                return Err(Error::Misaligned {
                    path: Path::TensorCore,
                    tensor,
                    need: "a 16-byte aligned address",
                    what: format!("{:#x}", t.addr),
                });
            }
        }
        let s = p.shape();
        let base = self.policy_base(p, io, &sc);
        let mut out = Vec::new();
        let rows_q = s.batch * s.q_heads * s.q_len;
        let rows_kv = s.batch * s.kv_heads * s.kv_len;
        // Q, K and V as the policy kernels read them: each tensor's rows, the heads and rows a head
        // of its (b, h, s) order; K and V of a paged cache through the block table (rows past a
        // sequence's key length not at all); Q never is.
        let tensors = [
            (io.q, rows_q, s.q_heads, s.q_len, None),
            (io.k, rows_kv, s.kv_heads, s.kv_len, io.pages),
            (io.v, rows_kv, s.kv_heads, s.kv_len, io.pages),
        ];
        let source = |(t, rows, heads, seq, pages): (DevTensor, usize, usize, usize, _)| {
            let (table, page_shift, max_pages) = PagedIo::args(pages);
            TcPolicy {
                src: t.addr,
                rows: rows as i64,
                s_bs: t.bs,
                s_hs: t.hs,
                s_ss: t.ss,
                s_heads: heads as i32,
                s_seq: seq as i32,
                table,
                page_shift,
                max_pages,
                ..base
            }
        };
        match (step, p.nonfinite()) {
            (Step::Check, _) => {
                // One word a scan block, Q's, K's and V's back to back; tc_any_flag ORs each
                // tensor's into its check word.
                let words = self.scan_cfg.words(p);
                let mut at = 0;
                for (t, n) in tensors.into_iter().zip(words) {
                    let prm = TcPolicy {
                        flags: sc.flags + 4 * at as u64,
                        ..source(t)
                    };
                    at += n;
                    let threads = self.scan_cfg.threads;
                    out.push(self.policy(&self.scan[plan.dt], n as u32, threads, &prm));
                }
                let reduce = TcPolicy {
                    rows: words[0] as i64,
                    rows_kv: words[1] as i64,
                    ..base
                };
                out.push(self.policy(&self.any_flag, 3, ANY_THREADS, &reduce));
            }
            (Step::Compute { .. }, NonFinitePolicy::Reject) => {
                out.extend(self.attention(p, plan, io, sc.part));
            }
            (Step::Compute { .. }, NonFinitePolicy::Propagate) => {
                let [cq, ck, cv] = sc.copies;
                // A copy of each with NaN and ±inf replaced, a flag a row.
                let flags_at = [0, rows_q, rows_q + rows_kv];
                for ((t, dst), at) in tensors.into_iter().zip(sc.copies).zip(flags_at) {
                    let rows = t.1;
                    let prm = TcPolicy {
                        dst,
                        flags: sc.flags + 4 * at as u64,
                        ..source(t)
                    };
                    let units = rows * (s.head_dim / CHUNK);
                    out.push(self.policy(
                        &self.sanitize[plan.dt],
                        units.div_ceil(POLICY_THREADS as usize) as u32,
                        POLICY_THREADS,
                        &prm,
                    ));
                }
                if io.mask == 0 {
                    out.push(Launch {
                        grid: (s.kv_heads as u32, s.batch as u32, 1),
                        ..self.policy(&self.first_bad, 1, POLICY_THREADS, &base)
                    });
                }
                let d = s.head_dim;
                let on_copies = Io {
                    q: DevTensor::bhsd(cq, s.q_heads, s.q_len, d),
                    k: DevTensor::bhsd(ck, s.kv_heads, s.kv_len, d),
                    v: DevTensor::bhsd(cv, s.kv_heads, s.kv_len, d),
                    pages: None, // the copies are contiguous
                    ..*io
                };
                out.extend(self.attention(p, plan, &on_copies, sc.part));
                out.push(Launch {
                    grid: (
                        s.q_len.div_ceil(POISON_ROWS) as u32,
                        s.q_heads as u32,
                        s.batch as u32,
                    ),
                    ..self.policy(&self.poison[plan.dt], 1, POLICY_THREADS, &base)
                });
            }
        }
        Ok(out)
    }
}

impl TensorCore {
    /// Key chunks of the split (docs/tensorcore-numerics.md §9) that `p`'s launches cover: every
    /// chunk any batch element may reach (a block past its own keys does nothing).
    fn chunks(&self, p: &Problem) -> usize {
        p.shape().kv_len.div_ceil(self.kchunk)
    }

    /// Whether a decode call of `p` splits its keys over blocks (grid x = chunks, then the
    /// merge), rather than one block per kv head walking every chunk.
    fn split_decode(&self, p: &Problem) -> bool {
        let s = p.shape();
        self.chunks(p) > 1 && s.batch * s.kv_heads < DECODE_WHOLE_BLOCKS
    }

    /// Whether the launches of `p` use the split's scratch: a split decode (its partials) or a
    /// prefill of more than one chunk (its fold state); a decode folding in registers does not.
    fn uses_part(&self, p: &Problem, plan: &Plan) -> bool {
        if plan.decode {
            self.split_decode(p)
        } else {
            self.chunks(p) > 1
        }
    }

    /// The attention launches of `p` on the tensors of `io`, `part` the key split's scratch: one
    /// launch up to one chunk of keys, or for a decode that does not split; else decode, the split
    /// launch and the merge; prefill, one launch (the TMA kernels) or one launch per chunk in
    /// order (kernels/tensorcore.cu, launch configuration).
    fn attention(&self, p: &Problem, plan: &Plan, io: &Io, part: u64) -> Vec<Launch> {
        let s = p.shape();
        let causal = usize::from(p.causal());
        let (msb, msh, msq) = mask_strides(p);
        let nch = self.chunks(p);
        let split = plan.decode && self.split_decode(p);
        let (table, page_shift, max_pages) = PagedIo::args(io.pages);
        let a = TcArgs {
            q: io.q.addr,
            k: io.k.addr,
            v: io.v.addr,
            o: io.out.addr,
            kv_lens: io.kv_lens,
            mask: if p.mask().is_some() { io.mask } else { 0 },
            q_bs: io.q.bs,
            q_hs: io.q.hs,
            k_bs: io.k.bs,
            k_hs: io.k.hs,
            v_bs: io.v.bs,
            v_hs: io.v.hs,
            o_bs: io.out.bs,
            o_hs: io.out.hs,
            msb,
            msh,
            msq,
            // Row strides below 2^31: checked by `validate`.
            q_ss: io.q.ss as i32,
            k_ss: io.k.ss as i32,
            v_ss: io.v.ss as i32,
            o_ss: io.out.ss as i32,
            b: s.batch as i32,
            hq: s.q_heads as i32,
            hkv: s.kv_heads as i32,
            sq: s.q_len as i32,
            skv: s.kv_len as i32,
            scale: p.scale(),
            top_left: i32::from(p.causal_align() == CausalAlign::TopLeft),
            part: if self.uses_part(p, plan) { part } else { 0 },
            chunk: 0,
            lse: io.lse.addr,
            lse_bs: io.lse.bs,
            lse_hs: io.lse.hs,
            table,
            page_shift,
            max_pages,
        };
        if plan.decode {
            let cfg = self.cfg_dec[plan.di];
            let family = match (&self.decp, io.pages) {
                (Some(decp), Some(_)) => decp,
                _ => &self.dec,
            };
            let mut out = vec![Launch {
                kernel: family[plan.dt][plan.di][causal].clone(),
                grid: (
                    if split { nch as u32 } else { 1 },
                    s.kv_heads as u32,
                    s.batch as u32,
                ),
                block: cfg.threads,
                smem: cfg.smem,
                params: a.params(),
                early: false,
            }];
            if split {
                let m = TcMerge {
                    part,
                    o: io.out.addr,
                    kv_lens: io.kv_lens,
                    o_bs: io.out.bs,
                    o_hs: io.out.hs,
                    o_ss: io.out.ss as i32,
                    hq: a.hq,
                    hkv: a.hkv,
                    sq: a.sq,
                    skv: a.skv,
                    d: s.head_dim as i32,
                    nch: nch as i32,
                    causal: causal as i32,
                    top_left: a.top_left,
                    _pad: 0,
                    lse: a.lse,
                    lse_bs: a.lse_bs,
                    lse_hs: a.lse_hs,
                };
                out.push(Launch {
                    kernel: self.merge[plan.dt].clone(),
                    grid: (
                        (s.group() * s.q_len) as u32,
                        s.kv_heads as u32,
                        s.batch as u32,
                    ),
                    block: s.head_dim as u32,
                    smem: 0,
                    params: ParamBytes::one(&m),
                    // Early wherever the kernels and the driver allow it: the merge's blocks take
                    // the SMs the decode leaves free as soon as every decode block has started, and
                    // wait there. With 128 decode blocks on 132 SMs as well (H200, 2026-11-29: one
                    // a sample −1.5 to −2.8 µs on four of five shapes, ten a sample unchanged;
                    // docs/perf.md, "What a decode of 64 or 128 blocks can reach"). A launch
                    // choice: the bits are the same either way.
                    early: self.pdl,
                });
            }
            out
        } else {
            // The TMA kernels run every chunk of a query tile in one launch (the fold through
            // `part` at each boundary inside it), their blocks walking query tiles (tma_grid); the
            // others one launch per chunk, in order, a block per query tile.
            let tma = self.tma.as_ref().zip(self.tma_maps(p, plan, io));
            let (kernel, cfg, maps, launches, grid) = match tma {
                Some((t, maps)) => {
                    let cfg = t.cfg[plan.di];
                    let nqt = s.q_len.div_ceil(cfg.bm);
                    let tiles = nqt * s.q_heads * s.batch;
                    // tiles <= batch · q_heads · q_len < 2^31 (validate).
                    let grid = tma_grid(tiles, nqt, causal == 1, self.sms) as u32;
                    (&t.fwd[plan.dt][plan.di][causal], cfg, maps, 1, (grid, 1, 1))
                }
                None => {
                    let cfg = self.cfg_fwd[plan.di];
                    let grid = (
                        s.q_len.div_ceil(cfg.bm) as u32,
                        s.q_heads as u32,
                        s.batch as u32,
                    );
                    (
                        &self.fwd[plan.dt][plan.di][causal],
                        cfg,
                        Vec::new(),
                        nch.max(1),
                        grid,
                    )
                }
            };
            (0..launches)
                .map(|c| Launch {
                    kernel: kernel.clone(),
                    grid,
                    block: cfg.threads,
                    smem: cfg.smem,
                    params: {
                        let mut p = TcArgs {
                            chunk: c as i32,
                            ..a
                        }
                        .params();
                        for m in &maps {
                            p.push_bytes(m);
                        }
                        p
                    },
                    early: false,
                })
                .collect()
        }
    }

    /// The tensor maps of K and V for the TMA prefill kernels, where the cubin has them, the head
    /// dim is 64 or 128 and both layouts suit one (contiguous rows whose addresses and strides are
    /// multiples of 16 bytes, positive strides; the driver decides the rest): `[K, V]`, else
    /// `None`. Public facts only (addresses, strides, shapes).
    fn tma_maps(&self, p: &Problem, plan: &Plan, io: &Io) -> Option<Vec<Vec<u8>>> {
        if self.tma.is_none() || plan.di > 1 || io.pages.is_some() {
            return None;
        }
        let s = p.shape();
        let map = |t: &DevTensor| -> Option<Vec<u8>> {
            tensor_map_2byte(
                plan.dt == 1,
                t.addr,
                [
                    s.head_dim as u64,
                    s.kv_len as u64,
                    s.kv_heads as u64,
                    s.batch as u64,
                ],
                tma_strides(t)?,
                [TMA_BOX_COLS, TMA_TILE_ROWS, 1, 1],
            )
        };
        Some(vec![map(&io.k)?, map(&io.v)?])
    }

    fn policy(&self, kernel: &Kernel, grid_x: u32, block: u32, prm: &TcPolicy) -> Launch {
        Launch {
            kernel: kernel.clone(),
            grid: (grid_x, 1, 1),
            block,
            smem: 0,
            params: ParamBytes::one(prm),
            early: false,
        }
    }

    /// The fields every policy kernel shares: shapes, flags layout, key lengths, mask and output
    /// strides.
    fn policy_base(&self, p: &Problem, io: &Io, sc: &Scratch) -> TcPolicy {
        let s = p.shape();
        let rows_q = (s.batch * s.q_heads * s.q_len) as u64;
        let rows_kv = (s.batch * s.kv_heads * s.kv_len) as u64;
        let (msb, msh, msq) = mask_strides(p);
        TcPolicy {
            flags: sc.flags,
            badq: sc.flags,
            badk: sc.flags + 4 * rows_q,
            badv: sc.flags + 4 * (rows_q + rows_kv),
            firstbad: sc.first,
            out: io.out.addr,
            mask: if p.mask().is_some() { io.mask } else { 0 },
            kv_lens: io.kv_lens,
            words: sc.words,
            rows: rows_q as i64,
            rows_kv: rows_kv as i64,
            msb,
            msh,
            msq,
            o_bs: io.out.bs,
            o_hs: io.out.hs,
            o_ss: io.out.ss,
            d: s.head_dim as i32,
            b: s.batch as i32,
            hq: s.q_heads as i32,
            hkv: s.kv_heads as i32,
            sq: s.q_len as i32,
            skv: s.kv_len as i32,
            causal: i32::from(p.causal()),
            top_left: i32::from(p.causal_align() == CausalAlign::TopLeft),
            lse: io.lse.addr,
            lse_bs: io.lse.bs,
            lse_hs: io.lse.hs,
            ..TcPolicy::default()
        }
    }
}

/// The element strides `(batch, head, query row)` of the mask (`(0, 0, 0)` without one): 0
/// broadcasts a dimension the layout does not have; the key dimension is contiguous.
fn mask_strides(p: &Problem) -> (i64, i64, i64) {
    let s = p.shape();
    match p.mask() {
        Some(l) => {
            let plane = (s.q_len * s.kv_len) as i64;
            let [_, hm, _, _] = p.mask_dims();
            (
                if l.per_batch { hm as i64 * plane } else { 0 },
                if l.per_head { plane } else { 0 },
                s.kv_len as i64,
            )
        }
        None => (0, 0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(addr: u64, bs: i64, hs: i64, ss: i64) -> DevTensor {
        DevTensor { addr, bs, hs, ss }
    }

    #[test]
    fn tma_grid_walks_tiles_with_at_most_one_block_an_sm_and_falls_back_on_uneven_causal_walks() {
        // Not causal: one tile a unit, never more blocks than tiles or SMs.
        assert_eq!(tma_grid(2048, 32, false, 132), 132);
        assert_eq!(tma_grid(96, 6, false, 132), 96);
        assert_eq!(tma_grid(1, 1, false, 132), 1);
        // Causal, 16 tiles a head in 256 heads: 2048 pairs, 15.5 a block on 132 SMs (16 at most:
        // 3 % above the mean) walk.
        assert_eq!(tma_grid(4096, 16, true, 132), 132);
        // 43 tiles a head in 32 heads: 704 units (the middle tile alone), 5.33 a block: 6 is 12.5 %
        // above the mean, so a block per tile.
        assert_eq!(tma_grid(1376, 43, true, 132), 1376);
        // Fewer units than SMs: a block a unit.
        assert_eq!(tma_grid(96, 6, true, 132), 48);
        assert_eq!(tma_grid(1, 1, true, 132), 1);
        // 32 pairs on 17 SMs: 2 a block, exactly 1/16 above the mean (32 / 17), still walk; 31
        // pairs are past it (2 against 31 / 17): a block per tile.
        assert_eq!(tma_grid(64, 2, true, 17), 17);
        assert_eq!(tma_grid(62, 2, true, 17), 62);
    }

    #[test]
    fn tensor_map_strides_take_only_layouts_a_tma_box_can_read() {
        // [B, H, S, D] = [2, 8, 4096, 128] bf16, contiguous: rows 256 bytes apart.
        assert_eq!(
            tma_strides(&t(0x1000, 8 * 4096 * 128, 4096 * 128, 128)),
            Some([256, 4096 * 256, 8 * 4096 * 256])
        );
        // [B, S, H, D] (bshd): the head stride below the row stride is still a tensor map.
        assert_eq!(
            tma_strides(&t(0x1000, 4096 * 8 * 64, 64, 8 * 64)),
            Some([1024, 128, 4096 * 1024])
        );
        // An address off a 16-byte boundary, a stride of 8 bytes, a zero and a negative stride.
        assert_eq!(tma_strides(&t(0x1008, 1 << 20, 1 << 12, 128)), None);
        assert_eq!(tma_strides(&t(0x1000, 1 << 20, 1 << 12, 4)), None);
        assert_eq!(tma_strides(&t(0x1000, 0, 1 << 12, 128)), None);
        assert_eq!(tma_strides(&t(0x1000, 1 << 20, -(1 << 12), 128)), None);
    }
}
