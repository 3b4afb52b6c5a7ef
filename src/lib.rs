//! # detattn — attention you can audit
//!
//! Scaled dot-product attention (forward) whose outputs are **bitwise reproducible**, whose
//! running time does **not depend on the values** it computes on, and which **never produces NaN
//! or ±inf from finite input**.
//!
//! ## What is promised
//!
//! On the [`Path::Exact`] path:
//!
//! - **The bits are defined by a document.** `docs/numerics.md` (contract version
//!   [`CONTRACT_VERSION`]) fixes every operation and its order; the CPU backend implements it and
//!   the CUDA backend mirrors it. Same inputs, same options: same output bits on every run (D1),
//!   whatever the batch around a problem (D2), decode or prefill (D3), whichever subset of query
//!   rows is computed (D4), whatever the thread count, stream or memory [`Layout`] (D5), CPU or
//!   GPU (D6). The contracts in full: `docs/design.md`.
//! - **No NaN, no ±inf from finite input**, including values at the dtype's largest magnitude. A
//!   row with no valid key (fully masked, or a key length of 0) is exactly 0.
//! - **Non-finite input** follows the [`NonFinitePolicy`] you choose: rejected with an error that
//!   names the tensor (the default), or propagated as the canonical NaN to exactly the affected
//!   rows.
//! - **Typed errors, before any work.** Every invalid shape, length, option or buffer is an
//!   [`Error`] naming the argument; the library does not panic on user input and leaves the
//!   output untouched when it returns an error.
//! - **No branch, loop bound or address depends on the values** of Q, K, V or the mask on either
//!   backend: masked keys contribute zero by selection; only public data (shapes, layouts, key
//!   lengths, the causal flag) decide what is skipped.
//! - **KV-cache interfaces** ([`Engine::run_cache`]): a paged cache ([`KvCache`], [`PagedKv`]:
//!   block table of `i32` pages) gives the bits of contiguous K and V; in a variable-length batch
//!   ([`ProblemBuilder::varlen`]) each sequence gets the bits of that sequence computed alone;
//!   both on either backend and path (on the GPU also through the device entry points). The
//!   optional log-sum-exp per query row (host entry points and, on the GPU, the device ones:
//!   `cuda::DeviceTensorMut::with_lse`) has the bits of `docs/numerics.md` §10 on the `Exact`
//!   path (CPU = GPU) and of `docs/tensorcore-numerics.md` §10 on the `TensorCore` path (D1–D5
//!   like its output).
//! - **What runs is what was audited**: the GPU kernels are embedded cubins checked against their
//!   recorded SHA-256 before loading; no environment variable, file or argument of a default build
//!   changes which machine code runs (the test-only override needs the `test-override` feature).
//!
//! On the [`Path::TensorCore`] path (CUDA only; f16/bf16, head_dim 64/128/256, both
//! [`NonFinitePolicy`]s; `docs/tensorcore.md`):
//!
//! - **Bitwise reproducible on one GPU architecture**: same bits run to run (D1), whatever the
//!   batch around a problem (D2), decode or prefill (D3), the subset of query rows (D4), the
//!   stream or the layout (D5). Golden digests are recorded per architecture (`golden/`).
//! - **Bounded error, not the CPU's bits**: relative L2 error against `Exact` ≤ 1e-2 (bf16) and
//!   ≤ 2e-3 (f16), measured on 300 random problems with values in [−2, 2).
//! - **No NaN, no ±inf from finite input**, as on `Exact`: any finite values (up to ±65504 in f16,
//!   ±3.39e38 in bf16, subnormals, zeros) and any finite scale > 0; rows with no valid key are
//!   exactly +0.
//! - **Non-finite input**: `Reject` as on `Exact` (the scan reads everything, then decides once);
//!   `Propagate` writes the canonical NaN to exactly the rows the `Exact` contract names
//!   (`docs/numerics.md` §7), and every other row gets the bits of the same call with the
//!   non-finite values replaced by +0.
//! - f32 inputs, other head dims and layouts whose offsets or strides are not multiples of 8
//!   elements are typed errors ([`Error::DTypeUnsupported`], [`Error::HeadDimUnsupported`],
//!   [`Error::Misaligned`]), never a fallback.
//!
//! ## What is not promised
//!
//! - Equality with PyTorch or any other library: the results agree to rounding
//!   (`docs/numerics.md` §9 gives the bound against an f64 reference), not bit for bit.
//! - Constant time against power, frequency or co-tenant cache contention (see
//!   `docs/threat-model.md`). On the CPU, constant time rests on the compiler and the processor:
//!   the masks are hidden from the optimiser and every multiply or fma that can meet a subnormal
//!   runs in binary64 with the binary32 bits (x86 cores take far longer on subnormals), and the
//!   dudect timing test is the check, run per machine (`docs/audit.md`); the SASS audit checks the
//!   GPU machine code.
//! - On the GPU, the same time for entirely zero data as for other data: the GPU's memory system
//!   takes a few tens of nanoseconds more or less for all-zero lines written and read back (its
//!   own copies show it too; `docs/threat-model.md`).
//! - On the `TensorCore` path: the CPU's or `Exact`'s bits, the same bits on another GPU
//!   architecture, or `Exact`'s accuracy for inputs of extreme magnitude (finite, but the
//!   tensor cores' f16/bf16 operands and `ex2.approx` bound the accuracy; an absurd scale or a
//!   bf16 row of magnitude beyond about 2^120 saturates the row's exponent factor).
//!
//! ## Example
//!
//! ```
//! use detattn::{Engine, Problem, Shape};
//!
//! // B=1, Hq=4, Hkv=2 (GQA), Sq=3, Skv=5, D=8, causal (bottom-right aligned).
//! let problem = Problem::builder(Shape::new(1, 4, 2, 3, 5, 8)).causal(true).build()?;
//! let q = vec![0.5f32; 4 * 3 * 8];
//! let k: Vec<f32> = (0..2 * 5 * 8).map(|i| (i % 7) as f32 - 3.0).collect();
//! let v: Vec<f32> = (0..2 * 5 * 8).map(|i| (i % 5) as f32).collect();
//!
//! let engine = Engine::cpu();
//! let out = engine.run(&problem, &q, &k, &v, None)?;
//! assert_eq!(out.len(), 4 * 3 * 8);
//! assert!(out.iter().all(|x| x.is_finite()));
//!
//! // The same call gives the same bits, and the digest pins them.
//! let again = engine.run(&problem, &q, &k, &v, None)?;
//! let d = detattn::digest(detattn::Path::Exact, [1, 4, 3, 8], &out);
//! assert_eq!(d, detattn::digest(detattn::Path::Exact, [1, 4, 3, 8], &again));
//! # Ok::<(), detattn::Error>(())
//! ```
//!
//! ## Where to read next
//!
//! [`problem`] and [`tensor`] (what is valid) → [`numerics`] (the contract) → `cpu` (the
//! reference) → `cuda` and `kernels/` (the paths and the launch edge) → `audit/` (the evidence).

#![deny(missing_docs)]
#![deny(unsafe_code)]

// In reading order, each module importing only modules above it (a test holds this:
// tests/architecture.rs).
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
mod digest;
mod dtype;
mod engine;
mod error;
pub mod golden;
pub mod inputs;
pub mod numerics;
mod path;
pub mod problem;
pub mod tensor;

pub use digest::{DIGEST_VERSION, Digest, digest, digest_of, lse_digest};
pub use dtype::{DType, Element};
pub use engine::{Backend, Engine};
pub use error::{Error, Result, TensorName};
pub use half::{bf16, f16};
pub use numerics::CONTRACT_VERSION;
pub use path::Path;
pub use problem::{
    CausalAlign, MaskLayout, NonFinitePolicy, Problem, ProblemBuilder, Sequence, Shape, Varlen,
};
pub use tensor::{KvCache, Layout, Order, PagedCache, PagedKv, Qkv, QkvCache, Tensor, TensorMut};

// The README's Rust example, compiled and run by `cargo test --doc` (doctests only; no item in the
// built library).
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
