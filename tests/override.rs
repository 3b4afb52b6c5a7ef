//! The audited machine code is what runs: a default build ignores `DETATTN_TEST_CUBIN_DIR`.
//!
//! A folder of *other* cubins (every embedded cubin with one byte changed) with a matching
//! `SHA256SUMS` — everything the test-only override would accept — is named in the variable, and
//! then:
//! - `detattn info --json` must report, for every embedded cubin, that this process loads it from
//!   the binary (`loads_from: embedded`) and that the build is not override-capable; a build with
//!   the `test-override` feature must instead report the folder (so the test can fail);
//! - on a GPU, an engine opened under the variable must run the embedded cubins (`cubin_source`)
//!   and reproduce a golden digest (the altered cubins would not load or would differ).
//!
//! The variable is only ever set in child processes, never in this one (tests run in parallel).

use std::path::PathBuf;
use std::process::Command;

const VAR: &str = "DETATTN_TEST_CUBIN_DIR";

/// A path of the repository: from the checkout this test was built in, or, where the binary was
/// carried to another machine (the GPU machine runs it from a copy of the repository), from the
/// current directory.
fn repo(rel: &str) -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel);
    if built.exists() {
        built
    } else {
        PathBuf::from(rel)
    }
}

/// The CLI of this build: where cargo put it, or scripts/carry.sh's default build beside it.
fn cli() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_detattn"));
    if built.exists() {
        built
    } else {
        repo(".carry/bin/detattn")
    }
}

/// A folder with every shipped cubin altered in one byte, and a SHA256SUMS that matches them.
fn altered_folder(tag: &str) -> PathBuf {
    let src = repo("kernels/cubin");
    let dir = std::env::temp_dir().join(format!(
        "detattn-altered-cubins-{tag}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let mut sums = String::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("cubin") {
            continue;
        }
        let mut bytes = std::fs::read(&path).unwrap();
        // A byte in the middle of the file: an ELF the driver could still try to load.
        let i = bytes.len() / 2;
        bytes[i] ^= 0x5a;
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let hex = sha256_hex(&bytes);
        std::fs::write(dir.join(&name), &bytes).unwrap();
        sums.push_str(&format!("{hex}  {name}\n"));
    }
    assert!(sums.lines().count() >= 8, "expected every shipped cubin");
    std::fs::write(dir.join("SHA256SUMS"), sums).unwrap();
    dir
}

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

#[test]
fn a_default_build_loads_only_the_embedded_cubins_whatever_the_environment_says() {
    let dir = altered_folder("info");
    let out = Command::new(cli())
        .args(["info", "--json"])
        .env(VAR, &dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cubins = v["cuda"]["cubins"].as_array().cloned().unwrap_or_default();
    let capable = cfg!(feature = "test-override");
    assert_eq!(v["override_capable"], capable, "{v}");
    if cfg!(feature = "cuda") {
        assert!(cubins.len() >= 8, "{v}");
    }
    for c in &cubins {
        let from = c["loads_from"].as_str().unwrap();
        if capable {
            // The override build really reads the folder: without this the test could not fail.
            assert!(from.contains("(test override)"), "{c}");
        } else {
            assert_eq!(from, "embedded", "{c}");
            assert_eq!(c["verified"], true, "{c}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// On a GPU: an engine opened with the variable set runs the embedded cubins. Runs itself as a
/// child process with the variable set (see `CHILD`).
#[cfg(feature = "cuda")]
#[test]
fn on_a_gpu_the_engine_runs_the_embedded_cubins_under_the_variable() {
    const CHILD: &str = "DETATTN_OVERRIDE_TEST_CHILD";
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let dir = altered_folder("gpu");
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            "on_a_gpu_the_engine_runs_the_embedded_cubins_under_the_variable",
            "--exact",
            "--nocapture",
        ])
        .env(VAR, &dir)
        .env(CHILD, "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    eprint!("{text}");
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(
        text.contains("SKIPPED") || text.contains("ran the embedded cubins"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "cuda")]
fn child() {
    use detattn::{Backend, Engine, Path, golden};
    use std::io::Write as _;
    let say = |l: &str| {
        let _ = writeln!(std::io::stderr(), "{l}");
    };
    for path in [Path::Exact, Path::TensorCore] {
        let e = match Engine::new(Backend::Cuda(0), path) {
            Ok(e) => e,
            Err(e) => {
                say(&format!(
                    "SKIPPED override GPU check: no usable CUDA GPU ({e})"
                ));
                return;
            }
        };
        let cb = e.cuda().unwrap();
        let sources = cb.cubin_sources();
        if cfg!(feature = "test-override") {
            assert!(
                sources.iter().all(|s| s.contains("(test override)")),
                "{sources:?}"
            );
            say("override build: ran the test folder's cubins (as it should)");
            continue;
        }
        assert!(sources.iter().all(|s| s == "embedded"), "{sources:?}");
        let case = golden::cases()
            .into_iter()
            .find(|c| c.name == "f16_mha")
            .unwrap();
        let got = case.digest_on(&e).unwrap().to_string();
        if let Some(want) = golden::expected(path, cb.arch()) {
            assert_eq!(
                Some(got.as_str()),
                want.digest(case.name),
                "{}",
                path.name()
            );
        }
        say(&format!(
            "{}: ran the embedded cubins ({sources:?}), digest {got}",
            path.name()
        ));
    }
}
