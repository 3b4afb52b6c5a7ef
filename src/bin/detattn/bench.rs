//! `detattn bench`: time one problem by the protocol of docs/design.md §9 — warm-up, at least 20 timed
//! samples by default, median; seeded inputs (never zeros) rotated across several sets.
//!
//! On a GPU either path is timed with CUDA events by `CudaBackend::bench_path`: `--per-sample N`
//! launches run back to back between one pair of events and the figures are per launch
//! (N = 1, the default, is the anchors' protocol: one call per event pair, synchronised). On the
//! CPU each `Engine::run` call is timed with `std::time::Instant` (the whole call: the non-finite
//! scan, the staging of K and V, the kernel and the output allocation), one call per sample.
//!
//! Reported: time, TF/s (FLOPs as docs/design.md §9 counts them), and GB/s of the bytes one call must
//! move (Q, K, V read once, O written once, in the dtype; the mask is not counted) with the
//! arithmetic intensity, so that a memory-bound problem (decode) can be read against the
//! device's copy bandwidth.

use crate::problem_args::{
    ProblemArgs, bytes_moved, check_memory, flops, fmt_us, shape_json, shape_text,
};
use crate::{Failure, print_json};
use clap::Args;
use detattn::inputs::generate;
use detattn::{DType, Element, Engine, Problem, Qkv, Tensor, TensorMut, bf16, f16};
use std::process::ExitCode;
use std::time::Instant;

/// Flags of `detattn bench`.
#[derive(Args, Debug)]
pub(crate) struct BenchArgs {
    #[command(flatten)]
    problem: ProblemArgs,
    /// Untimed runs first.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Timed samples (the protocol asks for at least 20).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    iters: u32,
    /// Input sets (seeds SEED, SEED+1, ..) cycled through, so that one set does not stay in cache.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    rotate: u32,
    /// GPU only: launches run back to back between one pair of CUDA events (cycling the input
    /// sets); figures are per launch. 1 is the anchors' protocol (one synchronised call per
    /// sample); more hides the host's launch overhead on short problems.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    per_sample: u32,
    /// GPU only: K and V in a paged cache of N-row pages (a power of two in 16..=256, placed as
    /// `run --page-size` places them), read as the device entry point of paged caches reads them
    /// (through the block table by the TensorCore decode kernels, else gathered per call and the
    /// gather timed with the call); the output says which.
    #[arg(long, value_name = "N")]
    page_size: Option<usize>,
}

/// Timings in microseconds, per call.
struct Timing {
    median_us: f64,
    min_us: f64,
    max_us: f64,
    iters: usize,
    /// GPU: the host's time to enqueue a call (median over the samples).
    host_us: Option<f64>,
    timer: &'static str,
    /// How a paged cache was read (GPU, `--page-size`).
    paged: Option<&'static str>,
}

impl BenchArgs {
    /// Whether `--json` was given (errors then come out as a JSON document too).
    pub(crate) fn json(&self) -> bool {
        self.problem.json
    }
}

pub(crate) fn main(args: BenchArgs) -> Result<ExitCode, Failure> {
    let a = &args.problem;
    let p = a.problem()?;
    let engine = a.engine(&p)?;
    let (iters, rotate) = (args.iters as usize, args.rotate as usize);
    let per_sample = args.per_sample as usize;
    if args.page_size.is_some() && !engine.is_gpu() {
        return Err(Failure::Usage(
            "--page-size times the GPU's device entry point of paged caches; the CPU bench times \
             contiguous K and V (the CPU gives a paged cache the same bits, `run --page-size`)"
                .into(),
        ));
    }
    if per_sample > 1 && !engine.is_gpu() {
        return Err(Failure::Usage(format!(
            "--per-sample {per_sample}: launches per sample apply to GPU timing (N launches \
             between one pair of CUDA events); the CPU backend times each call on its own with \
             the wall clock, so use --per-sample 1 there"
        )));
    }
    // The GPU bench also generates its input sets on the host first.
    check_memory(&p, a.dtype, rotate)?;
    let causal = if p.causal() {
        format!("causal, {}", p.causal_align().name())
    } else {
        "not causal".to_string()
    };
    // Say what is being timed at once: a large problem on the CPU takes minutes.
    let header = [
        ("backend", engine.describe()),
        ("path", engine.path().name().to_string()),
        ("dtype", a.dtype.name().to_string()),
        (
            "shape",
            format!(
                "{} ({causal}, {}{})",
                shape_text(&p),
                a.layout.name(),
                match args.page_size {
                    Some(ps) => format!(", K and V in {ps}-row pages"),
                    None => String::new(),
                }
            ),
        ),
    ];
    if !a.json {
        for (k, v) in &header {
            outln!("{k:<9} {v}");
        }
    }
    progress(&format!(
        "bench: {} warm-up and {iters} timed call(s) of {} on {}",
        args.warmup,
        shape_text(&p),
        engine.describe()
    ));
    let t = if engine.is_gpu() {
        gpu_bench(&engine, &args, &p)?
    } else {
        match a.dtype {
            DType::F32 => cpu_bench::<f32>(&engine, a, &p, args.warmup, iters, rotate)?,
            DType::F16 => cpu_bench::<f16>(&engine, a, &p, args.warmup, iters, rotate)?,
            DType::Bf16 => cpu_bench::<bf16>(&engine, a, &p, args.warmup, iters, rotate)?,
        }
    };
    let f = flops(&p);
    let bytes = bytes_moved(&p, a.dtype);
    let secs = t.median_us * 1e-6;
    let tflops = f / secs / 1e12;
    let gbps = bytes / secs / 1e9;
    let intensity = f / bytes;
    if a.json {
        print_json(&serde_json::json!({
            "median_us": t.median_us,
            "min_us": t.min_us,
            "max_us": t.max_us,
            "iters": t.iters,
            "host_us": t.host_us,
            "per_sample": per_sample,
            "tflops": tflops,
            "flops": f,
            "bytes": bytes,
            "gbps": gbps,
            "flop_per_byte": intensity,
            "backend": engine.describe(),
            "path": engine.path().name(),
            "dtype": a.dtype.name(),
            "shape": shape_json(&p),
            "causal": p.causal(),
            "causal_align": p.causal_align().name(),
            "layout": a.layout.name(),
            "page_size": args.page_size,
            "warmup": args.warmup,
            "rotate": rotate,
            "timer": t.timer,
            "paged_read": t.paged,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    let rate = if tflops >= 1.0 {
        format!("{tflops:.1} TF/s")
    } else {
        format!("{tflops:.4} TF/s ({:.1} GFLOP/s)", tflops * 1e3)
    };
    let launches = if engine.is_gpu() {
        format!(
            ", {per_sample} launch{} per event pair (figures per launch)",
            if per_sample == 1 { "" } else { "es" }
        )
    } else {
        String::new()
    };
    let protocol = format!(
        "{} warm-up, {} timed, {} input set(s) rotated; {}{launches}{}",
        args.warmup,
        t.iters,
        rotate,
        t.timer,
        if t.iters < 20 {
            " (fewer than the 20 samples the protocol asks for)"
        } else {
            ""
        }
    );
    let traffic = format!(
        "{:.1} GB/s of {:.3} MB (Q, K, V read once, O written once; {:.0} FLOP/byte)",
        gbps,
        bytes / 1e6,
        intensity
    );
    let protocol = match t.paged {
        Some(how) => format!("{protocol}; paged cache {how}"),
        None => protocol,
    };
    let rows = [
        ("protocol", protocol),
        ("median", format!("{:>12}   {rate}", fmt_us(t.median_us))),
        ("bytes", traffic),
        ("min", format!("{:>12}", fmt_us(t.min_us))),
        ("max", format!("{:>12}", fmt_us(t.max_us))),
    ];
    for (k, v) in rows {
        outln!("{k:<9} {v}");
    }
    if let Some(h) = t.host_us {
        outln!(
            "{:<9} {:>12}   the host's time to enqueue a call (median; part of each call at one a sample)",
            "host",
            fmt_us(h)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A progress line on stderr (never stdout: `--json` keeps stdout to one document).
fn progress(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[cfg(feature = "cuda")]
fn gpu_bench(engine: &Engine, args: &BenchArgs, p: &Problem) -> Result<Timing, Failure> {
    let cuda = engine
        .cuda()
        .ok_or_else(|| Failure::Runtime("internal: a GPU engine without a CUDA backend".into()))?;
    let a = &args.problem;
    let opts = detattn::cuda::BenchOptions {
        seed: a.seed,
        warmup: args.warmup,
        iters: args.iters as usize,
        rotate: args.rotate as usize,
        per_sample: args.per_sample as usize,
        order: a.layout,
        page_size: args.page_size,
    };
    let r = cuda.bench(engine.path(), p, a.dtype, &opts)?;
    Ok(Timing {
        median_us: r.median_us,
        min_us: r.min_us,
        max_us: r.max_us,
        iters: r.iters,
        host_us: Some(r.host_us),
        timer: "CUDA events",
        paged: r.paged.map(|m| match m {
            detattn::cuda::PagedRead::BlockTable => "read through the block table by the kernels",
            detattn::cuda::PagedRead::Gathered => "the used rows gathered per call, then run",
        }),
    })
}

#[cfg(not(feature = "cuda"))]
fn gpu_bench(_engine: &Engine, _args: &BenchArgs, _p: &Problem) -> Result<Timing, Failure> {
    // Engine::new cannot return a GPU engine without the feature.
    Err(Failure::Runtime(
        "built without the `cuda` feature: no GPU backend".into(),
    ))
}

fn cpu_bench<T: Element>(
    engine: &Engine,
    a: &ProblemArgs,
    p: &Problem,
    warmup: usize,
    iters: usize,
    rotate: usize,
) -> Result<Timing, Failure> {
    progress(&format!("bench: generating {rotate} input set(s)"));
    // q, k, v in the chosen layout, and the mask.
    type Set<T> = (Vec<T>, Vec<T>, Vec<T>, Option<Vec<bool>>);
    let sets: Vec<Set<T>> = (0..rotate as u64)
        .map(|i| {
            let x = generate::<T>(p, a.gen_options(a.seed.wrapping_add(i)));
            (
                a.placed(p, &x.q, true).0,
                a.placed(p, &x.k, false).0,
                a.placed(p, &x.v, false).0,
                x.mask,
            )
        })
        .collect();
    let s = p.shape();
    let kl = detattn::Layout::contiguous(a.layout, s.kv_heads, s.kv_len, s.head_dim);
    let ql = detattn::Layout::contiguous(a.layout, s.q_heads, s.q_len, s.head_dim);
    let mut out = vec![T::default(); s.q_elems()];
    let total = warmup + iters;
    let mut once = |i: usize| -> Result<f64, Failure> {
        let (q, k, v, mask) = &sets[i % rotate];
        let x = Qkv {
            q: Tensor::new(q, ql),
            k: Tensor::new(k, kl),
            v: Tensor::new(v, kl),
            mask: mask.as_deref(),
        };
        let t = Instant::now();
        engine.run_tensors(p, &x, TensorMut::new(&mut out, ql))?;
        let us = t.elapsed().as_secs_f64() * 1e6;
        // Keep the output observable so the call cannot be optimised away.
        std::hint::black_box(&out);
        let what = if i < warmup { "warm-up" } else { "timed" };
        progress(&format!(
            "bench: call {}/{total} ({what}) {}",
            i + 1,
            fmt_us(us)
        ));
        Ok(us)
    };
    for i in 0..warmup {
        once(i)?;
    }
    let mut ts = (0..iters)
        .map(|i| once(warmup + i))
        .collect::<Result<Vec<f64>, Failure>>()?;
    ts.sort_by(f64::total_cmp);
    Ok(Timing {
        median_us: median_sorted(&ts),
        min_us: ts[0],
        max_us: ts[ts.len() - 1],
        iters,
        host_us: None,
        timer: "wall clock (std::time::Instant) per Engine::run_tensors call",
        paged: None,
    })
}

/// Median of a sorted, non-empty slice (mean of the middle two for an even count, as Python's
/// `statistics.median`).
fn median_sorted(ts: &[f64]) -> f64 {
    let n = ts.len();
    if n % 2 == 1 {
        ts[n / 2]
    } else {
        (ts[n / 2 - 1] + ts[n / 2]) / 2.0
    }
}
