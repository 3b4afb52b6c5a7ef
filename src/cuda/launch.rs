//! The FFI edge: the one module of the CUDA backend that talks to the driver through raw handles.
//! It loads a verified cubin into a module, looks its kernels up (with their parameter sizes, read
//! from the driver), and submits launches. Everything above it builds [`Launch`] values — plain
//! data, safe to make — and hands them to [`submit`], the one `unsafe fn` whose contract says what
//! the caller must have checked.
#![allow(unsafe_code)]

use super::drv;
use crate::error::{Error, Result};
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaStream, result};
use std::ffi::{CString, c_void};
use std::sync::Arc;

/// Whether `libcuda` can be loaded at all. cudarc panics on first use without it, so this is
/// asked before anything else.
pub(crate) fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the driver library; calls nothing in it.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// The driver's CUDA version (e.g. 13000), after `driver_present()`.
pub(crate) fn driver_version() -> Result<i32> {
    result::init().map_err(drv("cuInit"))?;
    let mut v = 0i32;
    // SAFETY: the library is present and initialised; `v` is a valid out-pointer.
    unsafe { sys::cuDriverGetVersion(&mut v) }
        .result()
        .map_err(drv("cuDriverGetVersion"))?;
    Ok(v)
}

/// `(ordinal, name, major, minor)` of every GPU, after `driver_version()` succeeded.
pub(crate) fn devices() -> Result<Vec<(usize, String, i32, i32)>> {
    let n = result::device::get_count().map_err(drv("cuDeviceGetCount"))?;
    let mut out = Vec::new();
    for i in 0..n {
        let dev = result::device::get(i).map_err(drv("cuDeviceGet"))?;
        let name = result::device::get_name(dev).map_err(drv("cuDeviceGetName"))?;
        let attr = |a| {
            // SAFETY: `dev` is a valid device handle from cuDeviceGet.
            unsafe { result::device::get_attribute(dev, a) }.map_err(drv("cuDeviceGetAttribute"))
        };
        let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        out.push((i as usize, name, major, minor));
    }
    Ok(out)
}

/// Free and total device memory of `ctx`'s device, in bytes.
pub(crate) fn memory(ctx: &CudaContext) -> Result<(u64, u64)> {
    ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
    let (free, total) = result::mem_get_info().map_err(drv("cuMemGetInfo"))?;
    Ok((free as u64, total as u64))
}

/// A loaded cubin. Unloaded when the last [`Kernel`] of it and the module itself are gone: every
/// kernel holds the module, so no kernel handle can outlive the code it points into.
#[derive(Debug)]
struct Loaded {
    ctx: Arc<CudaContext>,
    module: sys::CUmodule,
}

// SAFETY: a CUmodule handle may be used from any thread once its context is bound there; every
// use below binds the context first, and the handle is never mutated after loading.
unsafe impl Send for Loaded {}
// SAFETY: as above.
unsafe impl Sync for Loaded {}

impl Drop for Loaded {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: loaded in `Module::load`, unloaded exactly once here, after every Kernel (each
        // holds an Arc of this) is gone.
        let _ = unsafe { result::module::unload(self.module) };
    }
}

/// A loaded, verified cubin.
#[derive(Clone, Debug)]
pub(crate) struct Module(Arc<Loaded>);

/// One kernel of a [`Module`].
#[derive(Clone, Debug)]
pub(crate) struct Kernel {
    func: sys::CUfunction,
    /// The cubin's name for it (what a per-kernel timing reports).
    name: Arc<str>,
    _module: Arc<Loaded>,
}
// SAFETY: a CUfunction is an immutable handle owned by its module, which this Kernel keeps alive.
unsafe impl Send for Kernel {}
// SAFETY: as above.
unsafe impl Sync for Kernel {}

impl Module {
    /// Load `cubin` (already checked against its recorded hash) into `ctx`.
    pub(crate) fn load(ctx: &Arc<CudaContext>, cubin: &[u8]) -> Result<Module> {
        ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
        // The driver reads the image as an ELF file: give it 8-byte alignment.
        let mut image = vec![0u64; cubin.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut image)[..cubin.len()].copy_from_slice(cubin);
        // SAFETY: `image` is a complete cubin; the driver copies what it needs before returning.
        let module = unsafe { result::module::load_data(image.as_ptr().cast::<c_void>()) }
            .map_err(drv("cuModuleLoadData"))?;
        Ok(Module(Arc::new(Loaded {
            ctx: ctx.clone(),
            module,
        })))
    }

    /// Look up kernel `name`, check that it takes parameters of exactly the sizes `params` (bytes,
    /// in order) as far as the driver can tell, and allow it `smem` bytes of dynamic shared memory.
    /// An ABI mismatch between the host and a cubin is then an [`Error::Cuda`] here, never a
    /// launch. (The driver, from CUDA 12.4, reports each parameter's size by index; a kernel with
    /// *more* parameters than `params` would only show by asking past the end, which is an API
    /// error that compute-sanitizer reports, so that case is left to the SASS audit's
    /// `param_count` rule, which checks every kernel's layout in the cubin.)
    pub(crate) fn kernel(&self, name: &str, smem: u32, params: &[usize]) -> Result<Kernel> {
        let m = &self.0;
        m.ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
        let cname = CString::new(name).map_err(|_| Error::Cuda {
            op: "cuModuleGetFunction",
            message: format!("kernel name {name:?} holds a NUL"),
        })?;
        // SAFETY: the module is loaded and stays loaded while `m` lives.
        let func = unsafe { result::module::get_function(m.module, cname) }
            .map_err(drv("cuModuleGetFunction"))?;
        if smem > 48 * 1024 {
            // SAFETY: `func` is a valid function of a loaded module.
            unsafe {
                result::function::set_function_attribute(
                    func,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    smem as i32,
                )
            }
            .map_err(drv("cuFuncSetAttribute"))?;
        }
        check_params(func, name, params)?;
        Ok(Kernel {
            func,
            name: name.into(),
            _module: m.clone(),
        })
    }

    /// The streaming multiprocessors of this module's device (the TMA prefill sizes its grid of
    /// persistent blocks by them; a launch fact, never a value of the inputs).
    pub(crate) fn sm_count(&self) -> Result<usize> {
        let n = self
            .0
            .ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(drv("cuDeviceGetAttribute"))?;
        Ok(n.max(1) as usize)
    }

    /// Read `N` 32-bit integers from the `__constant__` array `name` of this module (the cubins
    /// export their launch configurations this way). Synchronous.
    pub(crate) fn constant_i32<const N: usize>(&self, name: &str) -> Result<[i32; N]> {
        let m = &self.0;
        m.ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
        let cname = CString::new(name).map_err(|_| Error::Cuda {
            op: "cuModuleGetGlobal",
            message: format!("symbol name {name:?} holds a NUL"),
        })?;
        // SAFETY: the module is loaded and stays loaded while `m` lives.
        let (ptr, bytes) = unsafe { result::module::get_global(m.module, cname) }
            .map_err(drv("cuModuleGetGlobal"))?;
        if bytes != N * 4 {
            return Err(Error::Cuda {
                op: "cuModuleGetGlobal",
                message: format!("{name} holds {bytes} bytes, expected {}", N * 4),
            });
        }
        let mut out = [0i32; N];
        // SAFETY: `ptr` is the device address of a global of exactly `N * 4` bytes (checked
        // above); `out` is a host buffer of that size; the copy is synchronous.
        unsafe { result::memcpy_dtoh_sync(&mut out, ptr) }.map_err(drv("cuMemcpyDtoH"))?;
        Ok(out)
    }
}

impl Kernel {
    /// The kernel's name in its cubin.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

/// Compare the sizes of `func`'s first `params.len()` parameters with `params` (see
/// [`Module::kernel`]). A driver older than CUDA 12.4 lacks `cuFuncGetParamInfo` (cudarc would
/// panic on the missing symbol): nothing is checked there.
fn check_params(func: sys::CUfunction, name: &str, params: &[usize]) -> Result<()> {
    if driver_version()? < 12040 {
        return Ok(());
    }
    for (i, &want) in params.iter().enumerate() {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: `func` is a valid function; the out-pointers are valid locals.
        let r = unsafe { sys::cuFuncGetParamInfo(func, i, &mut offset, &mut size) };
        if r != sys::CUresult::CUDA_SUCCESS || size != want {
            return Err(Error::Cuda {
                op: "kernel ABI check",
                message: format!(
                    "{name}: the host passes {} parameters of {params:?} bytes; parameter {i} of the \
                     cubin's kernel is {}",
                    params.len(),
                    if r == sys::CUresult::CUDA_SUCCESS {
                        format!("{size} bytes")
                    } else {
                        "missing".to_string()
                    }
                ),
            });
        }
    }
    Ok(())
}

/// A TMA descriptor (`CUtensorMap`, 128 bytes, passed by value as a kernel parameter) of the 4-D
/// tensor of 2-byte elements (bf16 or f16) at `addr` with `dims` (innermost first) and the byte
/// `strides` of its outer three dimensions, read in boxes of `boxdim` elements into shared memory
/// in the 128-byte swizzle; `None` where the driver declines the layout (addresses or strides
/// that are not multiples of 16 bytes, sizes past its limits) or is older than CUDA 12.0. Only
/// host memory is touched: the driver encodes the descriptor, no GPU work is queued.
pub(crate) fn tensor_map_2byte(
    bf16: bool,
    addr: u64,
    dims: [u64; 4],
    strides: [u64; 3],
    boxdim: [u32; 4],
) -> Option<Vec<u8>> {
    if driver_version().ok()? < 12000 {
        return None;
    }
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    let elem = [1u32; 4];
    let dt = if bf16 {
        sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    } else {
        sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16
    };
    // SAFETY: `map` is a local CUtensorMap the call writes; `dims`, `strides`, `boxdim` and `elem`
    // are local arrays of the lengths rank 4 asks for (rank - 1 strides); `addr` is only recorded
    // in the descriptor (the caller's tensor, which outlives the launches that use it).
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            dt,
            4,
            addr as usize as *mut c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxdim.as_ptr(),
            elem.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    (r == sys::CUresult::CUDA_SUCCESS)
        .then(|| bytemuck::cast_slice::<u64, u8>(&map.opaque).to_vec())
}

/// The largest grid y and z dimensions.
pub(crate) const MAX_GRID_YZ: usize = 65535;

/// Each `(name, value)` that becomes a grid y or z dimension is at most [`MAX_GRID_YZ`]; else
/// [`Error::DimensionOutOfRange`] naming the first that is not.
pub(crate) fn within_grid_yz(dims: &[(&'static str, usize)]) -> Result<()> {
    match dims.iter().find(|(_, v)| *v > MAX_GRID_YZ) {
        Some(&(name, value)) => Err(Error::DimensionOutOfRange {
            name,
            value,
            min: 1,
            max: MAX_GRID_YZ,
        }),
        None => Ok(()),
    }
}

/// One kernel launch, as data: the kernel, its grid and block, dynamic shared memory, and the
/// bytes of each of its parameters in order (one entry for a kernel that takes one struct).
#[derive(Clone, Debug)]
pub(crate) struct Launch {
    pub kernel: Kernel,
    pub grid: (u32, u32, u32),
    pub block: u32,
    pub smem: u32,
    pub params: ParamBytes,
    /// Launched with programmatic stream serialisation (sm_90+): the kernel may start before the
    /// previous launch on the stream has completed, and must itself wait for it (PTX
    /// `griddepcontrol.wait`) before touching what that launch writes. Only for kernels built to
    /// wait (kernels/tensorcore.cu, `tc_pdl`).
    pub early: bool,
}

/// A launch's parameters, in the kernel's order: each one's bytes at a 16-byte boundary of one
/// buffer. One buffer rather than one allocation each: the TensorCore kernels take 36, whose
/// allocations were part of the 2-3 µs a call spent building and dropping its launches
/// (docs/perf.md, "A call's host time").
#[derive(Clone, Debug, Default)]
pub(crate) struct ParamBytes {
    bytes: Vec<u8>,
    /// Where each parameter starts in `bytes`, and its size.
    at: Vec<(usize, usize)>,
}

impl ParamBytes {
    /// Room for `n` parameters of `bytes` bytes in all, without reallocating.
    pub(crate) fn with_capacity(n: usize, bytes: usize) -> ParamBytes {
        ParamBytes {
            bytes: Vec::with_capacity(bytes + 16 * n),
            at: Vec::with_capacity(n),
        }
    }

    /// A kernel's one parameter.
    pub(crate) fn one<T: bytemuck::Pod>(x: &T) -> ParamBytes {
        let mut p = ParamBytes::with_capacity(1, std::mem::size_of::<T>());
        p.push(x);
        p
    }

    /// Append a parameter.
    pub(crate) fn push<T: bytemuck::Pod>(&mut self, x: &T) -> &mut ParamBytes {
        self.push_bytes(bytemuck::bytes_of(x))
    }

    /// Append a parameter given as its bytes (a TMA descriptor).
    pub(crate) fn push_bytes(&mut self, b: &[u8]) -> &mut ParamBytes {
        let start = self.bytes.len().next_multiple_of(16);
        self.bytes.resize(start, 0);
        self.bytes.extend_from_slice(b);
        self.at.push((start, b.len()));
        self
    }

    /// Each parameter's size, in order (what [`Module::kernel`] checks against the cubin).
    pub(crate) fn sizes(&self) -> Vec<usize> {
        self.at.iter().map(|&(_, n)| n).collect()
    }

    /// A pointer to each parameter's first byte, as cuLaunchKernel takes them: valid while
    /// `self` is neither changed nor dropped.
    fn pointers(&self) -> Vec<*mut c_void> {
        self.at
            .iter()
            .map(|&(start, _)| self.bytes[start..].as_ptr().cast::<c_void>().cast_mut())
            .collect()
    }
}

/// A stream to submit to: its raw handle and the context it belongs to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawStream {
    pub(crate) handle: sys::CUstream,
}

impl RawStream {
    /// The handle of a cudarc stream.
    pub(crate) fn of(s: &CudaStream) -> RawStream {
        RawStream {
            handle: s.cu_stream(),
        }
    }

    /// A stream handle given as a number by a binding (`torch.cuda.Stream.cuda_stream`,
    /// DLPack's stream); 0 is the legacy default stream.
    pub(crate) fn from_handle(handle: u64) -> RawStream {
        RawStream {
            handle: handle as usize as sys::CUstream,
        }
    }
}

/// Enqueue `launches` on `stream`, in order (asynchronous). Each kernel's parameter sizes were
/// checked against the cubin when it was looked up ([`Module::kernel`]).
///
/// # Safety
///
/// The caller guarantees that
/// - `stream` is a live stream of `ctx`, the context every launch's kernel was loaded into;
/// - every device address inside the launches' parameters points to a live allocation of that
///   context, at least as large as what the kernel reads or writes for the problem it was planned
///   for (the tensors checked by `tensor::check_call`, the scratch buffers sized by the path's
///   plan), and stays alive until the stream has run the launches;
/// - the grid, block and shared-memory sizes are the kernel's own configuration;
/// - no launch writes memory that another concurrent user reads or writes;
/// - a launch marked [`Launch::early`] is of a kernel that waits for the previous launch on the
///   stream (`griddepcontrol.wait`) before it reads or writes anything that launch touches.
pub(crate) unsafe fn submit(
    ctx: &CudaContext,
    stream: RawStream,
    launches: &[Launch],
) -> Result<()> {
    ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
    for l in launches {
        let mut args = l.params.pointers();
        if l.early {
            // Programmatic stream serialisation: the launch may begin once every block of the
            // previous one has started or triggered; the kernel waits for that launch itself.
            let mut attr = sys::CUlaunchAttribute {
                id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                pad: [0; 4],
                value: sys::CUlaunchAttributeValue {
                    programmaticStreamSerializationAllowed: 1,
                },
            };
            let cfg = sys::CUlaunchConfig {
                gridDimX: l.grid.0,
                gridDimY: l.grid.1,
                gridDimZ: l.grid.2,
                blockDimX: l.block,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: l.smem,
                hStream: stream.handle,
                attrs: &mut attr,
                numAttrs: 1,
            };
            // SAFETY: as for cuLaunchKernel (below); `cfg` and the attribute it points to live
            // until the call returns (the driver copies them), and `early` is set only for
            // kernels that wait for the previous launch before reading what it writes.
            unsafe {
                sys::cuLaunchKernelEx(&cfg, l.kernel.func, args.as_mut_ptr(), std::ptr::null_mut())
            }
            .result()
            .map_err(drv("cuLaunchKernelEx"))?;
            continue;
        }
        // SAFETY: each entry of `args` points to the bytes of one parameter, of the size the
        // kernel takes (checked when it was looked up, where the driver can tell); the driver
        // copies them at launch. The device addresses inside, the stream and the launch shape are valid as the
        // caller guarantees (above).
        unsafe {
            result::launch_kernel(
                l.kernel.func,
                l.grid,
                (l.block, 1, 1),
                l.smem,
                stream.handle,
                &mut args,
            )
        }
        .map_err(drv("cuLaunchKernel"))?;
    }
    Ok(())
}

/// Where a device address lies: its allocation's first byte and size, and the device ordinal,
/// as the driver reports them, in one query (`cuPointerGetAttributes`: one driver call where three
/// `cuPointerGetAttribute` were, for each tensor of a raw-address call). `None` when the address
/// is not device memory the driver knows (a host pointer, garbage): the query then succeeds with
/// each attribute at its null value, an allocation of size 0.
pub(crate) fn allocation_of(ctx: &CudaContext, ptr: u64) -> Result<Option<(u64, u64, i32)>> {
    ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
    use sys::CUpointer_attribute as A;
    let mut attrs = [
        A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
    ];
    let (mut start, mut size, mut ordinal) = (0u64, 0u64, -1i32);
    let mut data: [*mut c_void; 3] = [
        (&mut start as *mut u64).cast(),
        (&mut size as *mut u64).cast(),
        (&mut ordinal as *mut i32).cast(),
    ];
    // SAFETY: `attrs` and `data` hold three entries each, `data[i]` pointing to a local of the
    // size attribute `i` writes (an 8-byte address or size, a 4-byte ordinal); the driver only
    // reads `ptr` as a number.
    let r = unsafe { sys::cuPointerGetAttributes(3, attrs.as_mut_ptr(), data.as_mut_ptr(), ptr) };
    let ok = r == sys::CUresult::CUDA_SUCCESS && size > 0 && ordinal >= 0;
    Ok(ok.then_some((start, size, ordinal)))
}

/// Make `to` wait (on the device, not the host) for everything enqueued on `from` so far.
///
/// # Safety
/// Both streams are live streams of `ctx`.
pub(crate) unsafe fn order_after(
    ctx: &Arc<CudaContext>,
    from: RawStream,
    to: RawStream,
) -> Result<()> {
    ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
    let ev = ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
        .map_err(drv("cuEventCreate"))?;
    // SAFETY: `ev` is a live event of `ctx` (kept alive until the end of this function: the
    // driver allows destroying an event another stream still waits on); the streams are live
    // streams of `ctx` as the caller guarantees.
    unsafe {
        sys::cuEventRecord(ev.cu_event(), from.handle)
            .result()
            .map_err(drv("cuEventRecord"))?;
        sys::cuStreamWaitEvent(to.handle, ev.cu_event(), 0)
            .result()
            .map_err(drv("cuStreamWaitEvent"))
    }
}

/// The device's current memory pool (the one cudarc's stream-ordered allocations come from):
/// bytes held by live allocations (`CU_MEMPOOL_ATTR_USED_MEM_CURRENT`), and bytes the pool keeps
/// reserved (`RESERVED_MEM_CURRENT`), after returning what no allocation uses to the driver when
/// `trim` (`cuMemPoolTrimTo(pool, 0)`).
pub(crate) fn pool_usage(ctx: &CudaContext, trim: bool) -> Result<(u64, u64)> {
    ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let (mut used, mut reserved) = (0u64, 0u64);
    use sys::CUmemPool_attribute as A;
    // SAFETY: `pool` is a valid out-pointer; the device handle is the context's own. The
    // attribute queries write one u64 each into valid locals. Trimming only releases memory that
    // no allocation holds.
    unsafe {
        sys::cuDeviceGetMemPool(&mut pool, ctx.cu_device())
            .result()
            .map_err(drv("cuDeviceGetMemPool"))?;
        if trim {
            sys::cuMemPoolTrimTo(pool, 0)
                .result()
                .map_err(drv("cuMemPoolTrimTo"))?;
        }
        sys::cuMemPoolGetAttribute(
            pool,
            A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
            (&mut used as *mut u64).cast(),
        )
        .result()
        .map_err(drv("cuMemPoolGetAttribute"))?;
        sys::cuMemPoolGetAttribute(
            pool,
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
            (&mut reserved as *mut u64).cast(),
        )
        .result()
        .map_err(drv("cuMemPoolGetAttribute"))?;
    }
    Ok((used, reserved))
}

#[cfg(test)]
mod tests {
    use super::ParamBytes;

    #[test]
    fn param_bytes_keep_each_parameter_whole_at_a_16_byte_boundary_in_order() {
        let map = [7u8; 128]; // a TMA descriptor's size
        let mut p = ParamBytes::with_capacity(4, 0);
        p.push(&0x0102_0304_0506_0708u64)
            .push(&-5i32)
            .push(&1.5f32)
            .push_bytes(&map);
        assert_eq!(p.sizes(), vec![8, 4, 4, 128]);
        let base = p.bytes.as_ptr() as usize;
        let want: [&[u8]; 4] = [
            &0x0102_0304_0506_0708u64.to_ne_bytes(),
            &(-5i32).to_ne_bytes(),
            &1.5f32.to_ne_bytes(),
            &map,
        ];
        let ptrs = p.pointers();
        assert_eq!(ptrs.len(), 4);
        let mut last_end = 0;
        for ((ptr, &(start, len)), w) in ptrs.iter().zip(&p.at).zip(want) {
            assert_eq!(
                *ptr as usize - base,
                start,
                "the pointer is the parameter's first byte"
            );
            assert_eq!(start % 16, 0);
            assert!(start >= last_end, "parameters do not overlap");
            assert_eq!(&p.bytes[start..start + len], w);
            last_end = start + len;
        }
        assert_eq!(ParamBytes::one(&3u64).sizes(), vec![8]);
    }
}
