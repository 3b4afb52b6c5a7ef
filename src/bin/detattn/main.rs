//! `detattn`: run one attention problem, check the golden digests on every backend, show what the
//! machine offers, or time a problem.
//!
//! Exit codes: 0 success; 1 a runtime failure (no GPU where one was asked for, a CUDA error, a
//! golden digest mismatch); 2 a usage or validation error (a bad flag, an invalid problem). Every
//! error is printed as `error: <message>` on stderr; the program does not panic on user input.
//! With `--json`, stdout holds exactly one JSON document (progress, if any, goes to stderr), an
//! error included: `{"error": {"kind": "usage" | "runtime", "message": "..."}}`.

/// `println!` that ends the program quietly when stdout is closed (`detattn ... | head`) instead
/// of panicking, as `println!` does on a broken pipe.
macro_rules! outln {
    ($($t:tt)*) => {
        $crate::write_stdout(format_args!($($t)*))
    };
}

mod bench;
mod info;
mod problem_args;
mod run;
mod selftest;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Attention kernels whose outputs are bitwise reproducible.
#[derive(Parser, Debug)]
#[command(name = "detattn", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one problem from flags; print backend, path, time and the output digest.
    Run(run::RunArgs),
    /// Check every golden problem on every available backend against the built-in digests.
    Selftest(selftest::SelftestArgs),
    /// Show the version, the backends found and the embedded kernels.
    Info(info::InfoArgs),
    /// Time one problem (median of the timed iterations).
    Bench(bench::BenchArgs),
}

/// A failure with the exit code it maps to.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Exit 2: the user asked for something invalid.
    Usage(String),
    /// Exit 1: something failed while running.
    Runtime(String),
}

impl Failure {
    /// Classify a library error: problems with what was asked are usage errors, problems of the
    /// machine (driver, GPU, CUDA) are runtime errors.
    pub(crate) fn from_lib(e: detattn::Error) -> Failure {
        let msg = e.to_string();
        match e {
            // The CLI's words for the remedy: a flag, not a Rust enum.
            detattn::Error::PathUnavailable { .. } => {
                Failure::Usage(format!("{msg} (use --path exact)"))
            }
            e if e.is_caller_error() => Failure::Usage(msg),
            _ => Failure::Runtime(msg),
        }
    }
}

impl From<detattn::Error> for Failure {
    fn from(e: detattn::Error) -> Self {
        Failure::from_lib(e)
    }
}

/// Write one line to stdout; if stdout is gone (a closed pipe), exit with 141 (128 + SIGPIPE, what
/// a shell reports for a process killed by SIGPIPE) without a message.
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{args}").and_then(|()| out.flush()).is_err() {
        std::process::exit(141);
    }
}

/// Whether this binary was built with the test-only `test-override` feature.
pub(crate) fn override_capable() -> bool {
    #[cfg(feature = "cuda")]
    return detattn::cuda::OVERRIDE_CAPABLE;
    #[cfg(not(feature = "cuda"))]
    return false;
}

/// The banner an override-capable build prints first (`info`, `selftest`), or `None`.
pub(crate) fn override_warning() -> Option<String> {
    override_capable().then(|| {
        "WARNING: TEST BUILD (cargo feature `test-override`): the environment variables \
         DETATTN_TEST_CUBIN_DIR (the audited, embedded cubins) and DETATTN_TEST_CPU_ISA (the CPU \
         kernel's instruction set) change which machine code runs. Never use this build in \
         production."
            .to_string()
    })
}

/// Print a JSON value as the only thing on stdout.
pub(crate) fn print_json(v: &serde_json::Value) {
    // A Value always serialises; pretty output keeps it readable for people too.
    outln!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = match &cli.command {
        Command::Run(a) => a.json(),
        Command::Selftest(a) => a.json,
        Command::Info(a) => a.json,
        Command::Bench(a) => a.json(),
    };
    let result = match cli.command {
        Command::Run(a) => run::main(a),
        Command::Selftest(a) => selftest::main(a),
        Command::Info(a) => info::main(a),
        Command::Bench(a) => bench::main(a),
    };
    let (kind, message, code) = match result {
        Ok(code) => return code,
        Err(Failure::Usage(m)) => ("usage", m, 2),
        Err(Failure::Runtime(m)) => ("runtime", m, 1),
    };
    if json {
        print_json(&serde_json::json!({"error": {"kind": kind, "message": message}}));
    } else {
        eprintln!("error: {message}");
    }
    ExitCode::from(code)
}
