// How fast can ONE warp run the Exact decode's value chains (numerics.md §4: acc = fma(p, v, acc),
// a key at a time, in order)? dec1 has about one chain warp per scheduler, so that warp's cycles
// per key set `dec_values`' time (docs/perf.md, Exact decode kernels, 2026-11-27). This probe
// measures it for the loop shapes tried, with nothing else on the SM: one warp per block, one
// block per SM, its data already in shared memory, clock64() around 32 768 keys.
//
//   nvcc -arch=sm_90 -O3 -o /tmp/probe scripts/probe_chain_issue.cu && /tmp/probe
//
// Modes (K: independent chains a lane, all fed from shared memory as the kernels feed them):
//   0  registers only: K chains of FFMAs, no loads            (the FFMA latency and issue floor)
//   1  widened f32:   per 4 keys one 16-byte load of v per chain column, one of p (v1-v3 of 11-27)
//   2  raw bf16:      per key a 2-byte load of v and its widening, per 4 keys one 16-byte load of
//                     p per row; K rows share v (the shipped kernel at K = 1)
//   3  mode 2 at K = 1 with its loads written D groups ahead of their use in a register ring
//   4  mode 1 at K = 1 the same way (K is D for modes 3 and 4)
// Not part of the crate or its tests: a measurement aid, its output recorded in docs/perf.md.
#include <cstdio>
#include <vector>
#include <algorithm>

constexpr int KEYS = 32768, STAGE = 64;

// The operands in shared memory: two stage buffers of each, used in turn, so that addresses
// depend on the stage and the compiler cannot hoist the loads out of the stage loop (the
// kernels' ring does the same; a first run without this measured FFMAs only).
struct __align__(16) Stages {
    float w[2][STAGE * 8 * 8];    // widened v: [16 groups][8 K-columns][4 keys] (K ≤ 8)
    float p[2][8][STAGE + 4];     // weights, 8 rows
    unsigned short raw[2][STAGE * 32];  // raw bf16 v: [key][32 columns]
    __device__ void fill() {
        const int lane = threadIdx.x;
        for (int i = lane; i < 2 * STAGE * 8 * 8; i += 32) (&w[0][0])[i] = 1.0f + 1e-7f * i;
        for (int i = lane; i < 2 * 8 * (STAGE + 4); i += 32) (&p[0][0][0])[i] = 0.5f + 1e-7f * i;
        for (int i = lane; i < 2 * STAGE * 32; i += 32) (&raw[0][0])[i] = (unsigned short)(0x3F80 + (i % 7));
        __syncwarp();
    }
};

template <int K, int MODE>
__global__ void chain(float* out, long long* cyc) {
    __shared__ Stages sm;
    sm.fill();
    const int lane = threadIdx.x, c = lane & 7, rq = lane >> 3;
    float acc[K];
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] = lane + k;
    const long long t0 = clock64();
#pragma unroll 1
    for (int s = 0; s < KEYS / STAGE; ++s) {
        const float* ws = sm.w[s & 1];
        const float(*pst)[STAGE + 4] = sm.p[s & 1];
        const unsigned short* rs = sm.raw[s & 1];
#pragma unroll
        for (int g = 0; g < STAGE / 4; ++g) {
            if (MODE == 0) {
#pragma unroll
                for (int u = 0; u < 4; ++u)
#pragma unroll
                    for (int k = 0; k < K; ++k) acc[k] = __fmaf_rn(acc[k], 0.999f, 0.001f * (u + 1));
            } else if (MODE == 1) {
                float4 v4[K];
#pragma unroll
                for (int k = 0; k < K; ++k) v4[k] = *reinterpret_cast<const float4*>(ws + g * 256 + (c + 8 * k) * 4);
                const float4 p4 = *reinterpret_cast<const float4*>(&pst[rq][4 * g]);
#pragma unroll
                for (int k = 0; k < K; ++k) acc[k] = __fmaf_rn(p4.x, v4[k].x, acc[k]);
#pragma unroll
                for (int k = 0; k < K; ++k) acc[k] = __fmaf_rn(p4.y, v4[k].y, acc[k]);
#pragma unroll
                for (int k = 0; k < K; ++k) acc[k] = __fmaf_rn(p4.z, v4[k].z, acc[k]);
#pragma unroll
                for (int k = 0; k < K; ++k) acc[k] = __fmaf_rn(p4.w, v4[k].w, acc[k]);
            } else {
                float4 p4[K];
#pragma unroll
                for (int k = 0; k < K; ++k) p4[k] = *reinterpret_cast<const float4*>(&pst[k][4 * g]);
                float v[4];
#pragma unroll
                for (int u = 0; u < 4; ++u) v[u] = __uint_as_float((unsigned)rs[(4 * g + u) * 32 + lane] << 16);
#pragma unroll
                for (int k = 0; k < K; ++k) {
                    acc[k] = __fmaf_rn(p4[k].x, v[0], acc[k]);
                    acc[k] = __fmaf_rn(p4[k].y, v[1], acc[k]);
                    acc[k] = __fmaf_rn(p4[k].z, v[2], acc[k]);
                    acc[k] = __fmaf_rn(p4[k].w, v[3], acc[k]);
                }
            }
        }
    }
    const long long t1 = clock64();
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) sum += acc[k];
    out[blockIdx.x * 32 + lane] = sum;
    if (lane == 0) cyc[blockIdx.x] = t1 - t0;
}

// Modes 3 and 4: one chain a lane, each group's operands loaded D groups before its FFMAs (the
// ring runs on into the next stage's buffer, as it could after a stage barrier).
template <int D, int MODE>
__global__ void ring(float* out, long long* cyc) {
    __shared__ Stages sm;
    sm.fill();
    const int lane = threadIdx.x, c = lane & 7, rq = lane >> 3;
    float acc = lane;
    constexpr int NG = STAGE / 4;
    float4 vr[D], pr[D];
    auto load = [&](int s, int g, float4& v, float4& pp) {
        if (MODE == 3) {
            const unsigned short* rs = sm.raw[s & 1];
            v.x = __uint_as_float((unsigned)rs[(4 * g + 0) * 32 + lane] << 16);
            v.y = __uint_as_float((unsigned)rs[(4 * g + 1) * 32 + lane] << 16);
            v.z = __uint_as_float((unsigned)rs[(4 * g + 2) * 32 + lane] << 16);
            v.w = __uint_as_float((unsigned)rs[(4 * g + 3) * 32 + lane] << 16);
        } else {
            v = *reinterpret_cast<const float4*>(sm.w[s & 1] + g * 256 + c * 4);
        }
        pp = *reinterpret_cast<const float4*>(&sm.p[s & 1][rq][4 * g]);
    };
#pragma unroll
    for (int d = 0; d < D; ++d) load(0, d, vr[d], pr[d]);
    const long long t0 = clock64();
#pragma unroll 1
    for (int s = 0; s < KEYS / STAGE; ++s) {
#pragma unroll
        for (int g = 0; g < NG; ++g) {
            const float4 v = vr[g % D], pp = pr[g % D];
            const int gn = g + D;  // the group this slot loads next
            load(gn < NG ? s : s + 1, gn % NG, vr[g % D], pr[g % D]);
            acc = __fmaf_rn(pp.x, v.x, acc);
            acc = __fmaf_rn(pp.y, v.y, acc);
            acc = __fmaf_rn(pp.z, v.z, acc);
            acc = __fmaf_rn(pp.w, v.w, acc);
        }
    }
    const long long t1 = clock64();
    out[blockIdx.x * 32 + lane] = acc;
    if (lane == 0) cyc[blockIdx.x] = t1 - t0;
}

template <int K, int MODE>
void run(float* out, long long* cyc, int blocks) {
    for (int rep = 0; rep < 2; ++rep) {  // the first warms up
        if constexpr (MODE >= 3) ring<K, MODE><<<blocks, 32>>>(out, cyc);
        else chain<K, MODE><<<blocks, 32>>>(out, cyc);
    }
    cudaDeviceSynchronize();
    std::vector<long long> h(blocks);
    cudaMemcpy(h.data(), cyc, blocks * sizeof(long long), cudaMemcpyDeviceToHost);
    std::sort(h.begin(), h.end());
    const double per_key = (double)h[blocks / 2] / KEYS;
    if (MODE >= 3) printf("mode %d  D %d  cycles/key %6.2f\n", MODE, K, per_key);
    else printf("mode %d  K %d  cycles/key %6.2f  cycles/key/chain %6.2f\n", MODE, K, per_key, per_key / K);
}

int main() {
    int dev = 0, sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, dev);
    printf("%s, %d SMs, one warp per SM, %d keys (median over the SMs)\n", prop.name, sms, KEYS);
    float* out;
    long long* cyc;
    cudaMalloc(&out, sms * 32 * sizeof(float));
    cudaMalloc(&cyc, sms * sizeof(long long));
    run<1, 0>(out, cyc, sms); run<2, 0>(out, cyc, sms); run<4, 0>(out, cyc, sms); run<8, 0>(out, cyc, sms);
    run<1, 1>(out, cyc, sms); run<2, 1>(out, cyc, sms); run<4, 1>(out, cyc, sms); run<8, 1>(out, cyc, sms);
    run<1, 2>(out, cyc, sms); run<2, 2>(out, cyc, sms); run<4, 2>(out, cyc, sms);
    run<2, 3>(out, cyc, sms); run<4, 3>(out, cyc, sms); run<8, 3>(out, cyc, sms);
    run<2, 4>(out, cyc, sms); run<4, 4>(out, cyc, sms); run<8, 4>(out, cyc, sms);
    const cudaError_t e = cudaGetLastError();
    printf("%s\n", e == cudaSuccess ? "ok" : cudaGetErrorString(e));
    return e == cudaSuccess ? 0 : 1;
}
