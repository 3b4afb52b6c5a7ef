//! Golden digests of the `Exact` path on the CPU, pinned in `golden/exact.txt` (a data file a
//! reviewer can diff; `detattn selftest` checks every backend against the same files), and the
//! one parser of the golden files.
//!
//! To re-record after an intended change of the bits (a new contract version):
//! `DETATTN_RECORD=golden cargo test --release --test golden`, then review the diff.

use detattn::{Engine, Path, golden};

#[test]
fn golden_digests_exact_on_the_cpu() {
    let engine = Engine::cpu();
    let cases = golden::cases();
    let results: Vec<_> = cases
        .iter()
        .map(|c| (c.name, c.digest_on(&engine).expect(c.name)))
        .collect();
    if std::env::var_os("DETATTN_RECORD").is_some() {
        let text = golden::render(
            Path::Exact,
            "any",
            &format!("numerics v{} (docs/numerics.md)", detattn::CONTRACT_VERSION),
            "the CPU backend (`DETATTN_RECORD=golden cargo test --release --test golden`); every \
             GPU of the Exact path must reproduce them (`detattn selftest`)",
            &results,
        );
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/golden/exact.txt");
        std::fs::write(path, text).unwrap();
        eprintln!("RECORDED {path}: review the diff before committing");
        return;
    }
    let want = golden::expected(Path::Exact, "any").expect("golden/exact.txt");
    assert_eq!(want.path, Path::Exact);
    let mut bad = vec![];
    for (name, got) in &results {
        match want.digest(name) {
            Some(w) if w == got.to_string() => {}
            w => bad.push(format!("{name}: expected {w:?}, got {got}")),
        }
    }
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
    assert_eq!(
        want.digests.len(),
        results.len(),
        "extra digests in golden/exact.txt"
    );
}

#[test]
fn golden_set_covers_what_it_must() {
    use detattn::{CausalAlign, DType};
    let cases = golden::cases();
    assert!(cases.len() >= 24);
    let mut names: Vec<_> = cases.iter().map(|c| c.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "duplicate golden names");
    for dt in DType::ALL {
        assert!(cases.iter().any(|c| c.dtype == dt), "{dt}");
    }
    let has = |f: &dyn Fn(&golden::GoldenCase) -> bool| cases.iter().any(f);
    assert!(has(&|c| c.causal) && has(&|c| !c.causal));
    for align in [CausalAlign::BottomRight, CausalAlign::TopLeft] {
        assert!(has(&|c| c.causal && c.align == align), "{align:?}");
        assert!(
            has(&|c| c.causal && c.align == align && c.runs_on(Path::TensorCore)),
            "{align:?} on the tensorcore path"
        );
    }
    assert!(has(&|c| c.dims.1 > c.dims.2 && c.dims.2 > 1), "GQA");
    assert!(has(&|c| c.dims.2 == 1 && c.dims.1 > 1), "MQA");
    assert!(
        has(&|c| c.kv_lens.is_some_and(|l| l.contains(&0))),
        "kv length 0"
    );
    assert!(
        has(&|c| c.mask.is_some() && c.inputs.blank_rows_every.is_some()),
        "fully masked rows"
    );
    for s in [1, 17, 1000] {
        assert!(has(&|c| c.dims.3 == s), "Sq = {s}");
    }
    for d in [1, 3, 64, 80, 128, 256] {
        assert!(has(&|c| c.dims.5 == d), "D = {d}");
    }
}

#[test]
fn every_golden_file_parses_and_covers_exactly_its_path() {
    let cases = golden::cases();
    assert!(golden::FILES.len() >= 2);
    for (file, text) in golden::FILES {
        let f = golden::parse(text).unwrap_or_else(|e| panic!("golden/{file}: {e}"));
        assert_eq!(
            file,
            &format!("{}.{}.txt", f.path, f.architecture).replace(".any.txt", ".txt"),
            "a golden file is named after its path and architecture"
        );
        assert!(
            f.contract.contains('v') || f.contract.contains("TensorCore"),
            "{file}"
        );
        let want: Vec<&str> = cases
            .iter()
            .filter(|c| c.runs_on(f.path))
            .map(|c| c.name)
            .collect();
        let got: Vec<&str> = f.digests.iter().map(|(n, _)| n.as_str()).collect();
        // The Exact file lists every case in case order; a TensorCore file every case it takes
        // (recorded in the same order).
        assert_eq!(got, want, "golden/{file}");
    }
}

#[test]
fn the_parser_rejects_what_is_not_a_golden_file() {
    let good = "path: exact\narchitecture: any\ncontract: v1\nrecorded: now\n---\n\
                a 0d964c65e8da504be3235310b618e92d7927607e14ab4258d8046eece2bf7a43\n";
    let f = golden::parse(good).unwrap();
    assert_eq!(f.digests.len(), 1);
    assert_eq!(
        f.digest("a"),
        Some("0d964c65e8da504be3235310b618e92d7927607e14ab4258d8046eece2bf7a43")
    );
    let bad: [(&str, &str); 6] = [
        (
            "no `---`",
            "path: exact\narchitecture: any\ncontract: v1\nrecorded: now\n",
        ),
        (
            "a missing header field",
            "path: exact\ncontract: v1\nrecorded: now\n---\n",
        ),
        (
            "an unknown path",
            "path: fast\narchitecture: any\ncontract: v1\nrecorded: now\n---\n",
        ),
        (
            "a short digest",
            "path: exact\narchitecture: any\ncontract: v1\nrecorded: now\n---\na 0d96\n",
        ),
        (
            "an upper-case digest",
            "path: exact\narchitecture: any\ncontract: v1\nrecorded: now\n---\n\
             a 0D964C65E8DA504BE3235310B618E92D7927607E14AB4258D8046EECE2BF7A43\n",
        ),
        (
            "a case twice",
            "path: exact\narchitecture: any\ncontract: v1\nrecorded: now\n---\n\
             a 0d964c65e8da504be3235310b618e92d7927607e14ab4258d8046eece2bf7a43\n\
             a 0d964c65e8da504be3235310b618e92d7927607e14ab4258d8046eece2bf7a43\n",
        ),
    ];
    for (what, text) in bad {
        assert!(golden::parse(text).is_err(), "accepted {what}");
    }
}
