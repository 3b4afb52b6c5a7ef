// Software exp2, reciprocal and scale cap on FMA and integer instructions: the CUDA mirror of
// tcmodel/src/exp2.rs, step for step (docs/tensorcore-cpu-model.md §5). Compiled with the
// repository's NVRTC options (--fmad=false): every floating-point step is an explicit
// round-to-nearest intrinsic, so the compiler cannot contract or reorder, and the bits equal the
// CPU's for every input (checked exhaustively over all 2^32 inputs by `tcharness exp2`).
//
// Used by the probe kernels (tcmodel/kernels/probe.cu) and textually inserted into a variant of
// kernels/tensorcore.cu for the A/B (tcmodel/scripts/build_variants.py). Never shipped.
#pragma once

namespace swm {

// 1.5 * 2^23: x + SHIFTER rounds |x| < 2^22 to an integer (ties to even) in the low bits.
#define SWM_SHIFTER 12582912.0f
#define SWM_LOW (-127.0f)

// p(r) ~ 2^r on [-1/2, 1/2]: tcmodel/scripts/fit_exp2.py 5 (C0 = 1 exactly: exp2(0) = 1).
#define SWM_C1 __int_as_float(0x3f317215)
#define SWM_C2 __int_as_float(0x3e75fcde)
#define SWM_C3 __int_as_float(0x3d635baa)
#define SWM_C4 __int_as_float(0x3c1e7556)
#define SWM_C5 __int_as_float(0x3aaddcf8)
// Degree 3 (fit_exp2.py 3), relative error 1e-4: the cheaper variant of the A/B.
#define SWM_D1 __int_as_float(0x3f317b00)
#define SWM_D2 __int_as_float(0x3e780621)
#define SWM_D3 __int_as_float(0x3d614fb8)

// Steps 1, 2 and 4 of exp2 (exp2.rs): clamp, split x = j + r, scale 2^j from the exponent field.
__device__ __forceinline__ float exp2_split(float x, float& r) {
    // 1. x below -127 (-inf included) becomes -127; NaN stays NaN (max.NaN, FMNMX.NAN).
    float xc;
    asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(xc) : "f"(x), "f"(SWM_LOW));
    // 2. j = round(xc) by the shifter; r = xc - j is exact, in [-1/2, 1/2].
    const float t = __fadd_rn(xc, SWM_SHIFTER);
    const float j = __fsub_rn(t, SWM_SHIFTER);
    r = __fsub_rn(xc, j);
    // 4. 2^j = (bits(t) + 127) << 23 (bits(t) = 0x4B400000 + j, whose low 9 bits are zero):
    //    j = -127 gives +0.0, j = 128 gives +inf.
    return __uint_as_float((__float_as_uint(t) + 127u) << 23);
}

// 2^x: for x in [-126, 127] normal and within the bound of §5; x < -126.5 -> +0; -inf -> +0.
__device__ __forceinline__ float sw_exp2(float x) {
    float r;
    const float s = exp2_split(x, r);
    // 3. Horner with FMA, highest degree first.
    float p = SWM_C5;
    p = __fmaf_rn(p, r, SWM_C4);
    p = __fmaf_rn(p, r, SWM_C3);
    p = __fmaf_rn(p, r, SWM_C2);
    p = __fmaf_rn(p, r, SWM_C1);
    p = __fmaf_rn(p, r, 1.0f);
    return __fmul_rn(p, s);
}

// The same with the degree-3 polynomial (exp2_with(x, &C3) in exp2.rs).
__device__ __forceinline__ float sw_exp2_d3(float x) {
    float r;
    const float s = exp2_split(x, r);
    float p = SWM_D3;
    p = __fmaf_rn(p, r, SWM_D2);
    p = __fmaf_rn(p, r, SWM_D1);
    p = __fmaf_rn(p, r, 1.0f);
    return __fmul_rn(p, s);
}

// 1/x for positive normal x with a normal reciprocal: magic seed, three Newton steps (exp2.rs rcp).
__device__ __forceinline__ float sw_rcp(float x) {
    float y = __uint_as_float(0x7ef311c3u - __float_as_uint(x));
#pragma unroll
    for (int i = 0; i < 3; ++i) {
        const float e = __fmaf_rn(-x, y, 1.0f);
        y = __fmaf_rn(y, e, y);
    }
    return y;
}

// 2^(23 - floor(log2 |mu|)) clamped to [2^-126, 2^127], integer operations only (exp2.rs cap_pow2).
__device__ __forceinline__ float cap_pow2(float mu) {
    const int e = (int)((__float_as_uint(mu) >> 23) & 0xffu) - 127;
    const int k = min(max(23 - e, -126), 127);
    return __uint_as_float((unsigned)(k + 127) << 23);
}

}  // namespace swm
