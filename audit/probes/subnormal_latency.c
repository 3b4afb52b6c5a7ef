/* Which x86 floating-point instructions take longer on subnormal values (docs/audit.md, cause 4).
 *
 *   gcc -O2 -mavx512f -mavx512dq -mf16c -mfma audit/probes/subnormal_latency.c -o /tmp/probe
 *   /tmp/probe
 *
 * Throughput of independent operations with fixed operands, in TSC ticks per instruction (the
 * TSC may not tick at the core clock: compare lines with each other, not with a datasheet). A
 * line far above its "normal" neighbour means an assist; the CPU kernel must not run that
 * instruction on values that can be subnormal (src/numerics.rs: `mul`, `fma`, `fma_wide`). */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <x86intrin.h>

static float fb(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
#define N 1000000
#define BENCH(name, expr)                                                                  \
    do {                                                                                   \
        uint64_t t0 = __rdtsc();                                                           \
        for (int i = 0; i < N; i++) {                                                      \
            for (int k = 0; k < 8; k++) {                                                  \
                __m512 r_ = (__m512)(expr);                                                \
                __asm__ volatile("" ::"v"(r_));                                            \
            }                                                                              \
            __asm__ volatile("" : "+v"(A), "+v"(B), "+v"(C), "+v"(Ad), "+v"(Bd), "+v"(Cd), \
                             "+v"(Ah));                                                    \
        }                                                                                  \
        printf("%-44s %6.2f\n", name, (double)(__rdtsc() - t0) / (N * 8.0));               \
    } while (0)

int main(void) {
    const float sub = fb(0x00400000), small = fb(0x01000000); /* 2^-127, 2^-125 */
    __m512 A, B, C;
    __m512d Ad = _mm512_set1_pd(1.5), Bd = _mm512_set1_pd(1.5), Cd = _mm512_set1_pd(0);
    __m256 Ah = _mm256_set1_ps(1.5f);
    A = _mm512_set1_ps(1.5f); B = _mm512_set1_ps(1.5f); C = _mm512_set1_ps(1.5f);
    BENCH("vfmadd ps, normal", _mm512_fmadd_ps(A, B, C));
    A = _mm512_set1_ps(sub);
    BENCH("vfmadd ps, subnormal operand, normal result", _mm512_fmadd_ps(A, B, C));
    A = _mm512_set1_ps(0.0f); C = _mm512_set1_ps(sub);
    BENCH("vfmadd ps, zero product, subnormal addend", _mm512_fmadd_ps(A, B, C));
    A = _mm512_set1_ps(small); B = _mm512_set1_ps(0.25f); C = _mm512_set1_ps(0.0f);
    BENCH("vfmadd ps, normal operands, subnormal result", _mm512_fmadd_ps(A, B, C));
    BENCH("vmulps, subnormal result", _mm512_mul_ps(A, B));
    A = _mm512_set1_ps(sub); B = _mm512_set1_ps(1.5f);
    BENCH("vaddps, subnormal operand", _mm512_add_ps(A, B));
    BENCH("vaddps, subnormal result", _mm512_add_ps(A, A));
    BENCH("vmaxps, subnormal operands", _mm512_max_ps(A, A));
    BENCH("vfmadd pd {rd-sae}, normal", _mm512_fmadd_round_pd(Ad, Bd, Cd, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
    BENCH("vcvtpd2ps, normal", _mm512_castps256_ps512(_mm512_cvtpd_ps(Ad)));
    Ad = _mm512_set1_pd(1e-200); Bd = _mm512_set1_pd(1e-38);
    BENCH("vfmadd pd, result 1e-238 (normal binary64)", _mm512_fmadd_pd(Ad, Bd, Cd));
    BENCH("vfmadd pd {rd-sae}, same", _mm512_fmadd_round_pd(Ad, Bd, Cd, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
    Ad = _mm512_set1_pd((double)sub);
    BENCH("vcvtpd2ps, subnormal result", _mm512_castps256_ps512(_mm512_cvtpd_ps(Ad)));
    Ah = _mm256_set1_ps(sub);
    BENCH("vcvtps2pd, subnormal operand", _mm512_cvtps_pd(Ah));
    A = _mm512_set1_ps(fb(0x38000000)); /* 2^-15: an f16 subnormal */
    BENCH("vcvtps2ph, f16-subnormal result", _mm512_castsi512_ps(_mm512_castsi256_si512(_mm512_cvtps_ph(A, 0))));
    return 0;
}
