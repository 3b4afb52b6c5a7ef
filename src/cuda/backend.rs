//! Buffers and the launch sequence of the `Exact` path on a GPU.
//!
//! A call runs, on one stream: `prepare` for Q, K and V (numerics.md §2, into f32 scratch
//! buffers, one row per warp), then under `Reject` on device-resident inputs the non-finite scan
//! (`reject_flags`, then the host reads three words and decides once), then the attention kernel:
//! the tiled fast kernel for head_dim ≤ 256 (one of three, by head_dim) or the generic kernel
//! above. The choice of kernel depends on the shape only, and every kernel produces the bits of
//! docs/numerics.md, so the choice never changes the output.

use super::guards::Guards;
use super::launch::{self, Kernel, Module, Params};
use super::{BenchResult, cubins, drv, timing};
use crate::dtype::{DType, Element};
use crate::error::{Error, Result, TensorName};
use crate::problem::{NonFinitePolicy, Problem};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DeviceRepr};
use std::sync::Arc;

/// Keys per tile (numerics.md §4), as the kernels use it.
const TILE: usize = crate::numerics::TILE;
/// Head-dim bounds of the three fast kernels (kernels/exact.cu); their tile shapes are read from
/// the cubin (`detattn_exact_cfg`), so the host never restates them.
const FAST_DP: [usize; 3] = [64, 128, 256];
const GENERIC_THREADS: u32 = 64;
const PREPARE_THREADS: u32 = 256;
const PREPARE_ROWS_PER_BLOCK: usize = PREPARE_THREADS as usize / 32;
/// Largest grid y (and z) dimension; larger launches are split along y by the host.
const MAX_GRID_Y: usize = 65535;

/// The launch shape of one fast kernel, as the cubin declares it (`detattn_exact_cfg` in
/// kernels/exact.cu: rows per block, threads, dynamic shared bytes, K/V in one buffer).
#[derive(Clone, Copy, Debug)]
struct FastCfg {
    bm: usize,
    threads: u32,
    smem: u32,
}

/// Read and sanity-check the fast kernels' launch shapes from the loaded module.
fn fast_cfgs(module: &Module) -> Result<[FastCfg; 3]> {
    let raw = module.constant_i32::<12>("detattn_exact_cfg")?;
    let mut out = [FastCfg {
        bm: 0,
        threads: 0,
        smem: 0,
    }; 3];
    for (i, row) in raw.chunks_exact(4).enumerate() {
        let (bm, nt, smem) = (row[0], row[1], row[2]);
        // A cubin that declares nonsense is refused rather than launched.
        if !(1..=1024).contains(&bm) || !(32..=1024).contains(&nt) || nt % 32 != 0 || smem <= 0 {
            return Err(Error::Cuda {
                op: "cubin launch table",
                message: format!("detattn_exact_cfg[{i}] = {row:?} is not a valid launch shape"),
            });
        }
        out[i] = FastCfg {
            bm: bm as usize,
            threads: nt as u32,
            smem: smem as u32,
        };
    }
    Ok(out)
}

fn dtype_suffix(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::Bf16 => "bf16",
    }
}

#[derive(Debug)]
struct Kernels {
    prepare: [Kernel; 3],
    reject: Kernel,
    fast: [[Kernel; 3]; 3],
    generic: [Kernel; 3],
    cfg: [FastCfg; 3],
}

/// An opened device with its kernels.
#[derive(Debug)]
pub(crate) struct Inner {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    arch: &'static str,
    source: String,
    k: Kernels,
    // Declared last: dropped after the kernel handles that point into it.
    _module: Module,
}

/// Shape-derived launch geometry (public information only).
#[derive(Clone, Copy, Debug)]
struct Plan {
    fast: Option<usize>,
    dp: usize,
    skv_pad: usize,
    nq: usize,
    nkv: usize,
    bh: usize,
}

fn too_large(what: &str) -> Error {
    Error::Cuda {
        op: "launch planning",
        message: format!("{what} exceeds what one launch of the CUDA kernels indexes (2^31 - 1)"),
    }
}

fn plan(p: &Problem) -> Result<Plan> {
    let s = p.shape();
    let fast = [64usize, 128, 256].iter().position(|&b| s.head_dim <= b);
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
    })
}

/// Scratch buffers of one call (prepared rows, shifts, flags).
struct Scratch {
    qp: CudaSlice<f32>,
    kp: CudaSlice<f32>,
    vp: CudaSlice<f32>,
    sq: CudaSlice<i32>,
    sk: CudaSlice<i32>,
    badq: CudaSlice<u32>,
    badk: CudaSlice<u32>,
    badv: CudaSlice<u32>,
    flags: CudaSlice<u32>,
    acc: CudaSlice<f32>,
    kv_lens: CudaSlice<i32>,
}

fn alloc_scratch(stream: &Arc<CudaStream>, p: &Problem, pl: &Plan) -> Result<Scratch> {
    let z = |n: usize| {
        stream
            .alloc_zeros::<f32>(n.max(1))
            .map_err(drv("cuMemAlloc"))
    };
    let zi = |n: usize| {
        stream
            .alloc_zeros::<i32>(n.max(1))
            .map_err(drv("cuMemAlloc"))
    };
    let zu = |n: usize| {
        stream
            .alloc_zeros::<u32>(n.max(1))
            .map_err(drv("cuMemAlloc"))
    };
    let s = p.shape();
    let lens: Vec<i32> = (0..s.batch).map(|b| p.kv_len_of(b) as i32).collect();
    Ok(Scratch {
        qp: z(pl.nq * pl.dp)?,
        kp: z(pl.nkv * pl.dp)?,
        vp: z(pl.nkv * pl.dp)?,
        sq: zi(pl.nq)?,
        sk: zi(pl.nkv)?,
        badq: zu(pl.nq)?,
        badk: zu(pl.nkv)?,
        badv: zu(pl.nkv)?,
        flags: zu(3)?,
        acc: z(if pl.fast.is_none() { pl.nq * pl.dp } else { 1 })?,
        kv_lens: stream.clone_htod(&lens).map_err(drv("cuMemcpyHtoD"))?,
    })
}

/// Device addresses of the caller's tensors.
#[derive(Clone, Copy)]
struct Io {
    q: u64,
    k: u64,
    v: u64,
    mask: u64,
    out: u64,
}

/// The host entry point's buffers of raw element bits, in either width.
impl<'a> Guards<'a> {
    fn bits(&mut self, b: &'a Bits, st: &'a CudaStream) -> u64 {
        match b {
            Bits::W32(s) => self.r(s, st),
            Bits::W16(s) => self.r(s, st),
        }
    }
    fn bits_w(&mut self, b: &'a mut Bits, st: &'a CudaStream) -> u64 {
        match b {
            Bits::W32(s) => self.w(s, st),
            Bits::W16(s) => self.w(s, st),
        }
    }
}

/// Device addresses of the scratch buffers of one call.
#[derive(Clone, Copy)]
struct ScratchPtrs {
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
    kv_lens: u64,
}

fn scratch_ptrs<'a>(
    sc: &'a mut Scratch,
    stream: &'a CudaStream,
    g: &mut Guards<'a>,
) -> ScratchPtrs {
    ScratchPtrs {
        qp: g.w(&mut sc.qp, stream),
        kp: g.w(&mut sc.kp, stream),
        vp: g.w(&mut sc.vp, stream),
        sq: g.w(&mut sc.sq, stream),
        sk: g.w(&mut sc.sk, stream),
        badq: g.w(&mut sc.badq, stream),
        badk: g.w(&mut sc.badk, stream),
        badv: g.w(&mut sc.badv, stream),
        flags: g.w(&mut sc.flags, stream),
        acc: g.w(&mut sc.acc, stream),
        kv_lens: g.r(&sc.kv_lens, stream),
    }
}

/// A device buffer of raw element bits in the input dtype's width (host entry point).
enum Bits {
    W32(CudaSlice<u32>),
    W16(CudaSlice<u16>),
}

fn upload<T: Element>(stream: &Arc<CudaStream>, x: &[T]) -> Result<Bits> {
    Ok(match T::DTYPE.size() {
        4 => {
            let v: Vec<u32> = x.iter().map(|e| e.to_bits_u32()).collect();
            Bits::W32(stream.clone_htod(&v).map_err(drv("cuMemcpyHtoD"))?)
        }
        _ => {
            let v: Vec<u16> = x.iter().map(|e| e.to_bits_u32() as u16).collect();
            Bits::W16(stream.clone_htod(&v).map_err(drv("cuMemcpyHtoD"))?)
        }
    })
}

impl Inner {
    pub(crate) fn open(ordinal: usize) -> Result<Inner> {
        launch::driver_version().map_err(|e| Error::NoCudaDriver {
            reason: e.to_string(),
        })?;
        let devices = launch::devices()?;
        let Some((_, name, major, minor)) = devices.into_iter().find(|d| d.0 == ordinal) else {
            return Err(Error::NoCudaDriver {
                reason: format!("no CUDA GPU with ordinal {ordinal}"),
            });
        };
        let arch = cubins::arch_of(major, minor).ok_or_else(|| Error::UnsupportedGpu {
            ordinal,
            name: name.clone(),
            major,
            minor,
            supported: cubins::ARCHS.join(", "),
        })?;
        let c = cubins::load("exact", arch)?;
        let (cubin, source) = (c.bytes.into_owned(), c.source);
        let ctx = CudaContext::new(ordinal).map_err(drv("cuCtxCreate"))?;
        let stream = ctx.default_stream();
        let module = Module::load(&ctx, &cubin)?;
        let dts = [DType::F32, DType::F16, DType::Bf16];
        let by_dt = |stem: &str, smem: u32| -> Result<[Kernel; 3]> {
            let f = |d: DType| module.kernel(&format!("{stem}_{}", dtype_suffix(d)), smem);
            Ok([f(dts[0])?, f(dts[1])?, f(dts[2])?])
        };
        let cfg = fast_cfgs(&module)?;
        let k = Kernels {
            prepare: by_dt("detattn_prepare", 0)?,
            reject: module.kernel("detattn_reject_flags", 0)?,
            fast: [
                by_dt("detattn_exact64", cfg[0].smem)?,
                by_dt("detattn_exact128", cfg[1].smem)?,
                by_dt("detattn_exact256", cfg[2].smem)?,
            ],
            generic: by_dt("detattn_exact_generic", 0)?,
            cfg,
        };
        Ok(Inner {
            ordinal,
            ctx,
            stream,
            name,
            arch,
            source,
            k,
            _module: module,
        })
    }

    pub(crate) fn describe(&self) -> String {
        format!("cuda:{} {} ({})", self.ordinal, self.name, self.arch)
    }
    pub(crate) fn cubin_source(&self) -> &str {
        &self.source
    }
    pub(crate) fn stream(&self) -> Arc<CudaStream> {
        self.stream.clone()
    }
    pub(crate) fn new_stream(&self) -> Result<Arc<CudaStream>> {
        self.ctx.new_stream().map_err(drv("cuStreamCreate"))
    }

    fn base_params(&self, p: &Problem, pl: &Plan, io: Io, sc: ScratchPtrs) -> Params {
        let s = p.shape();
        let layout = p.mask();
        Params {
            q: io.q,
            k: io.k,
            v: io.v,
            mask: io.mask,
            out: io.out,
            kv_lens: sc.kv_lens,
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
            b: s.batch as i32,
            hq: s.q_heads as i32,
            hkv: s.kv_heads as i32,
            sq_len: s.q_len as i32,
            skv: s.kv_len as i32,
            d: s.head_dim as i32,
            dp: pl.dp as i32,
            skv_pad: pl.skv_pad as i32,
            causal: p.causal() as i32,
            has_mask: layout.is_some() as i32,
            mask_per_batch: layout.is_some_and(|l| l.per_batch) as i32,
            mask_per_head: layout.is_some_and(|l| l.per_head) as i32,
            propagate: (p.nonfinite() == NonFinitePolicy::Propagate) as i32,
            scale: p.scale(),
            group: s.group() as i32,
            ..Params::default()
        }
    }

    /// Enqueue prepare (and the scan when `scan`), then, when `attend`, the attention kernel. All on `stream`; asynchronous.
    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        &self,
        stream: &CudaStream,
        p: &Problem,
        pl: &Plan,
        dtype: DType,
        io: Io,
        sc: &mut Scratch,
        scan: bool,
        attend: bool,
    ) -> Result<()> {
        let s = *p.shape();
        let dt = dtype.code() as usize;
        let mut g = Guards::default();
        let ptrs = scratch_ptrs(sc, stream, &mut g);
        let base = self.base_params(p, pl, io, ptrs);
        // §2 in one launch: K (scaled, padded to whole tiles) and V (sanitised) always, and Q
        // (scaled; blockIdx.z = 0) when the generic kernel reads it or the device scan needs its
        // flags. The fast kernels prepare their own query rows.
        let with_q = scan || pl.fast.is_none();
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
                ..base
            };
            launch::launch(
                stream,
                self.k.prepare[dt],
                (gx, n as u32, jobs),
                PREPARE_THREADS,
                0,
                &prm,
            )?;
            h0 += n;
        }
        if scan {
            launch::launch(stream, self.k.reject, (1, 1, 1), 1024, 0, &base)?;
        }
        if attend {
            self.enqueue_attend(stream, pl, dt, &base)?;
        }
        drop(g);
        Ok(())
    }

    fn enqueue_attend(
        &self,
        stream: &CudaStream,
        pl: &Plan,
        dt: usize,
        base: &Params,
    ) -> Result<()> {
        let mut bh0 = 0;
        while bh0 < pl.bh {
            let n = (pl.bh - bh0).min(MAX_GRID_Y);
            let prm = Params {
                bh0: bh0 as i32,
                ..*base
            };
            match pl.fast {
                Some(i) => {
                    let c = self.k.cfg[i];
                    let nrb = (base.sq_len as usize).div_ceil(c.bm) as u32;
                    launch::launch(
                        stream,
                        self.k.fast[i][dt],
                        (nrb, n as u32, 1),
                        c.threads,
                        c.smem,
                        &prm,
                    )?;
                }
                None => {
                    launch::launch(
                        stream,
                        self.k.generic[dt],
                        (base.sq_len as u32, n as u32, 1),
                        GENERIC_THREADS,
                        0,
                        &prm,
                    )?;
                }
            }
            bh0 += n;
        }
        Ok(())
    }

    fn check_device<T>(&self, tensor: TensorName, x: &CudaSlice<T>) -> Result<()> {
        if x.context().ordinal() != self.ordinal || x.context().cu_ctx() != self.ctx.cu_ctx() {
            return Err(Error::WrongDevice {
                tensor,
                ordinal: self.ordinal,
            });
        }
        Ok(())
    }

    fn check_stream(&self, stream: &CudaStream) -> Result<()> {
        if stream.context().cu_ctx() != self.ctx.cu_ctx() {
            return Err(Error::Cuda {
                op: "stream check",
                message: format!(
                    "the stream belongs to another context than cuda:{}",
                    self.ordinal
                ),
            });
        }
        Ok(())
    }

    /// Check lengths and devices of device-resident arguments.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check_device_args<T>(
        &self,
        stream: &CudaStream,
        p: &Problem,
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        mask: Option<&CudaSlice<u8>>,
        out: &CudaSlice<T>,
    ) -> Result<()> {
        p.check_inputs(q.len(), k.len(), v.len(), mask.map(|m| m.len()))?;
        p.check_output(out.len())?;
        self.check_stream(stream)?;
        self.check_device(TensorName::Q, q)?;
        self.check_device(TensorName::K, k)?;
        self.check_device(TensorName::V, v)?;
        if let Some(m) = mask {
            self.check_device(TensorName::Mask, m)?;
        }
        self.check_device(TensorName::Out, out)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_device<T: Element + DeviceRepr>(
        &self,
        stream: &CudaStream,
        p: &Problem,
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        mask: Option<&CudaSlice<u8>>,
        out: &mut CudaSlice<T>,
        decide: bool,
    ) -> Result<()> {
        self.check_device_args(stream, p, q, k, v, mask, out)?;
        let pl = plan(p)?;
        // Scratch is allocated on the backend's stream and used on `stream`: cudarc's events
        // order the two (and the frees after the kernels) when several streams exist.
        let mut sc = alloc_scratch(&self.stream, p, &pl)?;
        let scan = p.nonfinite() == NonFinitePolicy::Reject;
        let mut g = Guards::default();
        let io = Io {
            q: g.r(q, stream),
            k: g.r(k, stream),
            v: g.r(v, stream),
            mask: mask.map_or(0, |m| g.r(m, stream)),
            out: g.w(out, stream),
        };
        if scan && decide {
            self.enqueue(stream, p, &pl, T::DTYPE, io, &mut sc, true, false)?;
            let flags = self
                .stream
                .clone_dtoh(&sc.flags)
                .map_err(drv("cuMemcpyDtoH"))?;
            self.stream
                .synchronize()
                .map_err(drv("kernel execution (prepare, scan)"))?;
            super::nonfinite_decision(&flags)?;
            let ptrs = scratch_ptrs(&mut sc, stream, &mut g);
            let base = self.base_params(p, &pl, io, ptrs);
            self.enqueue_attend(stream, &pl, T::DTYPE.code() as usize, &base)?;
        } else {
            self.enqueue(stream, p, &pl, T::DTYPE, io, &mut sc, scan, true)?;
        }
        drop(g);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn time_launch<T: Element + DeviceRepr>(
        &self,
        stream: &CudaStream,
        p: &Problem,
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        mask: Option<&CudaSlice<u8>>,
        out: &mut CudaSlice<T>,
    ) -> Result<f32> {
        self.check_device_args(stream, p, q, k, v, mask, out)?;
        let pl = plan(p)?;
        let st = stream;
        let mut sc = alloc_scratch(&self.stream, p, &pl)?;
        let scan = p.nonfinite() == NonFinitePolicy::Reject;
        let ev = |_| {
            self.ctx
                .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(drv("cuEventCreate"))
        };
        let (e0, e1) = (ev(0)?, ev(1)?);
        let mut g = Guards::default();
        let io = Io {
            q: g.r(q, st),
            k: g.r(k, st),
            v: g.r(v, st),
            mask: mask.map_or(0, |m| g.r(m, st)),
            out: g.w(out, st),
        };
        e0.record(st).map_err(drv("cuEventRecord"))?;
        self.enqueue(st, p, &pl, T::DTYPE, io, &mut sc, scan, true)?;
        e1.record(st).map_err(drv("cuEventRecord"))?;
        drop(g);
        e1.synchronize().map_err(drv("kernel execution"))?;
        let ms = e0.elapsed_ms(&e1).map_err(drv("cuEventElapsedTime"))?;
        Ok(ms * 1000.0)
    }

    pub(crate) fn run_host<T: Element>(
        &self,
        p: &Problem,
        q: &[T],
        k: &[T],
        v: &[T],
        mask: Option<&[bool]>,
        out: &mut [T],
    ) -> Result<()> {
        if p.nonfinite() == NonFinitePolicy::Reject {
            crate::cpu::reject_nonfinite(q, k, v)?;
        }
        let pl = plan(p)?;
        let st = self.stream.clone();
        let mut sc = alloc_scratch(&st, p, &pl)?;
        let (dq, dk, dv) = (upload(&st, q)?, upload(&st, k)?, upload(&st, v)?);
        let dm = match mask {
            Some(m) => {
                let bytes: Vec<u8> = m.iter().map(|&b| u8::from(b)).collect();
                Some(st.clone_htod(&bytes).map_err(drv("cuMemcpyHtoD"))?)
            }
            None => None,
        };
        let n = out.len();
        let mut dout = match T::DTYPE.size() {
            4 => Bits::W32(st.alloc_zeros::<u32>(n).map_err(drv("cuMemAlloc"))?),
            _ => Bits::W16(st.alloc_zeros::<u16>(n).map_err(drv("cuMemAlloc"))?),
        };
        {
            let mut g = Guards::default();
            let io = Io {
                q: g.bits(&dq, &st),
                k: g.bits(&dk, &st),
                v: g.bits(&dv, &st),
                mask: dm.as_ref().map_or(0, |m| g.r(m, &st)),
                out: g.bits_w(&mut dout, &st),
            };
            // The host scanned already (Reject) or the policy propagates: no device scan.
            self.enqueue(&st, p, &pl, T::DTYPE, io, &mut sc, false, true)?;
        }
        let bits: Vec<u32> = match &dout {
            Bits::W32(s) => st.clone_dtoh(s).map_err(drv("cuMemcpyDtoH"))?,
            Bits::W16(s) => st
                .clone_dtoh(s)
                .map_err(drv("cuMemcpyDtoH"))?
                .into_iter()
                .map(u32::from)
                .collect(),
        };
        st.synchronize().map_err(drv("kernel execution"))?;
        for (o, b) in out.iter_mut().zip(bits) {
            *o = T::from_bits_u32(b);
        }
        Ok(())
    }

    /// The `Exact` kernels timed by the protocol of `timing` (a call: the K/V preparation and the
    /// attention kernel, what a call costs on the GPU without uploads or the `Reject` scan).
    pub(crate) fn bench<T: Element + DeviceRepr>(
        &self,
        p: &Problem,
        seed: u64,
        warmup: usize,
        iters: usize,
        rotate: usize,
        per_sample: usize,
    ) -> Result<BenchResult> {
        let st = self.stream.clone();
        let pl = plan(p)?;
        let sets = timing::input_sets::<T>(&st, p, seed, rotate)?;
        let mut out = timing::poisoned_output::<T>(&st, p)?;
        let mut sc = alloc_scratch(&st, p, &pl)?;
        timing::sample(&st, warmup, iters, per_sample, rotate, |i| {
            let x = &sets[i];
            let mut g = Guards::default();
            let io = Io {
                q: g.r(&x.q, &st),
                k: g.r(&x.k, &st),
                v: g.r(&x.v, &st),
                mask: x.mask.as_ref().map_or(0, |m| g.r(m, &st)),
                out: g.w(&mut out, &st),
            };
            self.enqueue(&st, p, &pl, T::DTYPE, io, &mut sc, false, true)
        })
    }
}
