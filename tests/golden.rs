//! Golden digests of the `Exact` path on the CPU, pinned in an insta snapshot that a reviewer can
//! diff. `detattn selftest` checks every available backend against the same snapshot.

use detattn::{Engine, golden};

#[test]
fn golden_digests_exact() {
    let engine = Engine::cpu();
    let cases = golden::cases();
    let results: Vec<_> = cases
        .iter()
        .map(|c| (c.name, c.run(&engine).expect(c.name)))
        .collect();
    let text = golden::render(&results);
    insta::assert_snapshot!("golden_digests_exact", text);
}

#[test]
fn golden_set_covers_what_it_must() {
    use detattn::DType;
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
fn snapshot_and_case_list_agree() {
    // The snapshot compiled into the crate (and so into `selftest`) names exactly these cases.
    let want: Vec<_> = golden::cases().iter().map(|c| c.name.to_string()).collect();
    let got: Vec<_> = golden::expected_digests()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(got, want);
}
