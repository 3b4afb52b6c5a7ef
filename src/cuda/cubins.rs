//! The embedded kernel binaries and their integrity check.
//!
//! One cubin per kernel source and architecture, built ahead of time by `kernels/build.py`
//! (docs/build.md) and committed with `kernels/cubin/SHA256SUMS`. Before a cubin is handed to the
//! driver its SHA-256 is compared with the one recorded there; a mismatch is
//! [`Error::CubinIntegrity`], never a fallback to another binary.
//!
//! **What runs is what was audited.** In a default build nothing outside the binary can change
//! which cubin is loaded: no environment variable, file or argument is read here. Only a build
//! with the non-default cargo feature `test-override` (the planted-leak timing tests and the
//! second-compiler check D7 need one) reads the environment variable [`TEST_CUBIN_DIR_ENV`]: when
//! it names a folder, every cubin comes from that folder instead, checked against the
//! `SHA256SUMS` in the same folder, and a cubin missing there is an error (a test must know which
//! binary it timed). Such a build says so in `detattn info` and `detattn selftest`
//! ([`OVERRIDE_CAPABLE`]).

use crate::error::{Error, Result};
use sha2::{Digest as _, Sha256};
use std::borrow::Cow;

/// The environment variable a `test-override` build reads (see the module docs). A default
/// build never reads it.
pub const TEST_CUBIN_DIR_ENV: &str = "DETATTN_TEST_CUBIN_DIR";

/// Whether this build can load cubins from [`TEST_CUBIN_DIR_ENV`] (the `test-override` feature).
/// `false` in every default build.
pub const OVERRIDE_CAPABLE: bool = cfg!(feature = "test-override");

/// Architectures we ship cubins for, in order (exact matches only: a cubin for sm_80 is not run on
/// an sm_87 device; such a GPU gets [`Error::UnsupportedGpu`] naming this list).
pub const ARCHS: [&str; 6] = ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"];

const SUMS: &str = include_str!("../../kernels/cubin/SHA256SUMS");

macro_rules! cubins {
    ($($file:literal),* $(,)?) => {
        [$(($file, include_bytes!(concat!("../../kernels/cubin/", $file)) as &[u8])),*]
    };
}

static EMBEDDED: [(&str, &[u8]); 12] = cubins![
    "exact.sm_80.cubin",
    "exact.sm_86.cubin",
    "exact.sm_89.cubin",
    "exact.sm_90.cubin",
    "exact.sm_100.cubin",
    "exact.sm_120.cubin",
    "tensorcore.sm_80.cubin",
    "tensorcore.sm_86.cubin",
    "tensorcore.sm_89.cubin",
    "tensorcore.sm_90.cubin",
    "tensorcore.sm_100.cubin",
    "tensorcore.sm_120.cubin",
];

/// A verified cubin, ready for the driver.
#[derive(Debug)]
pub(crate) struct Cubin {
    /// The bytes (borrowed from the binary when embedded).
    pub bytes: Cow<'static, [u8]>,
    /// Where it came from: `embedded`, or `DIR/FILE (test override)`.
    pub source: String,
}

/// Lowercase hex SHA-256.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The SHA-256 recorded for `file` in a `SHA256SUMS` text (`<hex>  <file>` per line, as
/// `sha256sum` writes it).
fn recorded(sums: &str, file: &str) -> Option<String> {
    sums.lines()
        .filter_map(|l| l.split_once("  "))
        .find(|(_, f)| f.trim() == file)
        .map(|(h, _)| h.trim().to_string())
}

/// Check `bytes` against the entry for `file` in `sums`.
fn verify(file: &str, bytes: &[u8], sums: &str) -> Result<()> {
    let actual = sha256_hex(bytes);
    let expected = recorded(sums, file).unwrap_or_else(|| "(no SHA256SUMS entry)".into());
    if expected != actual {
        return Err(Error::CubinIntegrity {
            file: file.to_string(),
            expected,
            actual,
        });
    }
    Ok(())
}

/// The verified cubin of kernel source `stem` for `arch`: the embedded one (in a `test-override`
/// build with the variable set, the folder's; module docs).
pub(crate) fn load(stem: &str, arch: &str) -> Result<Cubin> {
    let file = format!("{stem}.{arch}.cubin");
    #[cfg(feature = "test-override")]
    if let Some(dir) = std::env::var_os(TEST_CUBIN_DIR_ENV) {
        return test_override::load(std::path::Path::new(&dir), &file);
    }
    let bytes = EMBEDDED
        .iter()
        .find(|(f, _)| *f == file)
        .map(|(_, b)| *b)
        .ok_or_else(|| Error::CubinIntegrity {
            file: file.clone(),
            expected: "an embedded cubin".into(),
            actual: "none".into(),
        })?;
    verify(&file, bytes, SUMS)?;
    Ok(Cubin {
        bytes: Cow::Borrowed(bytes),
        source: "embedded".into(),
    })
}

#[cfg(feature = "test-override")]
mod test_override {
    use super::{Cubin, verify};
    use crate::error::{Error, Result};
    use std::borrow::Cow;
    use std::path::Path;

    /// `file` from the test folder `dir`, checked against the folder's `SHA256SUMS`.
    pub(super) fn load(dir: &Path, file: &str) -> Result<Cubin> {
        let read = |name: &str| {
            std::fs::read(dir.join(name)).map_err(|e| Error::CubinIntegrity {
                file: format!("{}", dir.join(name).display()),
                expected: "a readable file".into(),
                actual: e.to_string(),
            })
        };
        let bytes = read(file)?;
        let sums = String::from_utf8_lossy(&read("SHA256SUMS")?).into_owned();
        verify(file, &bytes, &sums)?;
        Ok(Cubin {
            bytes: Cow::Owned(bytes),
            source: format!("{} (test override)", dir.join(file).display()),
        })
    }
}

/// One embedded cubin as the probe reports it.
pub(crate) struct Embedded {
    pub file: &'static str,
    pub arch: &'static str,
    pub sha256: String,
    pub verified: bool,
    /// Where [`load`] takes this cubin from in this process: `embedded`, the test folder, or the
    /// error it would return.
    pub loads_from: String,
}

/// Every embedded cubin with its recorded hash, whether the bytes match it, and where [`load`]
/// would take it from (so `detattn info` shows an override in force).
pub(crate) fn embedded() -> Vec<Embedded> {
    EMBEDDED
        .iter()
        .map(|(file, bytes)| {
            let (stem, rest) = file.split_once('.').unwrap_or((file, ""));
            let arch = rest.trim_end_matches(".cubin");
            let arch = ARCHS.iter().copied().find(|a| *a == arch).unwrap_or("?");
            let sha = recorded(SUMS, file).unwrap_or_default();
            Embedded {
                file,
                arch,
                verified: sha == sha256_hex(bytes),
                sha256: sha,
                loads_from: match load(stem, arch) {
                    Ok(c) => c.source,
                    Err(e) => format!("error: {e}"),
                },
            }
        })
        .collect()
}

/// `sm_XY` for a compute capability, if we ship cubins for it.
pub(crate) fn arch_of(major: i32, minor: i32) -> Option<&'static str> {
    let name = format!("sm_{major}{minor}");
    ARCHS.iter().copied().find(|a| *a == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel sources (`kernels/<stem>.cu`), one cubin each per architecture.
    const STEMS: [&str; 2] = ["exact", "tensorcore"];

    #[test]
    fn every_shipped_cubin_is_embedded_and_matches_its_recorded_hash() {
        let all = embedded();
        assert_eq!(all.len(), STEMS.len() * ARCHS.len());
        for e in &all {
            assert!(e.verified, "{} does not match its SHA256SUMS entry", e.file);
            assert_eq!(e.sha256.len(), 64);
        }
        for stem in STEMS {
            for arch in ARCHS {
                let file = format!("{stem}.{arch}.cubin");
                assert!(all.iter().any(|e| e.file == file), "{file} not embedded");
            }
        }
    }

    #[test]
    fn a_flipped_byte_is_an_integrity_error() {
        let (file, bytes) = EMBEDDED[3];
        let mut bytes = bytes.to_vec();
        bytes[100] ^= 1;
        match verify(file, &bytes, SUMS) {
            Err(Error::CubinIntegrity { file: f, .. }) => assert_eq!(f, file),
            other => panic!("expected CubinIntegrity, got {other:?}"),
        }
        // And a file without an entry is one too.
        assert!(verify("nope.cubin", &bytes, SUMS).is_err());
    }

    #[test]
    fn only_shipped_architectures_are_chosen() {
        assert_eq!(arch_of(9, 0), Some("sm_90"));
        assert_eq!(arch_of(8, 6), Some("sm_86"));
        assert_eq!(arch_of(7, 5), None);
        assert_eq!(arch_of(10, 0), Some("sm_100"));
        assert_eq!(arch_of(12, 0), Some("sm_120"));
        assert_eq!(arch_of(12, 1), None);
        assert_eq!(arch_of(11, 0), None);
    }

    #[cfg(feature = "test-override")]
    #[test]
    fn the_test_override_reads_the_folder_and_never_falls_back() {
        // Called directly: setting the variable here would race with the other tests (the
        // variable itself is exercised by tests/override.rs in a child process).
        let dir =
            std::env::temp_dir().join(format!("detattn-cubin-override-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (file, bytes) = EMBEDDED[9];
        std::fs::write(dir.join(file), bytes).unwrap();
        std::fs::write(
            dir.join("SHA256SUMS"),
            format!("{}  {file}\n", sha256_hex(bytes)),
        )
        .unwrap();
        let c = test_override::load(&dir, file).unwrap();
        assert_eq!(&*c.bytes, bytes);
        assert!(c.source.ends_with("(test override)"), "{}", c.source);
        // A cubin missing from the folder is an error, not the embedded one.
        assert!(matches!(
            test_override::load(&dir, "tensorcore.sm_80.cubin"),
            Err(Error::CubinIntegrity { .. })
        ));
        // A cubin that does not match the folder's sums is an error.
        let mut bad = bytes.to_vec();
        bad[100] ^= 1;
        std::fs::write(dir.join(file), &bad).unwrap();
        assert!(matches!(
            test_override::load(&dir, file),
            Err(Error::CubinIntegrity { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
