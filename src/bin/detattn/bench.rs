//! `detattn bench`: time one problem by the protocol of DESIGN.md §8 — warm-up, at least 20 timed
//! runs by default, median; seeded inputs (never zeros) rotated across several sets.
//!
//! On a GPU the kernel is timed with CUDA events by `CudaBackend::bench`; on the CPU each
//! `Engine::run` call is timed with `std::time::Instant` (the whole call: the non-finite scan, the
//! staging of K and V, the kernel and the output allocation).

use crate::problem_args::{ProblemArgs, check_memory, flops, fmt_us, shape_json, shape_text};
use crate::{Failure, print_json};
use clap::Args;
use detattn::inputs::{Inputs, generate};
use detattn::{DType, Element, Engine, Problem, bf16, f16};
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
    /// Timed runs (the protocol asks for at least 20).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    iters: u32,
    /// Input sets (seeds SEED, SEED+1, ..) cycled through, so that one set does not stay in cache.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    rotate: u32,
}

/// Timings in microseconds.
struct Timing {
    median_us: f64,
    min_us: f64,
    max_us: f64,
    iters: usize,
    timer: &'static str,
}

pub(crate) fn main(args: BenchArgs) -> Result<ExitCode, Failure> {
    let a = &args.problem;
    let p = a.problem()?;
    let engine = a.engine()?;
    let (iters, rotate) = (args.iters as usize, args.rotate as usize);
    // The GPU bench also generates its input sets on the host first.
    check_memory(&p, a.dtype, rotate)?;
    let t = if engine.is_gpu() {
        gpu_bench(&engine, a, &p, args.warmup, iters, rotate)?
    } else {
        match a.dtype {
            DType::F32 => cpu_bench::<f32>(&engine, a, &p, args.warmup, iters, rotate)?,
            DType::F16 => cpu_bench::<f16>(&engine, a, &p, args.warmup, iters, rotate)?,
            DType::Bf16 => cpu_bench::<bf16>(&engine, a, &p, args.warmup, iters, rotate)?,
        }
    };
    let tflops = flops(&p) / (t.median_us * 1e-6) / 1e12;
    if a.json {
        print_json(&serde_json::json!({
            "median_us": t.median_us,
            "min_us": t.min_us,
            "max_us": t.max_us,
            "iters": t.iters,
            "tflops": tflops,
            "backend": engine.describe(),
            "path": engine.path().name(),
            "dtype": a.dtype.name(),
            "shape": shape_json(&p),
            "causal": p.causal(),
            "warmup": args.warmup,
            "rotate": rotate,
            "timer": t.timer,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    let rate = if tflops >= 1.0 {
        format!("{tflops:.1} TF/s")
    } else {
        format!("{tflops:.4} TF/s ({:.1} GFLOP/s)", tflops * 1e3)
    };
    let protocol = format!(
        "{} warm-up, {} timed, {} input set(s) rotated; {}{}",
        args.warmup,
        t.iters,
        rotate,
        t.timer,
        if t.iters < 20 {
            " (fewer than the 20 runs the protocol asks for)"
        } else {
            ""
        }
    );
    let causal = if p.causal() { "causal" } else { "not causal" };
    let rows = [
        ("backend", engine.describe()),
        ("path", engine.path().name().to_string()),
        ("dtype", a.dtype.name().to_string()),
        ("shape", format!("{} ({causal})", shape_text(&p))),
        ("protocol", protocol),
        ("median", format!("{:>12}   {rate}", fmt_us(t.median_us))),
        ("min", format!("{:>12}", fmt_us(t.min_us))),
        ("max", format!("{:>12}", fmt_us(t.max_us))),
    ];
    for (k, v) in rows {
        outln!("{k:<9} {v}");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(feature = "cuda")]
fn gpu_bench(
    engine: &Engine,
    a: &ProblemArgs,
    p: &Problem,
    warmup: usize,
    iters: usize,
    rotate: usize,
) -> Result<Timing, Failure> {
    let cuda = engine
        .cuda()
        .ok_or_else(|| Failure::Runtime("internal: a GPU engine without a CUDA backend".into()))?;
    let r = cuda.bench(p, a.dtype, a.seed, warmup, iters, rotate)?;
    Ok(Timing {
        median_us: r.median_us,
        min_us: r.min_us,
        max_us: r.max_us,
        iters: r.iters,
        timer: "CUDA events",
    })
}

#[cfg(not(feature = "cuda"))]
fn gpu_bench(
    _engine: &Engine,
    _a: &ProblemArgs,
    _p: &Problem,
    _warmup: usize,
    _iters: usize,
    _rotate: usize,
) -> Result<Timing, Failure> {
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
    let sets: Vec<Inputs<T>> = (0..rotate as u64)
        .map(|i| generate::<T>(p, a.gen_options(a.seed.wrapping_add(i))))
        .collect();
    let once = |i: usize| -> Result<f64, Failure> {
        let x = &sets[i % rotate];
        let t = Instant::now();
        let out = engine.run(p, &x.q, &x.k, &x.v, x.mask.as_deref())?;
        let us = t.elapsed().as_secs_f64() * 1e6;
        // Keep the output observable so the call cannot be optimised away.
        std::hint::black_box(out);
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
        timer: "wall clock (std::time::Instant) per Engine::run call",
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
