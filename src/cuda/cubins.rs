//! The embedded `Exact` kernel binaries and their integrity check.
//!
//! One cubin per architecture, built ahead of time by `kernels/build.py` (docs/build.md) and
//! committed with `kernels/cubin/manifest.json`. Before a cubin is handed to the driver its
//! SHA-256 is compared with the manifest's; a mismatch is [`Error::CubinIntegrity`], never a
//! fallback to another binary.
//!
//! **For testing only** (the D7 compiler-independence check, the planted-leak timing tests): when
//! the environment variable `DETATTN_TEST_CUBIN_DIR` names a folder, `exact.<arch>.cubin` and
//! `tensorcore.<arch>.cubin` are read from that folder instead and checked against the
//! `manifest.json` in the same folder; a cubin missing there is an error, never a fall-back to
//! the embedded one (a test must know which binary it timed). Production code never sets it.

use crate::error::{Error, Result};
use sha2::{Digest as _, Sha256};

/// The test-only override of the embedded cubins (see the module docs).
pub const TEST_CUBIN_DIR_ENV: &str = "DETATTN_TEST_CUBIN_DIR";

/// Architectures we ship, in order.
pub const ARCHS: [&str; 4] = ["sm_80", "sm_86", "sm_89", "sm_90"];

const MANIFEST: &str = include_str!("../../kernels/cubin/manifest.json");

static EMBEDDED: [(&str, &[u8]); 4] = [
    (
        "exact.sm_80.cubin",
        include_bytes!("../../kernels/cubin/exact.sm_80.cubin"),
    ),
    (
        "exact.sm_86.cubin",
        include_bytes!("../../kernels/cubin/exact.sm_86.cubin"),
    ),
    (
        "exact.sm_89.cubin",
        include_bytes!("../../kernels/cubin/exact.sm_89.cubin"),
    ),
    (
        "exact.sm_90.cubin",
        include_bytes!("../../kernels/cubin/exact.sm_90.cubin"),
    ),
];

/// The `TensorCore` kernel binaries (kernels/tensorcore.cu), one per architecture in [`ARCHS`]
/// order, in the same manifest. The test-only folder override applies to them as to the `Exact`
/// ones (module docs).
static TC_EMBEDDED: [(&str, &[u8]); 4] = [
    (
        "tensorcore.sm_80.cubin",
        include_bytes!("../../kernels/cubin/tensorcore.sm_80.cubin"),
    ),
    (
        "tensorcore.sm_86.cubin",
        include_bytes!("../../kernels/cubin/tensorcore.sm_86.cubin"),
    ),
    (
        "tensorcore.sm_89.cubin",
        include_bytes!("../../kernels/cubin/tensorcore.sm_89.cubin"),
    ),
    (
        "tensorcore.sm_90.cubin",
        include_bytes!("../../kernels/cubin/tensorcore.sm_90.cubin"),
    ),
];

/// The verified `TensorCore` cubin for `arch` and its file name: the embedded one, or under the
/// test override the folder's (its name then says `(test override)`).
pub(crate) fn load_tensorcore(arch: &str) -> Result<(&'static [u8], &'static str)> {
    let file = format!("tensorcore.{arch}.cubin");
    if let Some(dir) = std::env::var_os(TEST_CUBIN_DIR_ENV) {
        return load_override_static(&std::path::PathBuf::from(dir), &file);
    }
    let (name, bytes) = TC_EMBEDDED
        .iter()
        .find(|(f, _)| *f == file)
        .copied()
        .ok_or_else(|| Error::CubinIntegrity {
            file: file.clone(),
            expected: "an embedded cubin".into(),
            actual: "none".into(),
        })?;
    verify(name, bytes, MANIFEST)?;
    Ok((bytes, name))
}

/// Lowercase hex SHA-256.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `(file, sha256)` of every entry of a manifest text.
fn manifest_hashes(text: &str) -> std::result::Result<Vec<(String, String)>, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let list = v.as_array().ok_or("manifest is not a JSON list")?;
    list.iter()
        .map(|e| {
            let f = e.get("file").and_then(|x| x.as_str());
            let h = e.get("sha256").and_then(|x| x.as_str());
            match (f, h) {
                (Some(f), Some(h)) => Ok((f.to_string(), h.to_string())),
                _ => Err("manifest entry without file or sha256".to_string()),
            }
        })
        .collect()
}

/// Check `bytes` against the manifest entry for `file`.
fn verify(file: &str, bytes: &[u8], manifest: &str) -> Result<()> {
    let actual = sha256_hex(bytes);
    let expected = manifest_hashes(manifest)
        .map_err(|e| Error::CubinIntegrity {
            file: file.to_string(),
            expected: format!("(unreadable manifest: {e})"),
            actual: actual.clone(),
        })?
        .into_iter()
        .find(|(f, _)| f == file)
        .map(|(_, h)| h)
        .unwrap_or_else(|| "(no manifest entry)".to_string());
    if expected != actual {
        return Err(Error::CubinIntegrity {
            file: file.to_string(),
            expected,
            actual,
        });
    }
    Ok(())
}

/// One embedded cubin as the probe reports it.
pub(crate) struct Embedded {
    pub file: &'static str,
    pub arch: &'static str,
    pub sha256: String,
    pub verified: bool,
}

/// Every embedded cubin with its manifest hash and whether the bytes match it.
pub(crate) fn embedded() -> Vec<Embedded> {
    let hashes = manifest_hashes(MANIFEST).unwrap_or_default();
    EMBEDDED
        .iter()
        .zip(ARCHS)
        .chain(TC_EMBEDDED.iter().zip(ARCHS))
        .map(|((file, bytes), arch)| {
            let sha = hashes
                .iter()
                .find(|(f, _)| f == file)
                .map(|(_, h)| h.clone())
                .unwrap_or_default();
            Embedded {
                file,
                arch,
                verified: sha == sha256_hex(bytes),
                sha256: sha,
            }
        })
        .collect()
}

/// `sm_XY` for a compute capability, if we ship a cubin for it.
pub(crate) fn arch_of(major: i32, minor: i32) -> Option<&'static str> {
    let name = format!("sm_{major}{minor}");
    ARCHS.iter().copied().find(|a| *a == name)
}

/// `file` from the test folder `dir`, checked against the folder's `manifest.json`; the bytes and
/// where they came from (`DIR/FILE (test override)`).
fn load_override(dir: &std::path::Path, file: &str) -> Result<(Vec<u8>, String)> {
    let read = |name: &str| {
        std::fs::read(dir.join(name)).map_err(|e| Error::CubinIntegrity {
            file: format!("{}", dir.join(name).display()),
            expected: "a readable file".into(),
            actual: e.to_string(),
        })
    };
    let bytes = read(file)?;
    let manifest = String::from_utf8_lossy(&read("manifest.json")?).into_owned();
    verify(file, &bytes, &manifest)?;
    Ok((
        bytes,
        format!("{} (test override)", dir.join(file).display()),
    ))
}

/// [`load_override`] with `'static` results, as the `TensorCore` loader hands them out (its
/// cubin and name live as long as the process when embedded). Each distinct override file is
/// read and leaked once per process, so repeated backends do not leak more: test-only memory,
/// a few MB at most.
fn load_override_static(
    dir: &std::path::Path,
    file: &str,
) -> Result<(&'static [u8], &'static str)> {
    type Loaded = Vec<(std::path::PathBuf, &'static [u8], &'static str)>;
    static LOADED: std::sync::Mutex<Loaded> = std::sync::Mutex::new(Vec::new());
    let path = dir.join(file);
    // A poisoned lock only means another thread panicked while holding it; the list is intact.
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, bytes, name)) = loaded.iter().find(|(p, _, _)| *p == path) {
        return Ok((*bytes, *name));
    }
    let (bytes, name) = load_override(dir, file)?;
    let (bytes, name): (&'static [u8], &'static str) = (Vec::leak(bytes), String::leak(name));
    loaded.push((path, bytes, name));
    Ok((bytes, name))
}

/// The verified cubin bytes for `arch`, and where they came from (`embedded` or the test folder).
pub(crate) fn load(arch: &str) -> Result<(Vec<u8>, String)> {
    let file = format!("exact.{arch}.cubin");
    if let Some(dir) = std::env::var_os(TEST_CUBIN_DIR_ENV) {
        return load_override(&std::path::PathBuf::from(dir), &file);
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
    verify(&file, bytes, MANIFEST)?;
    Ok((bytes.to_vec(), format!("embedded {file}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_cubins_match_the_manifest() {
        for e in embedded() {
            assert!(e.verified, "{} does not match its manifest hash", e.file);
            assert_eq!(e.sha256.len(), 64);
        }
        for a in ARCHS {
            assert!(load(a).is_ok(), "{a}");
            assert!(load_tensorcore(a).is_ok(), "tensorcore {a}");
        }
    }

    #[test]
    fn a_flipped_byte_is_an_integrity_error() {
        let mut bytes = EMBEDDED[3].1.to_vec();
        bytes[100] ^= 1;
        match verify(EMBEDDED[3].0, &bytes, MANIFEST) {
            Err(Error::CubinIntegrity { file, .. }) => assert_eq!(file, "exact.sm_90.cubin"),
            other => panic!("expected CubinIntegrity, got {other:?}"),
        }
        // And an entry missing from the manifest is one too.
        assert!(verify("nope.cubin", &bytes, MANIFEST).is_err());
    }

    #[test]
    fn the_test_override_reads_the_folder_and_never_falls_back() {
        // A folder holding a copy of the embedded sm_90 tensorcore cubin and its manifest entry
        // (called directly: setting the variable would race with the other tests).
        let dir =
            std::env::temp_dir().join(format!("detattn-cubin-override-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (file, bytes) = TC_EMBEDDED[3];
        std::fs::write(dir.join(file), bytes).unwrap();
        let manifest = format!(
            r#"[{{"file": "{file}", "sha256": "{}"}}]"#,
            sha256_hex(bytes)
        );
        std::fs::write(dir.join("manifest.json"), manifest).unwrap();

        let (b1, name) = load_override_static(&dir, file).unwrap();
        assert_eq!(b1, bytes);
        assert!(
            name.ends_with("tensorcore.sm_90.cubin (test override)"),
            "{name}"
        );
        // Read once per process: the same leaked bytes the second time.
        let (b2, _) = load_override_static(&dir, file).unwrap();
        assert!(std::ptr::eq(b1, b2));
        // A cubin missing from the folder is an error, not the embedded one.
        assert!(matches!(
            load_override_static(&dir, "tensorcore.sm_80.cubin"),
            Err(Error::CubinIntegrity { .. })
        ));
        // A cubin that does not match the folder's manifest is an error.
        let mut bad = bytes.to_vec();
        bad[100] ^= 1;
        std::fs::write(dir.join("exact.sm_90.cubin"), &bad).unwrap();
        let m2 = format!(
            r#"[{{"file": "exact.sm_90.cubin", "sha256": "{}"}}]"#,
            sha256_hex(bytes)
        );
        std::fs::write(dir.join("manifest.json"), m2).unwrap();
        assert!(matches!(
            load_override(&dir, "exact.sm_90.cubin"),
            Err(Error::CubinIntegrity { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_shipped_architectures_are_chosen() {
        assert_eq!(arch_of(9, 0), Some("sm_90"));
        assert_eq!(arch_of(8, 6), Some("sm_86"));
        assert_eq!(arch_of(7, 5), None);
        assert_eq!(arch_of(10, 0), None);
    }
}
