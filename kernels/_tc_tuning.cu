// Tuning variants of the TensorCore kernels, for scripts/tc_check.py only: never shipped (files whose
// name starts with `_` are not built by kernels/build.py). Compile by hand with the same NVRTC options
// (scripts/tc_tuning_build.py) and pass the cubin with `--cubin ... --variants e,g`.
//
// Kernel names tcx_<variant>_{f16,bf16}_d<D>[_causal], configuration in tcx_cfg_<variant>_d<D>[4];
// a variant whose BM is 16 is a decode variant (grid (1, Hkv, B)).
#include "tensorcore.cu"

//        prefix variant config   D    MT NW BN   ST QREG  MINB
TC_FAMILY(tcx_b, tcx_cfg_b_d128,  128, 2, 4, 32,  2, false, 1)
TC_FAMILY(tcx_e, tcx_cfg_e_d64,   64,  1, 4, 64,  2, true,  3)
TC_FAMILY(tcx_g, tcx_cfg_g_d64,   64,  1, 4, 128, 2, true,  2)
