#!/usr/bin/env python3
"""Compile kernels/_tc_tuning.cu (the shipped TensorCore kernels plus tuning variants) for sm_90 with
the pinned NVRTC and the options of kernels/build.py, into .carry/tc/tc_tuning.sm_90.cubin (git-ignored),
and print each kernel's registers and stack. Not part of the shipped build.

    python3 scripts/tc_tuning_build.py [ARCH]
"""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "kernels"))
os.chdir(ROOT)
import build  # noqa: E402

arch = sys.argv[1] if len(sys.argv) > 1 else "sm_90"
build.ensure_toolchain()
src = Path("kernels/_tc_tuning.cu")
cubin, log = build.Nvrtc().compile(src.read_bytes(), src.as_posix(), build.nvrtc_options(arch))
if log.strip():
    print(log, file=sys.stderr)
if cubin is None:
    sys.exit(1)
out = Path(".carry/tc") / f"tc_tuning.{arch}.cubin"
out.parent.mkdir(parents=True, exist_ok=True)
out.write_bytes(cubin)
res = build.cuobjdump("-res-usage", out)
lines = res.splitlines()
for i, line in enumerate(lines):
    if line.strip().startswith("Function"):
        name = line.split()[1].rstrip(":")
        fields = dict(f.split(":", 1) for f in lines[i + 1].split() if ":" in f)
        print(f"{name:36} REG {fields.get('REG')} STACK {fields.get('STACK')}")
print(f"wrote {out} ({len(cubin)} bytes)")
