// Does the GPU take a different time for some operand VALUES on the instructions the TensorCore
// prefill runs? docs/audit.md: the causal split prefill's dudect crosses 4.5 on the all-zero
// inputs and the all-true mask while the driver's copy of the same K and V bytes does not, and
// the listings have no value-dependent branch or address. This probe runs one fixed instruction
// stream per kernel over operands drawn from a class, with every SM busy, and times whole
// launches by CUDA events, the classes interleaved in a seeded random order; it prints each
// class's median and Welch's t against the first class of its kernel (|t| > 4.5: a difference).
//
//   nvcc -arch=sm_90 -O3 -o /tmp/probe_values scripts/probe_value_timing.cu && /tmp/probe_values [reps]
//
// Kernels (264 blocks of 256 threads; each warp cycles through 64 (hmma) or 32 operand sets held in
// shared memory, so the operands change every iteration, as a tile's do from one k-step to the next):
//   hmma  mma.sync.m16n8k16 bf16 x bf16 -> f32, four independent accumulators (S = Q·Kᵀ, P·V)
//   ex2   ex2.approx.ftz.f32 on each operand, summed into four accumulators (the softmax's p)
//   ffma  fma.rn.f32 chains on the operands (a control: the plain FP32 pipe)
// Classes: random (small normal-ish values), zeros, subnormals (bf16 for hmma, f32 for ffma: the
// inputs' "subnormals" class), and for hmma "quarter zeros" (a quarter of the A operand's elements
// +0: P under a random mask); for ex2 finite scores in [-20, 0], "quarter -inf" (a random mask's
// masked scores) and "all -inf". Not part of the crate or its tests: a
// measurement aid whose output is recorded in docs/audit.md.
#include <cuda_bf16.h>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <random>

constexpr int SETS = 64, VSETS = 32, BLOCKS = 264, THREADS = 256, ITER = 2048;

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// words: SETS x 32 lanes x 6 uint32 (A: 4, B: 2) of bf16 pairs.
__global__ void k_hmma(const uint32_t* words, float* out) {
    __shared__ uint32_t s[SETS * 6 * 32];
    for (int i = threadIdx.x; i < SETS * 6 * 32; i += blockDim.x) s[i] = words[i];
    __syncthreads();
    const int lane = threadIdx.x & 31;
    float c[4][4] = {};
#pragma unroll 1
    for (int it = 0; it < ITER; ++it) {
        const uint32_t* w = s + ((it + (threadIdx.x >> 5)) & (SETS - 1)) * 6 * 32 + lane;
        uint32_t a[4] = {w[0], w[32], w[64], w[96]}, b[2] = {w[128], w[160]};
#pragma unroll
        for (int k = 0; k < 4; ++k) mma(c[k], a, b);
    }
    float t = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) t += c[k][0] + c[k][1] + c[k][2] + c[k][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = t;
}

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm volatile("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// vals: VSETS x 256 floats.
__global__ void k_ex2(const float* vals, float* out) {
    __shared__ float s[VSETS * THREADS];
    for (int i = threadIdx.x; i < VSETS * THREADS; i += blockDim.x) s[i] = vals[i];
    __syncthreads();
    float acc[4] = {};
#pragma unroll 1
    for (int it = 0; it < ITER; ++it) {
        const float* v = s + (it & (VSETS - 1)) * THREADS;
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[k] += ex2(v[(threadIdx.x + 64 * k) & (THREADS - 1)]);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc[0] + acc[1] + acc[2] + acc[3];
}

__global__ void k_ffma(const float* vals, float* out) {
    __shared__ float s[VSETS * THREADS];
    for (int i = threadIdx.x; i < VSETS * THREADS; i += blockDim.x) s[i] = vals[i];
    __syncthreads();
    float acc[4] = {};
#pragma unroll 1
    for (int it = 0; it < ITER; ++it) {
        const float* v = s + (it & (VSETS - 1)) * THREADS;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float x = v[(threadIdx.x + 64 * k) & (THREADS - 1)];
            acc[k] = __fmaf_rn(x, x, acc[k]);
        }
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc[0] + acc[1] + acc[2] + acc[3];
}

static uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

struct Stats {
    double median, mean, var;
};
static Stats stats(std::vector<float> v) {
    Stats s{};
    for (float x : v) s.mean += x;
    s.mean /= v.size();
    for (float x : v) s.var += (x - s.mean) * (x - s.mean);
    s.var /= (v.size() - 1);
    std::sort(v.begin(), v.end());
    s.median = v[v.size() / 2];
    return s;
}

#define CK(x)                                                                        \
    do {                                                                             \
        cudaError_t e = (x);                                                         \
        if (e != cudaSuccess) {                                                      \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
            return 1;                                                                \
        }                                                                            \
    } while (0)

int main(int argc, char** argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 400;
    std::mt19937 rng(24301);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("probe_value_timing on %s, %d SMs, %d reps per class, ITER %d\n", prop.name, prop.multiProcessorCount,
           reps, ITER);

    // Operand classes. hmma words: bf16 pairs; small values, so that 4·ITER·16 products stay far
    // from overflow (an inf would be a value class of its own).
    const int NW = SETS * 6 * 32, NV = VSETS * THREADS;
    auto words = [&](int cls) {
        std::vector<uint32_t> w(NW);
        for (int i = 0; i < NW; ++i) {
            uint16_t h[2];
            for (int j = 0; j < 2; ++j) {
                float x = nd(rng) * 0.01f;
                if (cls == 1) x = 0.0f;
                const bool a_operand = (i / 32) % 6 < 4;
                if (cls == 2 && a_operand && ud(rng) < 0.25f) x = 0.0f;
                h[j] = bf16_bits(x);
                // bf16 subnormal: exponent field 0, a random non-zero fraction and sign.
                if (cls == 3) h[j] = (uint16_t)((rng() & 0x8000u) | (1u + rng() % 0x7Fu));
            }
            w[i] = h[0] | ((uint32_t)h[1] << 16);
        }
        return w;
    };
    auto vals = [&](int kernel, int cls) {
        std::vector<float> v(NV);
        for (int i = 0; i < NV; ++i) {
            if (kernel == 1) {  // ex2: scores after the softmax's scaling, <= 0
                float x = -20.0f * ud(rng);
                if (cls == 1 || (cls == 2 && ud(rng) < 0.25f)) x = -INFINITY;
                v[i] = x;
            } else {  // ffma
                v[i] = cls == 1 ? 0.0f : nd(rng) * 0.01f;
                if (cls == 2) {  // f32 subnormal
                    const uint32_t u = (rng() & 0x80000000u) | (1u + rng() % 0x7FFFFFu);
                    memcpy(&v[i], &u, 4);
                }
            }
        }
        return v;
    };
    const char* names[3][4] = {{"random", "zeros", "quarter zeros (A)", "subnormals"},
                               {"finite", "all -inf", "quarter -inf", nullptr},
                               {"random", "zeros", "subnormals", nullptr}};
    const char* kname[3] = {"hmma", "ex2", "ffma"};
    float* out;
    CK(cudaMalloc(&out, BLOCKS * THREADS * sizeof(float)));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int kernel = 0; kernel < 3; ++kernel) {
        int ncls = 0;
        while (ncls < 4 && names[kernel][ncls]) ++ncls;
        std::vector<void*> buf(ncls);
        for (int c = 0; c < ncls; ++c) {
            if (kernel == 0) {
                auto w = words(c);
                CK(cudaMalloc(&buf[c], NW * 4));
                CK(cudaMemcpy(buf[c], w.data(), NW * 4, cudaMemcpyHostToDevice));
            } else {
                auto v = vals(kernel, c);
                CK(cudaMalloc(&buf[c], NV * 4));
                CK(cudaMemcpy(buf[c], v.data(), NV * 4, cudaMemcpyHostToDevice));
            }
        }
        auto launch = [&](int c) {
            if (kernel == 0) k_hmma<<<BLOCKS, THREADS>>>((const uint32_t*)buf[c], out);
            else if (kernel == 1) k_ex2<<<BLOCKS, THREADS>>>((const float*)buf[c], out);
            else k_ffma<<<BLOCKS, THREADS>>>((const float*)buf[c], out);
        };
        for (int w = 0; w < 50; ++w) launch(w % ncls);  // warm-up: clocks, caches
        CK(cudaDeviceSynchronize());
        std::vector<int> order;
        for (int r = 0; r < reps; ++r)
            for (int c = 0; c < ncls; ++c) order.push_back(c);
        std::shuffle(order.begin(), order.end(), rng);
        std::vector<std::vector<float>> t(ncls);
        for (int c : order) {
            CK(cudaEventRecord(e0));
            launch(c);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            t[c].push_back(ms * 1000.0f);
        }
        const Stats base = stats(t[0]);
        for (int c = 0; c < ncls; ++c) {
            const Stats s = stats(t[c]);
            const double tt = (s.mean - base.mean) / std::sqrt(s.var / t[c].size() + base.var / t[0].size());
            printf("  %-5s %-18s median %9.2f us  mean %9.2f us  t vs %-7s %7.2f%s\n", kname[kernel], names[kernel][c],
                   s.median, s.mean, names[kernel][0], c == 0 ? 0.0 : tt,
                   c > 0 && std::fabs(tt) > 4.5 ? "  DIFFERENCE" : "");
        }
        for (void* b : buf) CK(cudaFree(b));
    }
    CK(cudaFree(out));
    return 0;
}
