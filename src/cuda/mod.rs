//! The CUDA backend (being written: see issue 3). Until its kernel lands, constructing it reports
//! why it is unavailable; it never pretends to compute.

use crate::dtype::Element;
use crate::engine::Path;
use crate::error::{Error, Result};
use crate::problem::Problem;

/// A CUDA device with the embedded `Exact` kernels loaded.
#[derive(Debug)]
pub struct CudaBackend {
    _private: (),
}

impl CudaBackend {
    /// Open GPU `ordinal`.
    pub fn new(_ordinal: usize) -> Result<Self> {
        // SAFETY: only tries to dlopen the driver library; calls nothing in it.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(Error::NoCudaDriver {
                reason: "libcuda.so could not be loaded".into(),
            });
        }
        Err(Error::NoCudaDriver {
            reason: "the CUDA Exact kernel is not built into this version".into(),
        })
    }

    /// One-line description.
    pub fn describe(&self) -> String {
        "cuda".into()
    }

    pub(crate) fn run<T: Element>(
        &self,
        _p: &Problem,
        _path: Path,
        _q: &[T],
        _k: &[T],
        _v: &[T],
        _mask: Option<&[bool]>,
        _out: &mut [T],
    ) -> Result<()> {
        Err(Error::NoCudaDriver {
            reason: "not built".into(),
        })
    }
}
