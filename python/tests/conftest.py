"""Shared fixtures: the repository root, the Rust CLI (its digests are what the package must
equal), and helpers that build seeded problems the way the CLI does."""

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import detattn
from detattn.inputs import as_bf16, generate

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cli():
    """The `detattn` binary built from this repository (DETATTN_CLI, else target/release/detattn):
    scripts/python-ci.sh builds it first. Missing is a failure, not a skip: the comparison with the
    Rust CLI is part of what these tests promise."""
    path = pathlib.Path(os.environ.get("DETATTN_CLI", ROOT / "target" / "release" / "detattn"))
    if not path.exists():
        pytest.fail(f"the Rust CLI {path} is missing: run `cargo build --release --bin detattn` first")
    return path


def run_cli(cli, **flags):
    """`detattn run --backend cpu --json` with `--flag value` for each keyword (True: a bare
    flag), returning the parsed JSON."""
    args = [str(cli), "run", "--backend", "cpu", "--json"]
    for k, v in flags.items():
        name = "--" + k.replace("_", "-")
        if v is True:
            args.append(name)
        elif v is not None and v is not False:
            args += [name, ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)]
    r = subprocess.run(args, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr + r.stdout
    return json.loads(r.stdout)


def host(x, dtype):
    """A generated array as the public API takes it (bf16 through ml_dtypes)."""
    return as_bf16(x) if dtype == "bf16" else x


def rand(shape, dt, rng):
    """Uniform values in [-2, 2) of `shape`, rounded to `dt` (bf16 through ml_dtypes)."""
    x = rng.uniform(-2, 2, shape).astype(np.float32)
    if dt == "f16":
        return x.astype(np.float16)
    if dt == "bf16":
        import ml_dtypes

        return x.astype(ml_dtypes.bfloat16)
    return x


MASKS = {"full": (True, True), "shared": (False, False), "per-batch": (True, False), "per-head": (False, True)}


def seeded(dims, dtype, seed, *, mask=None, blank_rows_every=None, amp=0, layout="bhsd"):
    """The CLI's inputs for these flags, as arrays in `layout` (contiguous)."""
    x = generate(dims, dtype, seed, amp=amp, mask=MASKS.get(mask), blank_rows_every=blank_rows_every)
    out = {}
    for n in ("q", "k", "v"):
        a = host(x[n], dtype)
        out[n] = np.ascontiguousarray(a.transpose(0, 2, 1, 3)) if layout == "bshd" else a
    out["mask"] = x["mask"]
    return out
