//! The `detattn` binary: exit codes, the digests it prints, and that `--json` puts exactly one JSON
//! document on stdout (scripts/gpu_compare.py and scripts/cpu_vs_numpy.py parse it).
//! Nothing here is timed: `bench` is only checked for the shape of its report.

use std::process::{Command, Output};

fn detattn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_detattn"))
        .args(args)
        .output()
        .expect("the detattn binary starts")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf-8 stderr")
}

/// The pinned digest of a golden case, read from the data file (not from the binary).
fn snapshot_digest(name: &str) -> String {
    let text = include_str!("../golden/exact.txt");
    let body = text
        .split("\n---\n")
        .nth(1)
        .expect("a header ends with ---");
    body.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(n, _)| *n == name)
        .map(|(_, d)| d.trim().to_string())
        .unwrap_or_else(|| panic!("{name} is in golden/exact.txt"))
}

#[test]
fn selftest_on_the_cpu_passes_and_reports_every_case() {
    let o = detattn(&["selftest", "--backend", "cpu"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let n = detattn::golden::cases().len();
    let case_lines = out.lines().filter(|l| l.starts_with('['));
    assert_eq!(
        case_lines.filter(|l| l.trim_end().ends_with(" OK")).count(),
        n,
        "{out}"
    );
    assert!(out.contains(&format!("[{n}/{n}]")), "{out}");
    assert!(out.contains("selftest PASSED"), "{out}");
    assert!(!out.contains("MISMATCH"), "{out}");
}

#[test]
fn selftest_json_is_one_document_with_every_case_ok() {
    let o = detattn(&["selftest", "--backend", "cpu", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("stdout is one JSON value");
    assert_eq!(v["ok"], true);
    let cpu = &v["backends"][0];
    assert_eq!(cpu["backend"], "cpu");
    let cases = cpu["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), detattn::golden::cases().len());
    assert!(cases.iter().all(|c| c["status"] == "ok"));
}

#[test]
fn run_prints_the_golden_digest_of_the_same_problem() {
    // golden case f32_mha: (2, 4, 4, 33, 33, 64), f32, seed 1.
    let args = everything_flags();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = detattn(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with("digest"))
        .expect("a digest line");
    assert_eq!(
        line.split_whitespace().nth(1),
        Some(snapshot_digest("f16_everything_d3_mqa").as_str())
    );
}

/// The flags of golden case f16_everything_d3_mqa, with `--json`, plus `extra`.
fn everything_case(extra: &[&str]) -> Vec<String> {
    let mut a = everything_flags();
    a.push("--json".into());
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// The flags of golden case f16_everything_d3_mqa (human output).
fn everything_flags() -> Vec<String> {
    [
        "run",
        "--backend",
        "cpu",
        "--batch",
        "2",
        "--q-heads",
        "4",
        "--kv-heads",
        "1",
        "--q-len",
        "17",
        "--kv-len",
        "40",
        "--head-dim",
        "3",
        "--dtype",
        "f16",
        "--causal",
        "--kv-lens",
        "40,20",
        "--mask",
        "full",
        "--blank-rows-every",
        "5",
        "--seed",
        "30",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn run_layout_bshd_prints_the_same_digest_as_bhsd() {
    for extra in [&["--layout", "bshd"][..], &["--layout", "bhsd"][..]] {
        let args = everything_case(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = detattn(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON value");
        assert_eq!(v["layout"], extra[1]);
        assert_eq!(
            v["digest"],
            snapshot_digest("f16_everything_d3_mqa"),
            "{extra:?}"
        );
    }
}

#[test]
fn run_top_left_causal_prints_its_golden_digest() {
    // golden case f32_top_left_d80: (1, 2, 1, 17, 70, 80), f32, causal top-left, seed 33.
    let case = |align: &[&'static str]| {
        let mut a = vec![
            "run",
            "--backend",
            "cpu",
            "--batch",
            "1",
            "--q-heads",
            "2",
            "--kv-heads",
            "1",
            "--q-len",
            "17",
            "--kv-len",
            "70",
            "--head-dim",
            "80",
            "--causal",
            "--seed",
            "33",
            "--json",
        ];
        a.extend_from_slice(align);
        a
    };
    let o = detattn(&case(&["--causal-align", "top-left"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON value");
    assert_eq!(v["causal_align"], "top-left");
    assert_eq!(v["digest"], snapshot_digest("f32_top_left_d80"));
    // Bottom-right on the same problem is another problem: another digest.
    let o = detattn(&case(&[]));
    let v2: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON value");
    assert_ne!(v2["digest"], v["digest"]);
}

#[test]
fn json_errors_are_one_json_document() {
    for (args, kind, code) in [
        (
            &["run", "--backend", "cpu", "--head-dim", "0", "--json"][..],
            "usage",
            2,
        ),
        (
            &[
                "bench",
                "--backend",
                "cpu",
                "--q-heads",
                "3",
                "--kv-heads",
                "2",
                "--json",
            ][..],
            "usage",
            2,
        ),
        (
            &["run", "--backend", "cuda:7", "--q-len", "8", "--json"][..],
            "runtime",
            1,
        ),
    ] {
        let o = detattn(args);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o))
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stdout(&o)));
        assert_eq!(v["error"]["kind"], kind, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{v}"
        );
    }
}

#[test]
fn tensorcore_on_the_cpu_names_the_flag_to_use() {
    let o = detattn(&[
        "run",
        "--backend",
        "cpu",
        "--path",
        "tensorcore",
        "--dtype",
        "f16",
        "--q-len",
        "8",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("--path exact"), "{e}");
    assert!(!e.contains("Path::"), "{e}");
}

#[test]
fn bench_json_has_the_fields_the_scripts_read() {
    let o = detattn(&[
        "bench",
        "--backend",
        "cpu",
        "--q-heads",
        "2",
        "--q-len",
        "32",
        "--head-dim",
        "16",
        "--warmup",
        "1",
        "--iters",
        "3",
        "--rotate",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON value");
    for key in ["median_us", "min_us", "max_us", "tflops"] {
        assert!(v[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {v}");
    }
    assert!(v["min_us"].as_f64() <= v["median_us"].as_f64());
    assert!(v["median_us"].as_f64() <= v["max_us"].as_f64());
    assert_eq!(v["iters"], 3);
    assert!(v["backend"].as_str().is_some_and(|b| b.starts_with("cpu")));
    // The host's enqueue time is a GPU figure: null on the CPU, whose wall clock is the call.
    assert!(v["host_us"].is_null(), "{v}");
}

#[test]
fn bench_json_reports_per_sample_and_bytes_moved() {
    // B=1 H=2 S=32 D=16 f16: Q, K, V, O of 1024 elements each, 2 bytes: 8192 bytes moved;
    // FLOPs 4·1·2·32·32·16 = 131072, 16 per byte.
    let o = detattn(&[
        "bench",
        "--backend",
        "cpu",
        "--q-heads",
        "2",
        "--q-len",
        "32",
        "--head-dim",
        "16",
        "--dtype",
        "f16",
        "--warmup",
        "0",
        "--iters",
        "2",
        "--rotate",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON value");
    assert_eq!(v["per_sample"], 1);
    assert_eq!(v["bytes"].as_f64(), Some(8192.0));
    assert_eq!(v["flops"].as_f64(), Some(131072.0));
    assert_eq!(v["flop_per_byte"].as_f64(), Some(16.0));
    let (us, gbps) = (
        v["median_us"].as_f64().unwrap(),
        v["gbps"].as_f64().unwrap(),
    );
    assert!((gbps - 8192.0 / us / 1e3).abs() <= 1e-9 * gbps, "{v}");

    // The human report says how many launches a sample holds only on a GPU; on the CPU it
    // shows the traffic line.
    let o = detattn(&[
        "bench",
        "--backend",
        "cpu",
        "--q-heads",
        "2",
        "--q-len",
        "32",
        "--head-dim",
        "16",
        "--warmup",
        "0",
        "--iters",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.starts_with("bytes") && l.contains("GB/s")),
        "{out}"
    );
}

#[test]
fn bench_per_sample_is_a_gpu_option() {
    let o = detattn(&[
        "bench",
        "--backend",
        "cpu",
        "--q-len",
        "8",
        "--per-sample",
        "10",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("error: --per-sample 10: launches per sample apply to GPU timing"),
        "{err}"
    );
    assert!(err.contains("use --per-sample 1 there"), "{err}");
    // 0 is refused by the flag's range; 1 is fine on the CPU.
    let o = detattn(&[
        "bench",
        "--backend",
        "cpu",
        "--q-len",
        "8",
        "--per-sample",
        "0",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("0 is not in 1..=10000"),
        "{}",
        stderr(&o)
    );
    let o = detattn(&[
        "bench",
        "--backend",
        "cpu",
        "--q-len",
        "8",
        "--iters",
        "1",
        "--per-sample",
        "1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// What the TensorCore path takes is checked before a backend is opened, with the library's
/// typed errors, so these messages are the same on a machine with a GPU and without one.
#[cfg(feature = "cuda")]
#[test]
fn bench_tensorcore_errors_are_the_library_messages() {
    let w1 = ["--q-heads", "2", "--q-len", "64"];
    for (extra, msg) in [
        (
            &["--backend", "cpu", "--dtype", "bf16"][..],
            "error: the tensorcore path is not available on the cpu backend: tensor cores are a \
             GPU feature; the exact path runs on the CPU (use --path exact)",
        ),
        (
            &["--dtype", "f32"][..],
            "error: the tensorcore path takes f16, bf16 inputs, got f32",
        ),
        (
            &["--backend", "cpu", "--dtype", "f32"][..],
            "error: the tensorcore path takes f16, bf16 inputs, got f32",
        ),
        (
            &["--dtype", "f16", "--head-dim", "96"][..],
            "error: the tensorcore path takes head_dim in 64, 128, 256, got 96",
        ),
        (
            &[
                "--dtype",
                "bf16",
                "--head-dim",
                "32",
                "--backend",
                "cuda:4096",
            ][..],
            "error: the tensorcore path takes head_dim in 64, 128, 256, got 32",
        ),
    ] {
        let mut args = vec!["bench", "--path", "tensorcore"];
        args.extend_from_slice(&w1);
        args.extend_from_slice(extra);
        let o = detattn(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end(), msg, "{args:?}");
        assert!(stdout(&o).is_empty(), "{args:?}");
    }
}

#[test]
fn validation_errors_exit_2_with_the_library_message() {
    for (args, msg) in [
        (
            &["run", "--head-dim", "0"][..],
            "head_dim must be in 1..=8192, got 0",
        ),
        (
            &["run", "--q-heads", "6", "--kv-heads", "4"][..],
            "q_heads (6) must be a multiple of kv_heads (4)",
        ),
        (
            &["run", "--scale", "-1"][..],
            "scale must be finite and > 0, got -1",
        ),
        (
            &["bench", "--batch", "2", "--kv-lens", "5,2000"][..],
            "kv_lens[1] must be in 0..=1024",
        ),
        (
            &[
                "run",
                "--backend",
                "cpu",
                "--path",
                "tensorcore",
                "--dtype",
                "bf16",
            ][..],
            "the tensorcore path is not available on the cpu backend",
        ),
        (
            &["run", "--backend", "cpu", "--q-len", "4", "--amp", "200"][..],
            "q holds a NaN or infinity",
        ),
        (&["run", "--dtype", "f64"][..], "unknown dtype"),
        (&["selftest", "--backend", "gpu"][..], "unknown backend"),
    ] {
        let o = detattn(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(msg), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_gpu_that_is_not_there_is_a_runtime_error() {
    let o = detattn(&["run", "--backend", "cuda:4096", "--q-len", "4"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn propagate_reports_nan_rows_instead_of_failing() {
    let o = detattn(&[
        "run",
        "--backend",
        "cpu",
        "--q-heads",
        "2",
        "--q-len",
        "4",
        "--amp",
        "200",
        "--nonfinite",
        "propagate",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON value");
    // Every input is ±inf at 2^200 in f32, so every row is poisoned: B·Hq·Sq = 8 rows.
    assert_eq!(v["nan_rows"], 8);
}

#[test]
fn info_json_names_the_backends() {
    let o = detattn(&["info", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON value");
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert!(v["cpu"]["threads"].as_u64().is_some_and(|t| t >= 1));
    assert!(v["cuda"]["compiled"].is_boolean());
    // The CLI says whether it can load other cubins, in JSON and in words.
    let capable = cfg!(feature = "test-override");
    assert_eq!(v["override_capable"], capable);
    let o = detattn(&["info"]);
    let text = stdout(&o);
    assert_eq!(text.contains("TEST BUILD"), capable, "{text}");
    assert_eq!(
        text.contains("embedded and verified only (no test override in this build)"),
        !capable,
        "{text}"
    );
}

/// A default build runs the CPU kernel variant its CPU allows whatever `DETATTN_TEST_CPU_ISA`
/// says; only a `test-override` build narrows it (D7's rule for the cubins, for the CPU).
#[test]
fn the_cpu_variant_override_is_test_builds_only() {
    let kernel = |isa: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_detattn"));
        c.args(["info", "--json"]);
        if let Some(v) = isa {
            c.env("DETATTN_TEST_CPU_ISA", v);
        }
        let o = c.output().expect("the detattn binary starts");
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON value");
        v["cpu"]["kernel"]
            .as_str()
            .expect("the kernel's name")
            .to_string()
    };
    let widest = kernel(None);
    let narrowed = kernel(Some("portable"));
    if cfg!(feature = "test-override") {
        assert_eq!(narrowed, "portable");
    } else {
        assert_eq!(
            narrowed, widest,
            "a default build obeyed DETATTN_TEST_CPU_ISA"
        );
    }
}

/// `detattn run --json` with these flags: the parsed document (the run must succeed).
fn run_json(args: &[&str]) -> serde_json::Value {
    let o = detattn(args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).expect("one JSON value")
}

#[test]
fn run_page_size_prints_the_contiguous_digest() {
    // K and V placed in shuffled pages (rows past the key lengths hold NaN, never read): the
    // digest of golden case f16_everything_d3_mqa, for several page sizes and both layouts.
    for extra in [
        &["--page-size", "16"][..],
        &["--page-size", "32", "--layout", "bshd"][..],
        &["--page-size", "256"][..],
    ] {
        let args = everything_case(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let v = run_json(&args);
        assert_eq!(v["page_size"], extra[1].parse::<u64>().unwrap());
        assert_eq!(
            v["digest"],
            snapshot_digest("f16_everything_d3_mqa"),
            "{extra:?}"
        );
    }
    let o = detattn(&[
        "run",
        "--backend",
        "cpu",
        "--q-len",
        "8",
        "--page-size",
        "48",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("page_size must be a power of two in 16..=256, got 48"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn run_seqlens_and_lse_print_the_golden_digests() {
    // golden case f16_lse_varlen_causal: Hq 2, Hkv 2, D 64, f16, causal, seed 46.
    let base = [
        "run",
        "--backend",
        "cpu",
        "--q-heads",
        "2",
        "--head-dim",
        "64",
        "--dtype",
        "f16",
        "--causal",
        "--seqlens-q",
        "1,7,0,20",
        "--seqlens-k",
        "70,12,5,0",
        "--seed",
        "46",
        "--json",
    ];
    for extra in [
        &["--lse"][..],
        &["--lse", "--page-size", "16", "--layout", "bshd"][..],
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let v = run_json(&args);
        assert_eq!(
            v["lse_digest"],
            snapshot_digest("f16_lse_varlen_causal"),
            "{extra:?}"
        );
        assert_eq!(v["cu_seqlens_q"], serde_json::json!([0, 1, 8, 8, 28]));
    }
    // golden case f32_varlen_mixed_causal: the output digest of the packed rows.
    let v = run_json(&[
        "run",
        "--backend",
        "cpu",
        "--q-heads",
        "4",
        "--kv-heads",
        "2",
        "--seqlens-q",
        "1,7,0,40,1",
        "--seqlens-k",
        "70,12,5,40,0",
        "--causal",
        "--seed",
        "40",
        "--json",
    ]);
    assert_eq!(v["digest"], snapshot_digest("f32_varlen_mixed_causal"));
    assert_eq!(v["lse_digest"], serde_json::Value::Null);
    // --seqlens-q replaces --q-len (a usage error together), and needs --seqlens-k.
    for args in [
        &[
            "run",
            "--seqlens-q",
            "1,2",
            "--seqlens-k",
            "3,4",
            "--q-len",
            "3",
        ][..],
        &["run", "--seqlens-q", "1,2"][..],
    ] {
        assert_eq!(detattn(args).status.code(), Some(2), "{args:?}");
    }
}
