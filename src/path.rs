//! The two arithmetic paths. A path is a contract on the output bits; where it runs (CPU, which
//! GPU) is the backend's business ([`crate::Backend`]).

use std::fmt;

/// The arithmetic path: which contract the output bits follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    /// f32 arithmetic in the fixed order of docs/numerics.md. Bit-identical on the CPU and on
    /// every supported GPU; defines the golden digests.
    Exact,
    /// f16/bf16 tensor-core arithmetic (`mma.sync`) with f32 accumulators, CUDA only
    /// (docs/tensorcore.md). Takes f16/bf16 inputs with head_dim 64, 128 or 256, causal (either
    /// alignment), kv_lens, GQA/MQA, a boolean mask, any layout whose offsets and strides are
    /// multiples of 8 elements, and either `NonFinitePolicy`; anything else is a typed error
    /// ([`crate::Error::DTypeUnsupported`], [`crate::Error::HeadDimUnsupported`],
    /// [`crate::Error::Misaligned`]), never a fallback. Promised: on one GPU architecture the bits are the same run to run,
    /// whatever the batch around a problem, decode or prefill, the subset of query rows, the
    /// layout or the stream; relative L2 error against `Exact` ≤ 1e-2 (bf16) / 2e-3 (f16) on the
    /// tested problems; no NaN or ±inf from finite input (any magnitude); under `Propagate` the
    /// canonical NaN on exactly the rows the `Exact` contract poisons. Not promised: the CPU's or
    /// `Exact`'s bits, the same bits on another architecture (golden digests are recorded per
    /// architecture). On the CPU backend: [`crate::Error::PathUnavailable`].
    TensorCore,
}

impl Path {
    /// Every path, in the order of their digest codes.
    pub const ALL: [Path; 2] = [Path::Exact, Path::TensorCore];

    /// Lower-case name (`exact`, `tensorcore`).
    pub fn name(self) -> &'static str {
        match self {
            Path::Exact => "exact",
            Path::TensorCore => "tensorcore",
        }
    }
    /// The code of this path in the digest encoding.
    pub fn code(self) -> u8 {
        match self {
            Path::Exact => 0,
            Path::TensorCore => 1,
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Path {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "exact" => Ok(Path::Exact),
            "tensorcore" => Ok(Path::TensorCore),
            _ => Err(format!("unknown path {s:?}: expected exact or tensorcore")),
        }
    }
}
