#!/usr/bin/env python3
"""Build a LEAKY copy of the CUDA Exact kernel, to show that the checks can see a leak (docs/audit.md).

    python3 audit/plant_gpu_leak.py [--out DIR]      default DIR: .carry/cubin-leaky (git-ignored)

It copies kernels/exact.cu, plants six data-dependent shortcuts that leave every output bit as it
was, compiles the copy for sm_90 with the pinned NVRTC and the shipped options, and writes
DIR/exact.sm_90.cubin with a manifest.json in the format the crate's test override reads
(`DETATTN_TEST_CUBIN_DIR=DIR`). The shortcuts:

- skip the rescale `acc *= alpha` when the running maximum did not move (alpha == 1), the classic
  "optimisation" docs/design.md §6 forbids;
- skip a group of four keys' multiply-adds in P·V when their weights are all zero (masked keys);
- in the decode kernels' chains, the same two in each values shape (narrow and wide): skip the
  rescale when alpha == 1 (too small a part of a decode call for dudect to see alone: measured NOT
  detected on the H100, 2026-11-24) and skip four keys whose weights are all zero (`dudect
  --q-len 1 ... --expect-leak` sees it). In the narrow shape's 2-byte kernels ptxas turns both into
  selections (no branch for the audit to flag, no leak for dudect to time); its f32 kernel keeps
  the branches, so the narrow plants are timed through `--dtype f32`.

Then, on a GPU: `DETATTN_TEST_CUBIN_DIR=DIR detattn-dudect --backend cuda` must report the leak
(|t| > 10), and here `python3 audit/sass_audit.py --listing ...` must flag the planted branches.
Nothing it writes is shipped: the crate embeds kernels/cubin/ only.
"""
import argparse
import os
from pathlib import Path

import planting
from planting import ROOT, build

# (what the shipped source says, what the leaky copy says instead). Each must match at least once;
# every occurrence is replaced (the kernel has a full-tile and a partial-tile copy of some steps).
PLANTS = [
    (
        "for (int c = 0; c < CPL; ++c) acc[q][c] = __fmul_rn(acc[q][c], as[min(warp + 4 * q, R - 1) * TPS + k]);",
        "{ const float al_ = as[min(warp + 4 * q, R - 1) * TPS + k];"
        " if (al_ != 1.0f) for (int c = 0; c < CPL; ++c) acc[q][c] = __fmul_rn(acc[q][c], al_); }"
        "  // PLANTED LEAK (decode chains, wide shape)",
    ),
    (
        "acc[q][c] = __fmaf_rn(p4.x, v[0][c], acc[q][c]);",
        "if (p4.x == 0.0f && p4.y == 0.0f && p4.z == 0.0f && p4.w == 0.0f) continue;"
        "  // PLANTED LEAK (decode chains, wide shape)\n"
        "                            acc[q][c] = __fmaf_rn(p4.x, v[0][c], acc[q][c]);",
    ),
    (
        "for (int q = 0; q < RPW; ++q) acc[q] = __fmul_rn(acc[q], as[min(rq + 4 * q, R - 1) * TPS + k]);",
        "for (int q = 0; q < RPW; ++q) { const float al_ = as[min(rq + 4 * q, R - 1) * TPS + k];"
        " if (al_ != 1.0f) acc[q] = __fmul_rn(acc[q], al_); }"
        "  // PLANTED LEAK (decode chains, narrow shape)",
    ),
    (
        "acc[q] = __fmaf_rn(p4[q].x, v4.x, acc[q]);",
        "if (p4[q].x == 0.0f && p4[q].y == 0.0f && p4[q].z == 0.0f && p4[q].w == 0.0f) continue;"
        "  // PLANTED LEAK (decode chains, narrow shape)\n"
        "                            acc[q] = __fmaf_rn(p4[q].x, v4.x, acc[q]);",
    ),
    (
        "for (int c = 0; c < NC * 4; ++c) acc[k][c] = __fmul_rn(acc[k][c], alpha);",
        "if (alpha != 1.0f) for (int c = 0; c < NC * 4; ++c) acc[k][c] = __fmul_rn(acc[k][c], alpha);"
        "  // PLANTED LEAK",
    ),
    (
        "for (int k = 0; k < RM; ++k) p4[k] = *reinterpret_cast<const float4*>(Ps + (ty + RS * k) * S::PS + j);",
        "for (int k = 0; k < RM; ++k) p4[k] = *reinterpret_cast<const float4*>(Ps + (ty + RS * k) * S::PS + j);"
        " if (p4[0].x == 0.0f && p4[0].y == 0.0f && p4[0].z == 0.0f && p4[0].w == 0.0f) continue;"
        "  // PLANTED LEAK",
    ),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".carry/cubin-leaky")
    ap.add_argument("--arch", default="sm_90", choices=build.ARCHS)
    args = ap.parse_args()
    out = Path(os.getcwd(), args.out)
    os.chdir(ROOT)
    sha = planting.build_leaky("plant_gpu_leak", "exact", PLANTS, out, args.arch)
    print(f"plant_gpu_leak: {len(PLANTS)} shortcuts planted; {out / f'exact.{args.arch}.cubin'} sha256 {sha}")


if __name__ == "__main__":
    main()
