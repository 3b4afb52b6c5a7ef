//! `detattn selftest`: every golden problem on every available backend and path, compared with
//! the golden files compiled into the binary (`golden/`, the same files `cargo test` checks the
//! CPU against). The `Exact` path is checked on the CPU and every supported GPU against one file;
//! the `TensorCore` path on every GPU against the file recorded for its architecture — where none
//! is recorded it says so and those runs are reported as not checked (not as passed).

use crate::{Failure, print_json};
use clap::Args;
use detattn::golden::{self, GoldenCase, GoldenFile};
use detattn::{Backend, Engine, Path};
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
    pub(crate) json: bool,
}

/// The outcome of one case on one engine.
enum Verdict {
    Ok,
    /// Ran, but no digest is recorded to compare with (`TensorCore` on an architecture without a
    /// golden file). Neither a pass nor a failure.
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

/// One engine to check: a backend on a path, and the golden file its bits must match.
struct Target {
    label: String,
    engine: Engine,
    golden: Option<GoldenFile>,
    /// Where the golden file would be for (`any` or `sm_XY`), for messages.
    arch: String,
}

struct Report {
    label: String,
    description: String,
    results: Vec<CaseResult>,
}

impl Report {
    fn count(&self, f: impl Fn(&Verdict) -> bool) -> usize {
        self.results.iter().filter(|r| f(&r.verdict)).count()
    }
}

/// The engines to check, plus notes on what was not checked and why.
struct Plan {
    targets: Vec<Target>,
    notes: Vec<String>,
    /// A GPU that should have worked did not open: a failure, not a note.
    failures: Vec<String>,
    gpus_checked: usize,
}

fn target(label: String, engine: Engine, arch: &str) -> Target {
    Target {
        golden: golden::expected(engine.path(), arch),
        arch: if engine.path() == Path::Exact {
            "any".into()
        } else {
            arch.to_string()
        },
        label,
        engine,
    }
}

fn plan(which: Which) -> Result<Plan, Failure> {
    let mut plan = Plan {
        targets: vec![],
        notes: vec![],
        failures: vec![],
        gpus_checked: 0,
    };
    if matches!(which, Which::All | Which::Cpu) {
        let e = Engine::new(Backend::Cpu, Path::Exact)?;
        plan.targets.push(target("cpu".into(), e, "any"));
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
                "{label} {} is sm_{}{}, which has no embedded kernel (detattn ships {}): not checked",
                d.name,
                d.major,
                d.minor,
                detattn::cuda::ARCHS.join(", ")
            );
            // Asked for by number: that is an error; found while looking for all: a note.
            if matches!(which, Which::Gpu(_)) {
                return Err(Failure::Runtime(msg));
            }
            plan.notes.push(msg);
            continue;
        }
        let mut opened = false;
        for path in Path::ALL {
            match Engine::new(Backend::Cuda(d.ordinal), path) {
                Ok(e) => {
                    let arch = e.cuda().map_or("unknown", |c| c.arch());
                    let l = match path {
                        Path::Exact => label.clone(),
                        Path::TensorCore => format!("{label} tc"),
                    };
                    plan.targets.push(target(l, e, arch));
                    opened = true;
                }
                Err(e) => plan.failures.push(format!(
                    "{label} {}: the {path} path could not be opened: {e}",
                    d.name
                )),
            }
        }
        plan.gpus_checked += usize::from(opened);
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

/// Every golden file must parse, and cover exactly the cases of its path.
fn consistency(cases: &[GoldenCase]) -> Vec<String> {
    let mut out = vec![];
    for (file, text) in golden::FILES {
        let f = match golden::parse(text) {
            Ok(f) => f,
            Err(e) => {
                out.push(format!("golden/{file} does not parse: {e}"));
                continue;
            }
        };
        for (name, _) in &f.digests {
            if !cases.iter().any(|c| c.name == name && c.runs_on(f.path)) {
                out.push(format!("golden/{file} has a digest for {name}, which is not a golden case of the {} path", f.path));
            }
        }
        for c in cases.iter().filter(|c| c.runs_on(f.path)) {
            if f.digest(c.name).is_none() {
                out.push(format!("golden/{file} has no digest for {}", c.name));
            }
        }
    }
    out
}

pub(crate) fn main(args: SelftestArgs) -> Result<ExitCode, Failure> {
    let plan = plan(args.backend)?;
    let cases = golden::cases();
    let mut failures = consistency(&cases);
    failures.extend(plan.failures.iter().cloned());

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
        "detattn {} selftest: {} golden problems (numerics contract v{}); the exact path on every \
         backend, the tensorcore path on every GPU (the problems it takes)",
        env!("CARGO_PKG_VERSION"),
        cases.len(),
        detattn::CONTRACT_VERSION
    ));
    for t in &plan.targets {
        let against = match &t.golden {
            Some(g) => format!("golden/{}.{}.txt ({})", g.path, g.architecture, g.contract)
                .replace(".any.txt", ".txt"),
            None => format!(
                "NOT CHECKED: no {} digests are recorded for {} (its bits are per architecture); \
                 the digests computed are printed",
                t.engine.path(),
                t.arch
            ),
        };
        say(format!(
            "  {:<9} {}  against {against}",
            t.label,
            t.engine.describe()
        ));
    }
    for note in &plan.notes {
        say(format!("  note: {note}"));
    }
    for f in &failures {
        say(format!("  FAILURE: {f}"));
    }

    let name_w = cases.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let label_w = plan
        .targets
        .iter()
        .map(|t| t.label.len())
        .max()
        .unwrap_or(0);
    let mut reports = vec![];
    for t in &plan.targets {
        let mine: Vec<&GoldenCase> = cases
            .iter()
            .filter(|c| c.runs_on(t.engine.path()))
            .collect();
        let n = mine.len();
        let mut results = vec![];
        for (i, case) in mine.into_iter().enumerate() {
            let r = check(case, &t.engine, t.golden.as_ref());
            let status = match &r.verdict {
                Verdict::Ok => "OK".to_string(),
                Verdict::Unchecked(d) => format!("UNCHECKED {d}"),
                Verdict::Mismatch { .. } => "MISMATCH".to_string(),
                Verdict::Error(_) => "ERROR".to_string(),
            };
            say(format!(
                "[{:>w$}/{n}] {:<label_w$}  {:<name_w$}  {:>8.1} ms  {status}",
                i + 1,
                t.label,
                case.name,
                r.seconds * 1e3,
                w = n.to_string().len()
            ));
            match &r.verdict {
                Verdict::Mismatch { expected, got } => {
                    say(format!("      expected {expected}"));
                    say(format!("      got      {got}"));
                }
                Verdict::Error(e) => say(format!("      {e}")),
                _ => {}
            }
            results.push(r);
        }
        reports.push(Report {
            label: t.label.clone(),
            description: t.engine.describe(),
            results,
        });
    }

    let bad: usize = reports
        .iter()
        .map(|r| r.count(|v| matches!(v, Verdict::Mismatch { .. } | Verdict::Error(_))))
        .sum();
    let ok = bad == 0 && failures.is_empty() && !reports.is_empty();
    if args.json {
        print_json(&json_report(&reports, &plan, &failures, ok));
    } else {
        outln!("summary");
        for r in &reports {
            let unchecked = match r.count(|v| matches!(v, Verdict::Unchecked(_))) {
                0 => String::new(),
                u => format!(", {u} NOT CHECKED (no digests recorded for this architecture)"),
            };
            outln!(
                "  {:<w$}  {}/{} OK{unchecked}  ({})",
                r.label,
                r.count(|v| matches!(v, Verdict::Ok)),
                r.results.len(),
                r.description,
                w = label_w
            );
        }
        let gpus = if plan.gpus_checked == 0 {
            "no GPU checked, only the CPU".to_string()
        } else {
            format!("{} GPU(s) checked", plan.gpus_checked)
        };
        if ok {
            outln!(
                "selftest PASSED: {} golden problems on {} engine(s); {gpus}",
                cases.len(),
                reports.len()
            );
        } else {
            outln!(
                "selftest FAILED: {bad} case run(s) did not match, {} other failure(s); {gpus}",
                failures.len()
            );
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn check(case: &GoldenCase, engine: &Engine, golden: Option<&GoldenFile>) -> CaseResult {
    let t = Instant::now();
    let got = case.digest_on(engine);
    let seconds = t.elapsed().as_secs_f64();
    let verdict = match (got, golden) {
        (Err(e), _) => Verdict::Error(e.to_string()),
        (Ok(d), None) => Verdict::Unchecked(d.to_string()),
        (Ok(d), Some(g)) => match g.digest(case.name) {
            None => Verdict::Error("no golden digest recorded for this case".into()),
            Some(want) if want == d.to_string() => Verdict::Ok,
            Some(want) => Verdict::Mismatch {
                expected: want.to_string(),
                got: d.to_string(),
            },
        },
    };
    CaseResult {
        name: case.name,
        verdict,
        seconds,
    }
}

fn json_report(
    reports: &[Report],
    plan: &Plan,
    failures: &[String],
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
                        "case": c.name, "status": "unchecked", "got": got, "seconds": c.seconds
                    }),
                    Verdict::Mismatch { expected, got } => json!({
                        "case": c.name, "status": "mismatch", "expected": expected, "got": got,
                        "seconds": c.seconds
                    }),
                    Verdict::Error(e) => {
                        json!({"case": c.name, "status": "error", "error": e, "seconds": c.seconds})
                    }
                })
                .collect();
            json!({
                "backend": r.label, "description": r.description,
                "passed": r.count(|v| matches!(v, Verdict::Ok)), "total": r.results.len(),
                "cases": cases,
            })
        })
        .collect();
    json!({
        "ok": ok,
        "override_capable": crate::override_capable(),
        "contract_version": detattn::CONTRACT_VERSION,
        "backends": backends,
        "gpus_checked": plan.gpus_checked,
        "notes": plan.notes,
        "failures": failures,
    })
}
