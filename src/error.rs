//! The one error type. Every invalid input is reported here, before any work is done and before
//! any output is written; the library does not panic on user input.

use std::fmt;

/// Which tensor an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorName {
    /// The queries, `[B, Hq, Sq, D]`.
    Q,
    /// The keys, `[B, Hkv, Skv, D]`.
    K,
    /// The values, `[B, Hkv, Skv, D]`.
    V,
    /// The boolean mask, `[B or 1, Hq or 1, Sq, Skv]`.
    Mask,
    /// The output, `[B, Hq, Sq, D]`.
    Out,
    /// The block table of a paged KV cache, `[sequences, max_pages]`.
    BlockTable,
    /// The log-sum-exp output, one f32 per query row (`[B, Hq, Sq]`).
    Lse,
}

impl fmt::Display for TensorName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TensorName::Q => "q",
            TensorName::K => "k",
            TensorName::V => "v",
            TensorName::Mask => "mask",
            TensorName::Out => "out",
            TensorName::BlockTable => "block_table",
            TensorName::Lse => "lse",
        })
    }
}

/// Everything that can go wrong. Messages name the argument, what was expected and what was given.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// A shape dimension is outside its accepted range.
    #[error("{name} must be in {min}..={max}, got {value}")]
    DimensionOutOfRange {
        /// The dimension (`batch`, `q_heads`, `kv_heads`, `q_len`, `kv_len`, `head_dim`).
        name: &'static str,
        /// What was given.
        value: usize,
        /// Smallest accepted value.
        min: usize,
        /// Largest accepted value.
        max: usize,
    },
    /// `q_heads` is not a multiple of `kv_heads` (GQA/MQA need whole groups).
    #[error("q_heads ({q_heads}) must be a multiple of kv_heads ({kv_heads})")]
    HeadsNotDivisible {
        /// Query heads given.
        q_heads: usize,
        /// KV heads given.
        kv_heads: usize,
    },
    /// The scale is not a finite positive number.
    #[error("scale must be finite and > 0, got {value}")]
    InvalidScale {
        /// What was given.
        value: f32,
    },
    /// The per-batch key lengths do not have one entry per batch element.
    #[error("kv_lens must have one entry per batch element: expected {expected}, got {got}")]
    KvLensCount {
        /// The batch size.
        expected: usize,
        /// Entries given.
        got: usize,
    },
    /// A per-batch key length exceeds the KV tensors' length.
    #[error("kv_lens[{batch}] must be in 0..={max} (the kv_len of the K/V tensors), got {value}")]
    KvLenOutOfRange {
        /// Which batch element.
        batch: usize,
        /// What was given.
        value: usize,
        /// The KV tensors' length.
        max: usize,
    },
    /// A paged KV cache's page size is not a power of two in 16..=256.
    #[error("page_size must be a power of two in 16..=256, got {value}")]
    PageSize {
        /// What was given.
        value: usize,
    },
    /// A block-table entry that a sequence's keys use does not name a page of the cache.
    #[error(
        "block_table[{seq}][{index}] is {value}, not a page of the cache (0..{num_pages}); \
         sequence {seq} uses its first {used} entries"
    )]
    BlockTableEntry {
        /// The sequence (row of the table).
        seq: usize,
        /// The entry (column of the table).
        index: usize,
        /// What the entry holds.
        value: i32,
        /// Pages in the cache.
        num_pages: usize,
        /// Entries the sequence uses, `ceil(L / page_size)`.
        used: usize,
    },
    /// A sequence has more keys than its row of the block table can hold.
    #[error(
        "sequence {seq} has {len} keys, more than its block-table row holds \
         ({max_pages} pages of {page_size} = {capacity})"
    )]
    CacheCapacity {
        /// The sequence.
        seq: usize,
        /// Its key length.
        len: usize,
        /// Columns of the block table.
        max_pages: usize,
        /// Keys per page.
        page_size: usize,
        /// `max_pages · page_size`.
        capacity: usize,
    },
    /// A cumulative sequence-length array of a variable-length batch is malformed.
    #[error("{name} {reason}")]
    CuSeqlens {
        /// `cu_seqlens_q` or `cu_seqlens_k`.
        name: &'static str,
        /// What is wrong, as text.
        reason: String,
    },
    /// Two options of a problem or call that do not combine.
    #[error("{first} cannot be combined with {second}")]
    IncompatibleOptions {
        /// One option, as text.
        first: &'static str,
        /// The other, as text.
        second: &'static str,
    },
    /// A tensor's size in elements overflows the address space.
    #[error("{tensor} has too many elements for this platform ({what})")]
    SizeOverflow {
        /// Which tensor.
        tensor: TensorName,
        /// The product that overflowed.
        what: String,
    },
    /// A tensor slice has the wrong number of elements for the problem's shape.
    #[error("{tensor} must have {expected} elements ({shape}), got {got}")]
    TensorLength {
        /// Which tensor.
        tensor: TensorName,
        /// Elements the shape needs.
        expected: usize,
        /// Elements given.
        got: usize,
        /// The expected shape, as text.
        shape: String,
    },
    /// A tensor's layout reaches past the end of its buffer.
    #[error(
        "{tensor} {shape} with {layout} needs a buffer of at least {needed} elements, got {got}"
    )]
    TensorExtent {
        /// Which tensor.
        tensor: TensorName,
        /// One past the largest element index the layout reaches.
        needed: usize,
        /// Elements in the buffer.
        got: usize,
        /// The logical shape, as text.
        shape: String,
        /// The layout, as text.
        layout: String,
    },
    /// The output's layout makes two output rows share elements: the result would depend on
    /// which row is written last.
    #[error("out's rows overlap ({layout}): every output row must have its own head_dim elements")]
    OutputOverlap {
        /// The layout, as text.
        layout: String,
    },
    /// A tensor's address, offset or stride is not aligned as the path needs (the `TensorCore`
    /// kernels copy 16-byte chunks).
    #[error("the {path} path needs {tensor} aligned to {need}: {what}")]
    Misaligned {
        /// The path.
        path: crate::Path,
        /// Which tensor.
        tensor: TensorName,
        /// What alignment is needed, as text.
        need: &'static str,
        /// What was found, as text.
        what: String,
    },
    /// The problem needs more GPU memory than the device has free. Nothing was written; the
    /// engine stays usable.
    #[error(
        "not enough GPU memory on cuda:{ordinal}: this call needs {needed} bytes, {free} are free"
    )]
    DeviceMemory {
        /// Device ordinal.
        ordinal: usize,
        /// Bytes the call would allocate.
        needed: u64,
        /// Bytes the driver reported free.
        free: u64,
    },
    /// The problem declares a mask but none was given, or the other way round.
    #[error("mask presence mismatch: the problem {declared} a mask, the inputs {given} one")]
    MaskPresence {
        /// "declares" / "does not declare".
        declared: &'static str,
        /// "give" / "do not give".
        given: &'static str,
    },
    /// A NaN or infinity was found under [`NonFinitePolicy::Reject`](crate::NonFinitePolicy).
    #[error("{tensor} holds a NaN or infinity (policy: reject; nothing was computed or written)")]
    NonFinite {
        /// The first tensor, in the order q, k, v, that holds one.
        tensor: TensorName,
    },
    /// The chosen path does not take this head dimension.
    #[error("the {path} path takes head_dim in {supported}, got {head_dim}")]
    HeadDimUnsupported {
        /// The path.
        path: crate::Path,
        /// What was given.
        head_dim: usize,
        /// The accepted values, as text.
        supported: &'static str,
    },
    /// The chosen path does not take this element type (the `TensorCore` path takes f16 and
    /// bf16; f32 runs on the `Exact` path).
    #[error("the {path} path takes {supported} inputs, got {dtype}")]
    DTypeUnsupported {
        /// The path.
        path: crate::Path,
        /// What was given.
        dtype: crate::DType,
        /// The accepted element types, as text.
        supported: &'static str,
    },
    /// The chosen path is not available on the chosen backend.
    #[error("the {path} path is not available on the {backend} backend: {reason}")]
    PathUnavailable {
        /// The path asked for.
        path: crate::Path,
        /// The backend it was asked on.
        backend: String,
        /// Why.
        reason: &'static str,
    },
    /// A thread pool of the requested size could not be built.
    #[error("cannot build a CPU thread pool of {threads} threads: {reason}")]
    ThreadPool {
        /// Threads asked for.
        threads: usize,
        /// What rayon said.
        reason: String,
    },
    /// No CUDA driver library could be loaded on this machine.
    #[error("no CUDA driver: {reason}")]
    NoCudaDriver {
        /// What was looked for.
        reason: String,
    },
    /// The GPU's architecture has no embedded kernel.
    #[error("GPU {ordinal} ({name}) is sm_{major}{minor}; detattn ships kernels for {supported}")]
    UnsupportedGpu {
        /// Device ordinal.
        ordinal: usize,
        /// Device name.
        name: String,
        /// Compute capability major.
        major: i32,
        /// Compute capability minor.
        minor: i32,
        /// The supported architectures, as text.
        supported: String,
    },
    /// An embedded kernel binary does not match the SHA-256 in its manifest.
    #[error(
        "embedded cubin {file} fails its integrity check: manifest sha256 {expected}, actual {actual}"
    )]
    CubinIntegrity {
        /// The cubin's file name.
        file: String,
        /// Hash in the manifest.
        expected: String,
        /// Hash of the embedded bytes.
        actual: String,
    },
    /// A device buffer is on another GPU than the engine's.
    #[error("{tensor} lives on another device than this engine's (GPU {ordinal})")]
    WrongDevice {
        /// Which tensor.
        tensor: TensorName,
        /// The engine's ordinal.
        ordinal: usize,
    },
    /// A CUDA driver call failed (including kernel faults reported at synchronisation).
    #[error("CUDA error in {op}: {message}")]
    Cuda {
        /// What was being done.
        op: &'static str,
        /// The driver's message.
        message: String,
    },
}

impl Error {
    /// Whether the caller can fix this by asking differently: a shape, option, layout, dtype,
    /// path, device or input value the call does not accept (`false`: the machine — driver, GPU,
    /// memory, kernel binaries, threads). Front ends (the CLI, the Python package) sort errors
    /// by it; every variant is named here, so a new one must be sorted too.
    pub fn is_caller_error(&self) -> bool {
        match self {
            Error::DimensionOutOfRange { .. }
            | Error::HeadsNotDivisible { .. }
            | Error::InvalidScale { .. }
            | Error::KvLensCount { .. }
            | Error::KvLenOutOfRange { .. }
            | Error::SizeOverflow { .. }
            | Error::TensorLength { .. }
            | Error::TensorExtent { .. }
            | Error::OutputOverlap { .. }
            | Error::Misaligned { .. }
            | Error::MaskPresence { .. }
            | Error::NonFinite { .. }
            | Error::HeadDimUnsupported { .. }
            | Error::DTypeUnsupported { .. }
            | Error::PathUnavailable { .. }
            | Error::WrongDevice { .. }
            | Error::PageSize { .. }
            | Error::BlockTableEntry { .. }
            | Error::CacheCapacity { .. }
            | Error::CuSeqlens { .. }
            | Error::IncompatibleOptions { .. } => true,
            Error::DeviceMemory { .. }
            | Error::ThreadPool { .. }
            | Error::NoCudaDriver { .. }
            | Error::UnsupportedGpu { .. }
            | Error::CubinIntegrity { .. }
            | Error::Cuda { .. } => false,
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
