//! The `TensorCore` path on a GPU: the kernels of `kernels/tensorcore.cu` (design, operation
//! sequence and measured figures: docs/tensorcore.md), their validation and launch sequence.
//!
//! What it promises: f16/bf16 inputs, head_dim 64, 128 or 256, causal (bottom-right), per-batch
//! key lengths, GQA/MQA, a boolean mask; on one GPU architecture the output bits of a row depend
//! only on that row's own data (not on the run, the batch around it, decode or prefill, the other
//! query rows computed with it, or the stream). What it does not: the bits are not the CPU's nor
//! the `Exact` path's (the error against `Exact` is bounded, docs/tensorcore.md), and they may
//! differ between architectures (golden digests are recorded per architecture).

use super::launch::{self, Kernel, Module, TcArgs};
use super::{cubins, drv};
use crate::digest::{Digest, digest};
use crate::dtype::{DType, Element};
use crate::engine::{Engine, Path};
use crate::error::{Error, Result};
use crate::golden::GoldenCase;
use crate::inputs::generate;
use crate::problem::{NonFinitePolicy, Problem};
use cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, SyncOnDrop,
};
use half::{bf16, f16};
use std::sync::Arc;

/// The head dims the `TensorCore` kernels are built for.
pub const TENSORCORE_HEAD_DIMS: [usize; 3] = [64, 128, 256];
const HEAD_DIMS_TEXT: &str = "64, 128, 256";
/// Largest batch and query-head count: the grid's z and y dimensions.
const MAX_GRID_YZ: usize = 65535;

/// A kernel family's launch configuration, read from the cubin (`tc_cfg_d<D>`, `tc_cfg_dec_d<D>`).
#[derive(Clone, Copy, Debug)]
struct Cfg {
    /// Query rows per block.
    bm: usize,
    threads: u32,
    smem: u32,
}

/// The loaded `TensorCore` cubin of one device.
#[derive(Debug)]
pub(crate) struct Tc {
    /// `[dtype: f16, bf16][head dim: 64, 128, 256][causal: no, yes]`.
    fwd: [[[Kernel; 2]; 3]; 2],
    dec: [[[Kernel; 2]; 3]; 2],
    cfg_fwd: [Cfg; 3],
    cfg_dec: [Cfg; 3],
    file: &'static str,
    // Declared last: dropped after the kernel handles that point into it.
    _module: Module,
}

/// Which kernel a problem runs, from its shape alone.
#[derive(Clone, Copy, Debug)]
struct Choice {
    dt: usize,
    di: usize,
    decode: bool,
}

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

/// Every check of the `TensorCore` path beyond the problem's own validation, before any work:
/// element type, head dim, NaN policy, launch limits.
pub(crate) fn validate(p: &Problem, dtype: DType) -> Result<()> {
    dtype_index(dtype)?;
    let s = p.shape();
    if !TENSORCORE_HEAD_DIMS.contains(&s.head_dim) {
        return Err(Error::HeadDimUnsupported {
            path: Path::TensorCore,
            head_dim: s.head_dim,
            supported: HEAD_DIMS_TEXT,
        });
    }
    if p.nonfinite() == NonFinitePolicy::Propagate {
        // The kernels let a NaN spread to rows the Exact contract keeps finite (e.g. through a
        // masked key's V row in the same tile): refuse rather than promise a different policy.
        return Err(Error::PathUnavailable {
            path: Path::TensorCore,
            backend: "cuda".into(),
            reason: "NonFinitePolicy::Propagate is not implemented on the tensorcore path yet; \
                     use NonFinitePolicy::Reject (the default) or Path::Exact",
        });
    }
    for (name, value) in [("batch", s.batch), ("q_heads", s.q_heads)] {
        if value > MAX_GRID_YZ {
            return Err(Error::DimensionOutOfRange {
                name,
                value,
                min: 1,
                max: MAX_GRID_YZ,
            });
        }
    }
    // The kernels index heads as `int` (b·Hq + h) before widening.
    if s.batch * s.q_heads > i32::MAX as usize {
        return Err(Error::Cuda {
            op: "launch planning",
            message: "batch × q_heads exceeds what the tensorcore kernels index (2^31 - 1)".into(),
        });
    }
    Ok(())
}

impl Tc {
    /// Load and verify `tensorcore.<arch>.cubin` into `ctx`, look up its 24 kernels and read
    /// their launch configurations.
    pub(crate) fn open(ctx: &Arc<CudaContext>, arch: &str) -> Result<Tc> {
        let (cubin, file) = cubins::load_tensorcore(arch)?;
        let module = Module::load(ctx, cubin)?;
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
        let family = |stem: &str, cfg: &[Cfg; 3]| -> Result<[[[Kernel; 2]; 3]; 2]> {
            let one = |dt: &str, di: usize, causal: bool| {
                let d = TENSORCORE_HEAD_DIMS[di];
                let c = if causal { "_causal" } else { "" };
                module.kernel(&format!("{stem}_{dt}_d{d}{c}"), cfg[di].smem)
            };
            let by_d = |dt: &str| -> Result<[[Kernel; 2]; 3]> {
                Ok([
                    [one(dt, 0, false)?, one(dt, 0, true)?],
                    [one(dt, 1, false)?, one(dt, 1, true)?],
                    [one(dt, 2, false)?, one(dt, 2, true)?],
                ])
            };
            Ok([by_d("f16")?, by_d("bf16")?])
        };
        let fwd = family("tc_fwd", &cfg_fwd)?;
        let dec = family("tc_dec", &cfg_dec)?;
        Ok(Tc {
            fwd,
            dec,
            cfg_fwd,
            cfg_dec,
            file,
            _module: module,
        })
    }

    /// The embedded cubin's file name.
    pub(crate) fn file(&self) -> &'static str {
        self.file
    }

    fn choose(&self, p: &Problem, dtype: DType) -> Result<Choice> {
        validate(p, dtype)?;
        let s = p.shape();
        let di = TENSORCORE_HEAD_DIMS
            .iter()
            .position(|&d| d == s.head_dim)
            .unwrap_or(0);
        // docs/tensorcore.md: the decode kernel holds the G·Sq rows of one kv head in one tile;
        // it gives the same bits as the prefill kernel, so this choice only changes the speed.
        let decode = s.group() * s.q_len <= self.cfg_dec[di].bm;
        Ok(Choice {
            dt: dtype_index(dtype)?,
            di,
            decode,
        })
    }

    /// Enqueue the one kernel launch of `p` on `stream` (asynchronous).
    fn enqueue(&self, stream: &CudaStream, p: &Problem, c: Choice, a: &TcArgs) -> Result<()> {
        let s = p.shape();
        let causal = usize::from(p.causal());
        let (kernel, cfg, grid) = if c.decode {
            let cfg = self.cfg_dec[c.di];
            (
                self.dec[c.dt][c.di][causal],
                cfg,
                (1, s.kv_heads as u32, s.batch as u32),
            )
        } else {
            let cfg = self.cfg_fwd[c.di];
            (
                self.fwd[c.dt][c.di][causal],
                cfg,
                (
                    s.q_len.div_ceil(cfg.bm) as u32,
                    s.q_heads as u32,
                    s.batch as u32,
                ),
            )
        };
        launch::launch_tc(stream, kernel, grid, cfg.threads, cfg.smem, a)
    }

    /// Host slices in and out (lengths validated by the engine). Under `Reject` the inputs are
    /// scanned on the host first; nothing is uploaded if one is non-finite, and `out` is written
    /// only after the kernel succeeded.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_host<T: Element>(
        &self,
        st: &Arc<CudaStream>,
        p: &Problem,
        q: &[T],
        k: &[T],
        v: &[T],
        mask: Option<&[bool]>,
        out: &mut [T],
    ) -> Result<()> {
        let c = self.choose(p, T::DTYPE)?;
        if p.nonfinite() == NonFinitePolicy::Reject {
            crate::cpu::reject_nonfinite(q, k, v)?;
        }
        let up = |x: &[T]| {
            let bits: Vec<u16> = x.iter().map(|e| e.to_bits_u32() as u16).collect();
            st.clone_htod(&bits).map_err(drv("cuMemcpyHtoD"))
        };
        let (dq, dk, dv) = (up(q)?, up(k)?, up(v)?);
        let dm = match mask {
            Some(m) => {
                let bytes: Vec<u8> = m.iter().map(|&b| u8::from(b)).collect();
                Some(st.clone_htod(&bytes).map_err(drv("cuMemcpyHtoD"))?)
            }
            None => None,
        };
        let dl = kv_lens_buffer(st, p)?;
        let mut dout = st
            .alloc_zeros::<u16>(out.len())
            .map_err(drv("cuMemAlloc"))?;
        {
            let mut g = Guards(Vec::new());
            let a = self.args(
                p,
                [g.r(&dq, st), g.r(&dk, st), g.r(&dv, st), g.w(&mut dout, st)],
                dl.as_ref().map_or(0, |l| g.r(l, st)),
                dm.as_ref().map_or(0, |m| g.r(m, st)),
            );
            self.enqueue(st, p, c, &a)?;
        }
        let bits = st.clone_dtoh(&dout).map_err(drv("cuMemcpyDtoH"))?;
        st.synchronize().map_err(drv("kernel execution"))?;
        for (o, b) in out.iter_mut().zip(bits) {
            *o = T::from_bits_u32(u32::from(b));
        }
        Ok(())
    }

    /// Device-resident buffers, launched on `stream` (asynchronous). `alloc` is the backend's
    /// stream (for the small kv_lens buffer). Under `Reject`, `scan` runs first (it waits).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_device<T: Element + DeviceRepr>(
        &self,
        alloc: &Arc<CudaStream>,
        stream: &CudaStream,
        p: &Problem,
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        mask: Option<&CudaSlice<u8>>,
        out: &mut CudaSlice<T>,
        scan: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let c = self.choose(p, T::DTYPE)?;
        if p.nonfinite() == NonFinitePolicy::Reject {
            scan()?;
        }
        let dl = kv_lens_buffer(alloc, p)?;
        let mut g = Guards(Vec::new());
        let a = self.args(
            p,
            [
                g.r(q, stream),
                g.r(k, stream),
                g.r(v, stream),
                g.w(out, stream),
            ],
            dl.as_ref().map_or(0, |l| g.r(l, stream)),
            mask.map_or(0, |m| g.r(m, stream)),
        );
        self.enqueue(stream, p, c, &a)?;
        drop(g);
        Ok(())
    }

    fn args(&self, p: &Problem, qkvo: [u64; 4], kv_lens: u64, mask: u64) -> TcArgs {
        let s = p.shape();
        let (msb, msh, msq) = match p.mask() {
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
        };
        TcArgs {
            q: qkvo[0],
            k: qkvo[1],
            v: qkvo[2],
            o: qkvo[3],
            kv_lens,
            b: s.batch as i32,
            hq: s.q_heads as i32,
            hkv: s.kv_heads as i32,
            sq: s.q_len as i32,
            skv: s.kv_len as i32,
            scale: p.scale(),
            mask: if p.mask().is_some() { mask } else { 0 },
            msb,
            msh,
            msq,
        }
    }
}

/// The per-batch key lengths as a device `int` array, or `None` (the kernel then uses `Skv`).
fn kv_lens_buffer(st: &Arc<CudaStream>, p: &Problem) -> Result<Option<CudaSlice<i32>>> {
    match p.kv_lens() {
        Some(l) => {
            let v: Vec<i32> = l.iter().map(|&x| x as i32).collect();
            Ok(Some(st.clone_htod(&v).map_err(drv("cuMemcpyHtoD"))?))
        }
        None => Ok(None),
    }
}

/// Holds cudarc's stream-ordering guards of every buffer a launch touches until it is enqueued.
struct Guards<'a>(Vec<SyncOnDrop<'a>>);
impl<'a> Guards<'a> {
    fn r<T>(&mut self, s: &'a CudaSlice<T>, st: &'a CudaStream) -> u64 {
        let (p, g) = s.device_ptr(st);
        self.0.push(g);
        p
    }
    fn w<T>(&mut self, s: &'a mut CudaSlice<T>, st: &'a CudaStream) -> u64 {
        let (p, g) = s.device_ptr_mut(st);
        self.0.push(g);
        p
    }
}

// ------------------------------------------------------------------------- golden digests

/// Whether the `TensorCore` path takes this golden case (f16/bf16, head_dim 64, 128 or 256).
pub fn tensorcore_supports(case: &GoldenCase) -> bool {
    case.dtype != DType::F32 && TENSORCORE_HEAD_DIMS.contains(&case.dims.5)
}

/// The digest of a golden case's output on `engine`, tagged with the engine's path (the golden
/// module's own runner tags every digest `exact`).
pub fn golden_digest(case: &GoldenCase, engine: &Engine) -> Result<Digest> {
    fn typed<T: Element>(case: &GoldenCase, engine: &Engine) -> Result<Digest> {
        let p = case.problem();
        let x = generate::<T>(&p, case.inputs);
        let out = engine.run(&p, &x.q, &x.k, &x.v, x.mask.as_deref())?;
        let s = p.shape();
        Ok(digest(
            engine.path(),
            [s.batch, s.q_heads, s.q_len, s.head_dim],
            &out,
        ))
    }
    match case.dtype {
        DType::F32 => typed::<f32>(case, engine),
        DType::F16 => typed::<f16>(case, engine),
        DType::Bf16 => typed::<bf16>(case, engine),
    }
}

/// The recorded `TensorCore` golden snapshots, per architecture (`tests/snapshots/`). A file
/// with no digest line means nothing was recorded for that architecture yet.
const TC_SNAPSHOTS: [(&str, &str); 1] = [(
    "sm_90",
    include_str!("../../tests/snapshots/golden_tensorcore_sm90.txt"),
)];

/// The `TensorCore` golden digests `(case name, hex)` recorded on architecture `arch`
/// (`sm_90`), or `None` when none were recorded there: the bits of this path are per
/// architecture, so a GPU of another architecture cannot be checked against them.
pub fn tensorcore_expected_digests(arch: &str) -> Option<Vec<(String, String)>> {
    let text = TC_SNAPSHOTS.iter().find(|(a, _)| *a == arch)?.1;
    let v: Vec<(String, String)> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, d)| (n.to_string(), d.trim().to_string()))
        .collect();
    (!v.is_empty()).then_some(v)
}
