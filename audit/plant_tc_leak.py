#!/usr/bin/env python3
"""Build a LEAKY copy of the CUDA TensorCore kernels, to show that the timing test can see a leak
on that path (docs/audit.md, "Timing (dudect)"; the Exact path's counterpart is plant_gpu_leak.py).

    python3 audit/plant_tc_leak.py [--out DIR] [--arch sm_90]   default DIR: .carry/cubin-tc-leaky
    python3 audit/plant_tc_leak.py --oldcap                      the old scale cap (a NaN fault)

It copies kernels/tensorcore.cu, plants data-dependent shortcuts that leave every output bit of
finite input as it was, compiles the copy with the pinned NVRTC and the shipped options (the same
program name, so only the planted lines differ), and writes DIR/tensorcore.<arch>.cubin next to a
copy of the shipped DIR/exact.<arch>.cubin, with a manifest.json covering both in the format the
crate's test override reads: under `DETATTN_TEST_CUBIN_DIR=DIR` *both* cubins come from DIR and
a missing one is an error (src/cuda/cubins.rs), so the Exact one is copied unchanged. The shortcuts:

- skip the P·V tensor-core products of a tile when every probability the warp holds is zero
  (`__any_sync` over `p != 0`: a warp-uniform branch on data). A fully masked row has only zero
  probabilities, so the "all-masked" class runs no P·V at all: this is the one the harness must
  see. Bits: the skipped products add exactly 0·V to O (finite V), so O is unchanged;
- skip the rescale `O *= corr` when the running maximum did not move (corr == 1), the classic
  "optimisation" docs/design.md §6 forbids (a few multiplies per row and tile: likely below what CUDA
  events resolve, as for the Exact plant);
- in the sm_90 D = 64 and 128 prefill kernels (wgmma, their own loop; the rescale above is shared
  with them) a tile's P·V not issued when every weight of the block's tile is zero
  (`__syncthreads_or`: wgmma must be issued by a whole warpgroup or not at all);
- in the sm_90 D = 64 and 128 decode kernels (warp-specialised: the O warps run P·V from weights
  the score warps published) a tile's products skipped when every weight the warp reads is zero;
- in every kernel's softmax, the exponentials and the row sum skipped when every score the warp
  holds is masked (the sm_90 decode kernels' score warps: the only one of these on their critical
  path, so the one a paged decode shows to dudect).

Then, on a GPU: `DETATTN_TEST_CUBIN_DIR=DIR detattn-dudect --backend cuda --path tensorcore
--expect-leak` must report the leak (max |t| > 10, expected on all-masked), and here
`python3 audit/sass_audit.py --listing DIR/tensorcore.<arch>.sass --cubin DIR/tensorcore.<arch>.cubin`
must flag the planted branches (taint-branch). Nothing it writes is shipped: the crate embeds
kernels/cubin/ only. If the kernel changed so that a planted line is no longer found, the script
stops and says which (update PLANTS).
"""
import argparse
import os
from pathlib import Path

import planting
from planting import ROOT, build

# (what the shipped source says, what the leaky copy says instead). Each must match at least once;
# every occurrence is replaced.
PLANTS = [
    (
        "// O += P V, P rounded to T (the C fragment of S is the A fragment of P), k-steps in key order.\n"
        "            {",
        "// O += P V, P rounded to T (the C fragment of S is the A fragment of P), k-steps in key order.\n"
        # Unrolled like the kernel's own loops, so that sacc stays in registers (a rolled loop
        # would index it at run time and spill it to local memory, slowing every class alike).
        "            bool planted_any = false;  // PLANTED LEAK\n"
        "#pragma unroll\n"
        "            for (int i = 0; i < MT; ++i)\n"
        "#pragma unroll\n"
        "                for (int j = 0; j < NB; ++j)\n"
        "#pragma unroll\n"
        "                    for (int e = 0; e < 4; ++e) planted_any |= (sacc[i][j][e] != 0.f);\n"
        "            if (__any_sync(0xffffffffu, planted_any))  // PLANTED LEAK\n"
        "            {",
    ),
    (  # every kernel's rescale of O (the mma.sync loops' and the wgmma loop's share rescale_half)
        "        for (int dn = 0; dn < ND; ++dn) {\n"
        "            oacc[mt][dn][hf * 2] = __fmul_rn(oacc[mt][dn][hf * 2], corr);",
        "        for (int dn = 0; dn < ND; ++dn) if (corr != 1.f) {  // PLANTED LEAK\n"
        "            oacc[mt][dn][hf * 2] = __fmul_rn(oacc[mt][dn][hf * 2], corr);",
    ),
    (  # the sm_90 D = 64 and 128 prefill kernels (wgmma, their own loop): a tile's P·V skipped when
       # every weight of the warpgroup's tile is zero (warpgroup-uniform, as wgmma needs: every warp
       # of a warpgroup must issue it or none). The OR is over the warpgroup's 128 threads (named
       # barrier 4 + warpgroup), not the block: in the TMA kernels the producer warpgroup never joins
       # a block barrier in the loop, and the consumer warpgroups hold their turns there (a
       # __syncthreads_or here hung them on 2026-11-27).
        "                wg_issue_o(sV + slot(j) * BN * D * 2, pa);\n",
        "                bool planted_any = false;  // PLANTED LEAK\n"
        "#pragma unroll\n"
        "                for (int nb = 0; nb < NB; ++nb)\n"
        "#pragma unroll\n"
        "                    for (int e = 0; e < 4; ++e) planted_any |= (sacc[0][nb][e] != 0.f);\n"
        "                unsigned planted_or;  // PLANTED LEAK\n"
        "                asm volatile(\"{\\n.reg .pred p, q;\\nsetp.ne.u32 q, %1, 0;\\n\"\n"
        "                             \"barrier.cta.red.or.pred p, %2, 128, q;\\nselp.u32 %0, 1, 0, p;\\n}\\n\"\n"
        "                             : \"=r\"(planted_or) : \"r\"((unsigned)planted_any), \"r\"(4 + (warp >> 2)) : \"memory\");\n"
        "                if (planted_or)  // PLANTED LEAK\n"
        "                    wg_issue_o(sV + slot(j) * BN * D * 2, pa);\n",
    ),
    (  # the sm_90 D = 64 and 128 decode kernels (warp-specialised, their own P·V in the O warps): a
       # tile's products skipped when every weight the warp reads for it is zero
        "                    // O += P V over this warp's columns, k-steps in key order (the other loops' order).\n",
        "                    bool planted_any = false;  // PLANTED LEAK\n"
        "#pragma unroll\n"
        "                    for (int kk = 0; kk < BN / 16; ++kk) {\n"
        "                        const uint4 w = lds128(slot(i) + (kk * 32 + lane) * 16);\n"
        "                        planted_any |= (w.x | w.y | w.z | w.w) != 0u;\n"
        "                    }\n"
        "                    planted_any = __any_sync(0xffffffffu, planted_any);  // PLANTED LEAK\n",
    ),
    (  # (its products)
        "                        Ty<T>::mma(oacc[0][2 * dp], pa, bv[t & 1][0], bv[t & 1][1]);\n"
        "                        Ty<T>::mma(oacc[0][2 * dp + 1], pa, bv[t & 1][2], bv[t & 1][3]);\n",
        "                        if (planted_any) {  // PLANTED LEAK\n"
        "                            Ty<T>::mma(oacc[0][2 * dp], pa, bv[t & 1][0], bv[t & 1][1]);\n"
        "                            Ty<T>::mma(oacc[0][2 * dp + 1], pa, bv[t & 1][2], bv[t & 1][3]);\n"
        "                        }\n",
    ),
    (  # every kernel's softmax: the exponentials and the row sum skipped when every score the warp
       # holds is masked (-inf: every weight is then 0 and rs stays +0, so no bit moves). In the sm_90
       # decode kernels this is the score warps' work, on the critical path of a call, where the two
       # plants above sit in the O warps, whose time the score warps hide (a paged decode of 16 rows
       # did not show those two to dudect on 2026-11-27, max |t| < 10).
        "                float rs = 0.f;\n",
        "                float rs = 0.f;\n"
        "                bool planted_live = false;  // PLANTED LEAK\n"
        "#pragma unroll\n"
        "                for (int nb = 0; nb < NB; ++nb)\n"
        "#pragma unroll\n"
        "                    for (int e = 0; e < 2; ++e) planted_live |= sacc[mt][nb][hf * 2 + e] != TC_NEG_INF;\n"
        "                if (__any_sync(0xffffffffu, planted_live)) {  // PLANTED LEAK\n",
    ),
    (  # (the other end of the shortcut above)
        "                        rs = __fadd_rn(rs, p);\n"
        "                    }\n",
        "                        rs = __fadd_rn(rs, p);\n"
        "                    }\n"
        "                } else {  // PLANTED LEAK: every weight 0, rs stays +0\n"
        "#pragma unroll\n"
        "                    for (int nb = 0; nb < NB; ++nb)\n"
        "#pragma unroll\n"
        "                        for (int e = 0; e < 2; ++e) sacc[mt][nb][hf * 2 + e] = 0.f;\n"
        "                }\n",
    ),
]


# `--oldcap`: not a timing leak but the numerical fault fixed on 2026-11-24 (docs/tensorcore.md,
# "Finite output", item 5): the scale cap without its 2^-104 floor, which `rcp.approx.ftz` flushed
# to 0 for |mu| >= 2^126 (bf16, head_dim 256, alternating ±max). The structured-extremes GPU test
# must fail on it (scripts/gpu-session.sh, stage `planted`).
OLDCAP = [
    (
        "fminf(sl2r, fmaxf(__fmul_rn(16777216.0f, rcp(fabsf(mu))), 4.93038066e-32f /* 2^-104 */));",
        "fminf(sl2r, __fmul_rn(16777216.0f, rcp(fabsf(mu))));  // PLANTED FAULT: the old cap",
    ),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="default .carry/cubin-tc-leaky (.carry/cubin-tc-oldcap with --oldcap)")
    ap.add_argument("--arch", default="sm_90", choices=build.ARCHS)
    ap.add_argument("--oldcap", action="store_true",
                    help="plant the old scale cap (a finite-output fault) instead of the timing leaks")
    args = ap.parse_args()
    args.out = args.out or (".carry/cubin-tc-oldcap" if args.oldcap else ".carry/cubin-tc-leaky")
    out = Path(os.getcwd(), args.out)
    os.chdir(ROOT)
    if args.oldcap:
        sha = planting.build_leaky("plant_tc_leak", "tensorcore", OLDCAP, out, args.arch)
        print(f"plant_tc_leak: the old cap planted; {out / f'tensorcore.{args.arch}.cubin'} sha256 {sha}")
        print(f"plant_tc_leak: on a GPU: DETATTN_TEST_CUBIN_DIR={args.out} "
              ".carry/tests-override/cuda_tensorcore structured_extremes_are_finite_on_every_kernel "
              "must fail")
        return
    sha = planting.build_leaky("plant_tc_leak", "tensorcore", PLANTS, out, args.arch)
    print(f"plant_tc_leak: {len(PLANTS)} shortcuts planted; {out / f'tensorcore.{args.arch}.cubin'} sha256 {sha}")
    print(f"plant_tc_leak: on a GPU: DETATTN_TEST_CUBIN_DIR={args.out} detattn-dudect --backend cuda "
          "--path tensorcore --expect-leak")


if __name__ == "__main__":
    main()
