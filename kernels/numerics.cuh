// The `Exact` numerics contract on the GPU: a mirror of src/numerics.rs, function for function,
// with the same names and the same section references into docs/numerics.md.
//
// Every floating-point operation is an intrinsic with explicit rounding (__fmaf_rn, __fmul_rn,
// __fadd_rn, __fsub_rn), so neither the compiler nor its options can contract, reassociate or
// substitute them (the build also passes --fmad=false). fmaxf/fminf are only given non-NaN
// operands. Nothing here branches on a value: selections are bit masks (sel).
#pragma once

namespace detattn {

// Constants of numerics.md, as bit patterns.
#define DA_FLT_MAX __int_as_float(0x7F7FFFFF)
#define DA_L2E __int_as_float(0x3FB8AA3B)
#define DA_SHIFTER __int_as_float(0x4B400000)
#define DA_LN2_HI __int_as_float(0x3F317200)
#define DA_LN2_LO __int_as_float(0x35BFBE8E)
#define DA_P7 __int_as_float(0x39506967)
#define DA_P6 __int_as_float(0x3AB743CE)
#define DA_P5 __int_as_float(0x3C088908)
#define DA_P4 __int_as_float(0x3D2AA9C1)
#define DA_P3 __int_as_float(0x3E2AAAAA)
#define DA_P2 __int_as_float(0x3F000000)
#define DA_ZMIN __int_as_float(0xC2A00000)
#define DA_W __int_as_float(0x32800000)
#define DA_R1 __int_as_float(0xBFF0F0F1)
#define DA_R0 __int_as_float(0x4034B4B5)

// §10 The log-sum-exp's log: reduction point and log1p coefficients G0..G8.
#define DA_LOG_SPLIT 0x3F2AAAABu
#define DA_G0 __int_as_float(0xBF000000)
#define DA_G1 __int_as_float(0x3EAAAA81)
#define DA_G2 __int_as_float(0xBE7FFF42)
#define DA_G3 __int_as_float(0x3E4CE8F9)
#define DA_G4 __int_as_float(0xBE2AD3A8)
#define DA_G5 __int_as_float(0x3E0F5F33)
#define DA_G6 __int_as_float(0xBDF92F17)
#define DA_G7 __int_as_float(0x3E0F68A7)
#define DA_G8 __int_as_float(0xBE049899)
#define DA_LOG2_W_INV 26

/// Keys per tile (§4).
constexpr int TILE = 64;

/// All ones when `c`, else zero: the mask behind every selection.
__device__ __forceinline__ unsigned mask_of(bool c) { return 0u - (unsigned)c; }

/// `c ? a : b` without a branch.
__device__ __forceinline__ float sel(bool c, float a, float b) {
    unsigned m = mask_of(c);
    return __uint_as_float((__float_as_uint(a) & m) | (__float_as_uint(b) & ~m));
}

/// §2.1 The biased exponent field.
__device__ __forceinline__ unsigned expfield(float x) { return (__float_as_uint(x) >> 23) & 0xFFu; }

/// §2.2 All ones when `x` is NaN or ±inf.
__device__ __forceinline__ unsigned nonfinite_mask(float x) { return mask_of(expfield(x) == 0xFFu); }

/// §2.2 NaN and ±inf become +0.
__device__ __forceinline__ float sanitize(float x) {
    return __uint_as_float(__float_as_uint(x) & ~nonfinite_mask(x));
}

/// §2.3 The row shift from the largest exponent field of the (sanitised) row.
__device__ __forceinline__ int row_shift(unsigned max_expfield) {
    int e = (int)max(max_expfield, 1u);
    return max(127 - e, -126);
}

/// §2.4 2^k for k in [−126, 127], built from bits.
__device__ __forceinline__ float pow2(int k) { return __uint_as_float((unsigned)(k + 127) << 23); }

// §2.5 (the per-element multiply of prepare_row) is in exact.cu's prepare kernel: there a warp
// shares one row, so the row's maximum is a warp reduction rather than a loop.

/// §3 From the fma chain `s` to the saturated, scaled score.
__device__ __forceinline__ float score_finish(float s, float scale, int sq, int sk) {
    int u = -(sq + sk);
    int a = u >> 1;
    int b = u - a;
    float x = __fmul_rn(__fmul_rn(__fmul_rn(s, scale), pow2(a)), pow2(b));
    return fminf(fmaxf(x, -DA_FLT_MAX), DA_FLT_MAX);
}

/// §4 `clamp(z) = min(max(z, ZMIN), 0)`.
__device__ __forceinline__ float clamp_z(float z) { return fminf(fmaxf(z, DA_ZMIN), 0.0f); }

/// §6 Software e^z for z in [−80, 0]. No MUFU, no libm.
__device__ __forceinline__ float exp(float z) {
    float t = __fmaf_rn(z, DA_L2E, DA_SHIFTER);
    float nf = __fsub_rn(t, DA_SHIFTER);
    int n = (int)__float_as_uint(t) - 0x4B400000;
    float r = __fmaf_rn(nf, -DA_LN2_HI, z);
    r = __fmaf_rn(nf, -DA_LN2_LO, r);
    float p = DA_P7;
    p = __fmaf_rn(p, r, DA_P6);
    p = __fmaf_rn(p, r, DA_P5);
    p = __fmaf_rn(p, r, DA_P4);
    p = __fmaf_rn(p, r, DA_P3);
    p = __fmaf_rn(p, r, DA_P2);
    p = __fmaf_rn(p, r, 1.0f);
    p = __fmaf_rn(p, r, 1.0f);
    return __fmul_rn(p, pow2(n));
}

/// §5 1/l for a normal positive l, by a fixed Newton sequence.
__device__ __forceinline__ float recip(float l) {
    unsigned bits = __float_as_uint(l);
    unsigned e = bits >> 23;
    float m = __uint_as_float((bits & 0x007FFFFFu) | 0x3F000000u);
    float r = __fmaf_rn(m, DA_R1, DA_R0);
    r = __fmaf_rn(r, __fmaf_rn(-m, r, 1.0f), r);
    r = __fmaf_rn(r, __fmaf_rn(-m, r, 1.0f), r);
    r = __fmaf_rn(r, __fmaf_rn(-m, r, 1.0f), r);
    return __fmul_rn(r, __uint_as_float((253u - e) << 23));
}

/// §5 a / l given r = recip(l): the same operations as div, for callers that divide many values
/// by one l and compute recip(l) once (a pure function of l, so the bits are the same).
__device__ __forceinline__ float div_r(float a, float l, float r) {
    float q = fminf(fmaxf(__fmul_rn(a, r), -DA_FLT_MAX), DA_FLT_MAX);
    float e = __fmaf_rn(-q, l, a);
    return __fmaf_rn(e, r, q);
}

/// §5 a / l, as a fixed sequence with one correction step (no IEEE division).
__device__ __forceinline__ float div(float a, float l) { return div_r(a, l, recip(l)); }

/// §5 `lsafe`: the divisor, 1 when no key was valid.
__device__ __forceinline__ float l_safe(float l) { return sel(l > 0.0f, l, 1.0f); }

/// §10 ln(l) − ln(W) for a normal, positive l: integer and fma steps only.
__device__ __forceinline__ float log_unweighted(float l) {
    const unsigned b = __float_as_uint(l);
    const unsigned e = (b - DA_LOG_SPLIT) & 0xFF800000u;
    const float f = __fsub_rn(__uint_as_float(b - e), 1.0f);
    const int k = (int)e >> 23;
    float p = DA_G8;
    p = __fmaf_rn(p, f, DA_G7);
    p = __fmaf_rn(p, f, DA_G6);
    p = __fmaf_rn(p, f, DA_G5);
    p = __fmaf_rn(p, f, DA_G4);
    p = __fmaf_rn(p, f, DA_G3);
    p = __fmaf_rn(p, f, DA_G2);
    p = __fmaf_rn(p, f, DA_G1);
    p = __fmaf_rn(p, f, DA_G0);
    const float r = __fmaf_rn(p, __fmul_rn(f, f), f);
    const float kf = __int2float_rn(k + DA_LOG2_W_INV);
    const float y = __fmaf_rn(kf, DA_LN2_LO, r);
    return __fmaf_rn(kf, DA_LN2_HI, y);
}

/// §10 A row's log-sum-exp from its final §4 state (m, l): −inf when no key was valid (l = 0);
/// the canonical NaN for a poisoned row (§7).
__device__ __forceinline__ float row_lse(float m, float l, bool poisoned) {
    const float y = log_unweighted(l_safe(l));
    const float v = sel(l > 0.0f, __fadd_rn(m, y), __uint_as_float(0xFF800000u));
    return sel(poisoned, __uint_as_float(0x7FC00000u), v);
}

/// §5 One output element before rounding: divide, canonicalise zero, saturate to `maxt`.
__device__ __forceinline__ float finalize(float acc, float lsafe, float maxt) {
    float o = __fadd_rn(div(acc, lsafe), 0.0f);
    return fminf(fmaxf(o, -maxt), maxt);
}

/// §5 finalize with recip(lsafe) computed once per row by the caller (same operations).
__device__ __forceinline__ float finalize_r(float acc, float lsafe, float r, float maxt) {
    float o = __fadd_rn(div_r(acc, lsafe, r), 0.0f);
    return fminf(fmaxf(o, -maxt), maxt);
}

}  // namespace detattn
