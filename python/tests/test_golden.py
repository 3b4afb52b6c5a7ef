"""The golden problems through the package on the CPU, and the generator's known answers."""

import json
import subprocess

import numpy as np

import detattn
from detattn.inputs import splitmix64

from conftest import ROOT


def test_splitmix64_known_answers():
    # The first outputs for seed 1234567 of the reference C implementation, as the crate's test
    # holds them (tests/data/splitmix64_kat.txt).
    want = [int(x) for x in (ROOT / "tests/data/splitmix64_kat.txt").read_text().split()]
    got = splitmix64(1234567, len(want)).tolist()
    assert got == want


def test_draws_continue_across_calls():
    # Drawing in two pieces gives the one stream (the mask's draws follow V's).
    whole = splitmix64(99, 50)
    assert np.array_equal(np.concatenate([splitmix64(99, 20), splitmix64(99, 30, start=20)]), whole)


def test_every_golden_problem_matches_on_the_cpu():
    report = detattn.selftest("cpu")
    (cpu,) = report.reports
    bad = [c for c in cpu["cases"] if c["status"] != "ok"]
    assert not bad, bad
    cases = detattn._native.golden_cases()
    # All of them: the log-sum-exp ones through `return_lse`, the varlen ones through
    # `attention_varlen`, the paged ones through `attention_with_kvcache`.
    assert report.n_cases == len(cases)
    assert [c["case"] for c in cpu["cases"]] == [c["name"] for c in cases]
    assert len(cases) >= 49
    assert sum(c["paged"] for c in cases) >= 5
    assert "not checked" not in str(report)


def test_the_selftest_mirrors_the_cli(cli):
    # Same cases, same verdicts, and the same golden-file consistency failures as `detattn
    # selftest --backend cpu` (the Python self-test is a mirror of the Rust one).
    r = subprocess.run([str(cli), "selftest", "--backend", "cpu", "--json"], capture_output=True, text=True)
    rust = json.loads(r.stdout)
    py = detattn.selftest("cpu")
    assert py.ok == rust["ok"] == (r.returncode == 0)
    assert py.failures == rust["failures"]
    (rc,) = rust["backends"]
    (pc,) = py.reports
    want = [(c["case"], c["status"]) for c in rc["cases"]]
    assert [(c["case"], c["status"]) for c in pc["cases"]] == want
    print(py)


def test_the_report_says_what_was_not_checked():
    report = detattn.selftest("all")
    text = str(report)
    if detattn.info()["driver"] is None:
        assert "no GPU checked (no CUDA driver:" in text
        assert report.gpus_checked == 0
    assert ("selftest PASSED" in text) == bool(report)
