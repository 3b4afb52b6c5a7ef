//! What the GPU test binaries (cuda_exact, cuda_tensorcore) share: opening GPU 0 for a path, or
//! saying loudly that the test is skipped and why. A test without a usable GPU must never pass
//! silently.
#![allow(dead_code)]

use detattn::{Backend, Engine, Path};
use std::io::Write as _;

/// GPU 0 on `path`, or `None` after printing `SKIPPED <test>: …` with the reason.
pub fn gpu(test: &str, path: Path) -> Option<Engine> {
    match Engine::new(Backend::Cuda(0), path) {
        Ok(e) => {
            eprintln!("{test}: running on {}", e.describe());
            Some(e)
        }
        Err(e) => {
            loud(&format!(
                "SKIPPED {test}: no usable CUDA GPU for the {} path ({e})",
                path.name()
            ));
            None
        }
    }
}

/// A line that must be seen even when the test passes: straight to the stderr handle, not
/// through `eprintln!`, which the test harness captures and hides for passing tests.
pub fn loud(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}
