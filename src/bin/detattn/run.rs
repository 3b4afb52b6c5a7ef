//! `detattn run`: one problem from flags, its wall time and its output digest.

use crate::problem_args::{ProblemArgs, check_memory, fmt_us, shape_json, shape_text};
use crate::{Failure, print_json};
use clap::Args;
use detattn::inputs::generate;
use detattn::{DType, Element, Engine, Problem, Qkv, Tensor, TensorMut, bf16, f16};
use std::process::ExitCode;
use std::time::Instant;

/// Flags of `detattn run`.
#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    problem: ProblemArgs,
}

/// What one run produced.
struct Outcome {
    wall_us: f64,
    digest: String,
    nan_rows: usize,
}

impl RunArgs {
    /// Whether `--json` was given (errors then come out as a JSON document too).
    pub(crate) fn json(&self) -> bool {
        self.problem.json
    }
}

pub(crate) fn main(args: RunArgs) -> Result<ExitCode, Failure> {
    let a = &args.problem;
    let p = a.problem()?;
    check_memory(&p, a.dtype, 1)?;
    let engine = a.engine(&p)?;
    let o = match a.dtype {
        DType::F32 => run_typed::<f32>(a, &p, &engine)?,
        DType::F16 => run_typed::<f16>(a, &p, &engine)?,
        DType::Bf16 => run_typed::<bf16>(a, &p, &engine)?,
    };
    if a.json {
        print_json(&serde_json::json!({
            "backend": engine.describe(),
            "path": engine.path().name(),
            "dtype": a.dtype.name(),
            "shape": shape_json(&p),
            "causal": p.causal(),
            "causal_align": p.causal_align().name(),
            "layout": a.layout.name(),
            "mask": a.mask.name(),
            "kv_lens": p.kv_lens(),
            "scale": p.scale(),
            "seed": a.seed,
            "amp": a.amp,
            "wall_us": o.wall_us,
            "nan_rows": o.nan_rows,
            "digest": o.digest,
        }));
    } else {
        let mut opts = vec![if p.causal() {
            format!("causal ({})", p.causal_align().name())
        } else {
            "not causal".to_string()
        }];
        opts.push(format!("layout {}", a.layout.name()));
        opts.push(format!("mask {}", a.mask.name()));
        if let Some(l) = p.kv_lens() {
            opts.push(format!("kv_lens {l:?}"));
        }
        opts.push(format!("scale {}", p.scale()));
        let rows = [
            ("backend", engine.describe()),
            ("path", engine.path().name().to_string()),
            ("dtype", a.dtype.name().to_string()),
            ("shape", shape_text(&p)),
            ("options", opts.join(", ")),
            ("inputs", format!("seed {}, amp {}", a.seed, a.amp)),
            (
                "time",
                format!("{} (one run, inputs already generated)", fmt_us(o.wall_us)),
            ),
            ("digest", o.digest),
        ];
        for (k, v) in rows {
            outln!("{k:<9} {v}");
        }
        if o.nan_rows > 0 {
            outln!(
                "{:<9} {} output rows are NaN (non-finite inputs, policy propagate)",
                "note",
                o.nan_rows
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn run_typed<T: Element>(
    a: &ProblemArgs,
    p: &Problem,
    engine: &Engine,
) -> Result<Outcome, Failure> {
    let x = generate::<T>(p, a.gen_options(a.seed));
    // The inputs in the chosen layout (a no-op copy for bhsd); the output in the same layout.
    let (q, ql) = a.placed(p, &x.q, true);
    let (k, kl) = a.placed(p, &x.k, false);
    let (v, _) = a.placed(p, &x.v, false);
    let inputs = Qkv {
        q: Tensor::new(&q, ql),
        k: Tensor::new(&k, kl),
        v: Tensor::new(&v, kl),
        mask: x.mask.as_deref(),
    };
    let mut out = vec![T::default(); q.len()];
    let t = Instant::now();
    engine.run_tensors(p, &inputs, TensorMut::new(&mut out, ql))?;
    let wall_us = t.elapsed().as_secs_f64() * 1e6;
    let s = p.shape();
    let digest = detattn::digest_of(engine.path(), p, &Tensor::new(&out, ql))?;
    let nan_rows = out
        .chunks(s.head_dim)
        .filter(|r| r.iter().any(|x| x.to_f32().is_nan()))
        .count();
    Ok(Outcome {
        wall_us,
        digest: digest.to_string(),
        nan_rows,
    })
}
