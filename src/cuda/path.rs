//! What a GPU path is: one small interface the entry points (`entry.rs`) drive, written once for
//! every path. A path *plans* a call (checks what it takes — element type, head dim, alignment,
//! launch limits — and fixes the kernel choice and grid from the shape alone), says which
//! *scratch* buffers the plan needs, and turns one *step* of the call into a list of [`Launch`]es:
//! plain data, which only `launch::submit` runs. A third path (the Hopper kernels) is one more
//! module implementing [`GpuPath`] and one more arm where `CudaBackend` picks the path.

use super::launch::Launch;
use crate::dtype::DType;
use crate::error::Result;
use crate::problem::Problem;
use crate::tensor::{Layout, Operands};
use cudarc::driver::CudaSlice;

/// A device tensor as the kernels take it: the address of element `(0, 0, 0, 0)` (the layout's
/// offset folded in) and the element strides of batch, head and row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DevTensor {
    pub addr: u64,
    pub bs: i64,
    pub hs: i64,
    pub ss: i64,
}

impl DevTensor {
    /// The tensor at `layout` in the buffer at `base`, of `elem` bytes per element. The layout was
    /// checked against the buffer (`tensor::check_call`), so the offset fits.
    pub(crate) fn new(base: u64, layout: Layout, elem: usize) -> DevTensor {
        DevTensor {
            addr: base + (layout.offset * elem) as u64,
            bs: layout.batch_stride as i64,
            hs: layout.head_stride as i64,
            ss: layout.seq_stride as i64,
        }
    }

    /// A contiguous `[B, heads, seq, d]` tensor at `addr`.
    pub(crate) fn bhsd(addr: u64, heads: usize, seq: usize, d: usize) -> DevTensor {
        DevTensor::new(addr, Layout::bhsd(heads, seq, d), 0)
    }
}

/// The device addresses of one call: the caller's tensors and the key lengths (`B` ints, always
/// present: the entry points upload them, `kv_len` where the problem gives none). `mask` is 0
/// without a mask. `lse`: where each query row's log-sum-exp goes (f32, row `(b, h, i)` at
/// element `b·bs + h·hs + i·ss`), address 0 when the call does not ask for it. `pages`: K and V
/// are a paged cache read through its block table (only for a plan the path said it reads pages
/// for, [`GpuPath::reads_pages`]); `k` and `v` then describe the pages, the page being the batch
/// index.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Io {
    pub q: DevTensor,
    pub k: DevTensor,
    pub v: DevTensor,
    pub out: DevTensor,
    pub mask: u64,
    pub kv_lens: u64,
    pub lse: DevTensor,
    pub pages: Option<PagedIo>,
}

/// A paged cache's block table on the device: `[B, max_pages]` i32 page numbers (public, checked
/// by the host: every entry a sequence uses is a page of the cache), pages of `2^page_shift` rows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PagedIo {
    pub table: u64,
    pub page_shift: i32,
    pub max_pages: i32,
}

impl PagedIo {
    /// `(table, page_shift, max_pages)` as the kernels take them: zeros without a paged cache.
    pub(crate) fn args(pages: Option<PagedIo>) -> (u64, i32, i32) {
        pages.map_or((0, 0, 0), |p| (p.table, p.page_shift, p.max_pages))
    }
}

/// One step of a call. Every path runs the same steps, so the entry points are written once:
/// - `Check`: the device non-finite scan of q, k and v (`Reject` on device-resident inputs): it
///   reads every element and leaves three words (q, k, v: nonzero if that tensor holds a NaN or
///   ±inf) at the start of scratch buffer 0, for the host to decide once;
/// - `Compute`: everything else of the call (the policy's own work under `Propagate` included).
///   `checked`: a `Check` of this call ran before on the same scratch (its preparation may be
///   reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Check,
    Compute { checked: bool },
}

/// A GPU path (module docs).
pub(crate) trait GpuPath {
    /// The launch plan of one problem (shape-derived, public data only).
    type Plan;

    /// Which path this is (for its typed errors).
    const PATH: crate::Path;

    /// Check what this path takes beyond the problem's and the tensors' own validation (in that
    /// order the entry points call them), and plan the call.
    fn plan(&self, p: &Problem, dtype: DType, ops: &Operands) -> Result<Self::Plan>;

    /// Bytes of each scratch buffer a call of `plan` needs (zeroed before use, but for those of
    /// [`GpuPath::written_first`]); `check`: the call runs [`Step::Check`] too, whose three words
    /// go to the start of buffer 0.
    fn scratch(&self, p: &Problem, plan: &Self::Plan, check: bool) -> Vec<usize>;

    /// Which scratch buffers (by [`GpuPath::scratch`]'s index; missing entries are `false`) need
    /// no zeroing because every byte a launch of the call reads from them was written by an
    /// earlier launch of the same call. Zeroing a buffer of a few GB costs as much GPU time as
    /// the attention itself (docs/perf.md, "A whole call from Python"); a wrong `true` would let a
    /// kernel read what an earlier call left, so each is argued where it is declared. By default
    /// none.
    fn written_first(&self, _p: &Problem, _plan: &Self::Plan, _check: bool) -> Vec<bool> {
        Vec::new()
    }

    /// Whether the kernels of `plan` read a paged K/V cache through its block table (`Io::pages`);
    /// otherwise a paged call gathers the rows it uses into contiguous tensors first
    /// (`entry::run_device_paged`). `plan` was made for the pages' own layout.
    fn reads_pages(&self, p: &Problem, plan: &Self::Plan) -> bool;

    /// The launches of `step`, in order. Addresses: `io` (the tensors), `scratch` (the buffers of
    /// [`GpuPath::scratch`], in order).
    fn launches(
        &self,
        p: &Problem,
        plan: &Self::Plan,
        io: &Io,
        scratch: &[u64],
        step: Step,
    ) -> Result<Vec<Launch>>;
}

/// A tensor in device memory: a cudarc allocation and where the tensor's elements lie in it.
#[derive(Clone, Copy, Debug)]
pub struct DeviceTensor<'a, T> {
    /// The buffer (it may hold more than this tensor, e.g. a fused QKV buffer).
    pub data: &'a CudaSlice<T>,
    /// Where the elements are.
    pub layout: Layout,
}

/// The output in device memory, and where each query row's log-sum-exp goes when the caller asks
/// for it ([`with_lse`](DeviceTensorMut::with_lse)). Only the output's rows are written.
#[derive(Debug)]
pub struct DeviceTensorMut<'a, T> {
    /// The buffer.
    pub data: &'a mut CudaSlice<T>,
    /// Where the rows go.
    pub layout: Layout,
    /// The log-sum-exp of each query row's scaled scores (docs/numerics.md §10), if asked: one
    /// f32 a row, `[B, Hq, Sq]` row-major (for a variable-length problem `[Hq, total_q]`, as
    /// FlashAttention's `softmax_lse`), exactly that many elements ([`Error::TensorLength`] for
    /// [`TensorName::Lse`](crate::TensorName::Lse)). The bits of the host entry points' `lse`.
    ///
    /// [`Error::TensorLength`]: crate::Error::TensorLength
    pub lse: Option<&'a mut CudaSlice<f32>>,
}

/// The inputs of one call in device memory: Q, K, V (any layouts) and the optional mask, one
/// byte per entry (nonzero = attend), dense `[B or 1, Hq or 1, Sq, Skv]`.
#[derive(Clone, Copy, Debug)]
pub struct DeviceQkv<'a, T> {
    /// Queries, logically `[B, Hq, Sq, D]`.
    pub q: DeviceTensor<'a, T>,
    /// Keys, logically `[B, Hkv, Skv, D]`.
    pub k: DeviceTensor<'a, T>,
    /// Values, logically `[B, Hkv, Skv, D]`.
    pub v: DeviceTensor<'a, T>,
    /// The mask, if the problem declares one.
    pub mask: Option<&'a CudaSlice<u8>>,
}

/// A paged KV cache in device memory ([`crate::PagedCache`]): the pages in device memory, the
/// block table on the host (checked, then uploaded per call).
pub type DevicePagedKv<'a, T> = crate::tensor::PagedCache<'a, DeviceTensor<'a, T>>;

impl<'a, T> DeviceTensor<'a, T> {
    /// A device tensor with this layout.
    pub fn new(data: &'a CudaSlice<T>, layout: Layout) -> Self {
        DeviceTensor { data, layout }
    }
}

impl<'a, T> DeviceTensorMut<'a, T> {
    /// A device output with this layout, without the log-sum-exp.
    pub fn new(data: &'a mut CudaSlice<T>, layout: Layout) -> Self {
        DeviceTensorMut {
            data,
            layout,
            lse: None,
        }
    }

    /// The same output, and each query row's log-sum-exp into `lse` ([`DeviceTensorMut::lse`]).
    pub fn with_lse(self, lse: &'a mut CudaSlice<f32>) -> Self {
        DeviceTensorMut {
            lse: Some(lse),
            ..self
        }
    }
}

impl<'a, T> DeviceQkv<'a, T> {
    /// Contiguous `[B, H, S, D]` buffers of `p`'s shape.
    pub fn bhsd(
        p: &Problem,
        q: &'a CudaSlice<T>,
        k: &'a CudaSlice<T>,
        v: &'a CudaSlice<T>,
        mask: Option<&'a CudaSlice<u8>>,
    ) -> Self {
        let s = p.shape();
        DeviceQkv {
            q: DeviceTensor::new(q, Layout::bhsd(s.q_heads, s.q_len, s.head_dim)),
            k: DeviceTensor::new(k, Layout::bhsd(s.kv_heads, s.kv_len, s.head_dim)),
            v: DeviceTensor::new(v, Layout::bhsd(s.kv_heads, s.kv_len, s.head_dim)),
            mask,
        }
    }
}

/// A tensor in device memory given by its address, for bindings that hold memory cudarc does not
/// own (a PyTorch tensor, a DLPack capsule): the address of the buffer's first element, the
/// buffer's length in elements, and where the tensor's elements lie in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawDeviceTensor {
    /// Device address of the buffer's element 0.
    pub ptr: u64,
    /// Elements in the buffer from `ptr`.
    pub len: usize,
    /// Where the tensor's elements are, from `ptr`.
    pub layout: Layout,
}

/// The inputs of one call as raw device tensors; the mask as (address, entries), one byte each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawDeviceQkv {
    /// Queries.
    pub q: RawDeviceTensor,
    /// Keys.
    pub k: RawDeviceTensor,
    /// Values.
    pub v: RawDeviceTensor,
    /// The mask's address and length in bytes, if the problem declares one.
    pub mask: Option<(u64, usize)>,
}

/// The outputs of one call as raw device tensors: the output, and where each query row's
/// log-sum-exp goes if asked, as (address, entries), one f32 each, in the shape and order of
/// [`DeviceTensorMut::lse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawDeviceOut {
    /// The output.
    pub out: RawDeviceTensor,
    /// The log-sum-exp's address and length in f32 entries, if asked.
    pub lse: Option<(u64, usize)>,
}

/// A paged KV cache given by raw device addresses ([`crate::PagedCache`]): the key and value pages
/// as raw device tensors (logically `[num_pages, Hkv, page_size, D]`, the page being the batch
/// index), the block table on the host (public: checked, then uploaded per call), for
/// [`run_device_raw_paged`](super::CudaBackend::run_device_raw_paged).
pub type RawDevicePagedKv<'a> = crate::tensor::PagedCache<'a, RawDeviceTensor>;

impl From<RawDeviceTensor> for RawDeviceOut {
    /// The output alone, without the log-sum-exp.
    fn from(out: RawDeviceTensor) -> Self {
        RawDeviceOut { out, lse: None }
    }
}
