//! The `Exact` path on a GPU (kernels/exact.cu): bit-identical to the CPU reference.
//!
//! A call is, on one stream: `prepare` (docs/numerics.md §2: the rows of K and V, and of Q when the
//! generic kernel or the device scan needs them, into f32 scratch, one row per warp), under
//! `Reject` on device-resident inputs the non-finite scan (`reject_flags`: three words for the
//! host), then the attention kernel — the tiled fast kernel for head_dim ≤ 256 (one of three, by
//! head_dim) or the generic kernel above. The choice depends on the shape only, and every kernel
//! produces the bits of docs/numerics.md, so it never changes the output.

use super::launch::{Kernel, Launch, Module};
use super::path::{GpuPath, Io, Step};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::problem::{CausalAlign, NonFinitePolicy, Problem};
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
/// Largest grid y dimension; larger launches are split along y by the host.
const MAX_GRID_Y: usize = 65535;

/// The kernel ABI, field for field the `Params` struct of kernels/exact.cu (pointers as device
/// addresses, then the 64-bit strides, then 32-bit scalars; 304 bytes). Change both together, and
/// the byte ranges of the `detattn_*` entries of audit/rules.toml.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    q: u64,
    k: u64,
    v: u64,
    mask: u64,
    out: u64,
    kv_lens: u64,
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
    q_bs: i64,
    q_hs: i64,
    q_ss: i64,
    k_bs: i64,
    k_hs: i64,
    k_ss: i64,
    v_bs: i64,
    v_hs: i64,
    v_ss: i64,
    o_bs: i64,
    o_hs: i64,
    o_ss: i64,
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
    prep_job0: i32,
    group: i32,
    bh0: i32,
    top_left: i32,
    pad: i32,
}

const _: () = assert!(std::mem::size_of::<Params>() == 304);

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
    reject: Kernel,
    fast: [[Kernel; 3]; 3],
    generic: [Kernel; 3],
    cfg: [FastCfg; 3],
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
        // Every Exact kernel takes one `Params` by value.
        let abi = [std::mem::size_of::<Params>()];
        let by_dt = |stem: &str, smem: u32| -> Result<[Kernel; 3]> {
            let f = |d: &str| module.kernel(&format!("{stem}_{d}"), smem, &abi);
            Ok([f("f32")?, f("f16")?, f("bf16")?])
        };
        Ok(Exact {
            prepare: by_dt("detattn_prepare", 0)?,
            reject: module.kernel("detattn_reject_flags", 0, &abi)?,
            fast: [
                by_dt("detattn_exact64", cfg[0].smem)?,
                by_dt("detattn_exact128", cfg[1].smem)?,
                by_dt("detattn_exact256", cfg[2].smem)?,
            ],
            generic: by_dt("detattn_exact_generic", 0)?,
            cfg,
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
}

impl Scratch {
    fn of(s: &[u64]) -> Result<Scratch> {
        match *s {
            [flags, qp, kp, vp, sq, sk, badq, badk, badv, acc] => Ok(Scratch {
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
            }),
            _ => Err(Error::Cuda {
                op: "launch planning",
                message: format!(
                    "exact path: {} scratch buffers, expected 10 (internal)",
                    s.len()
                ),
            }),
        }
    }
}

impl GpuPath for Exact {
    type Plan = Plan;

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
        Ok(Plan {
            fast,
            dp,
            skv_pad,
            nq,
            nkv,
            bh,
            dt: dtype.code() as usize,
        })
    }

    fn scratch(&self, _p: &Problem, pl: &Plan, check: bool) -> Vec<usize> {
        // The prepared query rows are only read by the generic kernel and the device scan (the
        // fast kernels prepare their own); without either they take 4 bytes, not B·Hq·Sq·DP·4.
        let q_rows = if check || pl.fast.is_none() { pl.nq } else { 1 };
        let f32s = |n: usize| 4 * n.max(1);
        vec![
            f32s(3),                                                 // flags
            f32s(q_rows * pl.dp),                                    // qp
            f32s(pl.nkv * pl.dp),                                    // kp
            f32s(pl.nkv * pl.dp),                                    // vp
            f32s(q_rows),                                            // sq
            f32s(pl.nkv),                                            // sk
            f32s(q_rows),                                            // badq
            f32s(pl.nkv),                                            // badk
            f32s(pl.nkv),                                            // badv
            f32s(if pl.fast.is_none() { pl.nq * pl.dp } else { 1 }), // acc
        ]
    }

    fn launches(
        &self,
        p: &Problem,
        pl: &Plan,
        io: &Io,
        scratch: &[u64],
        step: Step,
    ) -> Result<Vec<Launch>> {
        let sc = Scratch::of(scratch)?;
        let base = self.params(p, pl, io, sc);
        let mut out = Vec::new();
        match step {
            Step::Check => {
                self.prepare(p, pl, &base, true, &mut out);
                out.push(Launch {
                    kernel: self.reject.clone(),
                    grid: (1, 1, 1),
                    block: REJECT_THREADS,
                    smem: 0,
                    params: vec![bytemuck::bytes_of(&base).to_vec()],
                });
            }
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

impl Exact {
    fn params(&self, p: &Problem, pl: &Plan, io: &Io, sc: Scratch) -> Params {
        let s = p.shape();
        let layout = p.mask();
        Params {
            q: io.q.addr,
            k: io.k.addr,
            v: io.v.addr,
            mask: io.mask,
            out: io.out.addr,
            kv_lens: io.kv_lens,
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
            q_bs: io.q.bs,
            q_hs: io.q.hs,
            q_ss: io.q.ss,
            k_bs: io.k.bs,
            k_hs: io.k.hs,
            k_ss: io.k.ss,
            v_bs: io.v.bs,
            v_hs: io.v.hs,
            v_ss: io.v.ss,
            o_bs: io.out.bs,
            o_hs: io.out.hs,
            o_ss: io.out.ss,
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

    /// §2 in one launch per grid slice: K (scaled, padded to whole tiles) and V (sanitised)
    /// always, and Q (scaled; blockIdx.z = 0) when `with_q`.
    fn prepare(&self, p: &Problem, pl: &Plan, base: &Params, with_q: bool, out: &mut Vec<Launch>) {
        let s = p.shape();
        let (job0, jobs) = if with_q { (0, 2) } else { (1, 1) };
        let rows = if with_q {
            s.q_len.max(pl.skv_pad)
        } else {
            pl.skv_pad
        };
        let heads = s.batch * s.q_heads.max(s.kv_heads);
        let gx = rows.div_ceil(PREPARE_ROWS_PER_BLOCK) as u32;
        let mut h0 = 0;
        while h0 < heads {
            let n = (heads - h0).min(MAX_GRID_Y);
            let prm = Params {
                prep_head0: h0 as i32,
                prep_job0: job0,
                ..*base
            };
            out.push(Launch {
                kernel: self.prepare[pl.dt].clone(),
                grid: (gx, n as u32, jobs),
                block: PREPARE_THREADS,
                smem: 0,
                params: vec![bytemuck::bytes_of(&prm).to_vec()],
            });
            h0 += n;
        }
    }

    /// §3–§7: the attention kernel, one launch per grid slice of (b, h) pairs.
    fn attend(&self, pl: &Plan, base: &Params, out: &mut Vec<Launch>) {
        let mut bh0 = 0;
        while bh0 < pl.bh {
            let n = (pl.bh - bh0).min(MAX_GRID_Y);
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
                params: vec![bytemuck::bytes_of(&prm).to_vec()],
            });
            bh0 += n;
        }
    }
}
