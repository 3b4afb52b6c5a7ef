//! tcharness: the GPU harness of docs/tensorcore-cpu-model.md (test code, never shipped).
//!
//! ```text
//! tcharness mma   [--cubin F] [--instr mma|wgmma|both] [--mma-log2 N] [--wgmma-log2 N] [--seed S] [--out DIR] [--cpu-only [--plant]]
//! tcharness exp2  [--cubin F]          software exp2: GPU == CPU over all 2^32 inputs
//! tcharness exp2-bound                  CPU only: error bound of exp2 and rcp, exhaustive
//! tcharness exp2-digest                 CPU only: SHA-256 of exp2 over all 2^32 inputs
//! tcharness tc    --base DIR --variant NAME=DIR ...   TensorCore kernels: accuracy, and the
//!                                       CPU emulation of the all-software variant, bit for bit
//! ```
//! Without a CUDA driver every GPU subcommand says so and exits 0 (ordinary outcome); exit 1
//! means a check failed, 2 a usage or runtime error.

mod exp2_run;
mod gpu;
mod mma_run;
mod tc_run;

use std::path::PathBuf;
use std::process::ExitCode;

fn usage() -> ExitCode {
    eprintln!(
        "{}",
        include_str!("main.rs")
            .lines()
            .skip(2)
            .take(9)
            .map(|l| l.trim_start_matches("//! "))
            .collect::<Vec<_>>()
            .join("\n")
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first().cloned() else {
        return usage();
    };
    let get = |flag: &str| -> Option<String> {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let cubin_path = get("--cubin")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("tcmodel/target/cubin/probe.sm_90a.cubin"));
    let out = get("--out").map(PathBuf::from);
    let res = (|| -> Result<bool, String> {
        match cmd.as_str() {
            "exp2-bound" => return exp2_run::bound_main(),
            "exp2-digest" => return exp2_run::digest_main(),
            _ => {}
        }
        let cpu_only = has("--cpu-only");
        let gpu = gpu::open()?;
        match &gpu {
            Some(g) => println!(
                "GPU 0: {} (sm_{}{}), driver {}",
                g.name, g.cc.0, g.cc.1, g.driver
            ),
            None if cpu_only => {
                println!("no CUDA driver or GPU: --cpu-only, the model stands in for the hardware")
            }
            None => {
                println!("SKIPPED {cmd}: no CUDA driver or GPU on this machine");
                return Ok(true);
            }
        }
        let cubin = match (&gpu, cmd.as_str()) {
            (Some(_), "mma" | "exp2") => Some(
                std::fs::read(&cubin_path).map_err(|e| format!("{}: {e}", cubin_path.display()))?,
            ),
            _ => None,
        };
        match cmd.as_str() {
            "mma" => {
                let o = mma_run::Opts {
                    mma_log2: get("--mma-log2")
                        .map_or(Ok(16), |s| s.parse())
                        .map_err(|e| format!("--mma-log2: {e}"))?,
                    wgmma_log2: get("--wgmma-log2")
                        .map_or(Ok(14), |s| s.parse())
                        .map_err(|e| format!("--wgmma-log2: {e}"))?,
                    seed: get("--seed")
                        .map_or(Ok(14), |s| s.parse())
                        .map_err(|e| format!("--seed: {e}"))?,
                    out: out.clone(),
                    dump_cap: get("--dump-cap")
                        .map_or(Ok(120_000), |s| s.parse())
                        .map_err(|e| format!("--dump-cap: {e}"))?,
                    cpu_only,
                    plant: has("--plant"),
                    instrs: match get("--instr").as_deref() {
                        None | Some("both") => vec![0, 1],
                        Some("mma") => vec![0],
                        Some("wgmma") => vec![1],
                        Some(x) => return Err(format!("--instr {x}: mma, wgmma or both")),
                    },
                };
                mma_run::main(gpu.as_ref(), cubin.as_deref(), &o)
            }
            "exp2" => exp2_run::main(gpu.as_ref().unwrap(), cubin.as_deref().unwrap()),
            "tc" => {
                let base = get("--base").map(PathBuf::from).ok_or("tc: --base DIR")?;
                let variants: Vec<(String, PathBuf)> = args
                    .windows(2)
                    .filter(|w| w[0] == "--variant")
                    .map(|w| {
                        let (n, d) = w[1].split_once('=').unwrap_or((&w[1], &w[1]));
                        (n.to_string(), PathBuf::from(d))
                    })
                    .collect();
                tc_run::main(gpu.as_ref(), &base, &variants, has("--cpu-only"))
            }
            _ => Err(format!("unknown subcommand {cmd}")),
        }
    })();
    match res {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            println!("FAILED: a check above did not hold");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("tcharness {cmd}: {e}");
            ExitCode::from(2)
        }
    }
}
