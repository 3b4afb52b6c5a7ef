//! Every `detattn::Error` variant that can be reached without a GPU is reached here, through the
//! public API, by a test that asserts the variant (with its fields) and its exact message. The
//! expected values come from the documented limits (docs/numerics.md §1, §4, the crate docs),
//! not from the crate's constants. "No partial output": every error of `run_into` leaves `out` untouched.
//!
//! Variants that need a GPU (`UnsupportedGpu`, `CubinIntegrity`, `WrongDevice`, `Cuda`,
//! `Misaligned`, `DeviceMemory`, and the tensor-core path's `HeadDimUnsupported`,
//! `DTypeUnsupported`) only have their message format checked here on a hand-built value (the GPU
//! tests reach them: tests/cuda_*.rs); `every_variant_is_accounted_for` keeps the list
//! of variants here in step with src/error.rs (it reads the source: `Error` is `#[non_exhaustive]`,
//! so an exhaustive `match` outside the crate cannot be written, and a wildcard arm would make
//! such a test pass whatever was added).

use detattn::{
    Backend, DType, Engine, Error, Layout, MaskLayout, NonFinitePolicy, Path, Problem, Qkv, Shape,
    Tensor, TensorMut, TensorName, bf16, f16,
};

const M24: usize = 1 << 24; // 16777216: the largest B, Hq, Hkv, Sq, Skv accepted

fn build_err(p: detattn::ProblemBuilder) -> Error {
    p.build().expect_err("this problem must be rejected")
}

fn assert_msg(e: &Error, want: &str) {
    assert_eq!(e.to_string(), want, "{e:?}");
}

// -- DimensionOutOfRange ----------------------------------------------------------------------

#[test]
fn dimension_out_of_range_every_dimension_both_ends() {
    // (name, max, a shape with that dimension set to `x`, others valid)
    type ShapeWith = fn(usize) -> Shape;
    let cases: [(&str, usize, ShapeWith); 6] = [
        ("batch", M24, |x| Shape::new(x, 1, 1, 1, 1, 1)),
        ("q_heads", M24, |x| Shape::new(1, x, 1, 1, 1, 1)),
        ("kv_heads", M24, |x| Shape::new(1, 1, x, 1, 1, 1)),
        ("q_len", M24, |x| Shape::new(1, 1, 1, x, 1, 1)),
        ("kv_len", M24, |x| Shape::new(1, 1, 1, 1, x, 1)),
        ("head_dim", 8192, |x| Shape::new(1, 1, 1, 1, 1, x)),
    ];
    for (name, max, shape) in cases {
        for bad in [0, max + 1, usize::MAX] {
            let e = build_err(Problem::builder(shape(bad)));
            assert!(
                matches!(e, Error::DimensionOutOfRange { name: n, value, min: 1, max: m }
                    if n == name && value == bad && m == max),
                "{e:?}"
            );
            assert_msg(&e, &format!("{name} must be in 1..={max}, got {bad}"));
        }
        // The ends themselves are accepted (only the builder: no tensors that large here).
        assert!(Problem::builder(shape(1)).build().is_ok());
    }
    assert!(
        Problem::builder(Shape::new(1, 1, 1, 1, 1, 8192))
            .build()
            .is_ok()
    );
    assert!(
        Problem::builder(Shape::new(1, 1, 1, 1, M24, 1))
            .build()
            .is_ok()
    );
    assert_msg(
        &build_err(Problem::builder(Shape::new(1, 1, 1, 1, 1, 8193))),
        "head_dim must be in 1..=8192, got 8193",
    );
}

#[test]
fn dimension_errors_report_the_first_bad_dimension_in_order() {
    let e = build_err(Problem::builder(Shape::new(1, 0, 1, 0, 1, 0)));
    assert_msg(&e, "q_heads must be in 1..=16777216, got 0");
}

// -- HeadsNotDivisible ------------------------------------------------------------------------

#[test]
fn heads_not_divisible() {
    for (hq, hkv) in [(6, 4), (1, 2), (7, 3)] {
        let e = build_err(Problem::builder(Shape::new(1, hq, hkv, 1, 1, 8)));
        assert_eq!(
            e,
            Error::HeadsNotDivisible {
                q_heads: hq,
                kv_heads: hkv
            }
        );
        assert_msg(
            &e,
            &format!("q_heads ({hq}) must be a multiple of kv_heads ({hkv})"),
        );
    }
    // MHA, GQA and MQA are accepted.
    for (hq, hkv) in [(4, 4), (8, 2), (8, 1)] {
        assert!(
            Problem::builder(Shape::new(1, hq, hkv, 1, 1, 8))
                .build()
                .is_ok()
        );
    }
}

// -- InvalidScale -----------------------------------------------------------------------------

#[test]
fn invalid_scale() {
    let s = Shape::new(1, 1, 1, 1, 1, 8);
    for (x, shown) in [
        (0.0f32, "0"),
        (-0.0, "-0"),
        (-1.5, "-1.5"),
        (f32::NAN, "NaN"),
        (f32::INFINITY, "inf"),
        (f32::NEG_INFINITY, "-inf"),
    ] {
        let e = build_err(Problem::builder(s).scale(x));
        assert!(
            matches!(e, Error::InvalidScale { value } if value.to_bits() == x.to_bits()),
            "{e:?}"
        );
        assert_msg(&e, &format!("scale must be finite and > 0, got {shown}"));
    }
    // Any finite positive scale is fine, the smallest subnormal and FLT_MAX included.
    for x in [f32::from_bits(1), f32::MAX, 0.125] {
        assert_eq!(
            Problem::builder(s)
                .scale(x)
                .build()
                .unwrap()
                .scale()
                .to_bits(),
            x.to_bits()
        );
    }
}

// -- KvLensCount, KvLenOutOfRange -------------------------------------------------------------

#[test]
fn kv_lens_count() {
    let s = Shape::new(2, 1, 1, 1, 5, 8);
    for lens in [vec![], vec![1], vec![1, 2, 3]] {
        let n = lens.len();
        let e = build_err(Problem::builder(s).kv_lens(lens));
        assert_eq!(
            e,
            Error::KvLensCount {
                expected: 2,
                got: n
            }
        );
        assert_msg(
            &e,
            &format!("kv_lens must have one entry per batch element: expected 2, got {n}"),
        );
    }
}

#[test]
fn kv_len_out_of_range() {
    let s = Shape::new(3, 1, 1, 1, 5, 8);
    let e = build_err(Problem::builder(s).kv_lens(vec![5, 6, 9]));
    assert_eq!(
        e,
        Error::KvLenOutOfRange {
            batch: 1,
            value: 6,
            max: 5
        }
    );
    assert_msg(
        &e,
        "kv_lens[1] must be in 0..=5 (the kv_len of the K/V tensors), got 6",
    );
    // 0 and Skv are both in range.
    assert!(Problem::builder(s).kv_lens(vec![0, 5, 3]).build().is_ok());
}

// -- SizeOverflow -----------------------------------------------------------------------------

#[test]
fn size_overflow_of_each_tensor() {
    // Every dimension in range, but the products exceed 2^64 (64-bit usize assumed).
    assert_eq!(
        usize::BITS,
        64,
        "the sizes below are chosen for 64-bit usize"
    );
    // Q: 2^24 · 2^24 · 2^24 · 2^13.
    let e = build_err(Problem::builder(Shape::new(M24, M24, 1, M24, 1, 8192)));
    assert!(
        matches!(
            &e,
            Error::SizeOverflow {
                tensor: TensorName::Q,
                ..
            }
        ),
        "{e:?}"
    );
    assert_msg(
        &e,
        "q has too many elements for this platform ([16777216, 16777216, 16777216, 8192])",
    );
    // K: Q is 2^48 elements, K 2^72.
    let e = build_err(Problem::builder(Shape::new(M24, M24, M24, 1, M24, 1)));
    assert!(
        matches!(
            &e,
            Error::SizeOverflow {
                tensor: TensorName::K,
                ..
            }
        ),
        "{e:?}"
    );
    assert_msg(
        &e,
        "k has too many elements for this platform ([16777216, 16777216, 16777216, 1])",
    );
    // Out: Q has 2^63 elements (fits), 2^65 bytes (does not).
    let e = build_err(Problem::builder(Shape::new(M24, M24, 1, 4, 1, 8192)));
    assert!(
        matches!(
            &e,
            Error::SizeOverflow {
                tensor: TensorName::Out,
                ..
            }
        ),
        "{e:?}"
    );
    assert_msg(
        &e,
        "out has too many elements for this platform (bytes of the output)",
    );
    // Mask: Q and K are 2^48 elements, a full mask 2^72; a shared one (2^24) is fine.
    let s = Shape::new(M24, M24, 1, 1, M24, 1);
    let e = build_err(Problem::builder(s).mask(MaskLayout::FULL));
    assert!(
        matches!(
            &e,
            Error::SizeOverflow {
                tensor: TensorName::Mask,
                ..
            }
        ),
        "{e:?}"
    );
    assert_msg(
        &e,
        "mask has too many elements for this platform ([16777216, 16777216, 1, 16777216])",
    );
    assert!(Problem::builder(s).mask(MaskLayout::SHARED).build().is_ok());
}

// -- TensorLength, MaskPresence, and no partial output ------------------------------------------

/// B=2, Hq=4, Hkv=2, Sq=3, Skv=5, D=8: Q and out 192 elements, K and V 160, a full mask 120.
fn small() -> Shape {
    Shape::new(2, 4, 2, 3, 5, 8)
}

const SENTINEL: u32 = 0x5EED_0001;

/// Run `run_into` on a sentinel-filled output of `out_len` elements; return the error and
/// assert the output was not touched.
fn run_into_err(
    p: &Problem,
    q: usize,
    k: usize,
    v: usize,
    mask: Option<usize>,
    out_len: usize,
) -> Error {
    let (qv, kv, vv) = (vec![0.25f32; q], vec![0.5f32; k], vec![1.0f32; v]);
    let m = mask.map(|n| vec![true; n]);
    let mut out = vec![f32::from_bits(SENTINEL); out_len];
    let e = Engine::cpu()
        .run_into(p, &qv, &kv, &vv, m.as_deref(), &mut out)
        .expect_err("must be rejected");
    assert!(
        out.iter().all(|x| x.to_bits() == SENTINEL),
        "out written on error {e:?}"
    );
    // `run` (which has no `out`) reports the same error for the inputs.
    if !matches!(
        e,
        Error::TensorLength {
            tensor: TensorName::Out,
            ..
        }
    ) {
        let e2 = Engine::cpu()
            .run(p, &qv, &kv, &vv, m.as_deref())
            .expect_err("must be rejected");
        assert_eq!(e, e2);
    }
    e
}

#[test]
fn tensor_length_of_each_tensor() {
    let p = Problem::builder(small()).build().unwrap();
    let pm = Problem::builder(small())
        .mask(MaskLayout::FULL)
        .build()
        .unwrap();
    // (problem, [q, k, v, out] lengths, mask length, the tensor named, the message)
    type Case<'a> = (&'a Problem, [usize; 4], Option<usize>, TensorName, &'a str);
    let cases: [Case; 6] = [
        (
            &p,
            [191, 160, 160, 192],
            None,
            TensorName::Q,
            "q must have 192 elements ([2, 4, 3, 8]), got 191",
        ),
        (
            &p,
            [0, 160, 160, 192],
            None,
            TensorName::Q,
            "q must have 192 elements ([2, 4, 3, 8]), got 0",
        ),
        (
            &p,
            [192, 161, 160, 192],
            None,
            TensorName::K,
            "k must have 160 elements ([2, 2, 5, 8]), got 161",
        ),
        (
            &p,
            [192, 160, 80, 192],
            None,
            TensorName::V,
            "v must have 160 elements ([2, 2, 5, 8]), got 80",
        ),
        (
            &pm,
            [192, 160, 160, 192],
            Some(119),
            TensorName::Mask,
            "mask must have 120 elements ([2, 4, 3, 5]), got 119",
        ),
        (
            &p,
            [192, 160, 160, 193],
            None,
            TensorName::Out,
            "out must have 192 elements ([2, 4, 3, 8]), got 193",
        ),
    ];
    for (prob, [q, k, v, o], mask, tensor, msg) in cases {
        let e = run_into_err(prob, q, k, v, mask, o);
        assert!(
            matches!(&e, Error::TensorLength { tensor: t, .. } if *t == tensor),
            "{e:?}"
        );
        assert_msg(&e, msg);
    }
    // Several wrong: the first in the order q, k, v, mask, out is named.
    let e = run_into_err(&pm, 192, 1, 2, Some(3), 4);
    assert_msg(&e, "k must have 160 elements ([2, 2, 5, 8]), got 1");
    // Mask layouts broadcast: [1, 4, 3, 5] and [2, 1, 3, 5] and [1, 1, 3, 5].
    for (layout, n, dims) in [
        (
            MaskLayout {
                per_batch: false,
                per_head: true,
            },
            60,
            "[1, 4, 3, 5]",
        ),
        (
            MaskLayout {
                per_batch: true,
                per_head: false,
            },
            30,
            "[2, 1, 3, 5]",
        ),
        (MaskLayout::SHARED, 15, "[1, 1, 3, 5]"),
    ] {
        let pl = Problem::builder(small()).mask(layout).build().unwrap();
        let e = run_into_err(&pl, 192, 160, 160, Some(n + 1), 192);
        assert_msg(
            &e,
            &format!("mask must have {n} elements ({dims}), got {}", n + 1),
        );
    }
}

#[test]
fn mask_presence_both_ways() {
    let declared = Problem::builder(small())
        .mask(MaskLayout::FULL)
        .build()
        .unwrap();
    let e = run_into_err(&declared, 192, 160, 160, None, 192);
    assert_eq!(
        e,
        Error::MaskPresence {
            declared: "declares",
            given: "do not give"
        }
    );
    assert_msg(
        &e,
        "mask presence mismatch: the problem declares a mask, the inputs do not give one",
    );
    let undeclared = Problem::builder(small()).build().unwrap();
    let e = run_into_err(&undeclared, 192, 160, 160, Some(120), 192);
    assert_eq!(
        e,
        Error::MaskPresence {
            declared: "does not declare",
            given: "give"
        }
    );
    assert_msg(
        &e,
        "mask presence mismatch: the problem does not declare a mask, the inputs give one",
    );
}

// -- NonFinite --------------------------------------------------------------------------------

fn nonfinite_case<T: detattn::Element>(bad: T, ok: T) {
    let p = Problem::builder(small()).build().unwrap();
    for (tensor, name) in [
        (TensorName::Q, "q"),
        (TensorName::K, "k"),
        (TensorName::V, "v"),
    ] {
        let (mut q, mut k, mut v) = (vec![ok; 192], vec![ok; 160], vec![ok; 160]);
        // The last element: the scan must read everything, not stop early.
        match tensor {
            TensorName::Q => q[191] = bad,
            TensorName::K => k[159] = bad,
            _ => v[159] = bad,
        }
        // Later tensors holding one too do not change which is named.
        if tensor == TensorName::Q {
            k[0] = bad;
        }
        v[0] = bad;
        let sentinel = T::from_bits_u32(0x1357);
        let mut out = vec![sentinel; 192];
        let e = Engine::cpu()
            .run_into(&p, &q, &k, &v, None, &mut out)
            .expect_err("non-finite input under Reject");
        assert_eq!(e, Error::NonFinite { tensor });
        assert_msg(
            &e,
            &format!(
                "{name} holds a NaN or infinity (policy: reject; nothing was computed or written)"
            ),
        );
        assert!(out.iter().all(|x| *x == sentinel), "out written");
        // Under Propagate the same inputs are not an error.
        let pp = Problem::builder(small())
            .nonfinite(NonFinitePolicy::Propagate)
            .build()
            .unwrap();
        assert!(Engine::cpu().run(&pp, &q, &k, &v, None).is_ok());
    }
}

#[test]
fn nonfinite_names_the_tensor_in_each_dtype() {
    nonfinite_case(f32::NAN, 1.0f32);
    nonfinite_case(f32::NEG_INFINITY, 1.0f32);
    nonfinite_case(f16::INFINITY, f16::ONE);
    nonfinite_case(f16::NAN, f16::ONE);
    nonfinite_case(bf16::NAN, bf16::ONE);
    nonfinite_case(bf16::NEG_INFINITY, bf16::ONE);
}

// -- PathUnavailable, NoCudaDriver ------------------------------------------------------------

fn cuda_usable() -> bool {
    Engine::new(Backend::Cuda(0), Path::Exact).is_ok()
}

#[test]
fn path_unavailable_tensorcore_on_cpu() {
    let e = Engine::new(Backend::Cpu, Path::TensorCore).unwrap_err();
    assert!(
        matches!(&e, Error::PathUnavailable { path: Path::TensorCore, backend, .. } if backend == "cpu"),
        "{e:?}"
    );
    assert_msg(
        &e,
        "the tensorcore path is not available on the cpu backend: tensor cores are a GPU \
         feature; the exact path runs on the CPU",
    );
    // Auto without a usable GPU resolves to the CPU: the same error, never a fallback to Exact.
    if cuda_usable() {
        eprintln!("SKIPPED part: a CUDA GPU is usable here, Auto does not resolve to the CPU");
    } else {
        let e2 = Engine::new(Backend::Auto, Path::TensorCore).unwrap_err();
        assert_eq!(e, e2);
    }
}

#[test]
fn no_cuda_driver_when_there_is_none() {
    match Engine::new(Backend::Cuda(0), Path::Exact) {
        Ok(e) => eprintln!(
            "SKIPPED: a CUDA device is usable here ({}); NoCudaDriver is not reachable",
            e.describe()
        ),
        Err(e @ Error::NoCudaDriver { .. }) => {
            let Error::NoCudaDriver { reason } = &e else {
                unreachable!()
            };
            assert!(!reason.is_empty());
            assert_msg(&e, &format!("no CUDA driver: {reason}"));
            // Auto falls back to the CPU instead of failing.
            let auto = Engine::new(Backend::Auto, Path::Exact).unwrap();
            assert!(!auto.is_gpu(), "{}", auto.describe());
        }
        // A driver is present but the GPU is not usable: also not this test's variant.
        Err(e) => eprintln!("SKIPPED: a CUDA driver is present here: {e}"),
    }
}

// -- ThreadPool -------------------------------------------------------------------------------

/// Environment variable that turns `thread_pool_child` into the real check (see below).
const CHILD_ENV: &str = "DETATTN_TEST_THREAD_POOL_CHILD";

/// Does nothing unless started by `thread_pool_error_when_threads_cannot_start`, which re-runs
/// this test binary with that variable set, an address-space limit of 512 MiB and a default
/// thread stack of 1 GiB (`RUST_MIN_STACK`): not even the pool's first thread can be mapped, so
/// building the pool must fail with `ThreadPool` before any worker runs.
///
/// Why not simply many threads under the limit: workers that did start then race the exhausted
/// address space for their own signal stacks, and Rust's runtime aborts the process when one loses
/// (seen in CI: 2 runs in 60 aborted). With the first spawn failing nothing runs concurrently;
/// libtest, whose own test thread fails the same way with `WouldBlock`, runs the test on the main
/// thread.
#[test]
fn thread_pool_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let e = Engine::cpu_with_threads(1000).expect_err("1 GiB stacks in 512 MiB");
    let Error::ThreadPool { threads, reason } = &e else {
        panic!("expected ThreadPool, got {e:?}");
    };
    assert_eq!(*threads, 1000);
    assert!(reason.contains("os error"), "{reason}");
    assert_msg(
        &e,
        &format!("cannot build a CPU thread pool of 1000 threads: {reason}"),
    );
    println!("THREAD-POOL-CHILD-OK {e}");
}

#[cfg(target_os = "linux")]
#[test]
fn thread_pool_error_when_threads_cannot_start() {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -v 524288 && exec "$0" --exact thread_pool_child --nocapture --test-threads=1"#)
        .arg(&exe)
        .env(CHILD_ENV, "1")
        .env("RUST_MIN_STACK", (1u64 << 30).to_string())
        .output()
        .expect("sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success()
            && stdout
                .contains("THREAD-POOL-CHILD-OK cannot build a CPU thread pool of 1000 threads: "),
        "child failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}

#[test]
fn thread_counts_outside_1_to_1024_are_rejected_before_any_thread_starts() {
    // 0 is not "the default" (Engine::cpu is), and 100 000 would spend minutes creating threads.
    for n in [0usize, 1025, 100_000] {
        let e = Engine::cpu_with_threads(n).expect_err("out of range");
        assert_eq!(
            e,
            Error::DimensionOutOfRange {
                name: "threads",
                value: n,
                min: 1,
                max: 1024
            }
        );
        assert_msg(&e, &format!("threads must be in 1..=1024, got {n}"));
    }
    assert_eq!(
        Engine::cpu_with_threads(1).unwrap().describe(),
        format!("cpu (1 threads, {})", detattn::cpu::instruction_set())
    );
}

// -- Strided tensors: TensorExtent, OutputOverlap -------------------------------------------

#[test]
fn tensor_extent_and_output_overlap_of_strided_tensors() {
    // B=2, Hq=4, Hkv=2, Sq=3, Skv=5, D=8 in [B, S, H, D]: q and out need 192, k and v 160.
    let p = Problem::builder(small()).build().unwrap();
    let ql = Layout::bshd(4, 3, 8);
    let kl = Layout::bshd(2, 5, 8);
    let (q, k, v) = (vec![0.5f32; 192], vec![0.25f32; 160], vec![1.0f32; 160]);
    let run = |q: &[f32], k: &[f32], v: &[f32], ol: Layout, out_len: usize| {
        let mut out = vec![f32::from_bits(SENTINEL); out_len];
        let x = Qkv {
            q: Tensor::new(q, ql),
            k: Tensor::new(k, kl),
            v: Tensor::new(v, kl),
            mask: None,
        };
        let r = Engine::cpu().run_tensors(&p, &x, TensorMut::new(&mut out, ol));
        if r.is_err() {
            assert!(
                out.iter().all(|x| x.to_bits() == SENTINEL),
                "out written on error"
            );
        }
        r
    };
    run(&q, &k, &v, ql, 192).expect("exact fit");
    // A buffer larger than the extent is fine for a view; one element short is not.
    run(&[q.clone(), vec![0.0; 9]].concat(), &k, &v, ql, 200).expect("larger buffers");
    let e = run(&q, &k[..159], &v, ql, 192).unwrap_err();
    assert_eq!(
        e,
        Error::TensorExtent {
            tensor: TensorName::K,
            needed: 160,
            got: 159,
            shape: "[2, 2, 5, 8]".into(),
            layout: "strides (b 80, h 8, s 16, d 1) from offset 0".into()
        }
    );
    assert_msg(
        &e,
        "k [2, 2, 5, 8] with strides (b 80, h 8, s 16, d 1) from offset 0 needs a buffer of at \
         least 160 elements, got 159",
    );
    let e = run(&q, &k, &v, ql.with_offset(1), 192).unwrap_err();
    assert!(
        matches!(
            e,
            Error::TensorExtent {
                tensor: TensorName::Out,
                needed: 193,
                ..
            }
        ),
        "{e}"
    );
    // Output rows that share elements (a row stride smaller than D): refused.
    let overlap = Layout {
        offset: 0,
        batch_stride: 96,
        head_stride: 24,
        seq_stride: 4,
    };
    let e = run(&q, &k, &v, overlap, 192).unwrap_err();
    assert_eq!(
        e,
        Error::OutputOverlap {
            layout: "strides (b 96, h 24, s 4, d 1) from offset 0".into()
        }
    );
    assert_msg(
        &e,
        "out's rows overlap (strides (b 96, h 24, s 4, d 1) from offset 0): every output row \
         must have its own head_dim elements",
    );
    // Input rows may repeat (a stride of 0 reads the same K/V for both batch elements).
    let shared = Layout {
        batch_stride: 0,
        ..kl
    };
    let (k1, v1) = (&k[..80], &v[..80]);
    let mut out = vec![0f32; 192];
    let x = Qkv {
        q: Tensor::new(&q, ql),
        k: Tensor::new(k1, shared),
        v: Tensor::new(v1, shared),
        mask: None,
    };
    Engine::cpu()
        .run_tensors(&p, &x, TensorMut::new(&mut out, ql))
        .expect("broadcast inputs are fine");
}

// -- Variants that need a GPU, or that no path constructs yet: message format only -----------

#[test]
fn messages_of_variants_not_reachable_without_a_gpu() {
    let cases = [
        (
            Error::UnsupportedGpu {
                ordinal: 1,
                name: "Tesla T4".into(),
                major: 7,
                minor: 5,
                supported: "sm_80, sm_90".into(),
            },
            "GPU 1 (Tesla T4) is sm_75; detattn ships kernels for sm_80, sm_90",
        ),
        (
            Error::CubinIntegrity {
                file: "exact_sm90.cubin".into(),
                expected: "ab".into(),
                actual: "cd".into(),
            },
            "embedded cubin exact_sm90.cubin fails its integrity check: manifest sha256 ab, actual cd",
        ),
        (
            Error::WrongDevice {
                tensor: TensorName::V,
                ordinal: 0,
            },
            "v lives on another device than this engine's (GPU 0)",
        ),
        (
            Error::Cuda {
                op: "cuLaunchKernel",
                message: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
            },
            "CUDA error in cuLaunchKernel: CUDA_ERROR_ILLEGAL_ADDRESS",
        ),
        (
            Error::HeadDimUnsupported {
                path: Path::TensorCore,
                head_dim: 48,
                supported: "32, 64, 96, 128, 256",
            },
            "the tensorcore path takes head_dim in 32, 64, 96, 128, 256, got 48",
        ),
        (
            Error::DTypeUnsupported {
                path: Path::TensorCore,
                dtype: DType::F32,
                supported: "f16, bf16",
            },
            "the tensorcore path takes f16, bf16 inputs, got f32",
        ),
        (
            Error::Misaligned {
                path: Path::TensorCore,
                tensor: TensorName::Q,
                need: "a 16-byte aligned address",
                what: "0x7f02".into(),
            },
            "the tensorcore path needs q aligned to a 16-byte aligned address: 0x7f02",
        ),
        (
            Error::DeviceMemory {
                ordinal: 0,
                needed: 200,
                free: 100,
            },
            "not enough GPU memory on cuda:0: this call needs 200 bytes, 100 are free",
        ),
    ];
    for (e, want) in cases {
        assert_msg(&e, want);
    }
    // TensorName's Display is what every message above relies on.
    let names: Vec<String> = [
        TensorName::Q,
        TensorName::K,
        TensorName::V,
        TensorName::Mask,
        TensorName::Out,
    ]
    .iter()
    .map(|t| t.to_string())
    .collect();
    assert_eq!(names, ["q", "k", "v", "mask", "out"]);
}

/// Which test reaches each variant. Keep in step with src/error.rs (checked below).
const COVERAGE: &[(&str, &str)] = &[
    (
        "DimensionOutOfRange",
        "dimension_out_of_range_every_dimension_both_ends",
    ),
    ("HeadsNotDivisible", "heads_not_divisible"),
    ("InvalidScale", "invalid_scale"),
    ("KvLensCount", "kv_lens_count"),
    ("KvLenOutOfRange", "kv_len_out_of_range"),
    ("SizeOverflow", "size_overflow_of_each_tensor"),
    ("TensorLength", "tensor_length_of_each_tensor"),
    (
        "TensorExtent",
        "tensor_extent_and_output_overlap_of_strided_tensors",
    ),
    (
        "OutputOverlap",
        "tensor_extent_and_output_overlap_of_strided_tensors",
    ),
    (
        "Misaligned",
        "messages_of_variants_not_reachable_without_a_gpu (GPU; tests/cuda_tensorcore.rs)",
    ),
    (
        "DeviceMemory",
        "messages_of_variants_not_reachable_without_a_gpu (GPU; tests/cuda_reliability.rs)",
    ),
    ("MaskPresence", "mask_presence_both_ways"),
    ("NonFinite", "nonfinite_names_the_tensor_in_each_dtype"),
    (
        "HeadDimUnsupported",
        "messages_of_variants_not_reachable_without_a_gpu (no path constructs it yet)",
    ),
    (
        "DTypeUnsupported",
        "messages_of_variants_not_reachable_without_a_gpu (GPU; tests/cuda_tensorcore.rs)",
    ),
    ("PathUnavailable", "path_unavailable_tensorcore_on_cpu"),
    ("ThreadPool", "thread_pool_error_when_threads_cannot_start"),
    ("NoCudaDriver", "no_cuda_driver_when_there_is_none"),
    (
        "UnsupportedGpu",
        "messages_of_variants_not_reachable_without_a_gpu (GPU)",
    ),
    (
        "CubinIntegrity",
        "messages_of_variants_not_reachable_without_a_gpu (GPU)",
    ),
    (
        "WrongDevice",
        "messages_of_variants_not_reachable_without_a_gpu (GPU)",
    ),
    (
        "Cuda",
        "messages_of_variants_not_reachable_without_a_gpu (GPU)",
    ),
    (
        "PageSize",
        "tests/kvcache.rs: page_size_must_be_a_power_of_two_in_16_to_256",
    ),
    (
        "BlockTableEntry",
        "tests/kvcache.rs: a_used_block_table_entry_outside_the_cache_is_an_error",
    ),
    (
        "CacheCapacity",
        "tests/kvcache.rs: block_table_length_and_capacity",
    ),
    (
        "CuSeqlens",
        "tests/kvcache.rs: cu_seqlens_must_be_offsets_of_the_packed_rows",
    ),
    (
        "IncompatibleOptions",
        "tests/kvcache.rs: varlen_options_that_do_not_combine_are_typed_errors",
    ),
];

/// The variant names of `pub enum Error` in src/error.rs: the lines inside the enum indented by
/// exactly four spaces that start with an upper-case identifier.
fn variants_in_source() -> Vec<String> {
    let src = include_str!("../src/error.rs");
    let start = src
        .find("pub enum Error {")
        .expect("enum Error in src/error.rs");
    let body = &src[start..];
    let end = body.find("\n}").expect("end of enum Error");
    body[..end]
        .lines()
        .skip(1)
        .filter(|l| l.starts_with("    ") && !l.starts_with("     "))
        .map(str::trim)
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| {
            l.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

#[test]
fn every_variant_is_accounted_for() {
    let src = variants_in_source();
    assert!(src.len() >= 17, "parsed only {src:?}");
    let listed: Vec<&str> = COVERAGE.iter().map(|(v, _)| *v).collect();
    for v in &src {
        assert!(
            listed.contains(&v.as_str()),
            "Error::{v} has no test in tests/errors.rs (add one and list it in COVERAGE)"
        );
    }
    for v in &listed {
        assert!(
            src.iter().any(|s| s == v),
            "COVERAGE lists {v}, which src/error.rs no longer has"
        );
    }
}

// -- FromStr of Path, Backend, DType ----------------------------------------------------------

#[test]
fn path_parsing() {
    for p in [Path::Exact, Path::TensorCore] {
        assert_eq!(p.to_string().parse::<Path>(), Ok(p));
    }
    assert_eq!("exact".parse::<Path>(), Ok(Path::Exact));
    assert_eq!("tensorcore".parse::<Path>(), Ok(Path::TensorCore));
    for bad in ["", "Exact", "tensor-core", "exact "] {
        assert_eq!(
            bad.parse::<Path>(),
            Err(format!(
                "unknown path {bad:?}: expected exact or tensorcore"
            ))
        );
    }
}

#[test]
fn backend_parsing() {
    for b in [
        Backend::Cpu,
        Backend::Auto,
        Backend::Cuda(0),
        Backend::Cuda(7),
    ] {
        assert_eq!(b.to_string().parse::<Backend>(), Ok(b));
    }
    assert_eq!("cuda".parse::<Backend>(), Ok(Backend::Cuda(0)));
    assert_eq!("cuda:12".parse::<Backend>(), Ok(Backend::Cuda(12)));
    for bad in [
        "", "gpu", "CPU", "cuda:", "cuda:-1", "cuda:x", "cuda:1:2", "cuda0",
    ] {
        assert_eq!(
            bad.parse::<Backend>(),
            Err(format!(
                "unknown backend {bad:?}: expected cpu, cuda, cuda:N or auto"
            ))
        );
    }
}

#[test]
fn dtype_parsing() {
    for d in DType::ALL {
        assert_eq!(d.to_string().parse::<DType>(), Ok(d));
    }
    assert_eq!("bf16".parse::<DType>(), Ok(DType::Bf16));
    for bad in ["", "f64", "F32", "bfloat16", "half"] {
        assert_eq!(
            bad.parse::<DType>(),
            Err(format!("unknown dtype {bad:?}: expected f32, f16 or bf16"))
        );
    }
}

/// The front ends sort errors by `is_caller_error`: what the caller asked for is theirs to fix,
/// the machine's failures are not.
#[test]
fn caller_errors_and_machine_errors_are_told_apart() {
    let caller = [
        Engine::cpu_with_threads(0).unwrap_err(),
        build_err(Problem::builder(Shape::new(1, 3, 2, 1, 1, 8))),
        Error::NonFinite {
            tensor: TensorName::Q,
        },
    ];
    for e in &caller {
        assert!(e.is_caller_error(), "{e:?}");
    }
    let machine = [
        Error::NoCudaDriver {
            reason: "test".into(),
        },
        Error::Cuda {
            op: "test",
            message: "test".into(),
        },
    ];
    for e in &machine {
        assert!(!e.is_caller_error(), "{e:?}");
    }
}
