//! The crate's shape, checked on its source (docs/design.md, "Layout of the code"):
//! - one direction of dependency: every module of src/ imports only modules of an earlier layer
//!   (so there is no import circle, and nothing under cuda/ imports the engine or the golden
//!   cases);
//! - `unsafe` only at the launch edges: `#![deny(unsafe_code)]` at the crate root, allowed in
//!   exactly three modules, every `unsafe` block with a `// SAFETY:` comment and every `unsafe fn`
//!   with a `# Safety` section.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layers, lowest first: a module may import modules of its own or an earlier layer only.
const LAYERS: [&str; 12] = [
    "numerics", "dtype", "path", "error", "problem", "tensor", "digest", "inputs", "cpu", "cuda",
    "engine", "golden",
];

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every .rs file of the library (not the binaries), with its top-level module.
fn library_files() -> Vec<(String, PathBuf)> {
    let mut out = vec![];
    let mut stack = vec![src()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(src()).unwrap().to_path_buf();
            if rel.starts_with("bin") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let first = rel
                    .components()
                    .next()
                    .unwrap()
                    .as_os_str()
                    .to_string_lossy()
                    .to_string();
                let module = first.trim_end_matches(".rs").to_string();
                out.push((module, p));
            }
        }
    }
    out.sort();
    out
}

/// The top-level modules a file refers to as `crate::<module>` (in code, not comments).
fn crate_refs(text: &str) -> Vec<String> {
    let mut out = vec![];
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
            rest = &after[1.min(after.len())..];
        }
    }
    out
}

#[test]
fn every_module_imports_only_earlier_layers() {
    let files = library_files();
    assert!(files.len() >= 20, "found only {} files", files.len());
    let layer = |m: &str| LAYERS.iter().position(|l| *l == m);
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut bad = vec![];
    for (module, path) in &files {
        if module == "lib" {
            continue; // the root declares and re-exports every module
        }
        let Some(me) = layer(module) else {
            bad.push(format!(
                "{}: module {module} is not in LAYERS",
                path.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(path).unwrap();
        for r in crate_refs(&text) {
            // Items re-exported at the root (crate::Path, crate::Error, ...) are capitalised and
            // not matched; a lower-case name is a module path.
            match layer(&r) {
                Some(l) if l <= me => {}
                Some(_) => bad.push(format!(
                    "{}: {module} imports crate::{r}, a later layer",
                    path.display()
                )),
                None => bad.push(format!("{}: crate::{r} is no known module", path.display())),
            }
            graph.entry(module.clone()).or_default().push(r);
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // The rule above has teeth: cuda really uses problem and tensor, golden the engine.
    assert!(graph["cuda"].iter().any(|m| m == "tensor"));
    assert!(graph["golden"].iter().any(|m| m == "engine"));
    assert!(!graph["cuda"].iter().any(|m| m == "engine" || m == "golden"));
}

#[test]
fn the_layer_check_sees_a_backward_import() {
    // The checker on a planted file: cuda importing the engine is named.
    let refs = crate_refs("use crate::engine::Engine; // crate::golden in a comment");
    assert_eq!(refs, ["engine"]);
}

/// The files allowed `unsafe`: the FFI edge, the GPU entry points that submit launches, and the
/// CPU's instruction-set dispatch.
const UNSAFE_ALLOWED: [&str; 3] = ["cuda/launch.rs", "cuda/entry.rs", "cpu/kernel.rs"];

fn rel(p: &Path) -> String {
    p.strip_prefix(src())
        .unwrap()
        .to_string_lossy()
        .replace('\\', "/")
}

#[test]
fn unsafe_only_at_the_launch_edges_each_with_its_reason() {
    let root = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    assert!(
        root.contains("#![deny(unsafe_code)]"),
        "lib.rs must deny unsafe_code"
    );
    let mut bad = vec![];
    let mut seen = vec![];
    for (_, path) in library_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = rel(&path);
        let allowed = text.contains("#![allow(unsafe_code)]");
        if allowed {
            seen.push(name.clone());
            if !UNSAFE_ALLOWED.contains(&name.as_str()) {
                bad.push(format!("{name} allows unsafe_code"));
            }
        }
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("unsafe {") || code.contains("unsafe{") {
                let before = lines[i.saturating_sub(6)..=i].join("\n");
                if !before.contains("SAFETY") {
                    bad.push(format!(
                        "{name}:{}: an unsafe block without a `// SAFETY:` comment",
                        i + 1
                    ));
                }
            }
            if code.contains("unsafe fn ") && !code.contains("unsafe fn cu") {
                let docs: Vec<&str> = lines[..i]
                    .iter()
                    .rev()
                    .take_while(|l| {
                        l.trim_start().starts_with("///") || l.trim_start().starts_with("#[")
                    })
                    .copied()
                    .collect();
                if !docs.iter().any(|l| l.contains("# Safety")) {
                    bad.push(format!(
                        "{name}:{}: an unsafe fn without a `# Safety` section",
                        i + 1
                    ));
                }
            }
            if code.contains("unsafe impl")
                && !lines[i.saturating_sub(3)..i].join("\n").contains("SAFETY")
            {
                bad.push(format!(
                    "{name}:{}: an unsafe impl without a `// SAFETY:` comment",
                    i + 1
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    seen.sort();
    let mut want: Vec<String> = UNSAFE_ALLOWED.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(seen, want, "the modules that allow unsafe_code");
}
