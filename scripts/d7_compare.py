#!/usr/bin/env python3
"""D7 on the GPU: the Exact kernels built by the second compiler (nvcc 13.0, `python3
kernels/build.py nvcc13`) must give the same output bits as the shipped NVRTC 12.9 cubins.

Usage (on the GPU machine, after scripts/carry.sh):
    python3 scripts/d7_compare.py .carry/cubin-nvcc13

1. Runs the GPU contract tests (golden digests, random problems bit-identical to the CPU) with
   the nvcc 13.0 cubins loaded through the test-only override DETATTN_TEST_CUBIN_DIR, and checks
   from the tests' output that the override was really used.
2. Runs a set of problems through the CLI (`detattn run --backend cuda --json`) once with the
   embedded cubins and once with the nvcc 13.0 ones, and compares the output digests.
Exits non-zero on any difference.
"""
import json
import os
import subprocess
import sys

CUBINS = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".carry/cubin-nvcc13")
# Built with the test-only feature `test-override` (scripts/carry.sh): a default build ignores the
# variable and would compare the shipped cubins with themselves.
TESTS = ".carry/tests-override/cuda_exact"
CLI = ".carry/bin-override/detattn"
ENV_VAR = "DETATTN_TEST_CUBIN_DIR"

PROBLEMS = [
    "--batch 2 --q-heads 4 --kv-heads 2 --q-len 37 --kv-len 70 --head-dim 64 --dtype bf16 --causal --mask full --kv-lens 70,33",
    "--batch 1 --q-heads 8 --kv-heads 8 --q-len 300 --kv-len 300 --head-dim 128 --dtype f32",
    "--batch 1 --q-heads 2 --kv-heads 1 --q-len 33 --kv-len 130 --head-dim 256 --dtype f16 --mask shared",
    "--batch 1 --q-heads 1 --kv-heads 1 --q-len 5 --kv-len 70 --head-dim 1000 --dtype f32",
    "--batch 3 --q-heads 6 --kv-heads 3 --q-len 1 --kv-len 500 --head-dim 80 --dtype f32 --amp 100",
    "--batch 1 --q-heads 4 --kv-heads 4 --q-len 64 --kv-len 64 --head-dim 3 --dtype f16 --causal",
]


def cli_digest(args, env):
    r = subprocess.run([CLI, "run", "--backend", "cuda", *args.split(), "--json"], env=env,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"detattn run {args}: exit {r.returncode}: {r.stderr.strip()[:300]}")
    return json.loads(r.stdout)["digest"]


def main():
    if not os.path.exists(os.path.join(CUBINS, "exact.sm_90.cubin")):
        sys.exit(f"d7: no nvcc 13.0 cubins in {CUBINS}; run `python3 kernels/build.py nvcc13` first")
    bad = 0
    env2 = dict(os.environ, **{ENV_VAR: CUBINS})
    base = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    r = subprocess.run([TESTS, "--test-threads", "4", "--nocapture", "golden_digests_reproduced_on_gpu",
                        "d6_random_problems_bit_identical_to_cpu"],
                       env=env2, capture_output=True, text=True, timeout=500)
    print(r.stdout[-3000:], r.stderr[-3000:])
    if "(test override)" not in r.stderr:
        print("D7 FAIL: the tests did not report the nvcc 13.0 cubins as loaded")
        bad += 1
    if r.returncode != 0 or "2 passed" not in r.stdout:
        print(f"D7 FAIL: GPU tests with the nvcc 13.0 cubins: exit {r.returncode}")
        bad += 1
    for args in PROBLEMS:
        a, b = cli_digest(args, base), cli_digest(args, env2)
        same = a == b
        bad += not same
        print(f"{'same' if same else 'DIFFERENT'}  nvrtc12.9 {a[:16]}  nvcc13.0 {b[:16]}  {args}")
    print(f"D7: {'PASS' if bad == 0 else 'FAIL'} ({len(PROBLEMS)} CLI problems + golden + random tests "
          f"with cubins from {CUBINS})")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
