//! The `Exact` path on a GPU (kernels/exact.cu): bit-identical to the CPU reference.
//!
//! A call is, on one stream: `prepare` (docs/numerics.md §2: the rows of K and V, and of Q when the
//! generic kernel or the device scan needs them, into f32 scratch, one row per warp), under
//! `Reject` on device-resident inputs the non-finite scan of the prepared rows' flags
//! (`reject_part`, `reject_flags`: three words for the host), then the attention kernel — the tiled fast kernel for head_dim ≤ 256 (one
//! of three, by head_dim) or the generic kernel above. Decode-shaped problems (`group · q_len ≤
//! 16`: one token, or a few for speculative decoding) take four other kernels instead, which spread
//! one KV head's work over the whole GPU (`dec_scores` — `dec_scores_wide` past head dim 256 —
//! `dec_weights`, `dec_values` — `dec_values_wide` when the launch has many KV heads —
//! `dec_finish`: kernels/exact.cu explains why that keeps every bit) and read K and V in the
//! caller's dtype, once, with no prepare pass; their `Reject` scan (`scan`, then `reject_flags`)
//! reads the caller's Q, K and V where they lie. The choice depends on the shape only, and every
//! kernel produces the bits of docs/numerics.md, so it never changes the output.

use super::launch::{Kernel, Launch, Module, ParamBytes};
use super::path::{DevTensor, GpuPath, Io, Step};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::problem::{CausalAlign, MAX_HEAD_DIM, NonFinitePolicy, Problem};
use crate::tensor::Operands;

/// Keys per tile (numerics.md §4), as the kernels use it.
const TILE: usize = crate::numerics::TILE;
/// Head-dim bounds of the three fast kernels; their tile shapes are read from the cubin
/// (`detattn_exact_cfg`), so the host never restates them.
const FAST_DP: [usize; 3] = [64, 128, 256];
const GENERIC_THREADS: u32 = 64;
const PREPARE_THREADS: u32 = 256;
const PREPARE_ROWS_PER_BLOCK: usize = PREPARE_THREADS as usize / 32;
const REJECT_THREADS: u32 = 1024;
/// Blocks of `detattn_reject_part` (kernels/exact.cu `REJECT_PARTS`): each ORs a slice of the three
/// flag arrays into three words after the first three of the flags buffer.
const REJECT_PARTS: usize = 256;
/// Threads of `detattn_scan_*` (kernels/exact.cu `SCAN_T`).
const SCAN_THREADS: u32 = 256;
/// Largest grid y dimension; larger launches are split along y by the host.
const MAX_GRID_Y: usize = 65535;

/// The slices `(first, count)` of `total` grid rows along y, `MAX_GRID_Y` at most each.
fn grid_slices(total: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..total)
        .step_by(MAX_GRID_Y)
        .map(move |h0| (h0, (total - h0).min(MAX_GRID_Y)))
}

/// The caller's tensors as every Exact kernel takes them, at the start of `Params` and of
/// `DecParams` (kernels/exact.cu: `q`, `k`, `v`, `mask`, `out`, `kv_lens`; bytes 0..48, so
/// `kv_lens` is public at 40..48 in both).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct IoArgs {
    q: u64,
    k: u64,
    v: u64,
    mask: u64,
    out: u64,
    kv_lens: u64,
}

/// The element strides of q, k, v and out (batch, head, row), in that order, then the
/// log-sum-exp's (batch, head; its rows are consecutive), as both parameter structs hold them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Strides([i64; 14]);

impl IoArgs {
    fn of(io: &Io) -> IoArgs {
        IoArgs {
            q: io.q.addr,
            k: io.k.addr,
            v: io.v.addr,
            mask: io.mask,
            out: io.out.addr,
            kv_lens: io.kv_lens,
        }
    }
}

impl Strides {
    fn of(io: &Io) -> Strides {
        let t = [io.q, io.k, io.v, io.out];
        Strides(std::array::from_fn(|i| match i {
            12 => io.lse.bs,
            13 => io.lse.hs,
            _ => {
                let x = t[i / 3];
                [x.bs, x.hs, x.ss][i % 3]
            }
        }))
    }
}

/// The kernel ABI, field for field the `Params` struct of kernels/exact.cu (pointers as device
/// addresses, then the 64-bit strides, then 32-bit scalars; 344 bytes). Change both together, and
/// the byte ranges of the `detattn_*` entries of audit/rules.toml.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    io: IoArgs,
    qp: u64,
    kp: u64,
    vp: u64,
    sq: u64,
    sk: u64,
    badq: u64,
    badk: u64,
    badv: u64,
    flags: u64,
    acc: u64,
    lse: u64,
    strides: Strides,
    b: i32,
    hq: i32,
    hkv: i32,
    sq_len: i32,
    skv: i32,
    d: i32,
    dp: i32,
    skv_pad: i32,
    causal: i32,
    has_mask: i32,
    mask_per_batch: i32,
    mask_per_head: i32,
    propagate: i32,
    scale: f32,
    prep_head0: i32,
    prep_job: i32,
    group: i32,
    bh0: i32,
    top_left: i32,
    scan_rq: i32,
    scan_rkv: i32,
    scan_vec: i32,
    scan_parts: i32,
    pad: i32,
}

const _: () = assert!(std::mem::size_of::<Params>() == 344);
// The byte ranges audit/rules.toml names: kv_lens 40..48, scalars (strides first) from 136.
const _: () = assert!(std::mem::offset_of!(Params, strides) == 136);

/// The decode kernels' ABI, field for field `DecParams` of kernels/exact.cu (304 bytes; the
/// first six pointers where [`Params`] has them, so `kv_lens` is bytes 40..48 in both). Change
/// both together, and the `detattn_dec_*` entries of audit/rules.toml.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct DecParams {
    io: IoArgs,
    x: u64,
    tm: u64,
    bk: u64,
    acc: u64,
    l: u64,
    bv: u64,
    al: u64,
    lse: u64,
    strides: Strides,
    b: i32,
    hq: i32,
    hkv: i32,
    sq_len: i32,
    skv: i32,
    d: i32,
    group: i32,
    r: i32,
    xpad: i32,
    nslice: i32,
    causal: i32,
    top_left: i32,
    has_mask: i32,
    mask_per_batch: i32,
    mask_per_head: i32,
    propagate: i32,
    bkv0: i32,
    scale: f32,
    /// 1 when every K (V) row starts 16-byte aligned and holds whole 16-byte units
    /// ([`rows_in_units`]): the kernels then copy rows by `cp.async`, else element by element.
    k_vec: i32,
    v_vec: i32,
}

const _: () = assert!(std::mem::size_of::<DecParams>() == 304);
const _: () = assert!(std::mem::offset_of!(DecParams, strides) == 112);

/// The decode kernels' shape, as the cubin declares it (`detattn_dec_cfg`).
#[derive(Clone, Copy, Debug)]
struct DecCfg {
    /// Rows (`group · q_len`) per KV head at most: larger problems take the prefill kernels.
    rows: usize,
    /// Threads of `dec_scores_wide` and `dec_weights`.
    threads: u32,
    /// Threads of `dec_scores`: one per key of its tile.
    scores_threads: u32,
    /// Threads of `dec_values`.
    values_threads: u32,
    /// Columns per `dec_values` block.
    cols: usize,
    /// Keys per `dec_scores` (and `dec_scores_wide`) block: the score rows are padded to a
    /// multiple of it.
    keys: usize,
    /// Groups of `keys` keys per `dec_weights` block.
    weight_groups: usize,
    /// Threads of `dec_finish`.
    finish_threads: u32,
    /// The largest head dim of `dec_scores` (four tiles per block, rows staged whole); past it
    /// `dec_scores_wide` (the head dim in chunks).
    narrow_dim: usize,
    /// Dynamic shared bytes of `dec_values` for 2-byte and 4-byte elements: `[0]` with room
    /// for `rows` rows, `[1]` for `small_rows`, the stage `dec_values` takes when `r` is at most
    /// that (more blocks then share an SM).
    values_smem: [[u32; 2]; 2],
    /// Rows of `dec_values`' smaller stage.
    small_rows: usize,
    /// Threads of `dec_values_wide` (four row warps, which run the rows' `l` chains too).
    wide_threads: u32,
    /// Columns per `dec_values_wide` block.
    wide_cols: usize,
    /// Dynamic shared bytes of `dec_values_wide`, indexed as `values_smem`.
    wide_smem: [[u32; 2]; 2],
}

impl DecCfg {
    /// Dynamic shared bytes of `dec_scores` at head dim `d` and `es` bytes per element, as
    /// `dec_scores_smem` of kernels/exact.cu computes them: the tile's key rows raw, at a stride
    /// of an odd number of 16-byte units, then the query rows as f32, `d` rounded up to 8, for
    /// `r` rows rounded up to 4, 8 or `rows` (`dec_scores_rows`).
    fn scores_smem(&self, d: usize, es: usize, r: usize) -> u32 {
        let d8 = d.div_ceil(8) * 8;
        let units = (d8 * es / 16) | 1;
        let rows = match r {
            0..=4 => 4,
            5..=8 => 8,
            _ => self.rows,
        };
        (self.scores_threads as usize * units * 16 + d8 * rows * 4) as u32
    }

    /// Dynamic shared bytes of `dec_values` for `r` rows of `es`-byte elements: the kernel picks
    /// its stage by `r` the same way.
    fn values_smem(&self, r: usize, es: usize, wide: bool) -> u32 {
        let t = if wide {
            &self.wide_smem
        } else {
            &self.values_smem
        };
        t[usize::from(r <= self.small_rows)][usize::from(es == 4)]
    }
}

/// The least number of `dec_values_wide` blocks (KV heads × 128-column slices) for which a
/// decode takes that kernel rather than `dec_values` (kernels/exact.cu says why there are two;
/// both give the same bits). Below it the narrow kernel's four times as many blocks, and its
/// cheaper work a key, keep more chains running at once (dec1, 8 KV heads, needs them). Measured
/// on the H100, whole calls (docs/perf.md, "Where the wide kernel starts to pay"): the wide
/// kernel 10 % slower at 64 blocks and 2.05× at 8, 8 % faster at 96, 16–18 % at 128 and 256;
/// between 64 and 96 not measured.
const DEC_WIDE_MIN_BLOCKS: usize = 96;

/// Whether every row of `t` (`d` elements of `es` bytes) starts at a 16-byte aligned address and
/// is a whole number of 16-byte units, so that the decode kernels may move it in 16-byte units.
/// Public: addresses, strides and the head dim.
fn rows_in_units(t: &DevTensor, d: usize, es: usize) -> bool {
    let unit = |x: i64| (x * es as i64).rem_euclid(16) == 0;
    t.addr.is_multiple_of(16)
        && unit(t.bs)
        && unit(t.hs)
        && unit(t.ss)
        && (d * es).is_multiple_of(16)
}

/// The decode part of a plan.
#[derive(Clone, Copy, Debug)]
struct DecPlan {
    /// Rows per KV head (`group · q_len`).
    r: usize,
    /// Keys per score row (`kv_len` rounded up to a `dec_weights` block).
    xpad: usize,
    /// Column blocks per KV head of the values kernel (the narrow one runs one more, for the
    /// rows' `l` chains).
    nslice: usize,
    /// Whether the values kernel is `dec_values_wide` (by the grid: public).
    wide: bool,
    /// KV heads (`batch · kv_heads`).
    nbkv: usize,
}

/// The launch shape of one fast kernel, as the cubin declares it (`detattn_exact_cfg`: rows per
/// block, threads, dynamic shared bytes).
#[derive(Clone, Copy, Debug)]
struct FastCfg {
    bm: usize,
    threads: u32,
    smem: u32,
}

/// The loaded `Exact` kernels of one device: `[dtype: f32, f16, bf16]` each.
#[derive(Debug)]
pub(crate) struct Exact {
    prepare: [Kernel; 3],
    scan: [Kernel; 3],
    reject_part: Kernel,
    reject: Kernel,
    fast: [[Kernel; 3]; 3],
    generic: [Kernel; 3],
    cfg: [FastCfg; 3],
    /// scores, scores_wide, weights, values, finish, values_wide
    dec: [[Kernel; 3]; 6],
    dec_cfg: DecCfg,
}

/// Shape-derived launch geometry (public information only).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    /// Which fast kernel (by head-dim bound), or `None` for the generic one.
    fast: Option<usize>,
    /// Prepared row width (floats).
    dp: usize,
    skv_pad: usize,
    nq: usize,
    nkv: usize,
    bh: usize,
    dt: usize,
    /// Bytes per element of the inputs.
    es: usize,
    /// The decode kernels, for decode-shaped problems.
    dec: Option<DecPlan>,
}

impl Plan {
    /// Whether a call runs `prepare` on K and V (for the kernels that read the prepared rows:
    /// every one but the decode kernels, whose `check` scans the caller's rows instead), so that
    /// the prepared K and V rows, their shifts and flags exist: sized in `scratch`, written in full
    /// first (`written_first`).
    fn prepares_kv(&self) -> bool {
        self.dec.is_none()
    }
}

fn too_large(what: &str) -> Error {
    Error::Cuda {
        op: "launch planning",
        message: format!("{what} exceeds what one launch of the CUDA kernels indexes (2^31 - 1)"),
    }
}

impl Exact {
    /// Look up the kernels of `module` and read the fast kernels' launch shapes.
    pub(crate) fn open(module: &Module) -> Result<Exact> {
        let raw = module.constant_i32::<12>("detattn_exact_cfg")?;
        let mut cfg = [FastCfg {
            bm: 0,
            threads: 0,
            smem: 0,
        }; 3];
        for (i, row) in raw.chunks_exact(4).enumerate() {
            let (bm, nt, smem) = (row[0], row[1], row[2]);
            // A cubin that declares nonsense is refused rather than launched.
            if !(1..=1024).contains(&bm) || !(32..=1024).contains(&nt) || nt % 32 != 0 || smem <= 0
            {
                return Err(Error::Cuda {
                    op: "cubin launch table",
                    message: format!(
                        "detattn_exact_cfg[{i}] = {row:?} is not a valid launch shape"
                    ),
                });
            }
            cfg[i] = FastCfg {
                bm: bm as usize,
                threads: nt as u32,
                smem: smem as u32,
            };
        }
        let d = module.constant_i32::<20>("detattn_dec_cfg")?;
        let threads = |x: i32| (32..=1024).contains(&x) && x % 32 == 0;
        if !(1..=64).contains(&d[0])
            || !threads(d[1])
            || !threads(d[2])
            || !threads(d[3])
            || !(1..=1024).contains(&d[4])
            || d[5] <= 0
            || d[5] % TILE as i32 != 0
            || !threads(d[6])
            || !(1..=MAX_HEAD_DIM as i32).contains(&d[7])
            || !(1..=256 * 1024).contains(&d[8])
            || !(1..=256 * 1024).contains(&d[9])
            || !(1..=64).contains(&d[10])
            || !(1..=d[0]).contains(&d[11])
            || !(1..=d[8]).contains(&d[12])
            || !(1..=d[9]).contains(&d[13])
            || !threads(d[14])
            || !(1..=1024).contains(&d[15])
            || !(1..=256 * 1024).contains(&d[16])
            || !(1..=256 * 1024).contains(&d[17])
            || !(1..=d[16]).contains(&d[18])
            || !(1..=d[17]).contains(&d[19])
        {
            return Err(Error::Cuda {
                op: "cubin launch table",
                message: format!("detattn_dec_cfg = {d:?} is not a valid decode shape"),
            });
        }
        let dec_cfg = DecCfg {
            rows: d[0] as usize,
            threads: d[1] as u32,
            scores_threads: d[2] as u32,
            values_threads: d[3] as u32,
            cols: d[4] as usize,
            keys: d[5] as usize,
            finish_threads: d[6] as u32,
            narrow_dim: d[7] as usize,
            values_smem: [[d[8] as u32, d[9] as u32], [d[12] as u32, d[13] as u32]],
            weight_groups: d[10] as usize,
            small_rows: d[11] as usize,
            wide_threads: d[14] as u32,
            wide_cols: d[15] as usize,
            wide_smem: [[d[16] as u32, d[17] as u32], [d[18] as u32, d[19] as u32]],
        };
        // Every Exact kernel takes one `Params` by value, the decode kernels one `DecParams`.
        let abi = [std::mem::size_of::<Params>()];
        let dec_abi = [std::mem::size_of::<DecParams>()];
        let by_dt_abi = |stem: &str, smem: u32, abi: &[usize]| -> Result<[Kernel; 3]> {
            let f = |d: &str| module.kernel(&format!("{stem}_{d}"), smem, abi);
            Ok([f("f32")?, f("f16")?, f("bf16")?])
        };
        let by_dt = |stem: &str, smem: u32| by_dt_abi(stem, smem, &abi);
        Ok(Exact {
            prepare: by_dt("detattn_prepare", 0)?,
            scan: by_dt("detattn_scan", 0)?,
            reject_part: module.kernel("detattn_reject_part", 0, &abi)?,
            reject: module.kernel("detattn_reject_flags", 0, &abi)?,
            fast: [
                by_dt("detattn_exact64", cfg[0].smem)?,
                by_dt("detattn_exact128", cfg[1].smem)?,
                by_dt("detattn_exact256", cfg[2].smem)?,
            ],
            generic: by_dt("detattn_exact_generic", 0)?,
            cfg,
            dec: [
                by_dt_abi(
                    "detattn_dec_scores",
                    dec_cfg.scores_smem(dec_cfg.narrow_dim, 4, dec_cfg.rows),
                    &dec_abi,
                )?,
                by_dt_abi("detattn_dec_scores_wide", 0, &dec_abi)?,
                by_dt_abi("detattn_dec_weights", 0, &dec_abi)?,
                by_dt_abi(
                    "detattn_dec_values",
                    dec_cfg
                        .values_smem(dec_cfg.rows, 2, false)
                        .max(dec_cfg.values_smem(dec_cfg.rows, 4, false)),
                    &dec_abi,
                )?,
                by_dt_abi("detattn_dec_finish", 0, &dec_abi)?,
                by_dt_abi(
                    "detattn_dec_values_wide",
                    dec_cfg
                        .values_smem(dec_cfg.rows, 2, true)
                        .max(dec_cfg.values_smem(dec_cfg.rows, 4, true)),
                    &dec_abi,
                )?,
            ],
            dec_cfg,
        })
    }
}

/// The scratch buffers, in the order [`GpuPath::scratch`] lists them.
#[derive(Clone, Copy)]
struct Scratch {
    flags: u64,
    qp: u64,
    kp: u64,
    vp: u64,
    sq: u64,
    sk: u64,
    badq: u64,
    badk: u64,
    badv: u64,
    acc: u64,
    /// The decode kernels' buffers (kernels/exact.cu, "decode"): x, tm, bk, acc, l, bv, al.
    dec: [u64; 7],
}

impl Scratch {
    fn of(s: &[u64]) -> Result<Scratch> {
        match *s {
            [
                flags,
                qp,
                kp,
                vp,
                sq,
                sk,
                badq,
                badk,
                badv,
                acc,
                x,
                tm,
                bk,
                dacc,
                l,
                bv,
                al,
            ] => Ok(Scratch {
                flags,
                qp,
                kp,
                vp,
                sq,
                sk,
                badq,
                badk,
                badv,
                acc,
                dec: [x, tm, bk, dacc, l, bv, al],
            }),
            _ => Err(Error::Cuda {
                op: "launch planning",
                message: format!(
                    "exact path: {} scratch buffers, expected 17 (internal)",
                    s.len()
                ),
            }),
        }
    }
}

impl GpuPath for Exact {
    type Plan = Plan;
    const PATH: crate::Path = crate::Path::Exact;

    /// Never: a paged call on this path runs on the gathered rows.
    fn reads_pages(&self, _p: &Problem, _plan: &Plan) -> bool {
        false
    }

    fn plan(&self, p: &Problem, dtype: DType, _ops: &Operands) -> Result<Plan> {
        let s = p.shape();
        let fast = FAST_DP.iter().position(|&b| s.head_dim <= b);
        let dp = fast.map_or(s.head_dim.div_ceil(4) * 4, |i| FAST_DP[i]);
        let skv_pad = s.kv_len.div_ceil(TILE) * TILE;
        let lim = i32::MAX as usize;
        let bh = s.batch.checked_mul(s.q_heads).filter(|&x| x <= lim);
        let bh = bh.ok_or_else(|| too_large("batch × q_heads"))?;
        let nq = bh
            .checked_mul(s.q_len)
            .ok_or_else(|| too_large("query rows"))?;
        let nkv = (s.batch * s.kv_heads)
            .checked_mul(skv_pad)
            .ok_or_else(|| too_large("key rows"))?;
        nq.checked_mul(dp)
            .and(nkv.checked_mul(dp))
            .ok_or_else(|| too_large("prepared elements"))?;
        let c = self.dec_cfg;
        let r = s.group() * s.q_len;
        let dec = if r <= c.rows {
            let xpad = s.kv_len.div_ceil(c.keys) * c.keys;
            let nbkv = s.batch * s.kv_heads;
            let wide = nbkv * s.head_dim.div_ceil(c.wide_cols) >= DEC_WIDE_MIN_BLOCKS;
            // The kernels index the scratch in 64 bits; the shape bounds of problem.rs keep
            // every count here far from overflowing usize.
            Some(DecPlan {
                r,
                xpad,
                nslice: s.head_dim.div_ceil(if wide { c.wide_cols } else { c.cols }),
                wide,
                nbkv,
            })
        } else {
            None
        };
        Ok(Plan {
            fast,
            dp,
            skv_pad,
            nq,
            nkv,
            bh,
            dt: dtype.code() as usize,
            es: dtype.size(),
            dec,
        })
    }

    fn scratch(&self, p: &Problem, pl: &Plan, check: bool) -> Vec<usize> {
        // The prepared query rows are only read by the generic kernel and the prepared rows' scan
        // (the fast kernels prepare their own); without either they take 4 bytes, not
        // B·Hq·Sq·DP·4. The decode kernels prepare nothing, and their scan reads the caller's rows.
        let generic = pl.fast.is_none() && pl.dec.is_none();
        let q_rows = if (check && pl.dec.is_none()) || generic {
            pl.nq
        } else {
            1
        };
        let kv_rows = if pl.prepares_kv() { pl.nkv } else { 1 };
        let f32s = |n: usize| 4 * n.max(1);
        let mut sizes = vec![
            f32s(if check { 3 + 3 * REJECT_PARTS } else { 3 }), // flags
            f32s(q_rows * pl.dp),                               // qp
            f32s(kv_rows * pl.dp),                              // kp
            f32s(kv_rows * pl.dp),                              // vp
            f32s(q_rows),                                       // sq
            f32s(kv_rows),                                      // sk
            f32s(q_rows),                                       // badq
            f32s(kv_rows),                                      // badk
            f32s(kv_rows),                                      // badv
            f32s(if generic { pl.nq * pl.dp } else { 1 }),      // acc
        ];
        let [x, tm, acc, l, bv] = match pl.dec {
            Some(d) => {
                let rows = d.nbkv * d.r;
                [
                    rows * d.xpad,
                    rows * (d.xpad / TILE),
                    rows * p.shape().head_dim,
                    rows,
                    rows * d.nslice,
                ]
            }
            None => [0; 5],
        };
        // x, tm, bk and al (one word per tm entry each), acc, l, bv
        sizes.extend([x, tm, tm, acc, l, bv, tm].map(f32s));
        sizes
    }

    /// The prepared K and V rows (buffers 2 and 3), where they exist (more than a 4-byte
    /// placeholder): `prepare` runs before anything reads them (in the `Check` step, or first in
    /// `Compute`) and writes all `DP` elements of every row of every KV head, the padding rows
    /// past Skv and the columns past D as zeros (kernels/exact.cu, `prepare`; its launches cover
    /// `skv_pad` rows of `B · max(Hq, Hkv)` heads). The other buffers stay zeroed.
    fn written_first(&self, _p: &Problem, pl: &Plan, _check: bool) -> Vec<bool> {
        let prepared = pl.prepares_kv();
        vec![false, false, prepared, prepared]
    }

    fn launches(
        &self,
        p: &Problem,
        pl: &Plan,
        io: &Io,
        scratch: &[u64],
        step: Step,
    ) -> Result<Vec<Launch>> {
        if io.pages.is_some() {
            return Err(super::unread_pages("exact"));
        }
        let sc = Scratch::of(scratch)?;
        let base = self.params(p, pl, io, sc);
        let mut out = Vec::new();
        match step {
            Step::Check if pl.dec.is_some() => self.scan(p, pl, io, &base, &mut out)?,
            Step::Check => {
                self.prepare(p, pl, &base, true, &mut out);
                out.push(self.reject_launch(&self.reject_part, REJECT_PARTS, &base));
                out.push(self.reject_launch(&self.reject, 1, &base));
            }
            Step::Compute { .. } if pl.dec.is_some() => self.decode(p, pl, io, sc, &mut out),
            Step::Compute { checked } => {
                if !checked {
                    self.prepare(p, pl, &base, pl.fast.is_none(), &mut out);
                }
                self.attend(pl, &base, &mut out);
            }
        }
        Ok(out)
    }
}

/// How `detattn_scan_*` cuts Q (`q`) or K and V (kernels/exact.cu, "Reject scan of a decode"):
/// the rows of one head a chunk reads, and the tensor's chunks. About a thousandth of its rows, at
/// least 64 and at most a head's, so that `REJECT_PARTS` blocks share about a thousand chunks
/// evenly and a block's set-up is little against its rows. The kernel indexes chunks in 31 bits.
fn scan_chunks(p: &Problem, q: bool) -> Result<(i32, usize)> {
    let sh = p.shape();
    let (heads, s) = if q {
        (sh.q_heads, sh.q_len)
    } else {
        (sh.kv_heads, sh.kv_len)
    };
    let planes = sh.batch * heads;
    let rpc = (planes * s).div_ceil(1024).max(64).min(s).max(1);
    let chunks = planes * s.div_ceil(rpc);
    if chunks > i32::MAX as usize {
        return Err(too_large("scan chunks"));
    }
    Ok((rpc as i32, chunks))
}

impl Exact {
    /// A launch of one of the flag reductions (`detattn_reject_part`, `detattn_reject_flags`).
    fn reject_launch(&self, kernel: &Kernel, blocks: usize, base: &Params) -> Launch {
        Launch {
            kernel: kernel.clone(),
            grid: (blocks as u32, 1, 1),
            block: REJECT_THREADS,
            smem: 0,
            params: ParamBytes::one(base),
            early: false,
        }
    }

    /// `Reject`'s check of a decode: `detattn_scan_*` over the caller's Q, K and V, then
    /// `detattn_reject_flags` over its words. As many blocks a tensor as the larger has chunks,
    /// `REJECT_PARTS` at most: a small decode's grid is then one wave, not 768 blocks most of
    /// which find no chunk.
    fn scan(
        &self,
        p: &Problem,
        pl: &Plan,
        io: &Io,
        base: &Params,
        out: &mut Vec<Launch>,
    ) -> Result<()> {
        let (rq, cq) = scan_chunks(p, true)?;
        let (rkv, ckv) = scan_chunks(p, false)?;
        let parts = cq.max(ckv).min(REJECT_PARTS);
        let vec =
            |i: usize, t: &DevTensor| i32::from(rows_in_units(t, p.shape().head_dim, pl.es)) << i;
        let prm = Params {
            scan_rq: rq,
            scan_rkv: rkv,
            scan_vec: vec(0, &io.q) | vec(1, &io.k) | vec(2, &io.v),
            scan_parts: parts as i32,
            ..*base
        };
        out.push(Launch {
            kernel: self.scan[pl.dt].clone(),
            grid: (parts as u32, 3, 1),
            block: SCAN_THREADS,
            smem: 0,
            params: ParamBytes::one(&prm),
            early: false,
        });
        out.push(self.reject_launch(&self.reject, 1, &prm));
        Ok(())
    }

    fn params(&self, p: &Problem, pl: &Plan, io: &Io, sc: Scratch) -> Params {
        let s = p.shape();
        let layout = p.mask();
        Params {
            io: IoArgs::of(io),
            qp: sc.qp,
            kp: sc.kp,
            vp: sc.vp,
            sq: sc.sq,
            sk: sc.sk,
            badq: sc.badq,
            badk: sc.badk,
            badv: sc.badv,
            flags: sc.flags,
            acc: sc.acc,
            lse: io.lse.addr,
            strides: Strides::of(io),
            b: s.batch as i32,
            hq: s.q_heads as i32,
            hkv: s.kv_heads as i32,
            sq_len: s.q_len as i32,
            skv: s.kv_len as i32,
            d: s.head_dim as i32,
            dp: pl.dp as i32,
            skv_pad: pl.skv_pad as i32,
            causal: i32::from(p.causal()),
            has_mask: i32::from(layout.is_some()),
            mask_per_batch: i32::from(layout.is_some_and(|l| l.per_batch)),
            mask_per_head: i32::from(layout.is_some_and(|l| l.per_head)),
            propagate: i32::from(p.nonfinite() == NonFinitePolicy::Propagate),
            scale: p.scale(),
            group: s.group() as i32,
            top_left: i32::from(p.causal_align() == CausalAlign::TopLeft),
            ..Params::default()
        }
    }

    /// The decode kernels (kernels/exact.cu, "decode"): scores, chains, division, each one launch
    /// per grid slice of KV heads.
    fn decode(&self, p: &Problem, pl: &Plan, io: &Io, sc: Scratch, out: &mut Vec<Launch>) {
        let Some(d) = pl.dec else { return };
        let s = p.shape();
        let layout = p.mask();
        let [x, tm, bk, acc, l, bv, al] = sc.dec;
        let es = pl.es;
        let base = DecParams {
            io: IoArgs::of(io),
            x,
            tm,
            bk,
            acc,
            l,
            bv,
            al,
            lse: io.lse.addr,
            strides: Strides::of(io),
            b: s.batch as i32,
            hq: s.q_heads as i32,
            hkv: s.kv_heads as i32,
            sq_len: s.q_len as i32,
            skv: s.kv_len as i32,
            d: s.head_dim as i32,
            group: s.group() as i32,
            r: d.r as i32,
            xpad: d.xpad as i32,
            nslice: d.nslice as i32,
            causal: i32::from(p.causal()),
            top_left: i32::from(p.causal_align() == CausalAlign::TopLeft),
            has_mask: i32::from(layout.is_some()),
            mask_per_batch: i32::from(layout.is_some_and(|l| l.per_batch)),
            mask_per_head: i32::from(layout.is_some_and(|l| l.per_head)),
            propagate: i32::from(p.nonfinite() == NonFinitePolicy::Propagate),
            bkv0: 0,
            scale: p.scale(),
            k_vec: i32::from(rows_in_units(&io.k, s.head_dim, es)),
            v_vec: i32::from(rows_in_units(&io.v, s.head_dim, es)),
        };
        let c = self.dec_cfg;
        // (kernel, grid x, threads, dynamic shared bytes): scores one block per `keys` keys,
        // weights one per `weight_groups` of those, chains one per column slice (and, in the
        // narrow kernel, one for the rows' l), division one per row.
        let scores = if s.head_dim <= c.narrow_dim {
            (
                0,
                d.xpad / c.keys,
                c.scores_threads,
                c.scores_smem(s.head_dim, es, d.r),
            )
        } else {
            (1, d.xpad / c.keys, c.threads, 0)
        };
        let steps = [
            scores,
            (2, d.xpad.div_ceil(c.keys * c.weight_groups), c.threads, 0),
            if d.wide {
                (5, d.nslice, c.wide_threads, c.values_smem(d.r, es, true))
            } else {
                (
                    3,
                    d.nslice + 1,
                    c.values_threads,
                    c.values_smem(d.r, es, false),
                )
            },
            (4, d.r, c.finish_threads, 0),
        ];
        for (k, gx, threads, smem) in steps {
            for (h0, n) in grid_slices(d.nbkv) {
                let prm = DecParams {
                    bkv0: h0 as i32,
                    ..base
                };
                out.push(Launch {
                    kernel: self.dec[k][pl.dt].clone(),
                    grid: (gx as u32, n as u32, 1),
                    block: threads,
                    smem,
                    params: ParamBytes::one(&prm),
                    early: false,
                });
            }
        }
    }

    /// §2, one launch per grid slice: K (scaled, padded to whole tiles) and V (sanitised) always,
    /// and Q (scaled) when `with_q`, in launches of its own: each tensor's grid its own rows and
    /// heads. (One grid of both, sized by the larger of each, was seven empty blocks in eight for a
    /// GQA decode: 2 M blocks for 262 144 rows at B32, whose scheduling took the pass 3.0 ms on an
    /// H200; docs/perf.md, "Reject's scan".)
    fn prepare(&self, p: &Problem, pl: &Plan, base: &Params, with_q: bool, out: &mut Vec<Launch>) {
        let s = p.shape();
        // (job: 0 = Q, 1 = K and V, as kernels/exact.cu `prepare` reads prep_job; rows; heads)
        let q = (0, s.q_len, s.batch * s.q_heads);
        let kv = (1, pl.skv_pad, s.batch * s.kv_heads);
        for (job, rows, heads) in with_q.then_some(q).into_iter().chain([kv]) {
            let gx = rows.div_ceil(PREPARE_ROWS_PER_BLOCK) as u32;
            for (h0, n) in grid_slices(heads) {
                let prm = Params {
                    prep_head0: h0 as i32,
                    prep_job: job,
                    ..*base
                };
                out.push(Launch {
                    kernel: self.prepare[pl.dt].clone(),
                    grid: (gx, n as u32, 1),
                    block: PREPARE_THREADS,
                    smem: 0,
                    params: ParamBytes::one(&prm),
                    early: false,
                });
            }
        }
    }

    /// §3–§7: the attention kernel, one launch per grid slice of (b, h) pairs.
    fn attend(&self, pl: &Plan, base: &Params, out: &mut Vec<Launch>) {
        for (bh0, n) in grid_slices(pl.bh) {
            let prm = Params {
                bh0: bh0 as i32,
                ..*base
            };
            let (kernel, grid, block, smem) = match pl.fast {
                Some(i) => {
                    let c = self.cfg[i];
                    let nrb = (base.sq_len as usize).div_ceil(c.bm) as u32;
                    (
                        self.fast[i][pl.dt].clone(),
                        (nrb, n as u32, 1),
                        c.threads,
                        c.smem,
                    )
                }
                None => (
                    self.generic[pl.dt].clone(),
                    (base.sq_len as u32, n as u32, 1),
                    GENERIC_THREADS,
                    0,
                ),
            };
            out.push(Launch {
                kernel,
                grid,
                block,
                smem,
                params: ParamBytes::one(&prm),
                early: false,
            });
        }
    }
}
