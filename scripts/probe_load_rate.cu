// How fast can one block stream K and V into shared memory, and does that set the time of a split
// TensorCore decode of 64 blocks (docs/perf.md, "Eight warps on a decode block")? tc_dec moves a
// 2048-key chunk (1 MiB at D 128 bf16) per block with 16-byte cp.async (LDGSTS) through a ring of
// six 32 KiB tiles, issued two rounds of two tiles ahead; at 64 blocks it reaches ~45 GB/s a block
// (2.9 TB/s in all), at 128 blocks ~3.8 TB/s, whether the block has 4 or 8 warps. This probe
// streams the same bytes the same ways with no compute, to see whether the copies alone are bound
// there, and what one-dimensional bulk copies (cp.async.bulk, completing on an mbarrier: the
// TMA unit, not the LSU) reach instead.
//
//   nvcc -arch=sm_90a -O3 -o /tmp/probe_load scripts/probe_load_rate.cu && /tmp/probe_load
//
// Each block reads its own contiguous 1 MiB (4096 rows of 256 bytes) through a ring of STAGES
// 32 KiB tiles, LOOK tiles in flight, consuming a tile by one 16-byte shared load a thread (so the
// data is used and the ring's slots are recycled in order). Modes:
//   0  cp.async 16 B per thread, one commit group a tile, wait_group LOOK - 1 (tc_dec's copies)
//   1  cp.async.bulk, one 256-byte copy a row (128 of them a tile, one thread each), mbarrier a slot
//   2  cp.async.bulk, one 16 KiB copy each of K's and V's half tile (2 a tile), mbarrier a slot
// With SPREAD > 1 the grid has SPREAD times the blocks and only every SPREAD-th reads (the others
// exit at once): the same reading blocks, placed SPREAD SMs apart instead of side by side, to see
// whether the bound is each SM's or that of the SMs' shared paths (a GPC's).
// Timed with CUDA events, the median of 20 launches after 3 warm-ups; GB/s counts bytes read.
// Not part of the crate or its tests: a measurement aid, its output recorded in docs/perf.md.
#include <cstdio>
#include <vector>
#include <algorithm>

constexpr int TILE = 32768, ROW = 256, CHUNK = 1 << 20, STAGES = 6;

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(unsigned bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect(unsigned bar, int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, int parity) {
    asm volatile(
        "{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
__device__ __forceinline__ void bulk(unsigned dst, const void* src, int bytes, unsigned bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar)
        : "memory");
}

template <int MODE, int NT, int LOOK>
__global__ void __launch_bounds__(NT, 1) stream(const char* __restrict__ src, float* out, int spread) {
    extern __shared__ __align__(128) unsigned char sm[];
    __shared__ __align__(8) unsigned long long bars[STAGES];
    const int tid = threadIdx.x;
    if (blockIdx.x % spread != 0) return;
    const char* base = src + (size_t)(blockIdx.x / spread) * CHUNK;
    const unsigned s0 = smem_u32(sm);
    constexpr int NTILE = CHUNK / TILE;
    if (MODE > 0 && tid == 0) {
        for (int i = 0; i < STAGES; ++i) mbar_init(smem_u32(&bars[i]), 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    auto issue = [&](int t) {
        const int st = t % STAGES;
        const unsigned dst = s0 + st * TILE;
        const char* g = base + (size_t)t * TILE;
        if constexpr (MODE == 0) {
            for (int i = tid; i < TILE / 16; i += NT)
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst + i * 16), "l"(g + i * 16));
            asm volatile("cp.async.commit_group;\n" ::: "memory");
        } else {
            const unsigned bar = smem_u32(&bars[st]);
            if (tid == 0) mbar_expect(bar, TILE);
            __syncwarp();
            if constexpr (MODE == 1) {
                for (int r = tid; r < TILE / ROW; r += NT) bulk(dst + r * ROW, g + r * ROW, ROW, bar);
            } else {
                if (tid < 2) bulk(dst + tid * (TILE / 2), g + tid * (TILE / 2), TILE / 2, bar);
            }
        }
    };
    // Every thread must see the expect_tx before any copy can complete: issue's first barrier use
    // is after the __syncthreads above, and thread 0 arrives (expect) before the copies of the
    // other threads of its warp; other warps' copies may complete first, which mbarrier allows
    // (the transaction count may go negative before the expect).
    for (int t = 0; t < LOOK && t < NTILE; ++t) issue(t);
    float acc = 0.f;
    for (int t = 0; t < NTILE; ++t) {
        if constexpr (MODE == 0) {
            asm volatile("cp.async.wait_group %0;\n" ::"n"(LOOK - 1) : "memory");
        } else {
            mbar_wait(smem_u32(&bars[t % STAGES]), (t / STAGES) & 1);
        }
        __syncthreads();  // tile t landed for everyone; slot (t - 1) % STAGES is free again
        const float4 v = *reinterpret_cast<const float4*>(sm + (t % STAGES) * TILE + (tid % (TILE / 16)) * 16);
        acc += v.x + v.w;
        __syncthreads();
        if (t + LOOK < NTILE) issue(t + LOOK);
        else if (MODE == 0) asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
    if (acc == 12345.f) out[blockIdx.x / spread] = acc;  // never true: keeps the loads
}

template <int MODE, int NT, int LOOK>
void run(const char* name, const char* d, float* o, int blocks, int spread = 1) {
    auto k = stream<MODE, NT, LOOK>;
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, STAGES * TILE);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> ts;
    for (int i = 0; i < 23; ++i) {
        // Rotate over four regions so that a block's chunk is not in L2 from the launch before.
        const char* src = d + (size_t)(i % 4) * 128 * CHUNK;
        cudaEventRecord(a);
        k<<<blocks * spread, NT, STAGES * TILE>>>(src, o, spread);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        if (i >= 3) ts.push_back(ms * 1000.f);
    }
    std::sort(ts.begin(), ts.end());
    const float us = ts[ts.size() / 2];
    const double gbs = (double)blocks * CHUNK / us / 1e3;
    printf("%-44s blocks %3d (1 in %d) %7.1f us  %6.0f GB/s  %5.1f GB/s a block\n", name, blocks, spread, us, gbs,
           gbs / blocks);
    if (cudaGetLastError() != cudaSuccess) printf("  CUDA error\n");
}

int main() {
    char* d;
    float* o;
    cudaMalloc(&d, (size_t)4 * 128 * CHUNK);
    cudaMemset(d, 1, (size_t)4 * 128 * CHUNK);
    cudaMalloc(&o, 4096);
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    printf("%s, %d SMs; each block reads 1 MiB through %d tiles of 32 KiB\n", p.name, p.multiProcessorCount, STAGES);
    for (int blocks : {64, 128}) {
        run<0, 128, 4>("cp.async 16 B, 128 threads, 4 tiles ahead", d, o, blocks);
        run<0, 256, 4>("cp.async 16 B, 256 threads, 4 tiles ahead", d, o, blocks);
        run<0, 128, 6>("cp.async 16 B, 128 threads, 6 tiles ahead", d, o, blocks);
        run<1, 128, 4>("bulk 256 B rows, 128 threads, 4 tiles ahead", d, o, blocks);
        run<1, 128, 6>("bulk 256 B rows, 128 threads, 6 tiles ahead", d, o, blocks);
        run<2, 128, 4>("bulk 16 KiB, 4 tiles ahead", d, o, blocks);
        run<2, 128, 6>("bulk 16 KiB, 6 tiles ahead", d, o, blocks);
    }
    run<0, 128, 4>("cp.async 16 B, 128 threads, 4 tiles ahead", d, o, 64, 2);
    run<2, 128, 4>("bulk 16 KiB, 4 tiles ahead", d, o, 64, 2);
    run<0, 128, 4>("cp.async 16 B, 128 threads, 4 tiles ahead", d, o, 32, 4);
    run<0, 128, 4>("cp.async 16 B, 128 threads, 4 tiles ahead", d, o, 32, 1);
    return 0;
}
