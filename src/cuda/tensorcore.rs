//! The `TensorCore` path on a GPU: the kernels of `kernels/tensorcore.cu` (design, operation
//! sequence and measured figures: docs/tensorcore.md), their validation and launch sequence.
//!
//! What it promises: f16/bf16 inputs, head_dim 64, 128 or 256, causal (bottom-right), per-batch
//! key lengths, GQA/MQA, a boolean mask; on one GPU architecture the output bits of a row depend
//! only on that row's own data (not on the run, the batch around it, decode or prefill, the other
//! query rows computed with it, or the stream). What it does not: the bits are not the CPU's nor
//! the `Exact` path's (the error against `Exact` is bounded, docs/tensorcore.md), and they may
//! differ between architectures (golden digests are recorded per architecture).

use super::guards::Guards;
use super::launch::{self, Kernel, Module, TcArgs, TcPolicy};
use super::{BenchResult, cubins, drv, timing};
use crate::digest::{Digest, digest};
use crate::dtype::{DType, Element};
use crate::engine::{Engine, Path};
use crate::error::{Error, Result};
use crate::golden::GoldenCase;
use crate::inputs::generate;
use crate::problem::{NonFinitePolicy, Problem};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DeviceRepr};
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

/// The non-finite policy kernels of the cubin (`kernels/tensorcore.cu`, end of file).
#[derive(Debug)]
struct PolicyKernels {
    /// `[dtype: f16, bf16]`.
    sanitize: [Kernel; 2],
    poison: [Kernel; 2],
    first_bad: Kernel,
    any_flag: Kernel,
}

/// The loaded `TensorCore` cubin of one device.
#[derive(Debug)]
pub(crate) struct Tc {
    /// `[dtype: f16, bf16][head dim: 64, 128, 256][causal: no, yes]`.
    fwd: [[[Kernel; 2]; 3]; 2],
    dec: [[[Kernel; 2]; 3]; 2],
    cfg_fwd: [Cfg; 3],
    cfg_dec: [Cfg; 3],
    policy: PolicyKernels,
    file: String,
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

/// The GPU work of one call around the attention kernel (docs/tensorcore.md, "Non-finite
/// inputs"). Every variant enqueues the same launches whatever the values: only the policy and
/// the shape choose it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Work {
    /// The attention kernel alone (`Reject`, the inputs already checked on the host).
    Kernel,
    /// `Reject` on the device, first half: the flag scan of Q, K, V and their reduction to three
    /// words, which the host then reads to decide once.
    Scan,
    /// The scan and then the kernel, without the host's decision in between (timing: the same
    /// work whatever the values).
    ScanKernel,
    /// `Propagate`: sanitised copies and per-row flags, the first bad key per kv head (no mask),
    /// the kernel on the copies, then the canonical NaN over exactly the affected rows.
    Propagate,
}

/// Threads per block of the sanitize, first-bad and poison kernels; of the flag reduction.
const POLICY_THREADS: u32 = 256;
const ANY_THREADS: u32 = 1024;
/// Output rows per poison block (one warp each).
const POISON_ROWS: usize = POLICY_THREADS as usize / 32;

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

/// Every check of the `TensorCore` path beyond the problem's own validation, before any work:
/// element type, head dim, launch limits. Both NaN policies are taken.
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
        return Err(too_large("batch × q_heads"));
    }
    // The sanitize kernels' grid: one thread per 16 bytes of Q, K or V (grid x ≤ 2^31 − 1).
    let chunks = s.q_elems().max(s.kv_elems()) / 8;
    if chunks.div_ceil(POLICY_THREADS as usize) > i32::MAX as usize {
        return Err(too_large("the 16-byte chunks of q, k or v"));
    }
    Ok(())
}

/// Device addresses of one call's tensors (the mask 0 when there is none).
#[derive(Clone, Copy, Debug)]
struct Io {
    q: u64,
    k: u64,
    v: u64,
    o: u64,
    mask: u64,
}

/// Device scratch of one call: the key lengths, and for the policy work the per-row flags of Q,
/// K and V back to back, the three decision words, the first bad key per kv head and the
/// sanitised copies (`Propagate`). Allocated before anything is enqueued (outside any timing).
struct Scratch {
    kv_lens: Option<CudaSlice<i32>>,
    /// `None` for [`Work::Kernel`]: that call allocates nothing but the key lengths.
    policy: Option<PolicyScratch>,
    copies: Option<[CudaSlice<u16>; 3]>,
}

struct PolicyScratch {
    flags: CudaSlice<u32>,
    words: CudaSlice<u32>,
    first: CudaSlice<i32>,
}

impl Scratch {
    fn new(st: &Arc<CudaStream>, p: &Problem, work: Work) -> Result<Scratch> {
        let s = p.shape();
        let rows_q = s.batch * s.q_heads * s.q_len;
        let rows_kv = s.batch * s.kv_heads * s.kv_len;
        let zu = |n: usize| st.alloc_zeros::<u32>(n).map_err(drv("cuMemAlloc"));
        let policy = match work {
            Work::Kernel => None,
            _ => Some(PolicyScratch {
                flags: zu(rows_q + 2 * rows_kv)?,
                words: zu(3)?,
                first: st
                    .alloc_zeros::<i32>(s.batch * s.kv_heads)
                    .map_err(drv("cuMemAlloc"))?,
            }),
        };
        let copies = match work {
            Work::Propagate => {
                let z = |len: usize| st.alloc_zeros::<u16>(len).map_err(drv("cuMemAlloc"));
                Some([z(s.q_elems())?, z(s.kv_elems())?, z(s.kv_elems())?])
            }
            _ => None,
        };
        Ok(Scratch {
            kv_lens: kv_lens_buffer(st, p)?,
            policy,
            copies,
        })
    }

    /// The three words of the device scan (Q, K, V: 1 if the tensor holds a NaN or ±inf), read
    /// on `st` after the scan was enqueued (this waits), then one decision.
    fn decide(&self, st: &Arc<CudaStream>) -> Result<()> {
        let Some(ps) = &self.policy else {
            return Ok(());
        };
        let words = st.clone_dtoh(&ps.words).map_err(drv("cuMemcpyDtoH"))?;
        st.synchronize()
            .map_err(drv("kernel execution (non-finite scan)"))?;
        super::nonfinite_decision(&words)
    }
}

/// Device addresses of the scratch buffers (0 where a buffer was not allocated).
struct ScratchPtrs {
    kv_lens: u64,
    flags: u64,
    words: u64,
    first: u64,
    copies: Option<[u64; 3]>,
}

impl Tc {
    /// Load and verify `tensorcore.<arch>.cubin` into `ctx`, look up its 30 kernels and read
    /// the attention kernels' launch configurations.
    pub(crate) fn open(ctx: &Arc<CudaContext>, arch: &str) -> Result<Tc> {
        let c = cubins::load("tensorcore", arch)?;
        let module = Module::load(ctx, &c.bytes)?;
        let file = c.file;
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
        let by_dt = |stem: &str| -> Result<[Kernel; 2]> {
            Ok([
                module.kernel(&format!("{stem}_f16"), 0)?,
                module.kernel(&format!("{stem}_bf16"), 0)?,
            ])
        };
        let policy = PolicyKernels {
            sanitize: by_dt("tc_sanitize")?,
            poison: by_dt("tc_poison")?,
            first_bad: module.kernel("tc_first_bad", 0)?,
            any_flag: module.kernel("tc_any_flag", 0)?,
        };
        Ok(Tc {
            fwd,
            dec,
            cfg_fwd,
            cfg_dec,
            policy,
            file,
            _module: module,
        })
    }

    /// The embedded cubin's file name.
    pub(crate) fn file(&self) -> &str {
        &self.file
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

    /// Enqueue the one attention kernel launch of `p` on `stream` (asynchronous).
    fn enqueue_attention(
        &self,
        stream: &CudaStream,
        p: &Problem,
        c: Choice,
        a: &TcArgs,
    ) -> Result<()> {
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

    /// Enqueue `work` for `p` on `stream` (asynchronous): everything one call runs on the GPU,
    /// in a fixed order, the same launches for every value of the inputs.
    fn enqueue(
        &self,
        stream: &CudaStream,
        p: &Problem,
        c: Choice,
        io: Io,
        sc: &ScratchPtrs,
        work: Work,
    ) -> Result<()> {
        if work != Work::Kernel && sc.flags == 0 {
            return Err(Error::Cuda {
                op: "launch planning",
                message: "policy work without its scratch buffers (internal)".into(),
            });
        }
        let s = p.shape();
        let rows_q = s.batch * s.q_heads * s.q_len;
        let rows_kv = s.batch * s.kv_heads * s.kv_len;
        let base = self.policy_base(p, sc);
        let sanitize = |src: u64, dst: u64, flags_at: usize, rows: usize| -> Result<()> {
            let chunks = rows * (s.head_dim / 8);
            let blocks = chunks.div_ceil(POLICY_THREADS as usize) as u32;
            let prm = TcPolicy {
                src,
                dst,
                flags: sc.flags + 4 * flags_at as u64,
                rows: rows as i64,
                ..base
            };
            launch::launch_policy(
                stream,
                self.policy.sanitize[c.dt],
                (blocks, 1, 1),
                POLICY_THREADS,
                &prm,
            )
        };
        let scan = |dst: [u64; 3]| -> Result<()> {
            sanitize(io.q, dst[0], 0, rows_q)?;
            sanitize(io.k, dst[1], rows_q, rows_kv)?;
            sanitize(io.v, dst[2], rows_q + rows_kv, rows_kv)
        };
        let attention = |q: u64, k: u64, v: u64| {
            let a = self.args(p, [q, k, v, io.o], sc.kv_lens, io.mask);
            self.enqueue_attention(stream, p, c, &a)
        };
        match work {
            Work::Kernel => attention(io.q, io.k, io.v),
            Work::Scan | Work::ScanKernel => {
                scan([0; 3])?;
                launch::launch_policy(stream, self.policy.any_flag, (3, 1, 1), ANY_THREADS, &base)?;
                if work == Work::ScanKernel {
                    attention(io.q, io.k, io.v)?;
                }
                Ok(())
            }
            Work::Propagate => {
                let copies = sc.copies.ok_or_else(|| Error::Cuda {
                    op: "launch planning",
                    message: "Propagate without its sanitised copies (internal)".into(),
                })?;
                scan(copies)?;
                if io.mask == 0 {
                    let grid = (s.kv_heads as u32, s.batch as u32, 1);
                    launch::launch_policy(
                        stream,
                        self.policy.first_bad,
                        grid,
                        POLICY_THREADS,
                        &base,
                    )?;
                }
                attention(copies[0], copies[1], copies[2])?;
                let grid = (
                    s.q_len.div_ceil(POISON_ROWS) as u32,
                    s.q_heads as u32,
                    s.batch as u32,
                );
                let prm = TcPolicy {
                    out: io.o,
                    mask: io.mask,
                    ..base
                };
                launch::launch_policy(stream, self.policy.poison[c.dt], grid, POLICY_THREADS, &prm)
            }
        }
    }

    /// The fields every policy kernel shares: shapes, flags layout, key lengths, mask strides.
    fn policy_base(&self, p: &Problem, sc: &ScratchPtrs) -> TcPolicy {
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
            kv_lens: sc.kv_lens,
            words: sc.words,
            rows: rows_q as i64,
            rows_kv: rows_kv as i64,
            msb,
            msh,
            msq,
            d: s.head_dim as i32,
            b: s.batch as i32,
            hq: s.q_heads as i32,
            hkv: s.kv_heads as i32,
            sq: s.q_len as i32,
            skv: s.kv_len as i32,
            causal: i32::from(p.causal()),
            ..TcPolicy::default()
        }
    }

    /// Host slices in and out (lengths validated by the engine). Under `Reject` the inputs are
    /// scanned on the host first and nothing is uploaded if one is non-finite; under `Propagate`
    /// the device runs the policy kernels around the attention kernel. `out` is written only
    /// after everything succeeded.
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
        let work = match p.nonfinite() {
            NonFinitePolicy::Reject => {
                crate::cpu::reject_nonfinite(q, k, v)?;
                Work::Kernel
            }
            NonFinitePolicy::Propagate => Work::Propagate,
        };
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
        let mut sc = Scratch::new(st, p, work)?;
        let mut dout = st
            .alloc_zeros::<u16>(out.len())
            .map_err(drv("cuMemAlloc"))?;
        {
            let mut g = Guards::default();
            let io = Io {
                q: g.r(&dq, st),
                k: g.r(&dk, st),
                v: g.r(&dv, st),
                o: g.w(&mut dout, st),
                mask: dm.as_ref().map_or(0, |m| g.r(m, st)),
            };
            let ptrs = g.scratch(&mut sc, st);
            self.enqueue(st, p, c, io, &ptrs, work)?;
        }
        let bits = st.clone_dtoh(&dout).map_err(drv("cuMemcpyDtoH"))?;
        st.synchronize().map_err(drv("kernel execution"))?;
        for (o, b) in out.iter_mut().zip(bits) {
            *o = T::from_bits_u32(u32::from(b));
        }
        Ok(())
    }

    /// Device-resident buffers (lengths and devices checked by the caller), launched on
    /// `stream` (asynchronous). `alloc` is the backend's stream (scratch buffers). Under `Reject`
    /// the inputs are scanned on the GPU first (every element read, three words back, one
    /// decision; this waits) and nothing is written if one is non-finite; under `Propagate` the
    /// policy kernels run around the attention kernel, all on `stream`.
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
    ) -> Result<()> {
        let c = self.choose(p, T::DTYPE)?;
        let propagate = p.nonfinite() == NonFinitePolicy::Propagate;
        let work = if propagate {
            Work::Propagate
        } else {
            Work::Scan
        };
        let mut sc = Scratch::new(alloc, p, work)?;
        let mut g = Guards::default();
        let io = Io {
            q: g.r(q, stream),
            k: g.r(k, stream),
            v: g.r(v, stream),
            o: g.w(out, stream),
            mask: mask.map_or(0, |m| g.r(m, stream)),
        };
        {
            let mut gs = Guards::default();
            let ptrs = gs.scratch(&mut sc, stream);
            self.enqueue(stream, p, c, io, &ptrs, work)?;
            if !propagate {
                drop(gs);
                sc.decide(alloc)?;
                let mut gs = Guards::default();
                let ptrs = gs.scratch(&mut sc, stream);
                self.enqueue(stream, p, c, io, &ptrs, Work::Kernel)?;
            }
        }
        drop(g);
        Ok(())
    }

    /// Microseconds (CUDA events on `stream`) of exactly the GPU work [`Tc::run_device`]
    /// enqueues for `p` and its policy, without the host's `Reject` decision: under `Reject` the
    /// scan and then the kernel, under `Propagate` sanitize, kernel, poison. So the time covers
    /// the same launches whatever the values. Scratch is allocated before the first event.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn time_launch<T: Element + DeviceRepr>(
        &self,
        alloc: &Arc<CudaStream>,
        stream: &CudaStream,
        p: &Problem,
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        mask: Option<&CudaSlice<u8>>,
        out: &mut CudaSlice<T>,
    ) -> Result<f32> {
        let c = self.choose(p, T::DTYPE)?;
        let work = match p.nonfinite() {
            NonFinitePolicy::Reject => Work::ScanKernel,
            NonFinitePolicy::Propagate => Work::Propagate,
        };
        let mut sc = Scratch::new(alloc, p, work)?;
        let (e0, e1) = (timing::event(alloc)?, timing::event(alloc)?);
        let mut g = Guards::default();
        let io = Io {
            q: g.r(q, stream),
            k: g.r(k, stream),
            v: g.r(v, stream),
            o: g.w(out, stream),
            mask: mask.map_or(0, |m| g.r(m, stream)),
        };
        let ptrs = g.scratch(&mut sc, stream);
        e0.record(stream).map_err(drv("cuEventRecord"))?;
        self.enqueue(stream, p, c, io, &ptrs, work)?;
        e1.record(stream).map_err(drv("cuEventRecord"))?;
        drop(g);
        e1.synchronize().map_err(drv("kernel execution"))?;
        let ms = e0.elapsed_ms(&e1).map_err(drv("cuEventElapsedTime"))?;
        Ok(ms * 1000.0)
    }

    /// CUDA-event timing of `p` (docs/tensorcore.md, "Timing"): `rotate` seeded input sets
    /// (never zeros) uploaded once, the output poisoned once, `warmup` untimed calls, then `iters`
    /// samples of `per_sample` calls back to back between one pair of events, cycling the sets.
    /// A call is the GPU work of one host call: under `Reject` the kernel (the inputs are
    /// generated finite and, as in `bench` of the `Exact` path, the scan is not timed), under
    /// `Propagate` sanitize, kernel, poison. The figures are per call.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn bench<T: Element + DeviceRepr>(
        &self,
        st: &Arc<CudaStream>,
        p: &Problem,
        seed: u64,
        warmup: usize,
        iters: usize,
        rotate: usize,
        per_sample: usize,
    ) -> Result<BenchResult> {
        let c = self.choose(p, T::DTYPE)?;
        let work = match p.nonfinite() {
            NonFinitePolicy::Reject => Work::Kernel,
            NonFinitePolicy::Propagate => Work::Propagate,
        };
        let sets = timing::input_sets::<T>(st, p, seed, rotate)?;
        let mut out = timing::poisoned_output::<T>(st, p)?;
        let mut sc = Scratch::new(st, p, work)?;
        timing::sample(st, warmup, iters, per_sample, rotate, |i| {
            let x = &sets[i];
            let mut g = Guards::default();
            let ptrs = g.scratch(&mut sc, st);
            let io = Io {
                q: g.r(&x.q, st),
                k: g.r(&x.k, st),
                v: g.r(&x.v, st),
                o: g.w(&mut out, st),
                mask: x.mask.as_ref().map_or(0, |m| g.r(m, st)),
            };
            self.enqueue(st, p, c, io, &ptrs, work)
        })
    }

    fn args(&self, p: &Problem, qkvo: [u64; 4], kv_lens: u64, mask: u64) -> TcArgs {
        let s = p.shape();
        let (msb, msh, msq) = mask_strides(p);
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

/// The path's scratch buffers, with their guards.
impl<'a> Guards<'a> {
    fn scratch(&mut self, sc: &'a mut Scratch, st: &'a CudaStream) -> ScratchPtrs {
        let Scratch {
            kv_lens,
            policy,
            copies,
        } = sc;
        let (flags, words, first) = match policy {
            Some(ps) => (
                self.w(&mut ps.flags, st),
                self.w(&mut ps.words, st),
                self.w(&mut ps.first, st),
            ),
            None => (0, 0, 0),
        };
        ScratchPtrs {
            kv_lens: kv_lens.as_ref().map_or(0, |l| self.r(l, st)),
            flags,
            words,
            first,
            copies: copies
                .as_mut()
                .map(|[a, b, c]| [self.w(a, st), self.w(b, st), self.w(c, st)]),
        }
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
