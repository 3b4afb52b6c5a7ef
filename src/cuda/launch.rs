//! The FFI edge: the only module of the CUDA backend with `unsafe`. It loads a verified cubin into
//! a module, looks up the kernels, and launches them with the one by-value parameter struct that
//! `kernels/exact.cu` declares. Everything above this module is safe Rust.

use super::drv;
use crate::error::Result;
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaStream, result};
use std::ffi::{CString, c_void};
use std::sync::Arc;

/// The kernel ABI, field for field the `Params` struct of `kernels/exact.cu` (pointers are device
/// addresses, 8 bytes; then 32-bit scalars). Change both together.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Params {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub mask: u64,
    pub out: u64,
    pub kv_lens: u64,
    pub qp: u64,
    pub kp: u64,
    pub vp: u64,
    pub sq: u64,
    pub sk: u64,
    pub badq: u64,
    pub badk: u64,
    pub badv: u64,
    pub flags: u64,
    pub acc: u64,
    pub b: i32,
    pub hq: i32,
    pub hkv: i32,
    pub sq_len: i32,
    pub skv: i32,
    pub d: i32,
    pub dp: i32,
    pub skv_pad: i32,
    pub causal: i32,
    pub has_mask: i32,
    pub mask_per_batch: i32,
    pub mask_per_head: i32,
    pub propagate: i32,
    pub scale: f32,
    pub prep_head0: i32,
    pub prep_job0: i32,
    pub group: i32,
    pub bh0: i32,
}

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

/// A loaded cubin and the kernels looked up in it. Unloaded on drop.
#[derive(Debug)]
pub(crate) struct Module {
    ctx: Arc<CudaContext>,
    module: sys::CUmodule,
}

// SAFETY: a CUmodule handle may be used from any thread once its context is bound there; every
// use below binds the context first.
unsafe impl Send for Module {}
// SAFETY: as above; the handle is never mutated after loading.
unsafe impl Sync for Module {}

/// One kernel of a [`Module`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Kernel {
    func: sys::CUfunction,
}
// SAFETY: a CUfunction is an immutable handle owned by its module, which outlives every Kernel
// (both live in the backend).
unsafe impl Send for Kernel {}
// SAFETY: as above.
unsafe impl Sync for Kernel {}

impl Module {
    /// Load `cubin` (already checked against its manifest hash) into `ctx`.
    pub(crate) fn load(ctx: &Arc<CudaContext>, cubin: &[u8]) -> Result<Module> {
        ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
        // The driver reads the image as an ELF file: give it 8-byte alignment.
        let mut image = vec![0u64; cubin.len().div_ceil(8)];
        // SAFETY: `image` holds at least `cubin.len()` bytes; plain byte copy.
        unsafe {
            std::ptr::copy_nonoverlapping(
                cubin.as_ptr(),
                image.as_mut_ptr().cast::<u8>(),
                cubin.len(),
            )
        };
        // SAFETY: `image` is a complete cubin; the driver copies what it needs before returning.
        let module = unsafe { result::module::load_data(image.as_ptr().cast::<c_void>()) }
            .map_err(drv("cuModuleLoadData"))?;
        Ok(Module {
            ctx: ctx.clone(),
            module,
        })
    }

    /// Look up kernel `name` and allow it `smem` bytes of dynamic shared memory.
    pub(crate) fn kernel(&self, name: &str, smem: u32) -> Result<Kernel> {
        self.ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
        let cname = CString::new(name).expect("kernel names have no NUL");
        // SAFETY: the module is loaded and not unloaded before `self` drops.
        let func = unsafe { result::module::get_function(self.module, cname) }
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
        Ok(Kernel { func })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: loaded in `load`, unloaded exactly once here.
        let _ = unsafe { result::module::unload(self.module) };
    }
}

/// Launch `kernel` on `stream` with `params` (asynchronous).
///
/// The caller guarantees that every device address in `params` points to a live allocation of
/// the size the kernel reads or writes for this problem (src/cuda/backend.rs sizes them all from
/// the validated problem) and keeps those allocations alive until the stream has run the kernel.
pub(crate) fn launch(
    stream: &CudaStream,
    kernel: Kernel,
    grid: (u32, u32, u32),
    block: u32,
    smem: u32,
    params: &Params,
) -> Result<()> {
    stream
        .context()
        .bind_to_thread()
        .map_err(drv("cuCtxSetCurrent"))?;
    let mut p = *params;
    let mut args = [(&mut p as *mut Params).cast::<c_void>()];
    // SAFETY: the kernel takes exactly one parameter, a `Params` by value, whose layout this
    // struct mirrors; the driver copies it at launch. The addresses inside are valid as the
    // caller guarantees (above).
    unsafe {
        result::launch_kernel(
            kernel.func,
            grid,
            (block, 1, 1),
            smem,
            stream.cu_stream(),
            &mut args,
        )
    }
    .map_err(drv("cuLaunchKernel"))
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

// ------------------------------------------------------------------ the TensorCore kernels (issue 5)

/// The arguments of every `tc_fwd_*` / `tc_dec_*` kernel of `kernels/tensorcore.cu`, in the order
/// and with the types of its ABI comment: device addresses as 8 bytes, then `int`s, the `float`
/// scale, the mask address and its three `long long` strides. Change both together.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TcArgs {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    /// `int[B]` key lengths, or 0 (NULL: every batch element uses `skv`).
    pub kv_lens: u64,
    pub b: i32,
    pub hq: i32,
    pub hkv: i32,
    pub sq: i32,
    pub skv: i32,
    pub scale: f32,
    /// One byte per entry, or 0 (NULL: no mask).
    pub mask: u64,
    pub msb: i64,
    pub msh: i64,
    pub msq: i64,
}

impl Module {
    /// Read `N` 32-bit integers from the `__constant__` array `name` of this module (the
    /// TensorCore cubin exports its launch configuration this way). Synchronous.
    pub(crate) fn constant_i32<const N: usize>(&self, name: &str) -> Result<[i32; N]> {
        self.ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
        let cname = CString::new(name).expect("symbol names have no NUL");
        // SAFETY: the module is loaded and not unloaded before `self` drops.
        let (ptr, bytes) = unsafe { result::module::get_global(self.module, cname) }
            .map_err(drv("cuModuleGetGlobal"))?;
        if bytes != N * 4 {
            return Err(crate::error::Error::Cuda {
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

/// Launch a TensorCore kernel on `stream` with `a` (asynchronous).
///
/// The caller (src/cuda/tensorcore.rs) guarantees that `q`, `k`, `v`, `o` are live, 16-byte
/// aligned device allocations of `[B, Hq|Hkv, Sq|Skv, D]` elements of the kernel's dtype and head
/// dim, `kv_lens` (if not 0) holds `B` ints in `[0, Skv]`, `mask` (if not 0) covers every
/// `b·msb + h·msh + i·msq + j` the shape reaches, that all of them stay alive until the stream
/// has run the kernel, and that `grid`, `block`, `smem` are the cubin's own configuration.
pub(crate) fn launch_tc(
    stream: &CudaStream,
    kernel: Kernel,
    grid: (u32, u32, u32),
    block: u32,
    smem: u32,
    a: &TcArgs,
) -> Result<()> {
    stream
        .context()
        .bind_to_thread()
        .map_err(drv("cuCtxSetCurrent"))?;
    let mut a = *a;
    let mut args: [*mut c_void; 15] = [
        (&mut a.q as *mut u64).cast(),
        (&mut a.k as *mut u64).cast(),
        (&mut a.v as *mut u64).cast(),
        (&mut a.o as *mut u64).cast(),
        (&mut a.kv_lens as *mut u64).cast(),
        (&mut a.b as *mut i32).cast(),
        (&mut a.hq as *mut i32).cast(),
        (&mut a.hkv as *mut i32).cast(),
        (&mut a.sq as *mut i32).cast(),
        (&mut a.skv as *mut i32).cast(),
        (&mut a.scale as *mut f32).cast(),
        (&mut a.mask as *mut u64).cast(),
        (&mut a.msb as *mut i64).cast(),
        (&mut a.msh as *mut i64).cast(),
        (&mut a.msq as *mut i64).cast(),
    ];
    // SAFETY: the kernel takes exactly these 15 parameters with these sizes (kernels/tensorcore.cu
    // ABI: 5 pointers, 5 ints, a float, a pointer, 3 long longs); each entry points to a live
    // local of that size, which the driver copies at launch. The device addresses inside are
    // valid as the caller guarantees (above).
    unsafe {
        result::launch_kernel(
            kernel.func,
            grid,
            (block, 1, 1),
            smem,
            stream.cu_stream(),
            &mut args,
        )
    }
    .map_err(drv("cuLaunchKernel"))
}

// --------------------------------------------------- the TensorCore path's non-finite policy kernels

/// The one by-value parameter of the `tc_sanitize_*`, `tc_first_bad`, `tc_poison_*` and
/// `tc_any_flag` kernels: field for field the `TcPolicy` struct of `kernels/tensorcore.cu`
/// (11 device addresses, 5 `long long`s, 8 `int`s: 160 bytes). Change both together, and the
/// byte ranges of their `audit/rules.toml` entries.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TcPolicy {
    pub src: u64,
    pub dst: u64,
    pub flags: u64,
    pub badq: u64,
    pub badk: u64,
    pub badv: u64,
    pub firstbad: u64,
    pub out: u64,
    pub mask: u64,
    pub kv_lens: u64,
    pub words: u64,
    pub rows: i64,
    pub rows_kv: i64,
    pub msb: i64,
    pub msh: i64,
    pub msq: i64,
    pub d: i32,
    pub b: i32,
    pub hq: i32,
    pub hkv: i32,
    pub sq: i32,
    pub skv: i32,
    pub causal: i32,
    pub pad: i32,
}

const _: () = assert!(std::mem::size_of::<TcPolicy>() == 160);

/// Launch a policy kernel on `stream` with `p` (asynchronous).
///
/// The caller (src/cuda/tensorcore.rs) guarantees that every non-zero address in `p` is a live
/// device allocation of the size the kernel reaches for this shape (the kernel comments in
/// `kernels/tensorcore.cu`), that they stay alive until the stream has run the kernel, and that
/// `grid` and `block` are the launch shapes written there.
pub(crate) fn launch_policy(
    stream: &CudaStream,
    kernel: Kernel,
    grid: (u32, u32, u32),
    block: u32,
    p: &TcPolicy,
) -> Result<()> {
    stream
        .context()
        .bind_to_thread()
        .map_err(drv("cuCtxSetCurrent"))?;
    let mut p = *p;
    let mut args = [(&mut p as *mut TcPolicy).cast::<c_void>()];
    // SAFETY: the kernel takes exactly one parameter, a `TcPolicy` by value, whose layout this
    // struct mirrors (160 bytes, checked above); the driver copies it at launch. The addresses
    // inside are valid as the caller guarantees (above).
    unsafe {
        result::launch_kernel(
            kernel.func,
            grid,
            (block, 1, 1),
            0,
            stream.cu_stream(),
            &mut args,
        )
    }
    .map_err(drv("cuLaunchKernel"))
}
