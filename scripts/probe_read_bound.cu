// What can any kernel reach on issue 11's 67 MB and 134 MB decode caches, by our protocol (docs/perf.md,
// "What bounds a 64-block split decode")? A split TensorCore decode reads a 2048-key chunk of K and V
// (1 MiB at D 128 bf16) per block: 64 blocks for the 67 MB caches, 128 for the 134 MB ones. One
// block streams ~50 GB/s, so 64 blocks cannot read 67 MB at 80 % of the copy ceiling. This probe
// times, in one process and by one protocol (CUDA events, 3 warm-ups, the median of 20 samples of 1
// or 10 launches, four buffer regions rotated so that L2 holds nothing of the next launch's bytes):
//   ceiling   a 1 GiB device-to-device cudaMemcpyAsync, read + write bytes (gpu_compare.py's)
//   sweep     the best plain read: every SM, 4 blocks of 512 threads, 4 loads of 16 B in flight a
//             thread, over the whole N bytes — what no decode can beat at that size
//   chunks    N bytes as C contiguous chunks, a block each, through a ring of six 32 KiB tiles in
//             shared memory by 16-byte cp.async four tiles ahead (tc_dec's copies, no compute)
//   cluster2  64 chunks of 1 MiB, each read by a cluster of two blocks into the first block's
//             shared memory: the first block's own bulk copies fill the even tiles, the second's
//             (cp.async.bulk to the first block's shared memory through DSMEM) the odd ones, so one
//             consumer is fed by two SMs' copy paths — whether a chunk read that way beats 50 GB/s
//
//   nvcc -arch=sm_90a -O3 -o /tmp/probe_read scripts/probe_read_bound.cu && /tmp/probe_read
//
// Not part of the crate or its tests: a measurement aid, its output recorded in docs/perf.md.
#include <cstdio>
#include <vector>
#include <algorithm>
#include <functional>

constexpr int TILE = 32768, STAGES = 6, LOOK = 4;
constexpr size_t REGION = (size_t)128 << 20;  // bytes a launch may read; four regions rotate

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__global__ void __launch_bounds__(512) sweep(const uint4* __restrict__ src, size_t n16, float* out) {
    uint4 a = make_uint4(0, 0, 0, 0);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        const uint4 x0 = __ldcs(src + i), x1 = __ldcs(src + i + stride), x2 = __ldcs(src + i + 2 * stride),
                    x3 = __ldcs(src + i + 3 * stride);
        a.x ^= x0.x ^ x1.y ^ x2.z ^ x3.w;
        a.y ^= x0.y ^ x1.z ^ x2.w ^ x3.x;
    }
    for (; i < n16; i += stride) a.x ^= __ldcs(src + i).x;
    if (a.x == 0x12345678u && a.y == 0x9abcdef0u) out[0] = 1.f;  // never true: keeps the loads
}

__global__ void __launch_bounds__(128, 1) chunks(const char* __restrict__ src, int chunk, float* out) {
    extern __shared__ __align__(128) unsigned char sm[];
    const int tid = threadIdx.x;
    const char* base = src + (size_t)blockIdx.x * chunk;
    const unsigned s0 = smem_u32(sm);
    const int ntile = chunk / TILE;
    auto issue = [&](int t) {
        const unsigned dst = s0 + (t % STAGES) * TILE;
        const char* g = base + (size_t)t * TILE;
        for (int i = tid; i < TILE / 16; i += 128)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst + i * 16), "l"(g + i * 16));
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };
    for (int t = 0; t < LOOK; ++t) {
        if (t < ntile) issue(t);
        else asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
    float acc = 0.f;
    for (int t = 0; t < ntile; ++t) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(LOOK - 1) : "memory");
        __syncthreads();
        const float4 v = *reinterpret_cast<const float4*>(sm + (t % STAGES) * TILE + tid * 16);
        acc += v.x + v.w;
        __syncthreads();
        if (t + LOOK < ntile) issue(t + LOOK);
        else asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
    if (acc == 12345.f) out[blockIdx.x] = acc;
}

// Rank 0 consumes every tile of the cluster's chunk from its own shared memory; rank 1 issues the
// odd tiles' copies into it. full[s] (rank 0): one arrive (with the tile's bytes) a phase; empty[s]
// (rank 1): rank 0's arrive once it consumed an odd tile of slot s. STAGES is even, so odd tiles
// keep to odd slots.
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128, 1) cluster2(const char* __restrict__ src, float* out) {
    extern __shared__ __align__(128) unsigned char sm[];
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    const int tid = threadIdx.x;
    const int cl = blockIdx.x / 2;
    const char* base = src + (size_t)cl * (1 << 20);
    constexpr int NTILE = (1 << 20) / TILE;
    if (tid == 0) {
        for (int i = 0; i < STAGES; ++i) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_u32(&full[i])));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_u32(&empty[i])));
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    // Rank 0's shared addresses as the cluster sees them.
    unsigned sm0, full0, empty1;
    asm volatile("mapa.shared::cluster.u32 %0, %1, 0;\n" : "=r"(sm0) : "r"(smem_u32(sm)));
    asm volatile("mapa.shared::cluster.u32 %0, %1, 0;\n" : "=r"(full0) : "r"(smem_u32(&full[0])));
    asm volatile("mapa.shared::cluster.u32 %0, %1, 1;\n" : "=r"(empty1) : "r"(smem_u32(&empty[0])));
    auto issue = [&](int t) {  // by one thread of either rank
        const int s = t % STAGES;
        const unsigned bar = full0 + 8 * s;
        asm volatile("mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%0], %1;\n" ::"r"(bar),
                     "r"(TILE)
                     : "memory");
        for (int h = 0; h < 2; ++h)
            asm volatile(
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                    sm0 + s * TILE + h * (TILE / 2)),
                "l"(base + (size_t)t * TILE + h * (TILE / 2)), "r"(TILE / 2), "r"(bar)
                : "memory");
    };
    auto wait = [](unsigned bar, int parity) {
        asm volatile(
            "{\n.reg .pred p;\nW: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}\n" ::"r"(bar),
            "r"(parity)
            : "memory");
    };
    float acc = 0.f;
    if (rank == 1) {
        if (tid == 0) {
            for (int t = 1; t < NTILE; t += 2) {
                const int s = t % STAGES, k = t / STAGES;
                if (k > 0) wait(smem_u32(&empty[s]), (k - 1) & 1);
                issue(t);
            }
        }
    } else {
        if (tid == 0)
            for (int t = 0; t < LOOK; t += 2) issue(t);
        for (int t = 0; t < NTILE; ++t) {
            const int s = t % STAGES;
            wait(smem_u32(&full[s]), (t / STAGES) & 1);
            __syncthreads();
            const float4 v = *reinterpret_cast<const float4*>(sm + s * TILE + tid * 16);
            acc += v.x + v.w;
            __syncthreads();
            if (tid == 0) {
                if (t & 1)
                    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(empty1 + 8 * s)
                                 : "memory");
                else if (t + LOOK < NTILE)
                    issue(t + LOOK);
            }
        }
    }
    // Neither block may leave while the other can still reach its shared memory.
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    if (acc == 12345.f) out[cl] = acc;
}

static float median_us(int per_sample, const std::function<void(int)>& launch) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> ts;
    int r = 0;
    for (int i = 0; i < 23; ++i) {
        cudaEventRecord(a);
        for (int j = 0; j < per_sample; ++j) launch(r++ % 4);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        if (i >= 3) ts.push_back(ms * 1000.f / per_sample);
    }
    std::sort(ts.begin(), ts.end());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ts[ts.size() / 2];
}

int main() {
    char* d;
    float* o;
    char *c0, *c1;
    cudaMalloc(&d, 4 * REGION);
    cudaMemset(d, 1, 4 * REGION);
    cudaMalloc(&o, 4096);
    const size_t gib = (size_t)1 << 30;
    cudaMalloc(&c0, gib);
    cudaMalloc(&c1, gib);
    cudaMemset(c0, 1, gib);
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    const int sms = p.multiProcessorCount;
    cudaFuncSetAttribute(chunks, cudaFuncAttributeMaxDynamicSharedMemorySize, STAGES * TILE);
    cudaFuncSetAttribute(cluster2, cudaFuncAttributeMaxDynamicSharedMemorySize, STAGES * TILE);
    const float cus = median_us(1, [&](int) { cudaMemcpyAsync(c1, c0, gib, cudaMemcpyDeviceToDevice); });
    const double ceil = 2.0 * gib / cus / 1e6;  // TB/s
    printf("%s, %d SMs; ceiling (1 GiB copy, read + write): %.1f us, %.3f TB/s\n", p.name, sms, cus, ceil);
    printf("%-40s %9s %4s %9s %8s %9s\n", "how", "MB", "ps", "us", "TB/s", "of ceil");
    auto row = [&](const char* how, size_t bytes, int ps, float us) {
        const double tbs = bytes / us / 1e6;
        printf("%-40s %9.1f %4d %9.1f %8.3f %8.1f%%\n", how, bytes / 1e6, ps, us, tbs, 100.0 * tbs / ceil);
        if (cudaGetLastError() != cudaSuccess) printf("  CUDA error\n");
    };
    for (int ps : {1, 10}) {
        for (size_t mib : {64, 128}) {
            const size_t bytes = mib << 20;
            row("sweep, 4 blocks an SM", bytes, ps, median_us(ps, [&](int r) {
                    sweep<<<4 * sms, 512>>>(reinterpret_cast<const uint4*>(d + r * REGION), bytes / 16, o);
                }));
            for (int chunk_kib : {1024, 512, 256}) {
                const int blocks = (int)(bytes / ((size_t)chunk_kib << 10));
                char how[64];
                snprintf(how, sizeof how, "chunks of %d KiB, %d blocks", chunk_kib, blocks);
                row(how, bytes, ps, median_us(ps, [&](int r) {
                        chunks<<<blocks, 128, STAGES * TILE>>>(d + r * REGION, chunk_kib << 10, o);
                    }));
            }
            if (mib == 64)
                row("cluster2, 64 chunks of 1 MiB", bytes, ps,
                    median_us(ps, [&](int r) { cluster2<<<128, 128, STAGES * TILE>>>(d + r * REGION, o); }));
        }
    }
    return 0;
}
