//! tcmodel: the research "toward TensorCore bits that a CPU can reproduce" (docs/tensorcore-cpu-model.md).
//! Never shipped; nothing in the `detattn` crate depends on it.
//!
//! - [`mma`]: a bit-exact CPU model of the H100 tensor-core MMA, f16/bf16 inputs, f32 accumulator.
//! - [`exp2`]: a software exp2 (and reciprocal) that gives the same bits on CPU and GPU.
//! - [`cases`]: the seeded case generators of the GPU harness (random and adversarial classes).
//! - [`reference`]: an independent implementation of the MMA model in exact rational arithmetic
//!   (`f64` sums of dyadic values that are exact by construction), used by the tests.
//!
//! The GPU harness is `src/bin/tcharness.rs`; the kernels it runs are in `kernels/`.
//! docs/tensorcore-cpu-model.md is the written model, its evidence and the proposal.

pub mod cases;
pub mod exp2;
pub mod mma;
pub mod reference;
