//! The entry points of every GPU path, written once: host slices in and out, device-resident
//! tensors on the caller's stream, a timed launch, and the benchmark. Each drives a [`GpuPath`]
//! through the same steps (`path.rs`); the only `unsafe` here is the call of `launch::submit`,
//! after the checks its contract names.
//!
//! The order of the checks is the crate's one order (`tensor.rs`): the tensors' extents (the
//! engine does it for host slices, [`run_device`] here), then what the path takes (its plan), then
//! the devices, then device memory, then the non-finite policy.
#![allow(unsafe_code)]

use super::drv;
use super::guards::Guards;
use super::launch::{self, Launch, RawStream};
use super::paged::{Gather, Pages};
use super::path::{
    DevTensor, DevicePagedKv, DeviceQkv, DeviceTensor, DeviceTensorMut, GpuPath, Io, PagedIo,
    RawDeviceOut, RawDevicePagedKv, RawDeviceQkv, RawDeviceTensor, Step,
};
use super::timing::{self, BenchOptions, BenchResult};
use super::varlen::{Sequences, key_lengths};
use crate::dtype::Element;
use crate::error::{Error, Result, TensorName};
use crate::path::Path;
use crate::problem::{NonFinitePolicy, Problem};
use crate::tensor::{self, Fit, Layout, Operand, Operands, Paging, Qkv, TensorMut};
use cudarc::driver::sys::CUresult;
use cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DeviceRepr, DriverError, ValidAsZeroBits,
};
use std::sync::Arc;

/// An opened GPU: its context, the stream the host entry points use, and what it is.
#[derive(Debug)]
pub(crate) struct Device {
    pub ordinal: usize,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub name: String,
    pub arch: &'static str,
}

impl Device {
    /// `needed` bytes of new allocations must fit in what the driver reports free, else
    /// [`Error::DeviceMemory`] before anything is allocated.
    fn reserve(&self, needed: u64) -> Result<()> {
        let (free, _) = launch::memory(&self.ctx)?;
        if needed > free {
            return Err(Error::DeviceMemory {
                ordinal: self.ordinal,
                needed,
                free,
            });
        }
        Ok(())
    }

    /// An allocation's driver error: out of memory is [`Error::DeviceMemory`] (another process
    /// may have taken memory since [`Device::reserve`]), anything else [`Error::Cuda`].
    fn alloc_err(&self, needed: u64) -> impl Fn(DriverError) -> Error + '_ {
        move |e| {
            if e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                let free = launch::memory(&self.ctx).map_or(0, |m| m.0);
                Error::DeviceMemory {
                    ordinal: self.ordinal,
                    needed,
                    free,
                }
            } else {
                drv("cuMemAlloc")(e)
            }
        }
    }

    /// A call's own memory ([`CallMemory`]): the scratch buffers of `sizes` bytes, zeroed but
    /// for those `written` marks ([`GpuPath::written_first`]), and the key lengths of `p`
    /// ([`key_lengths`]), uploaded.
    fn call_memory(&self, p: &Problem, sizes: &[usize], written: &[bool]) -> Result<CallMemory> {
        let lens = key_lengths(p);
        let l = CallMemory::layout(sizes, written, lens.len());
        // SAFETY: cuMemAllocAsync of `l.total` bytes on this device's stream, with nothing read
        // from it before the writes below: the zeroed prefix (every buffer not marked written),
        // the key lengths; the rest is read only after a launch of the call wrote it, as the
        // path declares for each such buffer (`written_first`).
        let mut buf =
            unsafe { self.stream.alloc::<u8>(l.total) }.map_err(self.alloc_err(l.total as u64))?;
        if l.zeroed > 0 {
            self.stream
                .memset_zeros(&mut buf.slice_mut(0..l.zeroed))
                .map_err(drv("cuMemsetD8"))?;
        }
        let (offsets, at) = (l.offsets, l.lens);
        let bytes: &[u8] = bytemuck::cast_slice(&lens);
        if !bytes.is_empty() {
            let mut dst = buf.slice_mut(at..at + bytes.len());
            self.stream
                .memcpy_htod(bytes, &mut dst)
                .map_err(drv("cuMemcpyHtoD"))?;
        }
        Ok(CallMemory {
            buf,
            scratch: offsets,
            lens: at,
        })
    }

    fn check_context(&self, tensor: TensorName, ctx: &Arc<CudaContext>) -> Result<()> {
        if ctx.ordinal() != self.ordinal || ctx.cu_ctx() != self.ctx.cu_ctx() {
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

    /// Enqueue `launches` on `stream`.
    ///
    /// # Safety
    /// As [`launch::submit`]: the addresses inside the launches are live allocations of this
    /// device, large enough for the problem they were planned for, and alive until the stream
    /// has run them.
    unsafe fn submit(&self, stream: &CudaStream, launches: &[Launch]) -> Result<()> {
        self.check_stream(stream)?;
        // SAFETY: the stream belongs to this device's context (checked above); the rest is the
        // caller's contract, the same as submit's.
        unsafe { launch::submit(&self.ctx, RawStream::of(stream), launches) }
    }
}

/// A call's own device memory in one allocation: the path's scratch buffers, each at a 256-byte
/// aligned offset — first those to be zeroed (one memset for them all), then the key lengths
/// (`B` i32), then the buffers a launch of the call writes in full before any reads them
/// ([`GpuPath::written_first`]: the sanitised or prepared copies of the inputs, as large as the
/// KV cache, whose zeroing cost a decode as much GPU time as its attention). One allocation
/// because each costs the host more than the driver's allocation: cudarc's stream-ordering
/// events for it, its guard at every launch, its free (H200, 2026-11-29: a small TensorCore decode
/// called from Python took 169–196 µs of host time with eight, 114–117 with one; docs/perf.md,
/// "A whole call from Python").
struct CallMemory {
    buf: CudaSlice<u8>,
    /// Where each scratch buffer starts, in the order of [`GpuPath::scratch`].
    scratch: Vec<usize>,
    /// Where the key lengths start.
    lens: usize,
}

/// Where [`CallMemory`]'s parts lie, in bytes from its start.
#[derive(Debug)]
struct MemoryLayout {
    /// Each scratch buffer's offset, by [`GpuPath::scratch`]'s index.
    offsets: Vec<usize>,
    /// The end of the zeroed prefix: every buffer not written first lies before it.
    zeroed: usize,
    /// The key lengths' offset.
    lens: usize,
    total: usize,
}

impl CallMemory {
    const ALIGN: usize = 256;

    /// The layout of scratch buffers of `sizes` bytes (each at least 1; `written[i]`, where
    /// present and true, marks buffer i written in full before it is read) and `lens` key
    /// lengths: the zeroed buffers in index order, the key lengths, the written ones in order.
    fn layout(sizes: &[usize], written: &[bool], lens: usize) -> MemoryLayout {
        let w = |i: usize| written.get(i).copied().unwrap_or(false);
        let place = |at: &mut usize, n: usize| {
            let o = *at;
            *at += n.max(1).next_multiple_of(Self::ALIGN);
            o
        };
        let mut offsets = vec![0; sizes.len()];
        let mut at = 0;
        for i in (0..sizes.len()).filter(|&i| !w(i)) {
            offsets[i] = place(&mut at, sizes[i]);
        }
        let zeroed = at;
        let lens_at = place(&mut at, 4 * lens);
        for i in (0..sizes.len()).filter(|&i| w(i)) {
            offsets[i] = place(&mut at, sizes[i]);
        }
        MemoryLayout {
            offsets,
            zeroed,
            lens: lens_at,
            total: at,
        }
    }

    /// The bytes a call of these scratch buffers allocates (what the host entry's
    /// [`Device::reserve`] counts).
    fn bytes(sizes: &[usize], written: &[bool], p: &Problem) -> u64 {
        Self::layout(sizes, written, key_lengths(p).len()).total as u64
    }

    /// The scratch buffers' addresses, in order, and the key lengths', held by `g` for `st`.
    fn addrs<'a>(&'a mut self, g: &mut Guards<'a>, st: &'a CudaStream) -> (Vec<u64>, u64) {
        let base = g.w(&mut self.buf, st);
        let scratch = self.scratch.iter().map(|&o| base + o as u64).collect();
        (scratch, base + self.lens as u64)
    }

    /// The key lengths' address, for launches whose buffers the caller orders itself (the
    /// raw-address entry points, [`raw_steps`]).
    fn lens_addr(&self, st: &CudaStream) -> u64 {
        let mut g = Guards::default();
        g.r(&self.buf, st) + self.lens as u64
    }
}

/// The bytes of the three check words at the start of scratch buffer 0, read after the stream
/// has run the `Check` step, and the one decision on them.
fn decide(dev: &Device, mem: &CallMemory) -> Result<()> {
    let words: Vec<u8> = dev
        .stream
        .clone_dtoh(&mem.buf.slice(mem.scratch[0]..mem.scratch[0] + 12))
        .map_err(drv("cuMemcpyDtoH"))?;
    dev.stream
        .synchronize()
        .map_err(drv("kernel execution (non-finite scan)"))?;
    let flag = |i: usize| {
        u32::from_le_bytes([
            words[4 * i],
            words[4 * i + 1],
            words[4 * i + 2],
            words[4 * i + 3],
        ])
    };
    let names = [TensorName::Q, TensorName::K, TensorName::V];
    match (0..3).find(|&i| flag(i) != 0) {
        Some(i) => Err(Error::NonFinite { tensor: names[i] }),
        None => Ok(()),
    }
}

/// What the path takes (its plan): the one place every entry point plans a call.
fn plan<P: GpuPath>(path: &P, p: &Problem, dtype: crate::DType, ops: &Operands) -> Result<P::Plan> {
    path.plan(p, dtype, ops)
}

/// Host slices in and out. The engine has checked the tensors (`tensor::check_call`); the rest of
/// the validation happens here, before any upload: the path's plan, then device memory, then
/// under `Reject` the host scan of every element. `out` is written only after everything
/// succeeded, and only its rows.
pub(crate) fn run_host<P: GpuPath, T: Element>(
    dev: &Device,
    path: &P,
    p: &Problem,
    x: &Qkv<'_, T>,
    out: TensorMut<'_, T>,
    lse: Option<&mut [f32]>,
) -> Result<()> {
    let s = *p.shape();
    let (qd, _) = tensor::dims(p);
    let staged = Layout::bhsd(s.q_heads, s.q_len, s.head_dim);
    let ops = Operands {
        q: (&x.q).into(),
        k: (&x.k).into(),
        v: (&x.v).into(),
        mask: x.mask.map(<[bool]>::len),
        out: Operand {
            len: s.q_elems(),
            layout: staged,
        },
    };
    let plan = plan(path, p, T::DTYPE, &ops)?;
    let sizes = path.scratch(p, &plan, false);
    let written = path.written_first(p, &plan, false);
    // The uploads: each distinct input buffer once (q, k, v may be views of one fused buffer).
    let bufs: Vec<&[T]> = {
        let mut v: Vec<&[T]> = Vec::new();
        for b in [x.q.data, x.k.data, x.v.data] {
            if !v.iter().any(|u| std::ptr::eq(*u, b)) {
                v.push(b);
            }
        }
        v
    };
    let elem = T::DTYPE.size() as u64;
    let needed = bufs.iter().map(|b| b.len() as u64 * elem).sum::<u64>()
        + s.q_elems() as u64 * elem
        + x.mask.map_or(0, |m| m.len() as u64)
        + lse.as_ref().map_or(0, |l| 4 * l.len() as u64)
        + CallMemory::bytes(&sizes, &written, p);
    dev.reserve(needed)?;
    if p.nonfinite() == NonFinitePolicy::Reject {
        tensor::reject_nonfinite(p, &(*x).into())?;
    }
    let st = &dev.stream;
    let up = |b: &[T]| {
        st.clone_htod(bytemuck::cast_slice::<T, u8>(b))
            .map_err(dev.alloc_err(needed))
    };
    let dbufs: Vec<CudaSlice<u8>> = bufs.iter().map(|b| up(b)).collect::<Result<_>>()?;
    let which = |b: &[T]| bufs.iter().position(|u| std::ptr::eq(*u, b)).unwrap_or(0);
    let dmask = match x.mask {
        Some(m) => {
            let bytes: Vec<u8> = m.iter().map(|&b| u8::from(b)).collect();
            Some(st.clone_htod(&bytes).map_err(dev.alloc_err(needed))?)
        }
        None => None,
    };
    let mut dout = st
        .alloc_zeros::<u8>(s.q_elems() * T::DTYPE.size())
        .map_err(dev.alloc_err(needed))?;
    let mut mem = dev.call_memory(p, &sizes, &written)?;
    // The log-sum-exp, when asked: `[B, Hq, Sq]` row-major (for a varlen batch `[Hq, total]`, the
    // same with B = 1), as the caller's slice.
    let mut dlse = match &lse {
        Some(l) => Some(
            st.alloc_zeros::<f32>(l.len())
                .map_err(dev.alloc_err(needed))?,
        ),
        None => None,
    };
    {
        let mut g = Guards::default();
        let addrs: Vec<u64> = dbufs.iter().map(|b| g.r(b, st)).collect();
        let (scratch, kv_lens) = mem.addrs(&mut g, st);
        let e = elem as usize;
        let io = Io {
            q: DevTensor::new(addrs[which(x.q.data)], x.q.layout, e),
            k: DevTensor::new(addrs[which(x.k.data)], x.k.layout, e),
            v: DevTensor::new(addrs[which(x.v.data)], x.v.layout, e),
            out: DevTensor::new(g.w(&mut dout, st), staged, e),
            mask: dmask.as_ref().map_or(0, |m| g.r(m, st)),
            kv_lens,
            lse: lse_tensor(p, dlse.as_mut().map_or(0, |l| g.w(l, st))),
            pages: None,
        };
        let launches = path.launches(p, &plan, &io, &scratch, Step::Compute { checked: false })?;
        // SAFETY: every address in `io` is a buffer allocated above at the size of the host
        // slice it mirrors, which tensor::check_call checked against the layouts (the output:
        // q_elems elements at the contiguous layout `staged`); the key lengths hold B ints; the
        // scratch buffers have the sizes the plan asked for. The guards in `g` keep them alive
        // and ordered until the stream has run the launches.
        unsafe { dev.submit(st, &launches)? };
    }
    let mut staged_out = vec![T::default(); s.q_elems()];
    st.memcpy_dtoh(&dout, bytemuck::cast_slice_mut::<T, u8>(&mut staged_out))
        .map_err(drv("cuMemcpyDtoH"))?;
    let staged_lse = match &dlse {
        Some(d) => Some(st.clone_dtoh(d).map_err(drv("cuMemcpyDtoH"))?),
        None => None,
    };
    st.synchronize().map_err(drv("kernel execution"))?;
    place(&staged_out, qd, out);
    if let (Some(l), Some(staged)) = (lse, staged_lse) {
        l.copy_from_slice(&staged);
    }
    Ok(())
}

/// Copy a contiguous `[B, H, S, D]` result into the rows of `out`.
fn place<T: Copy>(staged: &[T], [_, h, s, d]: [usize; 4], out: TensorMut<'_, T>) {
    for (r, row) in staged.chunks_exact(d).enumerate() {
        let o = out.layout.row(r / (h * s), (r / s) % h, r % s);
        out.data[o..o + d].copy_from_slice(row);
    }
}

/// Where the log-sum-exp at device address `addr` puts row `(b, h, i)`: `[B, Hq, Sq]` row-major
/// (for a varlen batch `[Hq, total]`, the same with B = 1). Address 0: not asked.
fn lse_tensor(p: &Problem, addr: u64) -> DevTensor {
    if addr == 0 {
        return DevTensor::default();
    }
    let s = p.shape();
    DevTensor {
        addr,
        bs: (s.q_heads * s.q_len) as i64,
        hs: s.q_len as i64,
        ss: 1,
    }
}

/// The operands of a device call, for `tensor::check_call` and the path's plan.
fn device_operands<T>(x: &DeviceQkv<'_, T>, out: &DeviceTensorMut<'_, T>) -> Operands {
    let op = |len: usize, layout: Layout| Operand { len, layout };
    Operands {
        q: op(x.q.data.len(), x.q.layout),
        k: op(x.k.data.len(), x.k.layout),
        v: op(x.v.data.len(), x.v.layout),
        mask: x.mask.map(|m| m.len()),
        out: op(out.data.len(), out.layout),
    }
}

/// What a device call has allocated and which steps it runs, after its checks.
struct DeviceCall<Pl> {
    plan: Pl,
    mem: CallMemory,
    check: bool,
}

impl<Pl> DeviceCall<Pl> {
    /// The steps the call runs: under `Reject` the scan, its decision, then the computation;
    /// else the computation.
    fn steps(&self) -> &'static [Step] {
        if self.check {
            &[Step::Check, Step::Compute { checked: true }]
        } else {
            &[Step::Compute { checked: false }]
        }
    }
}

/// Every check of a device call in the crate's order, then its allocations.
fn prepare_device<P: GpuPath, T: Element>(
    dev: &Device,
    path: &P,
    stream: &CudaStream,
    p: &Problem,
    x: &DeviceQkv<'_, T>,
    out: &DeviceTensorMut<'_, T>,
) -> Result<DeviceCall<P::Plan>> {
    let ops = device_operands(x, out);
    let lse = out.lse.as_ref().map(|l| l.len());
    tensor::check_cache_call(p, &ops, None, lse, Fit::AtLeast)?;
    let plan = plan(path, p, T::DTYPE, &ops)?;
    allocate_device(dev, path, stream, p, plan, x, out)
}

/// The stream and every buffer of a call (inputs, mask, output, log-sum-exp) belong to this
/// device ([`Error::WrongDevice`], in that order).
fn check_devices<T>(
    dev: &Device,
    stream: &CudaStream,
    x: &DeviceQkv<'_, T>,
    out: &DeviceTensorMut<'_, T>,
) -> Result<()> {
    dev.check_stream(stream)?;
    dev.check_context(TensorName::Q, x.q.data.context())?;
    dev.check_context(TensorName::K, x.k.data.context())?;
    dev.check_context(TensorName::V, x.v.data.context())?;
    if let Some(m) = x.mask {
        dev.check_context(TensorName::Mask, m.context())?;
    }
    dev.check_context(TensorName::Out, out.data.context())?;
    if let Some(l) = &out.lse {
        dev.check_context(TensorName::Lse, l.context())?;
    }
    Ok(())
}

/// The checks of a planned device call that follow the plan (stream and buffers on this device),
/// then its allocation ([`allocate`]).
fn allocate_device<P: GpuPath, T: Element>(
    dev: &Device,
    path: &P,
    stream: &CudaStream,
    p: &Problem,
    plan: P::Plan,
    x: &DeviceQkv<'_, T>,
    out: &DeviceTensorMut<'_, T>,
) -> Result<DeviceCall<P::Plan>> {
    check_devices(dev, stream, x, out)?;
    allocate(dev, path, p, plan)
}

/// A planned call's own memory on the device's stream (its scratch and key lengths, one
/// allocation: [`CallMemory`]), for every device entry point, the raw-address ones included. Not
/// enough device memory for it is [`Error::DeviceMemory`] (the allocation's own failure, nothing
/// else allocated yet): no `cuMemGetInfo` first, which cost a call ~7 µs of host time (H200,
/// 2026-11-29, docs/perf.md "A whole call from Python").
fn allocate<P: GpuPath>(
    dev: &Device,
    path: &P,
    p: &Problem,
    plan: P::Plan,
) -> Result<DeviceCall<P::Plan>> {
    let check = p.nonfinite() == NonFinitePolicy::Reject;
    let sizes = path.scratch(p, &plan, check);
    let written = path.written_first(p, &plan, check);
    Ok(DeviceCall {
        mem: dev.call_memory(p, &sizes, &written)?,
        plan,
        check,
    })
}

#[allow(clippy::too_many_arguments)]
fn device_io<'a, T>(
    g: &mut Guards<'a>,
    st: &'a CudaStream,
    p: &Problem,
    x: &'a DeviceQkv<'_, T>,
    out: &'a mut DeviceTensorMut<'_, T>,
    kv_lens: u64,
    pages: Option<&'a DeviceTable>,
) -> Io {
    let e = std::mem::size_of::<T>();
    let lse = out.lse.as_deref_mut().map_or(0, |l| g.w(l, st));
    Io {
        q: DevTensor::new(g.r(x.q.data, st), x.q.layout, e),
        k: DevTensor::new(g.r(x.k.data, st), x.k.layout, e),
        v: DevTensor::new(g.r(x.v.data, st), x.v.layout, e),
        out: DevTensor::new(g.w(out.data, st), out.layout, e),
        mask: x.mask.map_or(0, |m| g.r(m, st)),
        kv_lens,
        lse: lse_tensor(p, lse),
        pages: pages.map(|t| t.io(g, st)),
    }
}

/// Device-resident tensors on `stream` (asynchronous: synchronise the stream before reading the
/// output). Under `Reject` the path's own device scan runs first (every element read, three words
/// back, one decision; this waits for the scan) and nothing is written if an input is
/// non-finite; under `Propagate` the policy's work is enqueued with the kernel.
pub(crate) fn run_device<P: GpuPath, T: Element + DeviceRepr>(
    dev: &Device,
    path: &P,
    stream: &CudaStream,
    p: &Problem,
    x: &DeviceQkv<'_, T>,
    out: DeviceTensorMut<'_, T>,
) -> Result<()> {
    let mut c = prepare_device(dev, path, stream, p, x, &out)?;
    run_steps(dev, path, stream, p, &mut c, x, out, None)
}

/// The steps of a prepared device call: under `Reject` the scan, its decision, then the
/// computation; else the computation. `pages`: K and V of `x` are a paged cache the plan reads
/// through this table.
#[allow(clippy::too_many_arguments)]
fn run_steps<P: GpuPath, T: Element + DeviceRepr>(
    dev: &Device,
    path: &P,
    stream: &CudaStream,
    p: &Problem,
    c: &mut DeviceCall<P::Plan>,
    x: &DeviceQkv<'_, T>,
    mut out: DeviceTensorMut<'_, T>,
    pages: Option<&DeviceTable>,
) -> Result<()> {
    for &step in c.steps() {
        {
            let mut g = Guards::default();
            let (scratch, kv_lens) = c.mem.addrs(&mut g, stream);
            let io = device_io(&mut g, stream, p, x, &mut out, kv_lens, pages);
            let launches = path.launches(p, &c.plan, &io, &scratch, step)?;
            // SAFETY: the caller's buffers live on this device (checked) and hold what their
            // layouts reach (tensor::check_call); the key lengths hold B ints; the scratch
            // buffers have the plan's sizes. The guards keep them alive and ordered until the
            // stream has run the launches.
            unsafe { dev.submit(stream, &launches)? };
        }
        if step == Step::Check {
            decide(dev, &c.mem)?;
        }
    }
    Ok(())
}

/// A paged cache in device memory: the checks in the crate's order (the cache's as the host entry
/// does them), the path's plan for the contiguous tensors the cache stands for (its typed errors),
/// the devices and memory. Then, where the path reads pages for the plan of the pages' own layout
/// ([`paged_route`]), the block table is uploaded and the steps run on the pages (under `Reject`
/// the scan reads the rows the sequences use, through the table); else the rows `p` reads are
/// gathered on `stream` (`paged.rs`) and the steps run on the gathered tensors. Uploaded and
/// gathered buffers are freed after `stream` has used them (cudarc's stream ordering, as the
/// scratch buffers).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_device_paged<P: GpuPath, T: Element + DeviceRepr + ValidAsZeroBits>(
    dev: &Device,
    gather: &Gather,
    path: &P,
    stream: &CudaStream,
    p: &Problem,
    q: DeviceTensor<'_, T>,
    cache: &DevicePagedKv<'_, T>,
    mask: Option<&CudaSlice<u8>>,
    out: DeviceTensorMut<'_, T>,
) -> Result<()> {
    match prepare_paged(dev, path, stream, p, q, cache, mask, &out)? {
        PagedCall::Pages { x, mut c, table } => {
            run_steps(dev, path, stream, p, &mut c, &x, out, Some(&table))
        }
        PagedCall::Gather { mut g, mut c } => {
            g.gather_cache(dev, gather, stream, p, cache)?;
            run_steps(dev, path, stream, p, &mut c, &g.qkv(q, mask), out, None)
        }
    }
}

/// A paged device call after its checks and allocations, by its route ([`paged_route`]).
enum PagedCall<'a, Pl, T> {
    /// The kernels read the pages (`x`) through the uploaded block table.
    Pages {
        x: DeviceQkv<'a, T>,
        c: DeviceCall<Pl>,
        table: DeviceTable,
    },
    /// The used rows are to be gathered into `g` (not yet enqueued); `c` is the call on them.
    Gather { g: Gathered<T>, c: DeviceCall<Pl> },
}

/// The checks of a paged device call in the crate's order (the cache's as the host entry does
/// them, the path's plan, the devices, device memory), then its allocations and, on the pages
/// route, the table's upload: everything before the first launch, for [`run_device_paged`] and
/// [`time_launch_paged`].
#[allow(clippy::too_many_arguments)]
fn prepare_paged<'a, P: GpuPath, T: Element + DeviceRepr + ValidAsZeroBits>(
    dev: &Device,
    path: &P,
    stream: &CudaStream,
    p: &Problem,
    q: DeviceTensor<'a, T>,
    cache: &DevicePagedKv<'a, T>,
    mask: Option<&'a CudaSlice<u8>>,
    out: &DeviceTensorMut<'_, T>,
) -> Result<PagedCall<'a, P::Plan, T>> {
    let paging = Paging::from(cache);
    let ops = paged_operands(&q, cache, mask, out);
    let lse = out.lse.as_ref().map(|l| l.len());
    tensor::check_cache_call(p, &ops, Some(paging), lse, Fit::AtLeast)?;
    // The pages as the call's K and V.
    let x = DeviceQkv {
        q,
        k: cache.k,
        v: cache.v,
        mask,
    };
    match paged_route(path, p, T::DTYPE, &ops, &paging)? {
        PagedRoute::Pages(plan) => {
            let table_bytes = 4 * cache.block_table.len() as u64;
            let c = allocate_device(dev, path, stream, p, plan, &x, out)?;
            let table = DeviceTable::upload(dev, &paging, table_bytes)?;
            Ok(PagedCall::Pages { x, c, table })
        }
        PagedRoute::Gather(plan) => {
            // The devices before the gather's memory (the call's own checks then repeat them for
            // the gathered tensors).
            check_devices(dev, stream, &x, out)?;
            let g = Gathered::alloc(dev, p, cache.block_table)?;
            let c = allocate_device(dev, path, stream, p, plan, &g.qkv(q, mask), out)?;
            Ok(PagedCall::Gather { g, c })
        }
    }
}

/// The operands of a paged device call: K and V are the pages.
fn paged_operands<T>(
    q: &DeviceTensor<'_, T>,
    cache: &DevicePagedKv<'_, T>,
    mask: Option<&CudaSlice<u8>>,
    out: &DeviceTensorMut<'_, T>,
) -> Operands {
    let op = |len: usize, layout: Layout| Operand { len, layout };
    Operands {
        q: op(q.data.len(), q.layout),
        k: op(cache.k.data.len(), cache.k.layout),
        v: op(cache.v.data.len(), cache.v.layout),
        mask: mask.map(|m| m.len()),
        out: op(out.data.len(), out.layout),
    }
}

/// How a paged call runs (`run_device_paged`, `bench`).
enum PagedRoute<Pl> {
    /// The path's kernels read the pages through the block table, with this plan.
    Pages(Pl),
    /// The used rows are gathered into contiguous tensors first; the plan for those.
    Gather(Pl),
}

/// The route of a paged call of `p` with the operands `ops` (K and V: the pages): the path's plan
/// for the contiguous tensors the cache stands for comes first, so that the typed errors are those
/// of either route; then, where the pages' own layout suits the path (its alignment) and the
/// path's kernels read pages for that plan, those. An empty table (`max_pages` 0) is gathered.
fn paged_route<P: GpuPath>(
    path: &P,
    p: &Problem,
    dtype: crate::DType,
    ops: &Operands,
    paging: &Paging<'_>,
) -> Result<PagedRoute<P::Plan>> {
    let kv = gathered_kv(p);
    let gathered = plan(
        path,
        p,
        dtype,
        &Operands {
            k: kv,
            v: kv,
            ..*ops
        },
    )?;
    if paging.max_pages == 0 || i32::try_from(paging.max_pages).is_err() {
        return Ok(PagedRoute::Gather(gathered));
    }
    Ok(match plan(path, p, dtype, ops) {
        Ok(pl) if path.reads_pages(p, &pl) => PagedRoute::Pages(pl),
        _ => PagedRoute::Gather(gathered),
    })
}

/// A paged cache's block table on the device, for a call whose path reads pages.
struct DeviceTable {
    table: CudaSlice<i32>,
    page_shift: i32,
    max_pages: i32,
}

impl DeviceTable {
    /// Upload `paging`'s table (`bytes` of device memory, reserved by the caller).
    fn upload(dev: &Device, paging: &Paging<'_>, bytes: u64) -> Result<DeviceTable> {
        Ok(DeviceTable {
            table: dev
                .stream
                .clone_htod(paging.block_table)
                .map_err(dev.alloc_err(bytes))?,
            page_shift: paging.page_size.trailing_zeros() as i32,
            // Fits: `paged_route` gathers otherwise.
            max_pages: paging.max_pages as i32,
        })
    }

    /// The table as the kernels take it ([`Io::pages`]), its buffer held by `g`.
    fn io<'a>(&'a self, g: &mut Guards<'a>, st: &'a CudaStream) -> PagedIo {
        PagedIo {
            table: g.r(&self.table, st),
            page_shift: self.page_shift,
            max_pages: self.max_pages,
        }
    }
}

/// K (and V) as a paged call's path sees them: the contiguous `[B, Hkv, Skv, D]` tensor the
/// used rows are gathered into.
fn gathered_kv(p: &Problem) -> Operand {
    let (_, [b, hkv, skv, d]) = tensor::dims(p);
    Operand {
        len: b * hkv * skv * d,
        layout: Layout::bhsd(hkv, skv, d),
    }
}

/// The device buffers of a paged call: contiguous `[B, Hkv, Skv, D]` K and V (zeroed: the rows
/// not gathered stay +0), and the uploaded block table and sequences (`Gather::sequences`).
struct Gathered<T> {
    k: CudaSlice<T>,
    v: CudaSlice<T>,
    layout: Layout,
    table: CudaSlice<i32>,
    seqs: CudaSlice<i32>,
}

impl<T: Element + DeviceRepr + ValidAsZeroBits> Gathered<T> {
    /// Allocate for `p` (after the device-memory check) and upload `block_table`.
    fn alloc(dev: &Device, p: &Problem, block_table: &[i32]) -> Result<Self> {
        let kv = gathered_kv(p);
        let n = kv.len;
        let seqs = Gather::sequences(p);
        let needed =
            (2 * n * std::mem::size_of::<T>() + 4 * (block_table.len() + seqs.len())) as u64;
        dev.reserve(needed)?;
        let zeros = || {
            dev.stream
                .alloc_zeros::<T>(n)
                .map_err(dev.alloc_err(needed))
        };
        let up = |x: &[i32]| dev.stream.clone_htod(x).map_err(dev.alloc_err(needed));
        Ok(Gathered {
            k: zeros()?,
            v: zeros()?,
            layout: kv.layout,
            table: up(block_table)?,
            seqs: up(&seqs)?,
        })
    }

    /// Enqueue the gather of the pages `k` and `v` (described by `paging`, checked for `p` by
    /// `tensor::check_cache_call`, on this device) on `stream`.
    #[allow(clippy::too_many_arguments)]
    fn gather(
        &mut self,
        dev: &Device,
        gather: &Gather,
        stream: &CudaStream,
        p: &Problem,
        paging: &Paging<'_>,
        k: &DeviceTensor<'_, T>,
        v: &DeviceTensor<'_, T>,
    ) -> Result<()> {
        let mut g = Guards::default();
        let pk = pages::<T>(g.r(k.data, stream), k.layout);
        let pv = pages::<T>(g.r(v.data, stream), v.layout);
        let launches = self.launches(&mut g, gather, stream, p, paging, pk, pv)?;
        // SAFETY: the pages' buffers live on this device and hold every row the block table's
        // used entries reach (the caller's checks); the gathered buffers hold B·Hkv·Skv·D
        // elements, the table and the sequences what `Gather::launch` reads. The guards keep them
        // alive and ordered until the stream has run the launches.
        unsafe { dev.submit(stream, &launches) }
    }

    /// The two launches copying the rows `p` reads of the pages `k` and `v` (laid out as
    /// `paging` says, checked for `p`) into these buffers, with their buffers held by `g` on `st`.
    #[allow(clippy::too_many_arguments)]
    fn launches<'a>(
        &'a mut self,
        g: &mut Guards<'a>,
        gather: &Gather,
        st: &'a CudaStream,
        p: &Problem,
        paging: &Paging<'_>,
        k: Pages,
        v: Pages,
    ) -> Result<[Launch; 2]> {
        let elem = std::mem::size_of::<T>();
        let (t, s) = (g.r(&self.table, st), g.r(&self.seqs, st));
        Ok([
            gather.launch(p, paging, elem, k, g.w(&mut self.k, st), t, s)?,
            gather.launch(p, paging, elem, v, g.w(&mut self.v, st), t, s)?,
        ])
    }

    /// [`gather`](Self::gather) of a paged cache's own pages (the paged entry points; the
    /// benchmark gathers each rotated input set's pages instead).
    fn gather_cache(
        &mut self,
        dev: &Device,
        gather: &Gather,
        stream: &CudaStream,
        p: &Problem,
        cache: &DevicePagedKv<'_, T>,
    ) -> Result<()> {
        self.gather(
            dev,
            gather,
            stream,
            p,
            &Paging::from(cache),
            &cache.k,
            &cache.v,
        )
    }

    /// [`qkv`](Self::qkv) as raw device tensors, for the raw-address entry point (whose own
    /// stream is ordered after `st`, where these buffers live).
    fn raw_qkv(
        &self,
        st: &CudaStream,
        q: RawDeviceTensor,
        mask: Option<(u64, usize)>,
    ) -> RawDeviceQkv {
        let mut g = Guards::default();
        let raw = |ptr| RawDeviceTensor {
            ptr,
            len: self.k.len(),
            layout: self.layout,
        };
        RawDeviceQkv {
            q,
            k: raw(g.r(&self.k, st)),
            v: raw(g.r(&self.v, st)),
            mask,
        }
    }

    /// The inputs of the path's call: `q`, the gathered K and V, `mask`.
    fn qkv<'a>(
        &'a self,
        q: DeviceTensor<'a, T>,
        mask: Option<&'a CudaSlice<u8>>,
    ) -> DeviceQkv<'a, T> {
        DeviceQkv {
            q,
            k: DeviceTensor::new(&self.k, self.layout),
            v: DeviceTensor::new(&self.v, self.layout),
            mask,
        }
    }
}

/// A tensor of pages at device address `base` (its layout's offset not yet folded in) as the
/// gather kernel takes it.
fn pages<T>(base: u64, layout: Layout) -> Pages {
    Pages {
        addr: DevTensor::new(base, layout, std::mem::size_of::<T>()).addr,
        layout,
    }
}

/// Microseconds (CUDA events on `stream`) of exactly the GPU work [`run_device`] enqueues for
/// this problem and policy, without the host's `Reject` decision in between (the scan and then
/// the kernel), so the time covers the same launches whatever the values. Scratch is allocated
/// before the first event. For timing harnesses (the constant-time test).
pub(crate) fn time_launch<P: GpuPath, T: Element + DeviceRepr>(
    dev: &Device,
    path: &P,
    stream: &CudaStream,
    p: &Problem,
    x: &DeviceQkv<'_, T>,
    out: DeviceTensorMut<'_, T>,
) -> Result<f32> {
    with_call(dev, path, stream, p, x, out, |launches| {
        // SAFETY: as in run_device: checked buffers of this device, scratch of the plan's sizes,
        // kept alive and ordered by the guards until the stream has run the launches.
        timed(stream, || unsafe { dev.submit(stream, launches) })
    })
}

/// The launches of one device call on `x` (prepared, scratch allocated), handed to `run`, which
/// submits them; their buffers stay held until it returns.
fn with_call<P: GpuPath, T: Element + DeviceRepr, R>(
    dev: &Device,
    path: &P,
    stream: &CudaStream,
    p: &Problem,
    x: &DeviceQkv<'_, T>,
    mut out: DeviceTensorMut<'_, T>,
    run: impl FnOnce(&[Launch]) -> Result<R>,
) -> Result<R> {
    let mut c = prepare_device(dev, path, stream, p, x, &out)?;
    let mut g = Guards::default();
    let launches = call_launches(&mut g, path, stream, p, &mut c, x, &mut out, None)?;
    run(&launches)
}

/// [`time_launch`] split by kernel: the microseconds of each launch of the call, in order, between
/// CUDA events recorded before and after it (so a difference in the whole call's time can be
/// traced to the kernel it comes from), each with the kernel's name. The events between the
/// launches are the only change to the work [`time_launch`] times.
pub(crate) fn time_launch_each<P: GpuPath, T: Element + DeviceRepr>(
    dev: &Device,
    path: &P,
    stream: &CudaStream,
    p: &Problem,
    x: &DeviceQkv<'_, T>,
    out: DeviceTensorMut<'_, T>,
) -> Result<Vec<(String, f32)>> {
    with_call(dev, path, stream, p, x, out, |launches| {
        each_timed(dev, stream, launches)
    })
}

/// Submit `launches` one by one between CUDA events; each launch's kernel name and microseconds.
fn each_timed(
    dev: &Device,
    stream: &CudaStream,
    launches: &[Launch],
) -> Result<Vec<(String, f32)>> {
    let events = (0..=launches.len())
        .map(|_| timing::event(stream))
        .collect::<Result<Vec<_>>>()?;
    events[0].record(stream).map_err(drv("cuEventRecord"))?;
    for (l, e) in launches.iter().zip(&events[1..]) {
        // SAFETY: as in run_device: checked buffers of this device, scratch of the plan's sizes,
        // kept alive and ordered by the guards until the stream has run the launches (the last
        // event's synchronisation below).
        unsafe { dev.submit(stream, std::slice::from_ref(l)) }?;
        e.record(stream).map_err(drv("cuEventRecord"))?;
    }
    let last = events.last().expect("one event more than launches");
    last.synchronize().map_err(drv("kernel execution"))?;
    launches
        .iter()
        .zip(events.windows(2))
        .map(|(l, w)| {
            let ms = w[0].elapsed_ms(&w[1]).map_err(drv("cuEventElapsedTime"))?;
            Ok((l.kernel.name().to_string(), ms * 1000.0))
        })
        .collect()
}

/// [`time_launch`] for a paged cache: microseconds of exactly the GPU work [`run_device_paged`]
/// enqueues (the pages read through the block table, or the gather and then the contiguous
/// call), without the host's `Reject` decision. Uploads and allocations come before the first
/// event. For the constant-time test of the paged kernels.
#[allow(clippy::too_many_arguments)]
pub(crate) fn time_launch_paged<P: GpuPath, T: Element + DeviceRepr + ValidAsZeroBits>(
    dev: &Device,
    gather: &Gather,
    path: &P,
    stream: &CudaStream,
    p: &Problem,
    q: DeviceTensor<'_, T>,
    cache: &DevicePagedKv<'_, T>,
    mask: Option<&CudaSlice<u8>>,
    mut out: DeviceTensorMut<'_, T>,
) -> Result<f32> {
    match prepare_paged(dev, path, stream, p, q, cache, mask, &out)? {
        PagedCall::Pages { x, mut c, table } => {
            let mut g = Guards::default();
            let launches =
                call_launches(&mut g, path, stream, p, &mut c, &x, &mut out, Some(&table))?;
            // SAFETY: as in run_device_paged: checked buffers of this device, the table uploaded
            // for this call, scratch of the plan's sizes, kept alive and ordered by the guards.
            timed(stream, || unsafe { dev.submit(stream, &launches) })
        }
        PagedCall::Gather {
            g: mut gathered,
            mut c,
        } => timed(stream, || {
            gathered.gather_cache(dev, gather, stream, p, cache)?;
            let gx = gathered.qkv(q, mask);
            let mut g = Guards::default();
            let launches = call_launches(&mut g, path, stream, p, &mut c, &gx, &mut out, None)?;
            // SAFETY: as in run_device on the gathered tensors (allocated for `p`).
            unsafe { dev.submit(stream, &launches) }
        }),
    }
}

/// The launches of one device call on `x` (the scan first under `Reject`), their buffers held by
/// `g` until the stream has run them.
#[allow(clippy::too_many_arguments)]
fn call_launches<'a, P: GpuPath, T>(
    g: &mut Guards<'a>,
    path: &P,
    stream: &'a CudaStream,
    p: &Problem,
    c: &'a mut DeviceCall<P::Plan>,
    x: &'a DeviceQkv<'_, T>,
    out: &'a mut DeviceTensorMut<'_, T>,
    pages: Option<&'a DeviceTable>,
) -> Result<Vec<Launch>> {
    let steps = c.steps(); // before the scratch guards borrow `c` for 'a
    let (scratch, kv_lens) = c.mem.addrs(g, stream);
    let io = device_io(g, stream, p, x, out, kv_lens, pages);
    let mut launches = Vec::new();
    for &step in steps {
        launches.extend(path.launches(p, &c.plan, &io, &scratch, step)?);
    }
    Ok(launches)
}

/// Microseconds between two CUDA events on `stream` around `submit`, after the stream has run.
fn timed(stream: &CudaStream, submit: impl FnOnce() -> Result<()>) -> Result<f32> {
    let (e0, e1) = (timing::event(stream)?, timing::event(stream)?);
    e0.record(stream).map_err(drv("cuEventRecord"))?;
    submit()?;
    e1.record(stream).map_err(drv("cuEventRecord"))?;
    e1.synchronize().map_err(drv("kernel execution"))?;
    let ms = e0.elapsed_ms(&e1).map_err(drv("cuEventElapsedTime"))?;
    Ok(ms * 1000.0)
}

/// The benchmark protocol of `timing.rs` on one path: seeded input sets in `opts.order`, the
/// output poisoned, and per sample `per_sample` calls of the GPU work one host call runs (without
/// uploads; under `Reject` without the scan, the inputs being finite; under `Propagate` with the
/// policy's work). With `opts.page_size`, K and V are a paged cache, run as [`run_device_paged`]
/// runs it: read through the block table where the path does, else each call first gathers the
/// rows it reads.
pub(crate) fn bench<P: GpuPath, T: Element + DeviceRepr + ValidAsZeroBits>(
    dev: &Device,
    gather: &Gather,
    path: &P,
    p: &Problem,
    opts: &BenchOptions,
) -> Result<BenchResult> {
    let st = &dev.stream;
    let sets = timing::input_sets::<T>(st, p, opts)?;
    let mut out = timing::poisoned_output::<T>(st, p)?;
    let ol = timing::layout(p, opts.order, true);
    let ops = device_operands(&sets[0].qkv(), &DeviceTensorMut::new(&mut out, ol));
    let paging = sets[0].paging();
    tensor::check_cache_call(p, &ops, paging, None, Fit::AtLeast)?;
    let route = match &paging {
        Some(pg) => Some(paged_route(path, p, T::DTYPE, &ops, pg)?),
        None => None,
    };
    let read = match &route {
        Some(PagedRoute::Pages(_)) => Some(timing::PagedRead::BlockTable),
        Some(PagedRoute::Gather(_)) => Some(timing::PagedRead::Gathered),
        None => None,
    };
    let (plan, table, mut gathered) = match (route, &paging) {
        (Some(PagedRoute::Pages(pl)), Some(pg)) => {
            let bytes = 4 * pg.block_table.len() as u64;
            dev.reserve(bytes)?;
            (pl, Some(DeviceTable::upload(dev, pg, bytes)?), None)
        }
        (Some(PagedRoute::Gather(pl)), Some(pg)) => {
            let g = Gathered::<T>::alloc(dev, p, pg.block_table)?;
            (pl, None, Some(g))
        }
        _ => (plan(path, p, T::DTYPE, &ops)?, None, None),
    };
    let sizes = path.scratch(p, &plan, false);
    let written = path.written_first(p, &plan, false);
    let mut mem = dev.call_memory(p, &sizes, &written)?;
    let r = timing::sample(st, opts, |i| {
        let set = &sets[i];
        let x = match (&mut gathered, set.paging()) {
            (Some(g), Some(pg)) => {
                let x = set.qkv();
                g.gather(dev, gather, st, p, &pg, &x.k, &x.v)?;
                g.qkv(x.q, x.mask)
            }
            _ => set.qkv(),
        };
        let mut o = DeviceTensorMut::new(&mut out, ol);
        let mut g = Guards::default();
        let (scratch, kv_lens) = mem.addrs(&mut g, st);
        let io = device_io(&mut g, st, p, &x, &mut o, kv_lens, table.as_ref());
        let launches = path.launches(p, &plan, &io, &scratch, Step::Compute { checked: false })?;
        // SAFETY: the input sets and the output were allocated for this problem's layouts
        // (checked above), the scratch at the plan's sizes, all on this device; the guards keep
        // them alive and ordered until the stream has run the launches.
        unsafe { dev.submit(st, &launches) }
    })?;
    Ok(BenchResult { paged: read, ..r })
}

/// Raw device tensors (bindings) on a raw stream: the same steps as [`run_device`]. What can be
/// checked is checked first, in the crate's order: the tensors against the lengths given (the
/// log-sum-exp's too), the path's plan, then the addresses ([`check_raw_addresses`]).
/// Scratch is allocated on the device's own stream, which `stream` waits for; and the device's
/// stream waits for `stream` before the scratch is freed ([`raw_steps`]).
///
/// # Safety
/// `stream` is a live stream of this device's primary context (0: the legacy default stream); the
/// buffers stay allocated, and the inputs unchanged, until `stream` has run the work; the output's
/// buffer and the log-sum-exp's overlap no input's nor each other.
pub(crate) unsafe fn run_device_raw<P: GpuPath, T: Element>(
    dev: &Device,
    path: &P,
    stream: RawStream,
    p: &Problem,
    x: &RawDeviceQkv,
    outs: &RawDeviceOut,
) -> Result<()> {
    let ops = raw_operands(x, &outs.out);
    tensor::check_cache_call(p, &ops, None, outs.lse.map(|l| l.1), Fit::AtLeast)?;
    let plan = plan(path, p, T::DTYPE, &ops)?;
    check_raw_addresses::<P, T>(dev, x, outs)?;
    let mut c = allocate(dev, path, p, plan)?;
    let io = raw_io::<T>(dev, p, x, outs, c.mem.lens_addr(&dev.stream), None);
    // SAFETY: the addresses of `io` were checked to lie in allocations of this device that hold
    // the extents tensor::check_call verified, and the caller keeps them alive until `stream` has
    // run the work (its contract, which is raw_steps'); the key lengths and scratch are `c`'s,
    // dropped after raw_steps has ordered their release after `stream`.
    unsafe { raw_steps(dev, path, stream, p, &mut c, &io, &[]) }
}

/// [`run_device_raw`] with K and V in a paged cache: the checks of [`run_device_paged`] on the
/// raw tensors (the cache's as the host entry does them: page size, pages, the table's length,
/// each sequence's capacity and used entries), the route ([`paged_route`]), then the addresses
/// of Q, the pages, the mask and the outputs ([`check_raw_addresses`]). Where the path reads
/// pages, the table is uploaded and the steps run on the pages; else the rows `p` reads are
/// gathered on `stream` first and the steps run on the gathered tensors. The table, the gathered
/// tensors and the scratch live on the device's own stream, ordered around `stream` as in
/// [`run_device_raw`].
///
/// # Safety
/// As [`run_device_raw`]; the pages are inputs.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn run_device_raw_paged<P: GpuPath, T: Element + DeviceRepr + ValidAsZeroBits>(
    dev: &Device,
    gather: &Gather,
    path: &P,
    stream: RawStream,
    p: &Problem,
    q: &RawDeviceTensor,
    cache: &RawDevicePagedKv<'_>,
    mask: Option<(u64, usize)>,
    outs: &RawDeviceOut,
) -> Result<()> {
    let paging = Paging::from(cache);
    // The pages as the call's K and V.
    let x = RawDeviceQkv {
        q: *q,
        k: cache.k,
        v: cache.v,
        mask,
    };
    let ops = raw_operands(&x, &outs.out);
    let lse = outs.lse.map(|l| l.1);
    tensor::check_cache_call(p, &ops, Some(paging), lse, Fit::AtLeast)?;
    let route = paged_route(path, p, T::DTYPE, &ops, &paging)?;
    check_raw_addresses::<P, T>(dev, &x, outs)?;
    match route {
        PagedRoute::Pages(plan) => {
            let bytes = 4 * cache.block_table.len() as u64;
            let mut c = allocate(dev, path, p, plan)?;
            let table = DeviceTable::upload(dev, &paging, bytes)?;
            let io = raw_io::<T>(dev, p, &x, outs, c.mem.lens_addr(&dev.stream), Some(&table));
            // SAFETY: as in run_device_raw; the table was uploaded above for this call (its used
            // entries checked against the pages) and is dropped after raw_steps has ordered its
            // release after `stream`.
            unsafe { raw_steps(dev, path, stream, p, &mut c, &io, &[]) }
        }
        PagedRoute::Gather(plan) => {
            let mut g = Gathered::<T>::alloc(dev, p, cache.block_table)?;
            let mut c = allocate(dev, path, p, plan)?;
            let (pk, pv) = (
                pages::<T>(x.k.ptr, x.k.layout),
                pages::<T>(x.v.ptr, x.v.layout),
            );
            let gather_launches = {
                let mut guards = Guards::default();
                g.launches(&mut guards, gather, &dev.stream, p, &paging, pk, pv)?
            };
            let io = raw_io::<T>(
                dev,
                p,
                &g.raw_qkv(&dev.stream, x.q, mask),
                outs,
                c.mem.lens_addr(&dev.stream),
                None,
            );
            // SAFETY: as in run_device_raw; the gather reads the pages through the table's
            // checked entries and writes the gathered tensors, allocated above for `p` and
            // dropped, as the table, after raw_steps has ordered their release after `stream`.
            unsafe { raw_steps(dev, path, stream, p, &mut c, &io, &gather_launches) }
        }
    }
}

/// The operands of a raw-address call, for `tensor::check_cache_call` and the path's plan (of a
/// paged call, `x.k` and `x.v` are the pages).
fn raw_operands(x: &RawDeviceQkv, out: &RawDeviceTensor) -> Operands {
    let op = |t: &RawDeviceTensor| Operand {
        len: t.len,
        layout: t.layout,
    };
    Operands {
        q: op(&x.q),
        k: op(&x.k),
        v: op(&x.v),
        mask: x.mask.map(|m| m.1),
        out: op(out),
    }
}

/// The raw addresses of a call whose tensors and plan have passed: every address aligned to its
/// element ([`Error::Misaligned`]: a misaligned access would fault the context, which outlives
/// the call), then every address device memory of this GPU whose allocation holds the length
/// given (`cuPointerGetAttribute`; [`Error::WrongDevice`], [`Error::TensorExtent`]).
fn check_raw_addresses<P: GpuPath, T>(
    dev: &Device,
    x: &RawDeviceQkv,
    outs: &RawDeviceOut,
) -> Result<()> {
    let elem = std::mem::size_of::<T>() as u64;
    let out = &outs.out;
    // (tensor, address, bytes, bytes an element)
    let mut bufs = vec![
        (TensorName::Q, x.q.ptr, x.q.len as u64 * elem, elem),
        (TensorName::K, x.k.ptr, x.k.len as u64 * elem, elem),
        (TensorName::V, x.v.ptr, x.v.len as u64 * elem, elem),
        (TensorName::Out, out.ptr, out.len as u64 * elem, elem),
    ];
    if let Some((ptr, len)) = x.mask {
        bufs.push((TensorName::Mask, ptr, len as u64, 1));
    }
    if let Some((ptr, len)) = outs.lse {
        bufs.push((TensorName::Lse, ptr, 4 * len as u64, 4));
    }
    if let Some(&(tensor, ptr, _, elem)) = bufs.iter().find(|b| !b.1.is_multiple_of(b.3)) {
        return Err(Error::Misaligned {
            path: P::PATH,
            tensor,
            need: match elem {
                4 => "an address that is a multiple of 4 bytes (f32)",
                _ => "an address that is a multiple of 2 bytes (f16, bf16)",
            },
            what: format!("address {ptr:#x}"),
        });
    }
    for (tensor, ptr, bytes, elem) in bufs {
        match launch::allocation_of(&dev.ctx, ptr)? {
            Some((start, size, ordinal)) if ordinal as usize == dev.ordinal => {
                if ptr + bytes > start + size {
                    return Err(Error::TensorExtent {
                        tensor,
                        needed: bytes.div_ceil(elem) as usize,
                        got: ((start + size).saturating_sub(ptr) / elem) as usize,
                        shape: "the buffer".into(),
                        layout: format!(
                            "from address {ptr:#x} (its allocation ends at {:#x})",
                            start + size
                        ),
                    });
                }
            }
            _ => {
                return Err(Error::WrongDevice {
                    tensor,
                    ordinal: dev.ordinal,
                });
            }
        }
    }
    Ok(())
}

/// The addresses of a raw-address call: the caller's tensors `x` and `outs`, the key lengths at
/// `kv_lens`, and for a path that reads pages the block table.
fn raw_io<T>(
    dev: &Device,
    p: &Problem,
    x: &RawDeviceQkv,
    outs: &RawDeviceOut,
    kv_lens: u64,
    pages: Option<&DeviceTable>,
) -> Io {
    let e = std::mem::size_of::<T>();
    let st = &dev.stream;
    let mut g = Guards::default();
    Io {
        q: DevTensor::new(x.q.ptr, x.q.layout, e),
        k: DevTensor::new(x.k.ptr, x.k.layout, e),
        v: DevTensor::new(x.v.ptr, x.v.layout, e),
        out: DevTensor::new(outs.out.ptr, outs.out.layout, e),
        mask: x.mask.map_or(0, |m| m.0),
        kv_lens,
        lse: lse_tensor(p, outs.lse.map_or(0, |l| l.0)),
        pages: pages.map(|t| t.io(&mut g, st)),
    }
}

/// The work of a raw-address call on `stream`: ordered after the device's own stream (where the
/// call's buffers were allocated and uploaded), `pre` first (a paged call's gather), then the
/// steps on `io` (under `Reject` the scan, its one decision, and nothing more if an input is
/// non-finite); last the device's stream is ordered after `stream`, so that the buffers the
/// caller drops after this returns are freed only once `stream` is done with them, also when a
/// launch failed.
///
/// # Safety
/// `stream` is a live stream of this device's primary context; every address in `io` and `pre`
/// is device memory of this device holding what the launches read and write: the caller's raw
/// buffers (checked, and kept alive until `stream` has run the work) and buffers of the call
/// allocated on the device's stream (`c`'s and the caller's), dropped only after this returns.
unsafe fn raw_steps<P: GpuPath>(
    dev: &Device,
    path: &P,
    stream: RawStream,
    p: &Problem,
    c: &mut DeviceCall<P::Plan>,
    io: &Io,
    pre: &[Launch],
) -> Result<()> {
    let own = RawStream::of(&dev.stream);
    let scratch: Vec<u64> = {
        let mut g = Guards::default();
        c.mem.addrs(&mut g, &dev.stream).0
    };
    // SAFETY: both streams belong to this device's context (the caller's contract for `stream`).
    unsafe { launch::order_after(&dev.ctx, own, stream)? };
    let run = || -> Result<()> {
        // SAFETY: the caller's contract: every address of `pre` is live device memory of this
        // device, ordered before `stream` by the event above.
        unsafe { launch::submit(&dev.ctx, stream, pre)? };
        for &step in c.steps() {
            let launches = path.launches(p, &c.plan, io, &scratch, step)?;
            // SAFETY: as above, for `io`; the scratch was allocated at the plan's sizes.
            unsafe { launch::submit(&dev.ctx, stream, &launches)? };
            if step == Step::Check {
                // SAFETY: as above.
                unsafe { launch::order_after(&dev.ctx, stream, own)? };
                decide(dev, &c.mem)?;
            }
        }
        Ok(())
    };
    let result = run();
    // The call's buffers are freed on the device's stream: after `stream` is done.
    // SAFETY: as above.
    unsafe { launch::order_after(&dev.ctx, stream, own)? };
    result
}

/// The raw-address entry point lives here, beside the other unsafe code of the crate (the lint
/// keeps `unsafe` out of `backend.rs`).
impl super::CudaBackend {
    /// [`run_device`](super::CudaBackend::run_device) for memory cudarc does not own, given by raw
    /// addresses (bindings: PyTorch tensors, DLPack), on a raw stream handle (`0`: the legacy
    /// default stream; PyTorch's `torch.cuda.current_stream().cuda_stream`). Beyond the checks of
    /// `run_device`, each address must be device memory of this GPU whose allocation holds the
    /// length given ([`Error::WrongDevice`], [`Error::TensorExtent`]); the log-sum-exp, when
    /// `out` asks for it, has the length and shape of [`DeviceTensorMut::lse`] and a 4-byte
    /// aligned address. Asynchronous on `stream`, except under `Reject`, which waits for the scan
    /// (and then writes neither output if an input is non-finite). Same bits as every other entry
    /// point.
    ///
    /// # Safety
    /// `stream` is 0 or a live stream of this device's primary context (the one PyTorch uses);
    /// the buffers stay allocated, and the inputs unchanged, until `stream` has run the work; the
    /// output's buffer and the log-sum-exp's overlap no input's nor each other.
    ///
    /// [`DeviceTensorMut::lse`]: super::DeviceTensorMut::lse
    pub unsafe fn run_device_raw<T: Element>(
        &self,
        path: Path,
        stream: u64,
        p: &Problem,
        x: &RawDeviceQkv,
        out: &RawDeviceOut,
    ) -> Result<()> {
        let st = RawStream::from_handle(stream);
        // The path as every entry point picks it (with `Sequences`, so that a variable-length
        // problem runs each sequence as itself).
        with_path!(self, path, |m| {
            // SAFETY: the caller's contract is run_device_raw's.
            unsafe { run_device_raw::<_, T>(&self.dev, m, st, p, x, out) }
        })
    }

    /// [`run_device_paged`](super::CudaBackend::run_device_paged) for memory cudarc does not own:
    /// Q, the key and value pages, the mask and the outputs given by raw addresses as for
    /// [`run_device_raw`](Self::run_device_raw), the block table on the host
    /// ([`RawDevicePagedKv`](super::RawDevicePagedKv)). Checks, before any work and in this
    /// order: the tensors and the cache as `run_device_paged` checks them ([`Error::PageSize`],
    /// [`Error::TensorLength`] of the table, [`Error::CacheCapacity`],
    /// [`Error::BlockTableEntry`], …), what the path takes, each address aligned to its element
    /// ([`Error::Misaligned`]) and in an allocation of this GPU that holds the length given
    /// ([`Error::WrongDevice`], [`Error::TensorExtent`]), device memory. Then as
    /// `run_device_paged`: the used rows gathered on `stream` where the path does not read the
    /// pages itself (device memory for two `[B, Hkv, Skv, D]` tensors, freed after `stream` has
    /// used them), the steps of `run_device_raw`. The bits of the same problem with contiguous K
    /// and V.
    ///
    /// # Safety
    /// As [`run_device_raw`](Self::run_device_raw): `stream` is 0 or a live stream of this
    /// device's primary context; the buffers (Q, the pages, the mask, the outputs) stay
    /// allocated, and the inputs unchanged, until `stream` has run the work; the output's buffer
    /// and the log-sum-exp's overlap no input's nor each other.
    ///
    /// [`Error::PageSize`]: crate::Error::PageSize
    /// [`Error::TensorLength`]: crate::Error::TensorLength
    /// [`Error::CacheCapacity`]: crate::Error::CacheCapacity
    /// [`Error::BlockTableEntry`]: crate::Error::BlockTableEntry
    /// [`Error::Misaligned`]: crate::Error::Misaligned
    /// [`Error::WrongDevice`]: crate::Error::WrongDevice
    /// [`Error::TensorExtent`]: crate::Error::TensorExtent
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run_device_raw_paged<T: Element + DeviceRepr + ValidAsZeroBits>(
        &self,
        path: Path,
        stream: u64,
        p: &Problem,
        q: &RawDeviceTensor,
        cache: &RawDevicePagedKv<'_>,
        mask: Option<(u64, usize)>,
        out: &RawDeviceOut,
    ) -> Result<()> {
        let st = RawStream::from_handle(stream);
        // The path as every entry point picks it (`Sequences`: a variable-length problem runs
        // each sequence as itself, on the gathered rows).
        with_path!(self, path, |m| {
            // SAFETY: the caller's contract is run_device_raw_paged's.
            unsafe {
                run_device_raw_paged::<_, T>(&self.dev, &self.gather, m, st, p, q, cache, mask, out)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::CallMemory;

    #[test]
    fn call_memory_places_every_buffer_apart_aligned_the_zeroed_ones_first() {
        // The TensorCore path's seven buffers of a decode (Reject: nothing written first;
        // Propagate: the three copies), odd and empty sizes, and every buffer written first:
        // each buffer at a 256-byte boundary, none overlapping another or the key lengths, every
        // buffer not written first inside the zeroed prefix and every written one past it, the
        // total the end of the last part.
        for (sizes, written, lens) in [
            (vec![16, 4, 4, 4, 4, 4, 4], vec![], 1),
            (
                vec![16, 80, 4, 96, 1 << 20, 1 << 20, 4096],
                vec![false, false, false, true, true, true, false],
                32,
            ),
            (
                vec![16, 0, 257, 256, 1, 70_000, 4096],
                vec![false, true, false, true],
                3,
            ),
            (vec![0], vec![true], 0),
        ] {
            let l = CallMemory::layout(&sizes, &written, lens);
            assert_eq!(l.offsets.len(), sizes.len());
            let w = |i: usize| written.get(i).copied().unwrap_or(false);
            let mut parts: Vec<(usize, usize)> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| (l.offsets[i], l.offsets[i] + n.max(1)))
                .collect();
            parts.push((l.lens, l.lens + 4 * lens.max(1)));
            for (i, &(a, e)) in parts.iter().enumerate() {
                assert_eq!(a % CallMemory::ALIGN, 0, "{sizes:?}: part {i} at {a}");
                assert!(e <= l.total, "{sizes:?}: part {i} ends past the total");
                for &(b, f) in &parts[i + 1..] {
                    assert!(
                        e <= b || f <= a,
                        "{sizes:?}: [{a}, {e}) and [{b}, {f}) overlap"
                    );
                }
            }
            for (i, &(a, e)) in parts[..sizes.len()].iter().enumerate() {
                if w(i) {
                    assert!(
                        a >= l.zeroed,
                        "{sizes:?}: written buffer {i} inside the zeroed prefix"
                    );
                } else {
                    assert!(e <= l.zeroed, "{sizes:?}: buffer {i} not all zeroed");
                }
            }
        }
    }
}
