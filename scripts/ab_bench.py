#!/usr/bin/env python3
"""Two detattn builds timed against each other on the same problems, in one command.

Usage (on the GPU machine; any machine with --backend cpu in the case arguments):
    python3 scripts/ab_bench.py --old BIN --new BIN [--new-env K=V ...] [--rounds 2]
        [--iters 30] [--warmup 5] [--json OUT.json] --case 'LABEL: BENCH ARGS' [--case ...]

Each case is a label and the arguments of `detattn bench` after `bench` (the backend, path and
problem: `--backend cuda --path tensorcore --dtype bf16 --batch 1 ...`). For each case the two
binaries run in turn, old then new, `--rounds` times, each run `detattn bench ... --iters N
--warmup N --json` (the protocol of docs/perf.md: CUDA events, warm-up, the median of the samples,
input sets rotated), and the line printed is

    LABEL: old=M1 new=M2 old=M3 new=M4    (medians in µs, in the order they ran)

Alternating the builds puts the machine's drifts (clocks, temperature) on both alike; a change is
believed when every new median is on its side of every old one. `--new-env` sets variables for
the new build only (the test-only cubin override: `DETATTN_TEST_CUBIN_DIR=DIR` with a
`test-override` build). A run that fails is reported in its slot (`old=error`), never fatal.
Writes every median to OUT.json with `--json`.
"""
import argparse
import json
import os
import sys

from bench_cli import bench_json


def median_us(binary, args, env, iters, warmup):
    """The median of one `detattn bench` run, or the error it printed."""
    j, err = bench_json(binary, [*args, "--iters", str(iters), "--warmup", str(warmup)], env=env)
    return (None, err) if j is None else (round(j["median_us"], 1), None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="the reference build's detattn")
    ap.add_argument("--new", required=True, help="the build under test's detattn")
    ap.add_argument("--new-env", action="append", default=[], metavar="K=V",
                    help="an environment variable for the new build only (repeatable)")
    ap.add_argument("--case", action="append", required=True, metavar="'LABEL: ARGS'",
                    help="a label, a colon, then the arguments of `detattn bench` (repeatable)")
    ap.add_argument("--rounds", type=int, default=2, help="old/new pairs per case (default 2)")
    ap.add_argument("--iters", type=int, default=30, help="timed samples per run (>= 20; default 30)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls per run (default 5)")
    ap.add_argument("--json", metavar="OUT", help="also write the medians as JSON")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds must be >= 1")
    if a.iters < 20:
        ap.error("--iters must be >= 20 (the protocol's median of at least 20)")
    env_old = dict(os.environ)
    env_new = dict(os.environ)
    for kv in a.new_env:
        k, sep, v = kv.partition("=")
        if not sep or not k:
            ap.error(f"--new-env takes K=V, got {kv!r}")
        env_new[k] = v
    cases = []
    for c in a.case:
        label, sep, args = c.partition(":")
        if not sep or not label.strip() or not args.split():
            ap.error(f"--case takes 'LABEL: BENCH ARGS', got {c!r}")
        cases.append((label.strip(), args.split()))
    out = []
    for label, args in cases:
        runs = []
        for _ in range(a.rounds):
            for who, binary, env in (("old", a.old, env_old), ("new", a.new, env_new)):
                us, err = median_us(binary, args, env, a.iters, a.warmup)
                runs.append({"build": who, "median_us": us, "error": err})
        line = " ".join(f"{r['build']}={r['median_us'] if r['median_us'] is not None else 'error'}" for r in runs)
        print(f"{label}: {line}", flush=True)
        for r in runs:
            if r["error"]:
                print(f"  {r['build']}: {r['error']}", flush=True)
        out.append({"label": label, "args": args, "runs": runs})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"old": a.old, "new": a.new, "new_env": a.new_env, "iters": a.iters,
                       "warmup": a.warmup, "cases": out}, f, indent=1)
    return 0 if all(r["error"] is None for c in out for r in c["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
