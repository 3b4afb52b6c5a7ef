//! `detattn run`: one problem from flags, its wall time and its output digest.

use crate::problem_args::{ProblemArgs, check_memory, fmt_us, shape_json, shape_text};
use crate::{Failure, print_json};
use clap::Args;
use detattn::inputs::{generate, paginate};
use detattn::{DType, Element, Engine, KvCache, Problem, QkvCache, Tensor, TensorMut, bf16, f16};
use std::process::ExitCode;
use std::time::Instant;

/// Flags of `detattn run`.
#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    problem: ProblemArgs,
    /// K and V in a paged cache of N-row pages (a power of two in 16..=256): the inputs are
    /// generated as always, then placed page by page in a shuffled order drawn from the seed,
    /// with a block table. The digest is the same as without it.
    #[arg(long, value_name = "N")]
    page_size: Option<usize>,
    /// Also compute the log-sum-exp of each query row (docs/numerics.md §10) and print its
    /// digest: the output digest's format over the f32 values as a [B, Hq, Sq, 1] tensor.
    #[arg(long)]
    lse: bool,
}

/// What one run produced.
struct Outcome {
    wall_us: f64,
    digest: String,
    lse_digest: Option<String>,
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
        DType::F32 => run_typed::<f32>(&args, &p, &engine)?,
        DType::F16 => run_typed::<f16>(&args, &p, &engine)?,
        DType::Bf16 => run_typed::<bf16>(&args, &p, &engine)?,
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
            "cu_seqlens_q": p.varlen().map(|v| v.cu_seqlens_q()),
            "cu_seqlens_k": p.varlen().map(|v| v.cu_seqlens_k()),
            "page_size": args.page_size,
            "scale": p.scale(),
            "seed": a.seed,
            "amp": a.amp,
            "wall_us": o.wall_us,
            "nan_rows": o.nan_rows,
            "digest": o.digest,
            "lse_digest": o.lse_digest,
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
        if let Some(ps) = args.page_size {
            opts.push(format!("paged KV cache ({ps}-row pages, shuffled)"));
        }
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
        if let Some(d) = o.lse_digest {
            outln!("{:<9} {d}", "lse");
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

fn run_typed<T: Element>(args: &RunArgs, p: &Problem, engine: &Engine) -> Result<Outcome, Failure> {
    let a = &args.problem;
    let x = generate::<T>(p, a.gen_options(a.seed));
    // The inputs in the chosen layout (a no-op copy for bhsd); the output in the same layout.
    let (q, ql) = a.placed(p, &x.q, true);
    let (k, kl) = a.placed(p, &x.k, false);
    let (v, _) = a.placed(p, &x.v, false);
    // A paged cache is placed from the generated (contiguous) K and V, its pages shuffled by
    // the seed.
    let paged = match args.page_size {
        Some(ps) => Some(paginate(p, &x.k, &x.v, ps, a.seed)?),
        None => None,
    };
    let kv = match &paged {
        Some(c) => KvCache::Paged(c.cache()),
        None => KvCache::Tensors {
            k: Tensor::new(&k, kl),
            v: Tensor::new(&v, kl),
        },
    };
    let inputs = QkvCache {
        q: Tensor::new(&q, ql),
        kv,
        mask: x.mask.as_deref(),
    };
    let s = p.shape();
    let mut out = vec![T::default(); q.len()];
    let mut lse = vec![0.0f32; s.batch * s.q_heads * s.q_len];
    let t = Instant::now();
    engine.run_cache(
        p,
        &inputs,
        TensorMut::new(&mut out, ql),
        args.lse.then_some(&mut lse[..]),
    )?;
    let wall_us = t.elapsed().as_secs_f64() * 1e6;
    let digest = detattn::digest_of(engine.path(), p, &Tensor::new(&out, ql))?;
    let lse_digest = match args.lse {
        true => Some(detattn::lse_digest(engine.path(), p, &lse)?.to_string()),
        false => None,
    };
    let nan_rows = out
        .chunks(s.head_dim)
        .filter(|r| r.iter().any(|x| x.to_f32().is_nan()))
        .count();
    Ok(Outcome {
        wall_us,
        digest: digest.to_string(),
        lse_digest,
        nan_rows,
    })
}
