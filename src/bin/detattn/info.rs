//! `detattn info`: the version, the backends this machine offers, and the embedded kernels.

use crate::{Failure, print_json};
use clap::Args;
use serde_json::{Value, json};
use std::process::ExitCode;

/// Flags of `detattn info`.
#[derive(Args, Debug)]
pub(crate) struct InfoArgs {
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn main(args: InfoArgs) -> Result<ExitCode, Failure> {
    let cpu = cpu_info();
    let cuda = cuda_info();
    if args.json {
        print_json(&json!({
            "version": env!("CARGO_PKG_VERSION"),
            "digest_version": detattn::DIGEST_VERSION,
            "contract_version": detattn::CONTRACT_VERSION,
            "override_capable": crate::override_capable(),
            "cpu": cpu,
            "cuda": cuda,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(w) = crate::override_warning() {
        outln!("{w}");
    }
    outln!("detattn {}", env!("CARGO_PKG_VERSION"));
    outln!("  digest format  v{}", detattn::DIGEST_VERSION);
    outln!(
        "  numerics       contract v{} (docs/numerics.md: the exact path's bits)",
        detattn::CONTRACT_VERSION
    );
    outln!(
        "  cubins         {}",
        if crate::override_capable() {
            "TEST BUILD: DETATTN_TEST_CUBIN_DIR can replace the embedded cubins, DETATTN_TEST_CPU_ISA narrow the CPU kernel"
        } else {
            "embedded and verified only (no test override in this build)"
        }
    );
    outln!("cpu");
    outln!("  model          {}", cpu["model"].as_str().unwrap_or("?"));
    outln!("  threads        {} (rayon pool)", cpu["threads"]);
    outln!("  kernel         {}", cpu["kernel"].as_str().unwrap_or("?"));
    outln!("  paths          exact");
    outln!("cuda");
    if !cuda["compiled"].as_bool().unwrap_or(false) {
        outln!("  not compiled in (built without the `cuda` feature)");
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "  architectures  {} (kernels shipped); run on {}; tensorcore golden digests for {}",
        cuda["archs"].as_array().map_or("?".into(), |a| join(a)),
        cuda["archs_run"].as_array().map_or("?".into(), |a| join(a)),
        cuda["tensorcore_golden"]
            .as_array()
            .map_or("?".into(), |a| join(a)),
    );
    match cuda["driver"].as_str() {
        Some(v) => outln!("  driver         CUDA {v}"),
        None => outln!(
            "  driver         none: {}",
            cuda["driver_error"].as_str().unwrap_or("?")
        ),
    }
    let devices = cuda["devices"].as_array().cloned().unwrap_or_default();
    if devices.is_empty() {
        outln!("  gpus           none found");
    }
    for d in &devices {
        outln!(
            "  gpu {:<10} {} ({}), {}",
            d["ordinal"],
            d["name"].as_str().unwrap_or("?"),
            d["arch"].as_str().unwrap_or("?"),
            if d["supported"].as_bool() == Some(true) {
                "supported"
            } else {
                "NOT supported (no embedded kernel for this architecture)"
            }
        );
    }
    let cubins = cuda["cubins"].as_array().cloned().unwrap_or_default();
    if cubins.is_empty() {
        outln!("  cubins         none embedded");
    } else {
        outln!("  cubins         {} embedded", cubins.len());
        let fw = cubins
            .iter()
            .map(|c| c["file"].as_str().unwrap_or("").len())
            .max()
            .unwrap_or(0);
        for c in &cubins {
            outln!(
                "    {:<fw$}  {:<6}  sha256 {}  {}",
                c["file"].as_str().unwrap_or("?"),
                c["arch"].as_str().unwrap_or("?"),
                c["sha256"].as_str().unwrap_or("?"),
                if c["verified"].as_bool() == Some(true) {
                    "verified"
                } else {
                    "HASH MISMATCH"
                }
            );
            let from = c["loads_from"].as_str().unwrap_or("?");
            if from != "embedded" {
                outln!("      LOADED FROM {from}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn cpu_info() -> Value {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    json!({
        "model": model,
        "threads": rayon::current_num_threads(),
        "kernel": detattn::cpu::instruction_set(),
    })
}

#[cfg(feature = "cuda")]
fn cuda_info() -> Value {
    let p = detattn::cuda::probe();
    let (driver, driver_error) = match &p.driver {
        // The driver reports 1000·major + 10·minor.
        Ok(v) => (
            Some(format!("{}.{} ({v})", v / 1000, (v % 1000) / 10)),
            None,
        ),
        Err(e) => (None, Some(e.clone())),
    };
    let devices: Vec<_> = p
        .devices
        .iter()
        .map(|d| {
            json!({
                "ordinal": d.ordinal, "name": d.name, "arch": format!("sm_{}{}", d.major, d.minor),
                "supported": d.supported,
            })
        })
        .collect();
    let cubins: Vec<_> = p
        .cubins
        .iter()
        .map(|c| {
            json!({"file": c.file, "arch": c.arch, "sha256": c.sha256, "verified": c.verified,
                       "loads_from": c.loads_from})
        })
        .collect();
    let tc_golden: Vec<String> = detattn::golden::FILES
        .iter()
        .filter_map(|(_, t)| detattn::golden::parse(t).ok())
        .filter(|f| f.path == detattn::Path::TensorCore)
        .map(|f| f.architecture)
        .collect();
    json!({
        "compiled": true, "driver": driver, "driver_error": driver_error,
        "devices": devices, "cubins": cubins,
        "archs": detattn::cuda::ARCHS, "archs_run": detattn::cuda::ARCHS_RUN,
        "tensorcore_golden": tc_golden,
    })
}

fn join(a: &[Value]) -> String {
    a.iter()
        .map(|x| x.as_str().unwrap_or("?"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(not(feature = "cuda"))]
fn cuda_info() -> Value {
    json!({"compiled": false, "driver": null, "driver_error": "built without the `cuda` feature",
           "devices": [], "cubins": []})
}
