// Probe kernels of the issue-14 harness (tcmodel/src/bin/tcharness): run one tensor-core
// instruction on tiles that the host generated, and the software exp2 over ranges of bit
// patterns. Test code, never shipped; compiled for sm_90a by tcmodel/scripts/build_probe.py with
// the repository's NVRTC options.
//
// Tile layout in global memory (all row-major, no padding):
//   A  [T][M][16]  16-bit patterns (f16 or bf16), M = 16 (mma) or 64 (wgmma)
//   Bt [T][8][16]  column n of B (its 16 k values) at Bt[t][n][0..16]
//   C  [T][M][8]   f32 bit patterns;  D the same shape, written
// Fragment layouts are the PTX ISA's for mma.m16n8k16 (.row.col) and wgmma.m64nNk16 (per warp
// of the warpgroup: rows 16*w .. 16*w + 15, the same lane mapping as mma).
#include "sw_math.cuh"

typedef unsigned short u16;
typedef unsigned int u32;

__device__ __forceinline__ u32 pack2(u16 lo, u16 hi) { return (u32)lo | ((u32)hi << 16); }

// Fragments of one m16 slab (rows r0 .. r0+15 of A, C, D) for lane (g = lane/4, q = lane%4).
struct Frag {
    u32 a[4];
    u32 b[2];
    float c[4];
};

__device__ __forceinline__ void load_frag(Frag& f, const u16* A, const u16* Bt, const u32* C, int r0, int lane) {
    const int g = lane >> 2, q = lane & 3;
    const u16* ar0 = A + (r0 + g) * 16;
    const u16* ar1 = A + (r0 + g + 8) * 16;
    f.a[0] = pack2(ar0[2 * q], ar0[2 * q + 1]);          // row g,   k 2q, 2q+1
    f.a[1] = pack2(ar1[2 * q], ar1[2 * q + 1]);          // row g+8, k 2q, 2q+1
    f.a[2] = pack2(ar0[2 * q + 8], ar0[2 * q + 9]);      // row g,   k 2q+8, 2q+9
    f.a[3] = pack2(ar1[2 * q + 8], ar1[2 * q + 9]);      // row g+8, k 2q+8, 2q+9
    const u16* bc = Bt + g * 16;                         // column n = g
    f.b[0] = pack2(bc[2 * q], bc[2 * q + 1]);            // k 2q, 2q+1
    f.b[1] = pack2(bc[2 * q + 8], bc[2 * q + 9]);        // k 2q+8, 2q+9
    f.c[0] = __uint_as_float(C[(r0 + g) * 8 + 2 * q]);   // row g,   n 2q, 2q+1
    f.c[1] = __uint_as_float(C[(r0 + g) * 8 + 2 * q + 1]);
    f.c[2] = __uint_as_float(C[(r0 + g + 8) * 8 + 2 * q]);  // row g+8
    f.c[3] = __uint_as_float(C[(r0 + g + 8) * 8 + 2 * q + 1]);
}

__device__ __forceinline__ void store_d(u32* D, const float (&d)[4], int r0, int lane) {
    const int g = lane >> 2, q = lane & 3;
    D[(r0 + g) * 8 + 2 * q] = __float_as_uint(d[0]);
    D[(r0 + g) * 8 + 2 * q + 1] = __float_as_uint(d[1]);
    D[(r0 + g + 8) * 8 + 2 * q] = __float_as_uint(d[2]);
    D[(r0 + g + 8) * 8 + 2 * q + 1] = __float_as_uint(d[3]);
}

template <bool BF16>
__device__ __forceinline__ void mma16816(float (&d)[4], const Frag& f) {
    if (BF16) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%10,%11,%12,%13};\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                     : "r"(f.a[0]), "r"(f.a[1]), "r"(f.a[2]), "r"(f.a[3]), "r"(f.b[0]), "r"(f.b[1]),
                       "f"(f.c[0]), "f"(f.c[1]), "f"(f.c[2]), "f"(f.c[3]));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%10,%11,%12,%13};\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                     : "r"(f.a[0]), "r"(f.a[1]), "r"(f.a[2]), "r"(f.a[3]), "r"(f.b[0]), "r"(f.b[1]),
                       "f"(f.c[0]), "f"(f.c[1]), "f"(f.c[2]), "f"(f.c[3]));
    }
}

// One warp per 16x8 tile (grid-stride over tiles).
template <bool BF16>
__device__ __forceinline__ void mma_tiles(const u16* A, const u16* Bt, const u32* C, u32* D, int T) {
    const int lane = threadIdx.x & 31;
    const int w0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = (gridDim.x * blockDim.x) >> 5;
    for (int t = w0; t < T; t += nw) {
        Frag f;
        load_frag(f, A + (size_t)t * 256, Bt + (size_t)t * 128, C + (size_t)t * 128, 0, lane);
        float d[4];
        mma16816<BF16>(d, f);
        store_d(D + (size_t)t * 128, d, 0, lane);
    }
}

extern "C" __global__ void mma_f16(const u16* A, const u16* Bt, const u32* C, u32* D, int T) {
    mma_tiles<false>(A, Bt, C, D, T);
}
extern "C" __global__ void mma_bf16(const u16* A, const u16* Bt, const u32* C, u32* D, int T) {
    mma_tiles<true>(A, Bt, C, D, T);
}

// ------------------------------------------------------------------------------------ wgmma
// One warpgroup (128 threads) per 64x8 tile. Three results per tile:
//   Drs: wgmma with A from registers, B from shared memory (the form FA3 uses for P·V);
//   Dss: wgmma with A and B from shared memory (the form for Q·K^T);
//   Dmm: mma.sync m16n8k16 on the same fragments (4 slabs of 16 rows), for a direct comparison.
// Shared layouts: no swizzle ("interleave"), K-major core matrices of 8 rows x 16 bytes:
//   sA[rg][kc][r8][k8] (rg = row / 8, kc = k / 8): 8-row groups 256 B apart (SBO), k-chunks 128 B
//   apart (LBO);  sB[kc][n][k8]: k-chunks 128 B apart (LBO), one 8-column group (SBO unused).

__device__ __forceinline__ unsigned long long desc_enc(unsigned x) { return (unsigned long long)((x & 0x3ffffu) >> 4); }

__device__ __forceinline__ unsigned long long make_desc(const void* smem, unsigned lbo, unsigned sbo) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(smem);
    return desc_enc(addr) | (desc_enc(lbo) << 16) | (desc_enc(sbo) << 32);  // base offset 0, no swizzle
}

template <bool BF16>
__device__ __forceinline__ void wgmma_rs(float (&d)[4], const u32 (&a)[4], unsigned long long db) {
    if (BF16) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
    } else {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
    }
}

template <bool BF16>
__device__ __forceinline__ void wgmma_ss(float (&d)[4], unsigned long long da, unsigned long long db) {
    if (BF16) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "l"(da), "l"(db), "r"(1));
    } else {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "l"(da), "l"(db), "r"(1));
    }
}

template <bool BF16>
__device__ __forceinline__ void wgmma_tiles(const u16* A, const u16* Bt, const u32* C, u32* Drs, u32* Dss, u32* Dmm,
                                            int T) {
    __shared__ __align__(128) u16 sA[64 * 16];
    __shared__ __align__(128) u16 sB[8 * 16];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    for (int t = blockIdx.x; t < T; t += gridDim.x) {
        const u16* At = A + (size_t)t * 1024;
        const u16* Btt = Bt + (size_t)t * 128;
        const u32* Ct = C + (size_t)t * 512;
        for (int i = tid; i < 1024; i += 128) {
            const int row = i >> 4, k = i & 15;
            sA[(row >> 3) * 128 + (k >> 3) * 64 + (row & 7) * 8 + (k & 7)] = At[i];
        }
        {
            const int n = tid >> 4, k = tid & 15;
            sB[(k >> 3) * 64 + n * 8 + (k & 7)] = Btt[tid];
        }
        // Generic-proxy stores that the async proxy (wgmma) reads next.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        Frag f;
        load_frag(f, At, Btt, Ct, 16 * warp, lane);
        const unsigned long long da = make_desc(sA, 128, 256), db = make_desc(sB, 128, 256);
        float d1[4] = {f.c[0], f.c[1], f.c[2], f.c[3]};
        float d2[4] = {f.c[0], f.c[1], f.c[2], f.c[3]};
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        wgmma_rs<BF16>(d1, f.a, db);
        wgmma_ss<BF16>(d2, da, db);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        float d3[4];
        mma16816<BF16>(d3, f);
        store_d(Drs + (size_t)t * 512, d1, 16 * warp, lane);
        store_d(Dss + (size_t)t * 512, d2, 16 * warp, lane);
        store_d(Dmm + (size_t)t * 512, d3, 16 * warp, lane);
        __syncthreads();  // sA/sB are rewritten for the next tile
    }
}

extern "C" __global__ void __launch_bounds__(128) wgmma_f16(const u16* A, const u16* Bt, const u32* C, u32* Drs,
                                                            u32* Dss, u32* Dmm, int T) {
    wgmma_tiles<false>(A, Bt, C, Drs, Dss, Dmm, T);
}
extern "C" __global__ void __launch_bounds__(128) wgmma_bf16(const u16* A, const u16* Bt, const u32* C, u32* Drs,
                                                             u32* Dss, u32* Dmm, int T) {
    wgmma_tiles<true>(A, Bt, C, Drs, Dss, Dmm, T);
}

// ------------------------------------------------------------------------------------- exp2
// out[i] = bits(sw_exp2(bits_to_float(start + i))) for i < n (start + i wraps modulo 2^32).
extern "C" __global__ void exp2_sw(u32 start, u32 n, u32* out) {
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = __float_as_uint(swm::sw_exp2(__uint_as_float(start + i)));
}

// The software exp2 against the hardware's ex2.approx.ftz.f32 over the same range, inputs in
// [-126, 1] only (normal results, the kernel's domain): per block, the number of equal results
// and the largest |difference| in units of the last place of the software result (reduced with
// atomics: harness code, not a shipped kernel). stats[0] += equal, stats[1] += compared,
// stats[2] = max ulp difference, stats[3] = an input reaching it.
extern "C" __global__ void exp2_vs_mufu(u32 start, u32 n, unsigned long long* stats) {
    unsigned long long eq = 0, cmp = 0;
    u32 worst = 0, worst_x = 0;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float x = __uint_as_float(start + i);
        if (!(x >= -126.0f && x <= 1.0f)) continue;
        float h;
        asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(h) : "f"(x));
        const u32 s = __float_as_uint(swm::sw_exp2(x)), hb = __float_as_uint(h);
        const u32 diff = s > hb ? s - hb : hb - s;  // positive normals: bit distance = ulps
        eq += diff == 0;
        cmp += 1;
        if (diff > worst) {
            worst = diff;
            worst_x = start + i;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        eq += __shfl_xor_sync(0xffffffffu, eq, o);
        cmp += __shfl_xor_sync(0xffffffffu, cmp, o);
        const u32 w2 = __shfl_xor_sync(0xffffffffu, worst, o), x2 = __shfl_xor_sync(0xffffffffu, worst_x, o);
        if (w2 > worst || (w2 == worst && x2 < worst_x)) {
            worst = w2;
            worst_x = x2;
        }
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&stats[0], eq);
        atomicAdd(&stats[1], cmp);
        const unsigned long long packed = ((unsigned long long)worst << 32) | (0xffffffffu - worst_x);
        atomicMax(&stats[2], packed);
    }
}

// Order-free digest of exp2 over all 2^32 inputs: block b covers inputs [b·2^16, (b+1)·2^16);
// hashes[x >> 24] += splitmix64((x << 32) | bits(exp2(x))) modulo 2^64 (one atomic per block).
// The CPU computes the same 256 sums (tcharness exp2); equal sums mean equal outputs up to a
// 2^-64 chance per chunk (NaN outputs compared as NaN, see below). deg = 5 (sw_exp2) or 3 (sw_exp2_d3). Launch: 65536 blocks x 256.
__device__ __forceinline__ unsigned long long splitmix64(unsigned long long z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

extern "C" __global__ void __launch_bounds__(256) exp2_hash(int deg, unsigned long long* hashes) {
    __shared__ unsigned long long part[8];
    const u32 base = (u32)blockIdx.x << 16;
    unsigned long long h = 0;
    for (u32 k = 0; k < 256; ++k) {
        const u32 x = base + (k << 8) + threadIdx.x;
        const float y = deg == 3 ? swm::sw_exp2_d3(__uint_as_float(x)) : swm::sw_exp2(__uint_as_float(x));
        // NaN outputs (from NaN or +inf inputs, outside the function's domain) are hashed as the
        // one pattern 0x7FFFFFFF: the GPU writes that one, a CPU may keep an input's payload.
        const u32 yb = (y != y) ? 0x7fffffffu : __float_as_uint(y);
        h += splitmix64(((unsigned long long)x << 32) | yb);
    }
    for (int o = 16; o > 0; o >>= 1) h += __shfl_xor_sync(0xffffffffu, h, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = h;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long s = 0;
        for (int w = 0; w < 8; ++w) s += part[w];
        atomicAdd(&hashes[base >> 24], s);
    }
}
