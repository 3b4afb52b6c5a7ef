#!/usr/bin/env python3
"""Build variants of the shipped TensorCore kernels whose exponentials (and reciprocals) are the
software functions of tcmodel/kernels/sw_math.cuh instead of MUFU.EX2 / MUFU.RCP, for the A/B of
the research note (docs/tensorcore-cpu-model.md §6). Text substitution in a copy of kernels/tensorcore.cu,
compiled exactly as the shipped cubin is (kernels/build.py: the pinned NVRTC, the same program
name and options; the header's text is inserted into the source, so not even an -I differs), for
sm_90 only. Each variant folder is what the crate's test override reads
(`DETATTN_TEST_CUBIN_DIR=DIR`, src/cuda/cubins.rs): the variant tensorcore.sm_90.cubin, a copy of
the shipped exact.sm_90.cubin, manifest.json and SHA256SUMS; plus the variant's compact SASS
listing and resource usage. Never shipped.

    python3 tcmodel/scripts/build_variants.py [--out DIR]     (default: tcmodel/target/variants)

Variants:
  v1  the score exponent p = ex2(fma(s, sl2e, nms)) -> swm::sw_exp2 (degree-5 polynomial)
  v3  the same with the degree-3 polynomial (relative error 1e-4: enough for P in bf16)
  v2  every MUFU gone: score and rescale exponents -> sw_exp2, the scale cap 2^24 * rcp(|mu|)
      -> cap_pow2(mu) (a power of two from the exponent field), the epilogue rcp(l) -> sw_rcp(l).
      With the MMA model, this variant's bits are computable on a CPU (tcharness tc checks it).
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "kernels"))
import build  # noqa: E402

ARCH = "sm_90"
STEM = "tensorcore"

P_SCORE = "float p = ex2(__fmaf_rn(s, sl2e, nms));"
P_CORR = "const float corr = ex2(__fmul_rn(__fsub_rn(m_old, mu), sl2e));"
P_CAP = "const float sl2e = fminf(sl2r, __fmul_rn(16777216.0f, rcp(fabsf(mu))));"
P_INV = "const float inv = seen ? rcp(l) : 0.f;"

VARIANTS = {
    "v1": [(P_SCORE, "float p = swm::sw_exp2(__fmaf_rn(s, sl2e, nms));  // VARIANT v1")],
    "v3": [(P_SCORE, "float p = swm::sw_exp2_d3(__fmaf_rn(s, sl2e, nms));  // VARIANT v3")],
    "v2": [
        (P_SCORE, "float p = swm::sw_exp2(__fmaf_rn(s, sl2e, nms));  // VARIANT v2"),
        (P_CORR, "const float corr = swm::sw_exp2(__fmul_rn(__fsub_rn(m_old, mu), sl2e));  // VARIANT v2"),
        (P_CAP, "const float sl2e = fminf(sl2r, swm::cap_pow2(mu));  // VARIANT v2"),
        (P_INV, "const float inv = seen ? swm::sw_rcp(l) : 0.f;  // VARIANT v2"),
    ],
}

ANCHOR = "#include <cuda_bf16.h>\n"


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def variant_source(name):
    src = Path(f"kernels/{STEM}.cu").read_text()
    header = Path("tcmodel/kernels/sw_math.cuh").read_text().replace("#pragma once\n", "")
    if src.count(ANCHOR) != 1:
        sys.exit(f"build_variants: '{ANCHOR.strip()}' not found once in kernels/{STEM}.cu")
    src = src.replace(ANCHOR, ANCHOR + "// ---- tcmodel/kernels/sw_math.cuh, inserted by tcmodel/scripts/build_variants.py\n"
                      + header + "// ---- end of sw_math.cuh\n")
    for old, new in VARIANTS[name]:
        n = src.count(old)
        if n != 1:
            sys.exit(f"build_variants {name}: expected the text once in kernels/{STEM}.cu, found {n}:\n  {old}\n"
                     "(the kernel changed: update VARIANTS)")
        src = src.replace(old, new)
    return src


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tcmodel/target/variants")
    ap.add_argument("--only", nargs="*", default=sorted(VARIANTS))
    args = ap.parse_args()
    os.chdir(ROOT)
    build.ensure_toolchain()
    nvrtc = build.Nvrtc()
    shipped_tc = build.CUBIN_DIR / f"{STEM}.{ARCH}.cubin"
    # The shipped cubin must be what today's source builds: otherwise the A/B compares two
    # different kernels, not two exponentials.
    base, log = nvrtc.compile(Path(f"kernels/{STEM}.cu").read_bytes(), f"kernels/{STEM}.cu", build.nvrtc_options(ARCH, STEM))
    if base is None or base != shipped_tc.read_bytes():
        sys.exit(f"build_variants: kernels/{STEM}.cu does not rebuild to the committed {shipped_tc} (run kernels/build.py check)")
    print(f"baseline {sha256(base)}  {shipped_tc} (rebuilt: identical)")
    for name in args.only:
        src = variant_source(name)
        cubin, log = nvrtc.compile(src.encode(), f"kernels/{STEM}.cu", build.nvrtc_options(ARCH, STEM))
        if cubin is None:
            sys.exit(f"build_variants {name}: NVRTC failed:\n{log}")
        out = Path(args.out) / name
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        file = f"{STEM}.{ARCH}.cubin"
        (out / file).write_bytes(cubin)
        entries = [{"file": file, "arch": ARCH, "sha256": sha256(cubin), "size": len(cubin),
                    "note": f"tcmodel VARIANT {name} of kernels/{STEM}.cu, never shipped"}]
        for shipped in sorted(build.CUBIN_DIR.glob(f"*.{ARCH}.cubin")):
            if shipped.name == file:
                continue
            shutil.copyfile(shipped, out / shipped.name)
            data = shipped.read_bytes()
            entries.append({"file": shipped.name, "arch": ARCH, "sha256": sha256(data), "size": len(data),
                            "note": f"copy of the shipped {shipped.as_posix()}"})
        (out / "manifest.json").write_text(json.dumps(entries, indent=2) + "\n")
        build.write_sums(out, entries)
        sass = build.compact_sass(build.cuobjdump("-sass", out / file))
        (out / f"{STEM}.{ARCH}.sass").write_text(sass)
        res = build.cuobjdump("-res-usage", out / file)
        (out / f"{STEM}.{ARCH}.res.txt").write_text(res)
        count = lambda pat: len(re.findall(pat, sass))
        regs = sorted({int(m) for m in re.findall(r"REG:(\d+)", res)})
        stack = sorted({int(m) for m in re.findall(r"STACK:(\d+)", res)})
        print(f"{name}: {sha256(cubin)}  {out / file}  MUFU.EX2 {count(r'MUFU.EX2')}  MUFU.RCP {count(r'MUFU.RCP')}  "
              f"FMNMX.NAN {count(r'FMNMX.NAN')}  registers {regs[0]}..{regs[-1]}  stack {stack[-1] if stack else 0}  "
              f"local {count(r'(LDL|STL)')}")
    base_sass = build.compact_sass(build.cuobjdump("-sass", shipped_tc))
    print(f"baseline: MUFU.EX2 {len(re.findall('MUFU.EX2', base_sass))}  MUFU.RCP {len(re.findall('MUFU.RCP', base_sass))}")


if __name__ == "__main__":
    main()
