#!/usr/bin/env python3
"""Build the issue-14 probe cubin (tcmodel/kernels/probe.cu) with the repository's pinned NVRTC and
its options (kernels/build.py: `nvrtc_options`, --fmad=false ...), for sm_90a (wgmma needs the
architecture-specific target), and write its compact SASS listing and resource usage beside it.

    python3 tcmodel/scripts/build_probe.py [--out DIR]     (default: tcmodel/target/cubin)

Run from anywhere; it works in the repository root like kernels/build.py. Never shipped: the
cubin is a test artefact of tcmodel/src/bin/tcharness, carried to the GPU machine.
"""
import argparse
import hashlib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "kernels"))
import build  # noqa: E402  (kernels/build.py: Nvrtc, nvrtc_options, ensure_toolchain, cuobjdump)

ARCH = "sm_90a"
SRC = Path("tcmodel/kernels/probe.cu")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tcmodel/target/cubin")
    args = ap.parse_args()
    os.chdir(ROOT)
    build.ensure_toolchain()
    opts = build.nvrtc_options(ARCH) + ["-Itcmodel/kernels"]
    cubin, log = build.Nvrtc().compile(SRC.read_bytes(), SRC.as_posix(), opts)
    if log.strip():
        print(log, file=sys.stderr)
    if cubin is None:
        sys.exit("build_probe: NVRTC failed")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"probe.{ARCH}.cubin"
    path.write_bytes(cubin)
    sass = build.compact_sass(build.cuobjdump("-sass", path))
    (out / f"probe.{ARCH}.sass").write_text(sass)
    (out / f"probe.{ARCH}.res.txt").write_text(build.cuobjdump("-res-usage", path))
    print(f"{hashlib.sha256(cubin).hexdigest()}  {path}  ({len(cubin)} bytes, options {' '.join(opts)})")
    for op in ("HMMA", "HGMMA", "MUFU.EX2", "FFMA"):
        print(f"  {op:9s} {sum(op in line for line in sass.splitlines())} instructions")


if __name__ == "__main__":
    main()
