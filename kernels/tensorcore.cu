// detattn TensorCore path: FlashAttention-2-style forward on mma.sync (sm_80+), deterministic and
// constant-time by construction. Design, reduction order and measured figures: docs/tensorcore.md.
//
// ---------------------------------------------------------------------------------------- ABI
// Kernels (extern "C"), one per dtype x head dim x causal, prefill (tc_fwd) and decode (tc_dec):
//
//   tc_{fwd,dec}_{f16,bf16}_d{64,128,256}[_causal](
//       const T* q,          // [B, Hq,  Sq,  D] contiguous, 16-byte aligned
//       const T* k,          // [B, Hkv, Skv, D] contiguous, 16-byte aligned
//       const T* v,          // [B, Hkv, Skv, D] contiguous, 16-byte aligned
//       T* o,                // [B, Hq,  Sq,  D] contiguous, 16-byte aligned; every element written
//       const int* kv_lens,  // [B] key length per batch element (clamped to [0, Skv]), or NULL = Skv
//       int B, int Hq, int Hkv, int Sq, int Skv,   // Hq % Hkv == 0 (MHA, GQA, MQA); Sq, Skv >= 1;
//                                                  // B, Hq <= 65535 (grid z, y)
//       float scale,         // softmax scale (1/sqrt(D) by default; the host chooses)
//       const unsigned char* mask,  // optional boolean mask (1 byte, nonzero = attend), or NULL:
//       long long msb, long long msh, long long msq)  // element (b, h, i, j) at mask[b*msb + h*msh +
//                            // i*msq + j] (stride 0 broadcasts); the key dim is contiguous
//
//   T = __half (f16) or __nv_bfloat16 (bf16); f32 accumulation; output rounded to nearest even once.
//   Query head h reads kv head h / (Hq / Hkv).  Causal is bottom-right aligned: query row i sees key j
//   iff j + Sq <= i + L, where L = kv_lens[b] (or Skv); key j >= L is never seen; the mask removes
//   more.  A row that sees no key is written as 0.
//
// Launch configuration (also readable from the cubin as __constant__ int tc_cfg_d<D>[4] and
// tc_cfg_dec_d<D>[4] = {BM, threads, dynamic smem bytes, BN}):
//   tc_fwd: grid = (ceil(Sq / BM), Hq, B)   block = (threads, 1, 1), dynamic smem = smem bytes
//   tc_dec: grid = (1, Hkv, B)              requires (Hq / Hkv) * Sq <= 16 (BM = 16): one block holds
//           the Sq rows of all G = Hq / Hkv query heads of one kv head (decode, small Sq).
//   Above 48 KiB of shared memory, raise cudaFuncAttributeMaxDynamicSharedMemorySize first.
//   For any problem both kernels accept, tc_dec gives the same bits as tc_fwd (same BN per head dim,
//   same operation sequence per row); so does any batch, query subset or decode step (docs/tensorcore.md).
//
// kernels/_tc_tuning.cu (not shipped) instantiates tuning variants tcx_* with the same arguments.
// ---------------------------------------------------------------------------------------------
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace tc {

using uint32_t = unsigned int;  // NVRTC has no <stdint.h>
#define TC_NEG_INF __int_as_float(0xff800000)

// ---------------------------------------------------------------------------------- primitives

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; src_bytes = 0 fills the 16 bytes with zeros and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

// The same single MUFU instruction for every value (no range-dependent path).
// ex2.approx(-inf) = +0 by the PTX spec; masked scores are also zeroed by selection.
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float rcp(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

template <typename T>
struct Ty;
template <>
struct Ty<__half> {
    __device__ __forceinline__ static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    // lo goes to the lower 16 bits (the lower column index).
    __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&h);
    }
};
template <>
struct Ty<__nv_bfloat16> {
    __device__ __forceinline__ static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&h);
    }
};

// --------------------------------------------------------------------------------- the kernel
//
// Shared-memory tiles are row-major [rows][D] in 16-byte chunks, chunk c of row r stored at chunk
// c ^ (r & 7): the 8 rows an ldmatrix phase reads land in 8 different bank groups.
template <int D>
__device__ __forceinline__ uint32_t soff(int r, int c) {
    return static_cast<uint32_t>((r * D + ((c ^ (r & 7)) << 3)) * 2);
}

// Copy rows [row0, row0 + ROWS) of a [*, D] tensor into a swizzled shared tile with 16-byte cp.async;
// rows at or past `limit` are filled with zeros (decided by position only) and nothing is read for them.
template <int D, int ROWS, int NT, typename T>
__device__ __forceinline__ void load_rows(uint32_t s_base, const T* g, int row0, int limit, int tid) {
    constexpr int CH = D / 8;
    static_assert(NT % CH == 0, "a thread keeps one chunk column");
    constexpr int RSTEP = NT / CH;  // rows between a thread's successive copies
    const int r0 = tid / CH, c = tid % CH;
    const T* gc = g + c * 8;
#pragma unroll
    for (int it = 0; it < ROWS / RSTEP; ++it) {
        const int r = r0 + it * RSTEP;
        const bool ok = row0 + r < limit;
        // Rows past the limit read nothing (src-size 0); their address is clamped to the last valid
        // row (limit >= 1 whenever this runs) so that no address past the tensor is ever formed.
        const T* src = gc + (size_t)min(row0 + r, limit - 1) * D;
        cp_async16(s_base + soff<D>(r, c), src, ok ? 16 : 0);
    }
}

// D head dim; MT m16 tiles per warp (rows per warp = 16 * MT); NW warps; BN keys per KV tile;
// STAGES cp.async stages of (K, V); QREG keeps the Q fragments in registers for the whole loop.
template <int D, int MT, int NW, int BN, int STAGES, bool QREG, bool DEC = false>
struct Cfg {
    static constexpr int NT = NW * 32;
    static constexpr int BM = DEC ? 16 : NW * MT * 16;
    static constexpr int CH = D / 8;
    static constexpr int SMEM = (BM * D + 2 * STAGES * BN * D) * 2;
    static_assert(D % 16 == 0 && BN % 16 == 0 && STAGES >= 2, "tile shape");
    static_assert(!DEC || (MT == 1 && (D / 16) % NW == 0), "decode: one m16 tile, warps split D");
    static_assert((BM * CH) % NT == 0 && (BN * CH) % NT == 0, "copy loop must divide evenly");
};

template <typename T, int D, int MT, int NW, int BN, int STAGES, bool QREG, bool CAUSAL, bool DEC>
__device__ __forceinline__ void fwd(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                    T* __restrict__ o, const int* __restrict__ kv_lens, int Hq, int Hkv,
                                    int Sq, int Skv, float scale, const unsigned char* __restrict__ mask,
                                    long long msb, long long msh, long long msq) {
    using C = Cfg<D, MT, NW, BN, STAGES, QREG, DEC>;
    constexpr int NT = C::NT, BM = C::BM, CH = C::CH;
    constexpr int NB = BN / 8;                    // n8 tiles of S per KV tile
    constexpr int ND = DEC ? D / 8 / NW : D / 8;  // n8 tiles of O held by one warp
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sQ = smem_u32(smem);
    const uint32_t sK = sQ + BM * D * 2;
    const uint32_t sV = sK + STAGES * BN * D * 2;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int b = blockIdx.z;
    const int G = Hq / Hkv;
    int L = kv_lens ? kv_lens[b] : Skv;
    L = min(max(L, 0), Skv);
    // Prefill: block (query tile, query head h, batch). Rows q0 .. q0 + BM - 1 of head h.
    // Decode:  block (0, kv head, batch). Rows 0 .. G * Sq - 1 (<= 16) are the Sq query rows of the G
    //          query heads that share this kv head: contiguous in memory, row r is query row r % Sq.
    // Causal prefill: the heaviest query tiles (the last ones) start first. Scheduling only.
    const int qt = (CAUSAL && !DEC) ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int hk = DEC ? (int)blockIdx.y : (int)blockIdx.y / G;
    const int q0 = DEC ? 0 : qt * BM;
    const int nrows = DEC ? G * Sq : Sq;  // rows of this block's [rows, D] view of Q and O
    const size_t qoff = DEC ? (size_t)(b * Hq + hk * G) * Sq * D : (size_t)(b * Hq + blockIdx.y) * Sq * D;
    const T* qb = q + qoff;
    const T* kb = k + (size_t)(b * Hkv + hk) * Skv * D;
    const T* vb = v + (size_t)(b * Hkv + hk) * Skv * D;
    T* ob = o + qoff;

    // Keys [0, kv_end) can be visible to some row of this tile; later tiles are skipped by position.
    int kv_end = L;
    if (CAUSAL) kv_end = DEC ? L : min(L, min(q0 + BM, Sq) - 1 + L - Sq + 1);
    const int ntiles = kv_end > 0 ? (kv_end + BN - 1) / BN : 0;

    auto load_kv = [&](int j) {
        const int st = j % STAGES;
        load_rows<D, BN, NT>(sK + st * BN * D * 2, kb, j * BN, L, tid);
        load_rows<D, BN, NT>(sV + st * BN * D * 2, vb, j * BN, L, tid);
    };

    load_rows<D, BM, NT>(sQ, qb, q0, nrows, tid);
    if (0 < ntiles) load_kv(0);
    cp_async_commit();
#pragma unroll
    for (int s = 1; s < STAGES - 1; ++s) {
        if (s < ntiles) load_kv(s);
        cp_async_commit();
    }

    float oacc[MT][ND][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int dn = 0; dn < ND; ++dn)
#pragma unroll
            for (int e = 0; e < 4; ++e) oacc[mt][dn][e] = 0.f;
    float mrow[MT][2], lrow[MT][2];  // running max (raw score units) and this thread's partial row sum
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            mrow[mt][hf] = TC_NEG_INF;
            lrow[mt][hf] = 0.f;
        }
    uint32_t qf[QREG ? MT : 1][QREG ? D / 16 : 1][4];
    const float sl2 = scale * 1.4426950408889634f;  // scores in log2 units
    const int wrow = DEC ? 0 : warp * MT * 16;      // this warp's first row in the tile
    const int dp0 = DEC ? warp * (D / 16 / NW) : 0;  // decode: this warp's first d16 column block
    // ldmatrix addresses: tile base + compile-time row offset + (lane offset ^ (k-step << 5)). This is
    // soff() rewritten so that the k-step enters by one XOR (chunk 2*kk + b lands at byte
    // ((2*kk + b) ^ (r & 7)) << 4 = (kk << 5) ^ (((b ^ (r & 7))) << 4) within row r).
    const uint32_t offQ = soff<D>(wrow + (lane & 15), lane >> 4);
    const uint32_t offK = soff<D>((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    const uint32_t offV = soff<D>((lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);

    for (int j = 0; j < ntiles; ++j) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // tile j landed for everyone; stage (j-1) % STAGES is free again
        if (QREG && j == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int kk = 0; kk < D / 16; ++kk)
                    ldsm_x4(qf[QREG ? mt : 0][QREG ? kk : 0],
                            sQ + mt * 16 * D * 2 + (offQ ^ (kk << 5)));
        }
        if (j + STAGES - 1 < ntiles) load_kv(j + STAGES - 1);
        cp_async_commit();
        const int st = j % STAGES;
        const uint32_t sKs = sK + st * BN * D * 2, sVs = sV + st * BN * D * 2;

        // S = Q K^T, f32 accumulators, k-steps in increasing d order.
        float sacc[MT][NB][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                for (int e = 0; e < 4; ++e) sacc[mt][nb][e] = 0.f;
        // K fragments are requested one step ahead of the MMAs that use them (ptxas schedules the final
        // order; writing the prefetch distance out keeps it from hoisting every load of the tile).
        {
            constexpr int NP = NB / 2, NS = (D / 16) * NP;
            // Q fragments: copied from registers (QREG), or loaded from shared memory at the start of
            // their k-step (loading them a step ahead made the D = 128 kernel spill).
            constexpr bool PREA = QREG;
            uint32_t a[2][MT][4], bk[2][4];
            auto load_a = [&](int kk, uint32_t (&dst)[MT][4]) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    if constexpr (QREG) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) dst[mt][e] = qf[QREG ? mt : 0][QREG ? kk : 0][e];
                    } else {
                        ldsm_x4(dst[mt], sQ + mt * 16 * D * 2 + (offQ ^ (kk << 5)));
                    }
                }
            };
            auto load_b = [&](int t, uint32_t (&dst)[4]) {
                const int kk = t / NP, np = t % NP;
                ldsm_x4(dst, sKs + np * 16 * D * 2 + (offK ^ (kk << 5)));
            };
            if constexpr (PREA) load_a(0, a[0]);
            load_b(0, bk[0]);
#pragma unroll
            for (int t = 0; t < NS; ++t) {
                const int kk = t / NP, np = t % NP;
                if (t + 1 < NS) load_b(t + 1, bk[(t + 1) & 1]);
                if (PREA && np == NP - 1 && kk + 1 < D / 16) load_a(kk + 1, a[(kk + 1) & 1]);
                if (!PREA && np == 0) load_a(kk, a[kk & 1]);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    Ty<T>::mma(sacc[mt][2 * np], a[kk & 1][mt], bk[t & 1][0], bk[t & 1][1]);
                    Ty<T>::mma(sacc[mt][2 * np + 1], a[kk & 1][mt], bk[t & 1][2], bk[t & 1][3]);
                }
            }
        }

        // Mask by position only: tiles that cross L or the causal diagonal of this tile's first row, and
        // every tile when a boolean mask is given (its values are only ever selected on, never branched on).
        const int kbase = j * BN;
        const bool has_mask = mask != nullptr;
        const bool need_mask =
            has_mask || (kbase + BN > L) || (CAUSAL && kbase + BN - 1 > (DEC ? 0 : q0) + L - Sq);
        if (need_mask) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int r = wrow + mt * 16 + (lane >> 2) + hf * 8;
                    const int row = DEC ? r % Sq : q0 + r;  // the query row's index in [0, Sq)
                    const bool row_in = DEC ? r < nrows : row < Sq;
                    const unsigned char* mrow_p = nullptr;
                    if (has_mask) {
                        const int hq = DEC ? hk * G + r / Sq : (int)blockIdx.y;
                        mrow_p = mask + (long long)b * msb + (long long)hq * msh + (long long)row * msq;
                    }
#pragma unroll
                    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int col = kbase + nb * 8 + (lane & 3) * 2 + e;
                            bool masked = col >= L || (CAUSAL && col > row + L - Sq);
                            if (has_mask) {
                                // Read only in-range positions (decided by position); false = masked out.
                                const bool in = row_in && col < Skv;
                                const unsigned char mv = in ? mrow_p[in ? col : 0] : (unsigned char)1;
                                masked = masked || (mv == 0);
                            }
                            sacc[mt][nb][hf * 2 + e] = masked ? TC_NEG_INF : sacc[mt][nb][hf * 2 + e];
                        }
                }
        }

        // Online softmax. Every row: the same max over its values (own columns in increasing order, then
        // quad butterfly xor 1, xor 2), the same rescale (always applied), the same partial sums.
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const float m_old = mrow[mt][hf];
                float mx = m_old;
#pragma unroll
                for (int nb = 0; nb < NB; ++nb) {
                    mx = fmaxf(mx, sacc[mt][nb][hf * 2]);
                    mx = fmaxf(mx, sacc[mt][nb][hf * 2 + 1]);
                }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                mrow[mt][hf] = mx;
                // A row with nothing visible yet keeps max -inf: subtract 0 instead (selection, no branch),
                // so no -inf - -inf; its scores are -inf and its probabilities are zeroed below.
                const float mu = (mx == TC_NEG_INF) ? 0.f : mx;
                const float corr = ex2(__fmul_rn(__fsub_rn(m_old, mu), sl2));  // ex2(0) = 1 exactly
                const float nms = __fmul_rn(-mu, sl2);
                float rs = 0.f;
#pragma unroll
                for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float s = sacc[mt][nb][hf * 2 + e];
                        float p = ex2(__fmaf_rn(s, sl2, nms));
                        if (need_mask) p = (s == TC_NEG_INF) ? 0.f : p;
                        sacc[mt][nb][hf * 2 + e] = p;
                        rs = __fadd_rn(rs, p);
                    }
                lrow[mt][hf] = __fmaf_rn(lrow[mt][hf], corr, rs);
#pragma unroll
                for (int dn = 0; dn < ND; ++dn) {
                    oacc[mt][dn][hf * 2] = __fmul_rn(oacc[mt][dn][hf * 2], corr);
                    oacc[mt][dn][hf * 2 + 1] = __fmul_rn(oacc[mt][dn][hf * 2 + 1], corr);
                }
            }

        // O += P V, P rounded to T (the C fragment of S is the A fragment of P), k-steps in key order.
        {
            constexpr int NDP = ND / 2, NS = (BN / 16) * NDP;
            uint32_t bv[2][4], pa[MT][4];
            auto load_v = [&](int t, uint32_t (&dst)[4]) {
                const int kk = t / NDP, dp = t % NDP;
                ldsm_x4_t(dst, sVs + kk * 16 * D * 2 + (offV ^ ((dp0 + dp) << 5)));
            };
            load_v(0, bv[0]);
#pragma unroll
            for (int t = 0; t < NS; ++t) {
                const int kk = t / NDP, dp = t % NDP;
                if (t + 1 < NS) load_v(t + 1, bv[(t + 1) & 1]);
                if (dp == 0) {
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        pa[mt][0] = Ty<T>::pack(sacc[mt][2 * kk][0], sacc[mt][2 * kk][1]);
                        pa[mt][1] = Ty<T>::pack(sacc[mt][2 * kk][2], sacc[mt][2 * kk][3]);
                        pa[mt][2] = Ty<T>::pack(sacc[mt][2 * kk + 1][0], sacc[mt][2 * kk + 1][1]);
                        pa[mt][3] = Ty<T>::pack(sacc[mt][2 * kk + 1][2], sacc[mt][2 * kk + 1][3]);
                    }
                }
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    Ty<T>::mma(oacc[mt][2 * dp], pa[mt], bv[t & 1][0], bv[t & 1][1]);
                    Ty<T>::mma(oacc[mt][2 * dp + 1], pa[mt], bv[t & 1][2], bv[t & 1][3]);
                }
            }
        }
    }

    cp_async_wait<0>();
    __syncthreads();  // every warp is done with shared memory: the Q area becomes the output staging

    // Epilogue: row sum = (l0 + l1) + (l2 + l3) over the quad (same value in all four lanes), then
    // O * (1 / l) with one MUFU.RCP (l >= 1 for any row that sees a key); fully masked rows -> 0.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float l = lrow[mt][hf];
            l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
            l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
            const float r = rcp(l);
            const float inv = (l > 0.f) ? r : 0.f;
            const int row = wrow + mt * 16 + (lane >> 2) + hf * 8;
#pragma unroll
            for (int dn = 0; dn < ND; ++dn) {
                const uint32_t packed = Ty<T>::pack(__fmul_rn(oacc[mt][dn][hf * 2], inv),
                                                    __fmul_rn(oacc[mt][dn][hf * 2 + 1], inv));
                const uint32_t addr = sQ + soff<D>(row, (DEC ? dp0 * 2 : 0) + dn) + (lane & 3) * 4;
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(packed) : "memory");
            }
        }
    __syncthreads();
#pragma unroll
    for (int it = 0; it < BM * CH / NT; ++it) {
        const int idx = tid + it * NT;
        const int r = idx / CH, c = idx % CH;
        if (q0 + r < nrows) {  // position only
            uint4 val;
            asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w)
                         : "r"(sQ + soff<D>(r, c))
                         : "memory");
            *reinterpret_cast<uint4*>(ob + (size_t)(q0 + r) * D + c * 8) = val;
        }
    }
}

}  // namespace tc

using tc::uint32_t;

// ------------------------------------------------------------------------------ instantiations

#define TC_KERNEL(NAME, T, D, MT, NW, BN, ST, QREG, MINB, CAUSAL, DEC)                                 \
    extern "C" __global__ void __launch_bounds__(NW * 32, MINB) NAME(                                  \
        const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,  \
        const int* __restrict__ kv_lens, int B, int Hq, int Hkv, int Sq, int Skv, float scale,         \
        const unsigned char* __restrict__ mask, long long msb, long long msh, long long msq) {         \
        (void)B;                                                                                       \
        tc::fwd<T, D, MT, NW, BN, ST, QREG, CAUSAL, DEC>(q, k, v, o, kv_lens, Hq, Hkv, Sq, Skv, scale, \
                                                         mask, msb, msh, msq);                         \
    }

#define TC_CFG(NAME, D, MT, NW, BN, ST, QREG, DEC)                                                    \
    extern "C" __constant__ int NAME[4] = {tc::Cfg<D, MT, NW, BN, ST, QREG, DEC>::BM,                 \
                                           tc::Cfg<D, MT, NW, BN, ST, QREG, DEC>::NT,                 \
                                           tc::Cfg<D, MT, NW, BN, ST, QREG, DEC>::SMEM, BN};

// All four (dtype x causal) kernels of one head-dim configuration. MINB: blocks per SM the register
// allocation must allow (__launch_bounds__), i.e. a register cap of 65536 / (NW * 32 * MINB).
#define TC_FAMILY_(PREFIX, CFGNAME, D, MT, NW, BN, ST, QREG, MINB, DEC)                                \
    TC_CFG(CFGNAME, D, MT, NW, BN, ST, QREG, DEC)                                                     \
    TC_KERNEL(PREFIX##_f16_d##D, __half, D, MT, NW, BN, ST, QREG, MINB, false, DEC)                    \
    TC_KERNEL(PREFIX##_f16_d##D##_causal, __half, D, MT, NW, BN, ST, QREG, MINB, true, DEC)            \
    TC_KERNEL(PREFIX##_bf16_d##D, __nv_bfloat16, D, MT, NW, BN, ST, QREG, MINB, false, DEC)            \
    TC_KERNEL(PREFIX##_bf16_d##D##_causal, __nv_bfloat16, D, MT, NW, BN, ST, QREG, MINB, true, DEC)
#define TC_FAMILY(PREFIX, CFGNAME, D, MT, NW, BN, ST, QREG, MINB) \
    TC_FAMILY_(PREFIX, CFGNAME, D, MT, NW, BN, ST, QREG, MINB, false)
#define TC_DECODE(PREFIX, CFGNAME, D, NW, BN, ST, MINB) TC_FAMILY_(PREFIX, CFGNAME, D, 1, NW, BN, ST, false, MINB, true)

// The KV tile size BN of each head dim is part of the numerics (it fixes where the online softmax
// rescales): prefill and decode kernels of one head dim must use the same BN, or D3 breaks.
#define TC_BN_D64 64
#define TC_BN_D128 64
#define TC_BN_D256 32

//        prefix  config          D    MT NW BN          ST QREG   MINB
TC_FAMILY(tc_fwd, tc_cfg_d64,     64,  2, 4, TC_BN_D64,  3, true,  1)
TC_FAMILY(tc_fwd, tc_cfg_d128,    128, 2, 4, TC_BN_D128, 2, false, 1)
TC_FAMILY(tc_fwd, tc_cfg_d256,    256, 1, 4, TC_BN_D256, 2, false, 1)
// sm_86 and sm_89 allow 99 KiB of shared memory per block: 2 stages there for the larger tiles (the
// stage count does not change the bits).
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 890)
#define TC_DEC_ST_BIG 2
#else
#define TC_DEC_ST_BIG 3
#endif
//        prefix  config          D    NW BN          ST             MINB
TC_DECODE(tc_dec, tc_cfg_dec_d64, 64,  4, TC_BN_D64,  6,             2)
TC_DECODE(tc_dec, tc_cfg_dec_d128, 128, 4, TC_BN_D128, TC_DEC_ST_BIG, 2)
TC_DECODE(tc_dec, tc_cfg_dec_d256, 256, 4, TC_BN_D256, TC_DEC_ST_BIG, 2)
