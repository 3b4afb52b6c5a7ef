//! The FFI edge of the harness: the only module with `unsafe`. Opens GPU 0 (or reports that there
//! is none), loads a cubin, allocates, copies and launches through cudarc's `result` layer.

use cudarc::driver::{CudaContext, result, sys};
use std::ffi::{CString, c_void};
use std::sync::Arc;

pub type R<T> = Result<T, String>;

fn drv(what: &'static str) -> impl Fn(result::DriverError) -> String {
    move |e| format!("{what}: {e:?}")
}

pub struct Gpu {
    ctx: Arc<CudaContext>,
    pub name: String,
    pub cc: (i32, i32),
    pub driver: i32,
}

/// `Ok(None)` when this machine has no CUDA driver or no GPU: an ordinary outcome here.
pub fn open() -> R<Option<Gpu>> {
    // SAFETY: only tries to dlopen libcuda; calls nothing in it. cudarc panics without it.
    if !unsafe { sys::is_culib_present() } {
        return Ok(None);
    }
    result::init().map_err(drv("cuInit"))?;
    if result::device::get_count().map_err(drv("cuDeviceGetCount"))? < 1 {
        return Ok(None);
    }
    let ctx = CudaContext::new(0).map_err(drv("cuCtxCreate"))?;
    let name = ctx.name().map_err(drv("cuDeviceGetName"))?;
    let cc = ctx
        .compute_capability()
        .map_err(drv("compute capability"))?;
    let mut v = 0i32;
    // SAFETY: initialised above; `v` is a valid out-pointer.
    unsafe { sys::cuDriverGetVersion(&mut v) }
        .result()
        .map_err(drv("cuDriverGetVersion"))?;
    Ok(Some(Gpu {
        ctx,
        name,
        cc,
        driver: v,
    }))
}

pub struct Module {
    ctx: Arc<CudaContext>,
    module: sys::CUmodule,
}

#[derive(Clone, Copy)]
pub struct Func(sys::CUfunction);

/// A device allocation, freed on drop.
pub struct Buf {
    pub ptr: sys::CUdeviceptr,
    pub bytes: usize,
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: allocated by `alloc`, freed once.
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: loaded by `load`, unloaded once.
        let _ = unsafe { result::module::unload(self.module) };
    }
}

impl Gpu {
    fn bind(&self) -> R<()> {
        self.ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))
    }

    pub fn load(&self, cubin: &[u8]) -> R<Module> {
        self.bind()?;
        // 8-byte aligned copy of the ELF image.
        let mut image = vec![0u64; cubin.len().div_ceil(8)];
        // SAFETY: `image` holds at least cubin.len() bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                cubin.as_ptr(),
                image.as_mut_ptr().cast::<u8>(),
                cubin.len(),
            )
        };
        // SAFETY: a complete cubin image; the driver copies what it needs.
        let module = unsafe { result::module::load_data(image.as_ptr().cast::<c_void>()) }
            .map_err(drv("cuModuleLoadData"))?;
        Ok(Module {
            ctx: self.ctx.clone(),
            module,
        })
    }

    pub fn alloc(&self, bytes: usize) -> R<Buf> {
        self.bind()?;
        // SAFETY: plain allocation; freed by Buf's drop.
        let ptr = unsafe { result::malloc_sync(bytes.max(4)) }.map_err(drv("cuMemAlloc"))?;
        Ok(Buf { ptr, bytes })
    }

    pub fn upload<T: Copy>(&self, data: &[T]) -> R<Buf> {
        let b = self.alloc(std::mem::size_of_val(data))?;
        // SAFETY: `b` holds exactly size_of_val(data) bytes; synchronous copy.
        unsafe { result::memcpy_htod_sync(b.ptr, data) }.map_err(drv("cuMemcpyHtoD"))?;
        Ok(b)
    }

    /// Set every byte of `b` to `byte`.
    pub fn fill(&self, b: &Buf, byte: u8) -> R<()> {
        self.bind()?;
        // SAFETY: `b` is a live allocation of b.bytes bytes.
        unsafe { result::memset_d8_sync(b.ptr, byte, b.bytes) }.map_err(drv("cuMemsetD8"))
    }

    pub fn download<T: Copy>(&self, b: &Buf, out: &mut [T]) -> R<()> {
        assert!(std::mem::size_of_val(out) <= b.bytes);
        self.bind()?;
        // SAFETY: `out` is no larger than the allocation; synchronous copy.
        unsafe { result::memcpy_dtoh_sync(out, b.ptr) }.map_err(drv("cuMemcpyDtoH"))
    }

    /// Launch and wait; `args` are pointers to the kernel's parameters in order.
    pub fn launch(
        &self,
        f: Func,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        args: &mut [*mut c_void],
    ) -> R<()> {
        self.bind()?;
        // SAFETY: the caller passes the kernel's exact parameter list (see each call site) with
        // every device address live and large enough for the launch's index range.
        unsafe {
            result::launch_kernel(f.0, grid, (block, 1, 1), smem, std::ptr::null_mut(), args)
        }
        .map_err(drv("cuLaunchKernel"))?;
        result::ctx::synchronize().map_err(drv("kernel (synchronize)"))
    }
}

impl Module {
    /// Kernel `name`, allowed `smem` bytes of dynamic shared memory.
    pub fn func(&self, name: &str, smem: u32) -> R<Func> {
        self.ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
        let c = CString::new(name).expect("no NUL");
        // SAFETY: the module stays loaded while `self` lives (callers keep it alive).
        let f = unsafe { result::module::get_function(self.module, c) }
            .map_err(|e| format!("{name}: {e:?}"))?;
        if smem > 48 * 1024 {
            // SAFETY: valid function handle.
            unsafe {
                result::function::set_function_attribute(
                    f,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    smem as i32,
                )
            }
            .map_err(drv("cuFuncSetAttribute"))?;
        }
        Ok(Func(f))
    }

    /// N i32s of the `__constant__` array `name`.
    pub fn constant_i32<const N: usize>(&self, name: &str) -> R<[i32; N]> {
        self.ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
        let c = CString::new(name).expect("no NUL");
        // SAFETY: module loaded.
        let (ptr, bytes) = unsafe { result::module::get_global(self.module, c) }
            .map_err(|e| format!("{name}: {e:?}"))?;
        if bytes != N * 4 {
            return Err(format!("{name}: {bytes} bytes, expected {}", N * 4));
        }
        let mut out = [0i32; N];
        // SAFETY: ptr holds N i32s (checked); synchronous copy.
        unsafe { result::memcpy_dtoh_sync(&mut out, ptr) }.map_err(drv("cuMemcpyDtoH"))?;
        Ok(out)
    }
}

/// A kernel argument as the driver wants it: a pointer to the value.
pub fn arg<T>(x: &mut T) -> *mut c_void {
    (x as *mut T).cast::<c_void>()
}
