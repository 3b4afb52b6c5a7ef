//! `detattn selftest`: every golden problem on every available backend, compared with the digests
//! compiled into the binary (the same snapshot `cargo test` checks the CPU against). On a GPU the
//! `TensorCore` path is checked too, separately: its golden problems (f16/bf16, head_dim 64, 128,
//! 256) against the digests recorded for the GPU's architecture; where none are recorded, it says
//! so and those runs are reported as not checked (not as passed).

use crate::{Failure, print_json};
use clap::Args;
use detattn::golden::{self, GoldenCase};
use detattn::{Backend, Engine, Path};
use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

/// Which backends to check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    /// The CPU and every supported GPU found.
    All,
    /// The CPU only.
    Cpu,
    /// Every supported GPU found (an error if there is none).
    AllGpus,
    /// One GPU.
    Gpu(usize),
}

fn parse_which(s: &str) -> Result<Which, String> {
    match s {
        "all" => Ok(Which::All),
        "cpu" => Ok(Which::Cpu),
        "cuda" => Ok(Which::AllGpus),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(Which::Gpu)
            .ok_or_else(|| format!("unknown backend {s:?}: expected all, cpu, cuda or cuda:N")),
    }
}

/// Flags of `detattn selftest`.
#[derive(Args, Debug)]
pub(crate) struct SelftestArgs {
    /// Which backends: all (the CPU and every supported GPU), cpu, cuda (every supported GPU),
    /// or cuda:N.
    #[arg(long, default_value = "all", value_parser = parse_which)]
    backend: Which,
    /// Print one JSON document on stdout (progress goes to stderr).
    #[arg(long)]
    json: bool,
}

/// The outcome of one case on one backend.
enum Verdict {
    Ok,
    /// Ran, but there is no recorded digest to compare with (TensorCore on an architecture
    /// without a snapshot). Neither a pass nor a failure. Only a GPU produces it.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    Unchecked(String),
    Mismatch {
        expected: String,
        got: String,
    },
    Error(String),
}

struct CaseResult {
    name: &'static str,
    verdict: Verdict,
    seconds: f64,
}

struct BackendReport {
    label: String,
    description: String,
    results: Vec<CaseResult>,
}

impl BackendReport {
    fn passed(&self) -> usize {
        self.results
            .iter()
            .filter(|r| matches!(r.verdict, Verdict::Ok))
            .count()
    }
    fn unchecked(&self) -> usize {
        self.results
            .iter()
            .filter(|r| matches!(r.verdict, Verdict::Unchecked(_)))
            .count()
    }
}

/// The backends to check, plus notes on what was not checked and why.
struct Plan {
    engines: Vec<(String, Engine)>,
    /// `TensorCore` engines of the GPUs checked, with their architecture (none without CUDA).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    tc_engines: Vec<(String, Engine, &'static str)>,
    notes: Vec<String>,
    /// A GPU that should have worked did not open: a failure, not a note.
    failures: Vec<String>,
    gpus_checked: usize,
}

fn plan(which: Which) -> Result<Plan, Failure> {
    let mut plan = Plan {
        engines: vec![],
        tc_engines: vec![],
        notes: vec![],
        failures: vec![],
        gpus_checked: 0,
    };
    if matches!(which, Which::All | Which::Cpu) {
        plan.engines
            .push(("cpu".into(), Engine::new(Backend::Cpu, Path::Exact)?));
    }
    if which != Which::Cpu {
        add_gpus(&mut plan, which)?;
    }
    Ok(plan)
}

#[cfg(feature = "cuda")]
fn add_gpus(plan: &mut Plan, which: Which) -> Result<(), Failure> {
    let probe = detattn::cuda::probe();
    if let Err(reason) = &probe.driver {
        return no_gpu(plan, which, format!("no CUDA driver: {reason}"));
    }
    if probe.devices.is_empty() {
        return no_gpu(plan, which, "the CUDA driver reports no GPU".into());
    }
    if let Which::Gpu(n) = which
        && !probe.devices.iter().any(|d| d.ordinal == n)
    {
        return Err(Failure::Runtime(format!(
            "there is no GPU cuda:{n} ({} found)",
            probe.devices.len()
        )));
    }
    for d in &probe.devices {
        if matches!(which, Which::Gpu(n) if n != d.ordinal) {
            continue;
        }
        let label = format!("cuda:{}", d.ordinal);
        if !d.supported {
            let msg = format!(
                "{label} {} is sm_{}{}, which has no embedded kernel: not checked",
                d.name, d.major, d.minor
            );
            // Asked for by number: that is an error; found while looking for all: a note.
            if matches!(which, Which::Gpu(_)) {
                return Err(Failure::Runtime(msg));
            }
            plan.notes.push(msg);
            continue;
        }
        match Engine::new(Backend::Cuda(d.ordinal), Path::Exact) {
            Ok(e) => {
                plan.engines.push((label.clone(), e));
                plan.gpus_checked += 1;
                match Engine::new(Backend::Cuda(d.ordinal), Path::TensorCore) {
                    Ok(t) => {
                        let arch = t.cuda().map_or("unknown", |c| c.arch());
                        plan.tc_engines.push((format!("{label} tc"), t, arch));
                    }
                    Err(e) => plan.failures.push(format!(
                        "{label} {}: the tensorcore path could not be opened: {e}",
                        d.name
                    )),
                }
            }
            Err(e) => plan
                .failures
                .push(format!("{label} {} could not be opened: {e}", d.name)),
        }
    }
    if plan.gpus_checked == 0 && plan.failures.is_empty() && which != Which::All {
        return Err(Failure::Runtime(
            "no supported GPU was found (see `detattn info`)".into(),
        ));
    }
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn add_gpus(plan: &mut Plan, which: Which) -> Result<(), Failure> {
    no_gpu(
        plan,
        which,
        "this binary was built without the `cuda` feature".into(),
    )
}

/// No GPU at all: a note when checking everything, an error when a GPU was asked for.
fn no_gpu(plan: &mut Plan, which: Which, why: String) -> Result<(), Failure> {
    if which == Which::All {
        plan.notes
            .push(format!("no GPU checked ({why}); only the CPU was checked"));
        Ok(())
    } else {
        Err(Failure::Runtime(format!("no GPU to check: {why}")))
    }
}

pub(crate) fn main(args: SelftestArgs) -> Result<ExitCode, Failure> {
    let plan = plan(args.backend)?;
    let cases = golden::cases();
    let expected: BTreeMap<String, String> = golden::expected_digests().into_iter().collect();
    let n = cases.len();

    // The case list and the compiled-in snapshot must describe the same set.
    let mut consistency: Vec<String> = expected
        .keys()
        .filter(|k| !cases.iter().any(|c| c.name == k.as_str()))
        .map(|k| format!("the snapshot has a digest for {k}, which is not a golden case"))
        .collect();
    consistency.extend(plan.failures.iter().cloned());

    let say = |line: String| {
        if args.json {
            // Progress on stderr; a closed stderr is not worth failing the run for.
            let _ = writeln!(std::io::stderr(), "{line}");
        } else {
            outln!("{line}");
        }
    };
    if let Some(w) = crate::override_warning() {
        say(w);
    }
    say(format!(
        "detattn {} selftest: {n} golden problems on the exact path (every backend), and on the \
         tensorcore path those it takes (every GPU)",
        env!("CARGO_PKG_VERSION")
    ));
    for (label, e) in &plan.engines {
        say(format!("  backend {label:<7} {}", e.describe()));
    }
    for note in &plan.notes {
        say(format!("  note: {note}"));
    }
    for f in &consistency {
        say(format!("  FAILURE: {f}"));
    }

    let name_w = cases.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let label_w = plan.engines.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    let mut reports = vec![];
    for (label, engine) in &plan.engines {
        let mut results = vec![];
        for (i, case) in cases.iter().enumerate() {
            let r = check(case, engine, expected.get(case.name));
            let status = match &r.verdict {
                Verdict::Ok => "OK".to_string(),
                Verdict::Unchecked(_) => "UNCHECKED".to_string(),
                Verdict::Mismatch { .. } => "MISMATCH".to_string(),
                Verdict::Error(_) => "ERROR".to_string(),
            };
            say(format!(
                "[{:>w$}/{n}] {label:<label_w$}  {:<name_w$}  {status:<8} {:>8.1} ms",
                i + 1,
                case.name,
                r.seconds * 1e3,
                w = n.to_string().len()
            ));
            match &r.verdict {
                Verdict::Ok | Verdict::Unchecked(_) => {}
                Verdict::Mismatch { expected, got } => {
                    say(format!("      expected {expected}"));
                    say(format!("      got      {got}"));
                }
                Verdict::Error(e) => say(format!("      {e}")),
            }
            results.push(r);
        }
        reports.push(BackendReport {
            label: label.clone(),
            description: engine.describe(),
            results,
        });
    }
    tensorcore_reports(&plan, &cases, &say, &mut reports);

    let failed: usize = reports
        .iter()
        .map(|r| r.results.len() - r.passed() - r.unchecked())
        .sum();
    let ok = failed == 0 && consistency.is_empty() && !reports.is_empty();
    if args.json {
        print_json(&json_report(&reports, &plan, &consistency, ok));
    } else {
        outln!("summary");
        for r in &reports {
            let unchecked = match r.unchecked() {
                0 => String::new(),
                u => format!(", {u} NOT CHECKED (no digests recorded for this architecture)"),
            };
            outln!(
                "  {:<w$}  {}/{} OK{unchecked}  ({})",
                r.label,
                r.passed(),
                r.results.len(),
                r.description,
                w = label_w + 3
            );
        }
        let gpus = if plan.gpus_checked == 0 {
            "no GPU checked, only the CPU".to_string()
        } else {
            format!("{} GPU(s) checked", plan.gpus_checked)
        };
        if ok {
            outln!(
                "selftest PASSED: {n} cases on {} backend(s); {gpus}",
                reports.len()
            );
        } else {
            outln!(
                "selftest FAILED: {failed} case run(s) did not match, {} other failure(s); {gpus}",
                consistency.len()
            );
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn check(case: &GoldenCase, engine: &Engine, expected: Option<&String>) -> CaseResult {
    let t = Instant::now();
    let got = case.run(engine);
    let seconds = t.elapsed().as_secs_f64();
    let verdict = match (got, expected) {
        (Err(e), _) => Verdict::Error(e.to_string()),
        (Ok(_), None) => Verdict::Error("no golden digest for this case in the snapshot".into()),
        (Ok(d), Some(want)) if d.to_string() == *want => Verdict::Ok,
        (Ok(d), Some(want)) => Verdict::Mismatch {
            expected: want.clone(),
            got: d.to_string(),
        },
    };
    CaseResult {
        name: case.name,
        verdict,
        seconds,
    }
}

fn json_report(
    reports: &[BackendReport],
    plan: &Plan,
    consistency: &[String],
    ok: bool,
) -> serde_json::Value {
    use serde_json::json;
    let backends: Vec<_> = reports
        .iter()
        .map(|r| {
            let cases: Vec<_> = r
                .results
                .iter()
                .map(|c| match &c.verdict {
                    Verdict::Ok => json!({"case": c.name, "status": "ok", "seconds": c.seconds}),
                    Verdict::Unchecked(got) => json!({
                        "case": c.name, "status": "unchecked", "got": got, "seconds": c.seconds,
                    }),
                    Verdict::Mismatch { expected, got } => json!({
                        "case": c.name, "status": "mismatch", "expected": expected, "got": got,
                        "seconds": c.seconds,
                    }),
                    Verdict::Error(e) => {
                        json!({"case": c.name, "status": "error", "error": e, "seconds": c.seconds})
                    }
                })
                .collect();
            json!({
                "backend": r.label, "description": r.description,
                "passed": r.passed(), "total": r.results.len(), "cases": cases,
            })
        })
        .collect();
    json!({
        "ok": ok,
        "override_capable": crate::override_capable(),
        "backends": backends,
        "gpus_checked": plan.gpus_checked,
        "notes": plan.notes,
        "failures": consistency,
    })
}

/// The `TensorCore` path of every GPU checked: its golden problems against the digests recorded
/// for the GPU's architecture (reported as not checked where there are none).
fn tensorcore_reports(
    plan: &Plan,
    cases: &[GoldenCase],
    say: &dyn Fn(String),
    reports: &mut Vec<BackendReport>,
) {
    #[cfg(feature = "cuda")]
    for (label, engine, arch) in &plan.tc_engines {
        use detattn::cuda;
        let expected: Option<BTreeMap<String, String>> =
            cuda::tensorcore_expected_digests(arch).map(|v| v.into_iter().collect());
        let tc_cases: Vec<&GoldenCase> = cases
            .iter()
            .filter(|c| cuda::tensorcore_supports(c))
            .collect();
        say(format!(
            "  tensorcore path on {label} ({arch}): {} golden problems (f16/bf16, head_dim 64/128/256); {}",
            tc_cases.len(),
            match &expected {
                Some(e) => format!(
                    "checked against the {} digests recorded for {arch}",
                    e.len()
                ),
                None => format!(
                    "NOT CHECKED: no tensorcore digests are recorded for {arch} (its bits are per \
                     architecture); the digests computed are printed"
                ),
            }
        ));
        let n = tc_cases.len();
        let mut results = vec![];
        for (i, case) in tc_cases.into_iter().enumerate() {
            let t = Instant::now();
            let got = cuda::golden_digest(case, engine);
            let seconds = t.elapsed().as_secs_f64();
            let verdict = match (got, &expected) {
                (Err(e), _) => Verdict::Error(e.to_string()),
                (Ok(d), None) => Verdict::Unchecked(d.to_string()),
                (Ok(d), Some(exp)) => match exp.get(case.name) {
                    None => Verdict::Error("no tensorcore digest recorded for this case".into()),
                    Some(want) if *want == d.to_string() => Verdict::Ok,
                    Some(want) => Verdict::Mismatch {
                        expected: want.clone(),
                        got: d.to_string(),
                    },
                },
            };
            let status = match &verdict {
                Verdict::Ok => "OK".to_string(),
                Verdict::Unchecked(d) => format!("UNCHECKED {d}"),
                Verdict::Mismatch { expected, got } => {
                    format!("MISMATCH expected {expected} got {got}")
                }
                Verdict::Error(e) => format!("ERROR {e}"),
            };
            say(format!(
                "[{:>w$}/{n}] {label}  {:<36}  {:>8.1} ms  {status}",
                i + 1,
                case.name,
                seconds * 1e3,
                w = n.to_string().len()
            ));
            results.push(CaseResult {
                name: case.name,
                verdict,
                seconds,
            });
        }
        reports.push(BackendReport {
            label: label.clone(),
            description: engine.describe(),
            results,
        });
    }
    #[cfg(not(feature = "cuda"))]
    let _ = (plan, cases, say, reports);
}
