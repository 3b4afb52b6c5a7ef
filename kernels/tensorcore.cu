// detattn TensorCore path: FlashAttention-2-style forward on mma.sync (sm_80+), deterministic and
// constant-time by construction. Design, reduction order and measured figures: docs/tensorcore.md.
//
// ---------------------------------------------------------------------------------------- ABI
// Kernels (extern "C"), one per dtype x head dim x causal, prefill (tc_fwd) and decode (tc_dec):
//
//   tc_{fwd,dec,decp}_{f16,bf16}_d{64,128,256}[_causal](the 36 fields of struct TcArgs below, in order)
//   tc_merge_{f16,bf16}(TcMerge)   decode only: folds the key chunks' partials into the output
//
//   Q [B, Hq, Sq, D], K and V [B, Hkv, Skv, D] and the output O [B, Hq, Sq, D] are logical shapes:
//   element (b, h, s, d) of X is at X[b*X_bs + h*X_hs + s*X_ss + d] (element strides; the host folds
//   a layout's offset into the pointer). Pointers and strides must be multiples of 16 bytes (8
//   elements): rows are copied in 16-byte chunks. Only O's rows are written.
//   T = __half (f16) or __nv_bfloat16 (bf16); f32 accumulation; output rounded to nearest even once.
//   Query head h reads kv head h / (Hq / Hkv).  Causal (the _causal kernels): query row i sees key j
//   iff j <= i + coff, coff = 0 when top_left, else L - Sq (bottom-right: the last row sees every
//   key), where L = kv_lens[b] (or Skv); key j >= L is never seen; the mask removes more.  A row
//   that sees no key is written as +0.  Finite inputs (any finite values and any finite
//   scale > 0) always give finite outputs; non-finite inputs are the host's business (the NaN policy,
//   with the tc_sanitize / tc_first_bad / tc_poison / tc_any_flag kernels at the end of this file).
//   With `lse` non-NULL every written row also gets its log-sum-exp, f32, at lse[b*lse_bs + h*lse_hs
//   + s] (docs/tensorcore-numerics.md §10; -inf for a row that sees no key).
//   tc_decp_* (decode of a paged cache, launched as tc_dec_*; not in the sm_100/sm_120 cubins,
//   tc_paged = 0): key j of batch element b is row j & (2^page_shift - 1) of page
//   table[b * max_pages + (j >> page_shift)], the page being the "batch" index of k_bs/v_bs
//   (element (p, h, r, d) at k[p*k_bs + h*k_hs + r*k_ss + d]). Only entries of pages holding keys
//   below L are read. The table is PUBLIC, like kv_lens.
//
// Launch configuration (also readable from the cubin as __constant__ int tc_cfg_d<D>[4] and
// tc_cfg_dec_d<D>[4] = {BM, threads, dynamic smem bytes, BN}):
//   tc_fwd: grid = (ceil(Sq / BM), Hq, B)   block = (threads, 1, 1), dynamic smem = smem bytes
//   tc_dec: grid = (NCH, Hkv, B)            requires (Hq / Hkv) * Sq <= 16 (BM = 16): one block holds
//           the Sq rows of all G = Hq / Hkv query heads of one kv head (decode, small Sq). NCH = 1:
//           the block walks every key chunk (TC_KCHUNK keys, docs/tensorcore-numerics.md §9),
//           folding them in registers, and writes the output. NCH = ceil(Skv / TC_KCHUNK) > 1 (the
//           split, for few kv heads): block x runs chunk x and writes its partial to `part`
//           ([B, Hkv, NCH, 16, D + 4] f32), and tc_merge, grid (G * Sq, Hkv, B), block D threads,
//           folds them into the output. Both give the same bits. Where tc_pdl = 1 (sm_90+) the merge
//           may be launched with programmatic stream serialisation (it waits for the decode grid
//           before reading `part`; the host does so where both grids fit on the SMs side by side).
//   tc_fwd with Skv > TC_KCHUNK: one launch per key chunk, chunk = 0 .. ceil(Skv / TC_KCHUNK) - 1 in
//           order on one stream, the same grid, and `part` holding BM * (D + 8) f32 per block (the
//           fold state of its rows) for gridDim.x * gridDim.y * gridDim.z blocks. A block writes its
//           output rows in the launch of its last chunk.
//   tc_fwdt (sm_90a; tc_cfg_tma_d<D>): grid = (G, 1, 1), G blocks walking the ceil(Sq / BM) * Hq * B
//           query tiles (tc::fwd_tma: at most one block per SM; the host's choice of G changes no
//           bit), each query tile's every key chunk in this one launch, `part` as for tc_fwd, the
//           tensor maps of K and V after TcArgs's fields.
//   Above 48 KiB of shared memory, raise cudaFuncAttributeMaxDynamicSharedMemorySize first.
//   For any problem both kernels accept, tc_dec gives the same bits as tc_fwd (same BN per head dim,
//   same operation sequence per row); so does any batch, query subset or decode step (docs/tensorcore.md).
//
// kernels/_tc_tuning.cu (not shipped) instantiates tuning variants tcx_* with the same arguments.
// ---------------------------------------------------------------------------------------------
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include "numerics.cuh"  // the log of the log-sum-exp (docs/tensorcore-numerics.md §10)

namespace tc {

using uint32_t = unsigned int;  // NVRTC has no <stdint.h>
#define TC_NEG_INF __int_as_float(0xff800000)
// Keys per chunk of the key split (docs/tensorcore-numerics.md §9): a constant of the contract, the
// same for every dtype, head dim and architecture, a multiple of every BN. It changes bits (rows
// that see keys in two chunks fold two partials), so prefill and decode share it. 2048, not 1024:
// each chunk costs prefill a launch and a round trip of its fold state through memory (H100: W3c
// +21 % at 1024, +12 % at 2048), and dec1 was no faster at 1024 (66.5 against 60.9 µs).
#define TC_KCHUNK 2048
// Whether the tc_decp_* kernels (decode of a paged K/V cache) are built (tc_paged below).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#define TC_PAGED 0
#else
#define TC_PAGED 1
#endif

}  // namespace tc

// The attention kernels' parameters, in order (the kernels take them one by one; see TC_KERNEL),
// mirrored field for field by `TcArgs` in src/cuda/tensorcore.rs. Change both together, and the
// `tc*_*` entry of audit/rules.toml (ordinals of the public and the 8-byte scalar parameters). The
// row strides are 32-bit (the host checks them): a row address is then one 32x32->64-bit
// multiply-add with the stride read from the constant bank.
struct TcArgs {
    const void* q;              //   0  [B, Hq, Sq, D]
    const void* k;              //   8  [B, Hkv, Skv, D]
    const void* v;              //  16  [B, Hkv, Skv, D]
    void* o;                    //  24  [B, Hq, Sq, D]; every element of every row written
    const int* kv_lens;         //  32  [B] key length per batch element (clamped to [0, Skv]), or NULL
                                //      = Skv. PUBLIC
    const unsigned char* mask;  //  40  boolean mask (1 byte, nonzero = attend) or NULL: element
                                //      (b, h, i, j) at mask[b*msb + h*msh + i*msq + j] (0 broadcasts)
    long long q_bs, q_hs;       //  48  element strides of q, k, v, o: batch, head
    long long k_bs, k_hs;       //  64
    long long v_bs, v_hs;       //  80
    long long o_bs, o_hs;       //  96
    long long msb, msh, msq;    // 112
    int q_ss, k_ss, v_ss, o_ss; // 136  row (sequence) strides, < 2^31
    int B, Hq, Hkv, Sq, Skv;    // 152  Hq % Hkv == 0 (MHA, GQA, MQA); Sq, Skv >= 1; B, Hq <= 65535
    float scale;                // 172  softmax scale (1/sqrt(D) by default; the host chooses)
    int top_left;               // 176  causal alignment (see above)
    float* part;                // 184  f32 scratch of the key-chunk fold (see the launch
                                //      configuration above), or NULL when Skv <= TC_KCHUNK
    int chunk;                  // 192  prefill: the key chunk of this launch (decode: 0, unused)
    float* lse;                 // 200  the rows' log-sum-exp (f32, row (b, h, s) at b*lse_bs + h*lse_hs
                                //      + s; docs/tensorcore-numerics.md §10), or NULL (not asked)
    long long lse_bs, lse_hs;   // 208
    const int* table;           // 224  decode: the block table [B, max_pages] of a paged K/V cache (see
                                //      above), or NULL (k, v are [B, Hkv, Skv, D] tensors). PUBLIC
    int page_shift, max_pages;  // 232  log2 of the page size (4..8), entries per table row
};

namespace tc {

// ---------------------------------------------------------------------------------- primitives

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; src_bytes = 0 fills the 16 bytes with zeros and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
// 4-byte global -> shared copy (the decode merge's chunk records).
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Programmatic dependent launch (sm_90 and later; docs/tensorcore.md, "The merge launched early"). A
// split decode lets its merge launch as soon as every block of it has started (trigger), so that the
// merge's blocks are resident when the decode ends; the merge waits for the decode grid to complete
// and its writes to be visible (wait) before it reads anything the decode wrote. Both depend only
// on the launch, never on a value. Elsewhere (and on older architectures) neither is emitted and
// the merge is an ordinary launch (the host asks for the early launch only where `tc_pdl` says so).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TC_PDL 1
#else
#define TC_PDL 0
#endif
__device__ __forceinline__ void pdl_trigger() {
#if TC_PDL
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if TC_PDL
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
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
// ex2.approx(-inf) = +0 by the PTX ISA: a masked score (-inf) gets weight +0 through it.
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

// x clamped to [-m, m], NaN kept NaN (PTX min.NaN/max.NaN, sm_80+: FMNMX.NAN).
__device__ __forceinline__ float clamp_nan(float x, float m) {
    float y;
    asm("min.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(x), "f"(m));
    asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(y), "f"(-m));
    return y;
}

// This row's scale of a step whose max is mu (docs/tensorcore-numerics.md §5 step 2): sl2r capped so
// that |mu * sl2e| <= 2^24. rcp.approx.ftz flushes a subnormal result to +0, which it is for |mu| >=
// 2^126: the cap is then 2^-104 instead, never 0 (a 0 would make -inf * sl2e = NaN). mu = 0 gives
// rcp = +inf and sl2e = sl2r.
__device__ __forceinline__ float capped_scale(float sl2r, float mu) {
    return fminf(sl2r, fmaxf(__fmul_rn(16777216.0f, rcp(fabsf(mu))), 4.93038066e-32f /* 2^-104 */));
}

// The weights a (of the folded state, max M) and b (of the next chunk, max mc) of one fold step of
// the key split (docs/tensorcore-numerics.md §9 step 2); the new max is fmaxf(M, mc). One of them is
// ex2(0) = 1 exactly unless both maxima are -inf (then both are ex2(-inf) = +0).
__device__ __forceinline__ void fold_weights(float M, float mc, float sl2r, float& a, float& b) {
    const float mn = fmaxf(M, mc);
    const float mu = (mn == TC_NEG_INF) ? 0.f : mn;
    const float sl2e = capped_scale(sl2r, mu);
    a = ex2(__fmul_rn(__fsub_rn(M, mu), sl2e));
    b = ex2(__fmul_rn(__fsub_rn(mc, mu), sl2e));
}

// The end of the keys some row of a block may see (keys [0, end)): L, or under causal the limit of
// its last row, rows_end - 1, with the alignment's offset L - Sq (bottom-right) or 0 (top-left).
// The one formula of tc::fwd's tile count (both computations of it) and tc_merge's chunk count;
// the offset in tc::fwd's form (`coff` there, which says why it is written so).
__device__ __forceinline__ int visible_end(bool causal, int L, int rows_end, int Sq, int top_left) {
    return causal ? min(L, rows_end + L - Sq + (top_left ? Sq - L : 0)) : L;
}

// One fold step of a sum or an O element: x * a + RN(xc * b), one FFMA (§9 step 2).
__device__ __forceinline__ float fold(float x, float a, float xc, float b) {
    return __fmaf_rn(x, a, __fmul_rn(xc, b));
}

// A row's log-sum-exp from its final state (docs/tensorcore-numerics.md §10): max M, the row's sum L
// (quad-summed, folded), its sl2 · 2^sh, the dtype's BIAS. Every weight is ex2(s·sl2e + nms), so L
// carries the factor 2^nms of the row's last rescale (nms formed from M exactly as the loop's last
// tile, or the fold's last step, formed it) and ln Σ exp(x) = ln L - nms · ln 2. ln L is the Exact
// path's log (numerics.cuh `log_unweighted` = ln L + 26 ln 2: integer and fma steps, no MUFU.LG2),
// the 26 taken back out of nms. L = 0 (no key seen): -inf by selection; a NaN stays NaN.
__device__ __forceinline__ float row_lse(float M, float L, float sl2r, float bias) {
    const float mu = (M == TC_NEG_INF) ? 0.f : M;
    const float nms = __fsub_rn(bias, __fmul_rn(mu, capped_scale(sl2r, mu)));
    const float y = detattn::log_unweighted((L == 0.f) ? 1.f : L);
    const float v = __fsub_rn(-(float)DA_LOG2_W_INV, nms);
    const float lse = __fmaf_rn(v, DA_LN2_HI, __fmaf_rn(v, DA_LN2_LO, y));
    return (L == 0.f) ? TC_NEG_INF : ((L != L) ? L : lse);
}

// sm_90a (Hopper, the `a` target): the D = 64 and 128 prefill kernels run both GEMMs on
// wgmma.mma_async, a warpgroup of four warps per 64 rows, instead of mma.sync. Same bits: wgmma
// computes a k16 step exactly as mma.sync.m16n8k16 does (docs/tensorcore-cpu-model.md §1: 0
// differences in 4.4 x 10^8 hardware comparisons), its accumulator and register-A fragments are
// mma.sync's m16n8 fragments stacked four warps high, and the kernel issues the same k-steps in the
// same order with the same softmax code between them (tc::fwd, Cfg::WG).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TC_WGMMA 1
#else
#define TC_WGMMA 0
#endif
// The warp-specialised decode loop (Cfg::WS): built and measured on sm_90 (the H100) only; the other
// architectures keep the loop they were measured with. Same bits either way.
#define TC_DEC_WS TC_WGMMA
#if TC_WGMMA
// m64n64 (wg_n64<0>: S, B = K tile, K-major; wg_n64<1>: O at D 64, B = V tile, N-major) and
// m64n128 (wg_o: O at D 128, N-major), A (Q or P) from registers, f32 accumulators read and written
// (scale-d 1); DT is ".f16" or ".bf16".
#define TC_WG_MMAS(DT)                                                                                                \
    template <int TB>                                                                                                 \
    __device__ __forceinline__ static void wg_n64(float (&d)[32], const uint32_t (&a)[4], unsigned long long desc) {  \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                     \
            "wgmma.mma_async.sync.aligned.m64n64k16.f32" DT DT " "                                                    \
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                 \
            "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "                       \
            "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"                                                           \
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),         \
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),   \
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])  \
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1), "n"(TB));                                         \
    }                                                                                                                 \
    __device__ __forceinline__ static void wg_o(float (&d)[64], const uint32_t (&a)[4], unsigned long long desc) {    \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                     \
            "wgmma.mma_async.sync.aligned.m64n128k16.f32" DT DT " "                                                   \
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                 \
            "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                        \
            "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                        \
            "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "                       \
            "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                                             \
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),         \
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),   \
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])  \
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));                                         \
    }
#else
#define TC_WG_MMAS(DT)
#endif

template <typename T>
struct Ty;
// Per-dtype numerics (docs/tensorcore.md, "The operation sequence"):
//   SCALE_Q  scale each Q row by a power of two in the kernel (bf16: q·k can overflow f32; f16 cannot,
//            and scaling f16 would lose its subnormals' precision);
//   BIAS     the exponent bias of every weight p = 2^((s - m)·sl2 + BIAS) (bf16: keeps l and O below
//            max|v| / 4 for up to 2^24 keys; f16 O cannot overflow and P would underflow in f16);
//   MAXT     the largest finite output, as f32 (the epilogue clamps to it before rounding).
template <>
struct Ty<__half> {
    static constexpr bool SCALE_Q = false;
    static constexpr float BIAS = 0.f;
    __device__ __forceinline__ static float maxt() { return 65504.f; }
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
    TC_WG_MMAS(".f16")
};
template <>
struct Ty<__nv_bfloat16> {
    static constexpr bool SCALE_Q = true;
    static constexpr float BIAS = -26.f;
    __device__ __forceinline__ static float maxt() { return __int_as_float(0x7f7f0000); }  // bf16 max
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
    TC_WG_MMAS(".bf16")
};

// --------------------------------------------------------------------------------- the kernel
//
// Shared-memory tiles are row-major [rows][D] in 16-byte chunks, chunk c of row r stored at chunk
// c ^ (r & 7): the 8 rows an ldmatrix phase reads land in 8 different bank groups.
template <int D>
__device__ __forceinline__ uint32_t soff(int r, int c) {
    return static_cast<uint32_t>((r * D + ((c ^ (r & 7)) << 3)) * 2);
}

// A tile's byte offset of chunk c of row r: soff, or (PANEL, the wgmma kernels' K and V tiles) D / 64
// panels of 64 columns, each ROWS rows of 128 bytes in wgmma's 128-byte swizzle (wg_desc).
template <int D, int ROWS, bool PANEL>
__device__ __forceinline__ uint32_t toff(int r, int c) {
    if constexpr (PANEL) return static_cast<uint32_t>((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
    return soff<D>(r, c);
}

// Copy rows [row0, row0 + ROWS) of a tensor into a swizzled shared tile with 16-byte cp.async; row i
// starts at row_ptr(i). Rows at or past `limit` are filled with zeros (decided by position only) and
// nothing is read for them. ROLLED: a loop, not unrolled (the TMA producer warp, which has 40
// registers: unrolled, its 32 copies a thread spilled).
template <int D, int ROWS, int NT, typename T, typename RowPtr, bool PANEL = false, bool ROLLED = false>
__device__ __forceinline__ void load_rows(uint32_t s_base, RowPtr row_ptr, int row0, int limit, int tid) {
    constexpr int CH = D / 8;
    static_assert(NT % CH == 0, "a thread keeps one chunk column");
    constexpr int RSTEP = NT / CH;  // rows between a thread's successive copies
    const int r0 = tid / CH, c = tid % CH;
    auto copy = [&](int it) {
        const int r = r0 + it * RSTEP;
        const bool ok = row0 + r < limit;
        // Rows past the limit read nothing (src-size 0); their address is clamped to the last valid
        // row (limit >= 1 whenever this runs) so that no address past the tensor is ever formed.
        const T* src = row_ptr(min(row0 + r, limit - 1)) + c * 8;
        cp_async16(s_base + toff<D, ROWS, PANEL>(r, c), src, ok ? 16 : 0);
    };
    if constexpr (ROLLED) {
#pragma unroll 1
        for (int it = 0; it < ROWS / RSTEP; ++it) copy(it);
    } else {
#pragma unroll
        for (int it = 0; it < ROWS / RSTEP; ++it) copy(it);
    }
}

// load_rows for a tile wholly before `limit` (decided by position): no clamp and no zero fill, and
// the row addresses as one base plus multiples of the row stride (the decode loop issues these
// copies every tile; the general form costs about 100 instructions a tile there).
template <int D, int ROWS, int NT, typename T, bool PANEL = false>
__device__ __forceinline__ void load_rows_full(uint32_t s_base, const T* row0_ptr, int row_stride, int tid) {
    constexpr int CH = D / 8;
    constexpr int RSTEP = NT / CH;
    const int r0 = tid / CH, c = tid % CH;
    const T* src = row0_ptr + (long long)r0 * row_stride + c * 8;
    const long long step = (long long)RSTEP * row_stride;
#pragma unroll
    for (int it = 0; it < ROWS / RSTEP; ++it)
        cp_async16(s_base + toff<D, ROWS, PANEL>(r0 + it * RSTEP, c), src + it * step, 16);
}

__device__ __forceinline__ uint4 lds128(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}
__device__ __forceinline__ void sts128(uint32_t addr, uint4 v) {
    asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

// wgmma plumbing (sm_90a; the WG branches of tc::fwd call these, other targets never do). A shared
// operand's descriptor: 128-byte swizzle (the 16-byte chunk c of a 128-byte row r sits at chunk
// c ^ (r & 7), atoms of 8 rows, 1024-byte aligned), start address, the byte strides between
// 64-element panels (lbo; N-major operands) and between 8-row groups (sbo). The k-steps of one
// operand differ only in the start address, so a call site forms the two halves once and each
// k-step's descriptor is one add (`at`): the start field is (address >> 4) of a shared address below
// 2^18 (shared memory's whole window), so adding a step's (offset >> 4) never carries into lbo.
struct WgDesc {
    uint32_t lo, hi;
    __device__ __forceinline__ WgDesc(uint32_t addr, uint32_t lbo, uint32_t sbo)
        : lo(((addr & 0x3ffffu) >> 4) | ((lbo >> 4) << 16)), hi((sbo >> 4) | (1u << 30)) {}
    // The descriptor of the operand `off` bytes (a multiple of 16) further on.
    __device__ __forceinline__ unsigned long long at(uint32_t off) const {
        return ((unsigned long long)hi << 32) | (lo + (off >> 4));
    }
};
// Before a batch of wgmma whose registers other instructions wrote; after the writes of cp.async
// (generic proxy) and before wgmma reads them (async proxy); closing and awaiting the batch.
__device__ __forceinline__ void wg_fence() {
#if TC_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_proxy_fence() {
#if TC_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit() {
#if TC_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wg_wait() {
#if TC_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// The accumulators as operands of an empty asm: the compiler cannot move their reads above the wait
// (or their writes below the issue) that this follows (precedes).
template <int N>
__device__ __forceinline__ void wg_keep(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The TMA prefill kernels (tc_fwdt_*, sm_90a; Cfg::TMA): a producer warp moves the K and V tiles by
// the tensor-memory accelerator into a ring of stages, each stage with a "full" mbarrier for K, one
// for V and an "empty" one the consumer warps arrive on when they are done with it. Every wait is on
// a barrier and a phase that the tile's position fixes; the time a wait takes depends on the copies
// and on the other warps, never on a value. A tensor map (CUtensorMap, 128 opaque bytes made by
// cuTensorMapEncodeTiled on the host) travels by value as a __grid_constant__ parameter.
struct __align__(64) TmaMap {
    unsigned long long w[16];
};
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
#if TC_WGMMA
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// One arrival that also expects `bytes` of transactions (the TMA copies that complete on it).
__device__ __forceinline__ void mbar_expect(uint32_t bar, int bytes) {
#if TC_WGMMA
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Until phase `parity` of the barrier has completed (try_wait suspends the thread for a while
// between polls; the loop is the architecture's way to wait, its trip count is timing only).
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
    asm volatile(
        "{\n"
        ".reg .pred P1;\n"
        "WAIT_AGAIN:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
        "@!P1 bra WAIT_AGAIN;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// Box (64 columns, BN rows) of a [B][H][S][D] tensor at (column c, row r, head h, batch b) into
// shared memory at dst in the 128-byte swizzle (the PANEL layout of toff), completing on bar.
__device__ __forceinline__ void tma_load(uint32_t dst, const TmaMap* map, int c, int r, int h, int b, uint32_t bar) {
#if TC_WGMMA
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
        "%5}], [%6];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(c), "r"(r), "r"(h), "r"(b), "r"(bar)
        : "memory");
#endif
}
// A warpgroup's register budget (setmaxnreg: the producer gives registers up, the consumers take them).
template <int N>
__device__ __forceinline__ void regs_down() {
#if TC_WGMMA
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void regs_up() {
#if TC_WGMMA
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
// The consumer warps' own barrier (named barrier 1): the producer warpgroup never joins it.
template <int N>
__device__ __forceinline__ void bar_consumers() {
    asm volatile("bar.sync 1, %0;\n" ::"n"(N) : "memory");
}
// Named barrier `id` of N threads: wait there (sync) or only count this warp in (arrive).
template <int N>
__device__ __forceinline__ void bar_sync_id(int id) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void bar_arrive_id(int id) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(N) : "memory");
}

// The largest of m and a row half's 2·NB scores in one thread's S fragment (hf: the row half). Max is
// exact and order-free (a NaN is ignored in any order; the sign of a zero maximum reaches no value:
// docs/tensorcore-numerics.md §5), so the order changes no bit. TREE (the sm_90 wgmma and
// warp-specialised loops): a tree of fmaxf, log2(2·NB) deep; else a chain in column order.
template <bool TREE, int NB>
__device__ __forceinline__ float tile_max(const float (&s)[NB][4], int hf, float m) {
    if constexpr (!TREE) {
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) m = fmaxf(fmaxf(m, s[nb][hf * 2]), s[nb][hf * 2 + 1]);
        return m;
    }
    float t[2 * NB];
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
        t[2 * nb] = s[nb][hf * 2];
        t[2 * nb + 1] = s[nb][hf * 2 + 1];
    }
#pragma unroll
    for (int w = 1; w < 2 * NB; w *= 2)
#pragma unroll
        for (int i = 0; i < 2 * NB; i += 2 * w) t[i] = fmaxf(t[i], t[i + w]);
    return fmaxf(m, t[0]);
}

// 2^k as an f32, for k in [-126, 127] (exponent field built with integer ops).
__device__ __forceinline__ float pow2(int k) { return __int_as_float((k + 127) << 23); }

// Two bf16 times the bf16 pair f: fma(w, f, -0) (an exact power-of-two step unless the result is
// subnormal; -0 keeps a zero's sign). fma.rn.bf16x2 is sm_80+ (mul.bf16x2 would need sm_90).
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t w, uint32_t f) {
    uint32_t y;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(y) : "r"(w), "r"(f), "r"(0x80008000u));
    return y;
}

// The bf16 pair (2^-k, 2^-k), k in [-126, 126].
__device__ __forceinline__ uint32_t pow2_bf16x2(int k) {
    const uint32_t h = (uint32_t)(127 - k) << 7;
    return h | (h << 16);
}

// A bf16 Q row's scale (step 0 below) from its largest magnitude's bit pattern, as scale_q_rows
// forms it (written out there too: a shared helper moved the schedules of every bf16 kernel on every
// architecture, not all of which can be run here): the factors 2^-a and 2^-b (bf16 pairs; sh = a + b)
// and the row's sl2 · 2^sh, clamped to [FLT_MIN, FLT_MAX].
struct QScale {
    uint32_t fa, fb;
    float sl2r;
};
__device__ __forceinline__ QScale q_scale(uint32_t mag, float sl2) {
    const int e = max(1, (int)(mag >> 7));
    const int sh = e - 117;
    const int a = sh >> 1, b = sh - a;
    const float f = __fmul_rn(__fmul_rn(sl2, pow2(a)), pow2(b));
    return {pow2_bf16x2(a), pow2_bf16x2(b), fminf(fmaxf(f, 1.17549435e-38f), 3.40282347e38f)};
}

// bf16 only (docs/tensorcore.md, step 0): scale every row r of the BM x D Q tile in shared memory by
// 2^-sh, sh = e - 127 + 10 with e = max(1, the row's largest biased exponent), so that its largest
// |q| lies in [2^-10, 2^-9) and every score |q'·k| <= 2^-9 · 2^128 · 256 = 2^127 stays finite for any
// finite bf16 K (D <= 256); write sl2 · 2^sh, clamped to [FLT_MIN, FLT_MAX], to srow[r]. The chunk
// order in a row does not matter (max, elementwise scaling), so a thread visits its row's chunks
// rotated by the row index: the 8 threads of a quarter warp (8 rows, 2^k · 16 bytes apart) then hit
// 8 different bank groups instead of one. Every row of the tile, zero-filled ones included, runs the
// same instructions: nothing depends on the values.
template <int D, int BM, int NT>
__device__ __forceinline__ void scale_q_rows(uint32_t sQ, uint32_t srow, float sl2, int tid) {
    constexpr int CH = D / 8;
    constexpr int TPR = NT / BM;  // threads per row, consecutive lanes
    static_assert(NT % BM == 0 && CH % TPR == 0 && (TPR & (TPR - 1)) == 0 && TPR <= 32, "row split");
    const int r = tid / TPR, part = tid % TPR;
    const uint32_t row = sQ + r * D * 2;
    // Magnitudes (sign cleared) as bit patterns order like the values: a packed 16-bit integer max.
    uint32_t mag2 = 0;
#pragma unroll
    for (int i = 0; i < CH / TPR; ++i) {
        const uint4 w = lds128(row + ((part + i * TPR + r) & (CH - 1)) * 16);
        mag2 = __vmaxu2(mag2, __vmaxu2(__vmaxu2(w.x & 0x7fff7fffu, w.y & 0x7fff7fffu),
                                       __vmaxu2(w.z & 0x7fff7fffu, w.w & 0x7fff7fffu)));
    }
    uint32_t mag = max(mag2 & 0xffffu, mag2 >> 16);
#pragma unroll
    for (int o = 1; o < TPR; o <<= 1) mag = max(mag, __shfl_xor_sync(0xffffffffu, mag, o));
    const int e = max(1, (int)(mag >> 7));
    const int sh = e - 117;                 // in [-116, 137]
    const int a = sh >> 1, b = sh - a;      // a in [-58, 68], b in [-58, 69]: each 2^-k is a normal bf16
    const uint32_t fa = pow2_bf16x2(a), fb = pow2_bf16x2(b);
#pragma unroll
    for (int i = 0; i < CH / TPR; ++i) {
        const uint32_t addr = row + ((part + i * TPR + r) & (CH - 1)) * 16;
        uint4 w = lds128(addr);
        w.x = mul_bf16x2(mul_bf16x2(w.x, fa), fb);
        w.y = mul_bf16x2(mul_bf16x2(w.y, fa), fb);
        w.z = mul_bf16x2(mul_bf16x2(w.z, fa), fb);
        w.w = mul_bf16x2(mul_bf16x2(w.w, fa), fb);
        sts128(addr, w);
    }
    // sl2 · 2^sh is exact in the normal range; the clamps only act on absurd inputs (a row of
    // subnormals with a tiny scale; |q| ~ 2^120 with the default scale): FLT_MIN keeps -inf · sl2 from
    // becoming NaN, FLT_MAX keeps it from being inf.
    const float f = __fmul_rn(__fmul_rn(sl2, pow2(a)), pow2(b));
    const float sl2r = fminf(fmaxf(f, 1.17549435e-38f), 3.40282347e38f);
    if (part == 0) asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(srow + r * 4), "f"(sl2r) : "memory");
}

// The TMA kernels (bf16): the same scaling applied to a warp's Q fragments in registers, after
// ldmatrix has read them unscaled from the Q tile, instead of a pass of the whole block over the
// tile in shared memory before the query tile's first S (a fixed cost of every query tile:
// docs/perf.md). The same integer max over the same row (a quad's four lanes hold a row's D
// columns: registers 0 and 2 of each k-step row r0 = wrow + lane / 4, 1 and 3 row r0 + 8), the
// same factors, the same two roundings per element: the same bits. Lane 0 of the quad writes the
// row's sl2 · 2^sh, which the quad's lanes read (row_sl2, the softmax): at every key chunk's start
// (the fragments are reloaded there), so a __syncwarp before the write orders it after the lanes'
// reads of the previous chunk (compute-sanitizer's racecheck flagged the write without it: the same
// value, but an unordered write), and one after it before their next reads.
template <int D>
__device__ __forceinline__ void scale_q_regs(uint32_t (&qf)[D / 16][4], uint32_t srow, int r0, float sl2, int lane) {
    uint32_t mag2[2] = {0u, 0u};
    float sl2r[2];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) mag2[e & 1] = __vmaxu2(mag2[e & 1], qf[kk][e] & 0x7fff7fffu);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        uint32_t mag = max(mag2[h] & 0xffffu, mag2[h] >> 16);
        mag = max(mag, __shfl_xor_sync(0xffffffffu, mag, 1));
        mag = max(mag, __shfl_xor_sync(0xffffffffu, mag, 2));
        const QScale q = q_scale(mag, sl2);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            qf[kk][h] = mul_bf16x2(mul_bf16x2(qf[kk][h], q.fa), q.fb);
            qf[kk][h + 2] = mul_bf16x2(mul_bf16x2(qf[kk][h + 2], q.fa), q.fb);
        }
        sl2r[h] = q.sl2r;
    }
    __syncwarp();
    if ((lane & 3) == 0) {  // position
#pragma unroll
        for (int h = 0; h < 2; ++h)
            asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(srow + (r0 + h * 8) * 4), "f"(sl2r[h]) : "memory");
    }
    __syncwarp();
}

// D head dim; MT m16 tiles per warp (rows per warp = 16 * MT); NW warps; BN keys per KV tile;
// STAGES cp.async stages of (K, V); QREG keeps the Q fragments in registers for the whole loop.
template <int D, int MT, int NW, int BN, int STAGES, bool QREG, bool DEC = false, bool TMA_ = false>
struct Cfg {
    static constexpr int NT = NW * 32;  // the threads that compute (TMA: the producer warpgroup besides)
    static constexpr int BM = DEC ? 16 : NW * MT * 16;
    static constexpr int CH = D / 8;
    // Decode with three or more stages computes each tile's scores one tile ahead (PIPE, in tc::fwd);
    // where the warps can share the tile's n8 column pairs evenly, each computes its share once and
    // they exchange them through shared memory (SPLIT): two tiles of 16 x BN f32 in fragment order.
    // Decode on sm_90 at D 64 and 128, warp-specialised (tc::fwd, WS): warps 0 and 1 compute the
    // scores and the softmax of alternate key tiles, warps 2 and 3 the P·V of half of O's columns
    // each, so that a tile's work is no longer one dependent chain repeated by every warp.
    static constexpr bool WS = DEC && TC_DEC_WS && (D == 64 || D == 128) && NW == 4;
    static constexpr bool PIPE = DEC && STAGES >= 3 && !WS;
    // sm_90a prefill at D = 64 and 128: both GEMMs on wgmma, warpgroups of 64 rows (the primitives above).
    static constexpr bool WG = TC_WGMMA && !DEC && (D == 128 || D == 64);
    static_assert(!WG || (MT == 1 && (NW == 8 || (NW == 12 && TMA_ && D == 64)) && BN == 64 && QREG),
                  "wgmma: a warp per m16 tile, Q in registers; three warpgroups only in the D 64 TMA kernels");
    // The TMA prefill (tc_fwdt_*): the WG loop fed by a producer warpgroup (warps NW .. NW + 3) through
    // mbarriers instead of every thread's cp.async; three barriers of 8 bytes per stage.
    static constexpr bool TMA = TMA_ && WG;
    static_assert(!TMA_ || TMA, "TMA: the wgmma prefill only");
    static constexpr int NTL = TMA ? NT + 128 : NT;  // threads a block is launched with
    static constexpr int BARS = TMA ? 3 * STAGES * 8 : 0;
    static constexpr bool SPLIT = PIPE && (BN / 8) % (2 * NW) == 0;
    // WS: four tile slots, each the tile's published weights P (A fragments: BN / 16 k-steps x 32
    // lanes x 16 bytes), then per lane its two rows' corr and rs (16 bytes) and m (8 bytes); after
    // the slots, the row maxima of four tiles (16 rows each).
    static constexpr int WS_SLOT = (BN / 16) * 32 * 16 + 32 * 16 + 32 * 8;
    static constexpr int SBUF = SPLIT ? 2 * 16 * BN * 4 : WS ? 4 * WS_SLOT + 4 * 16 * 4 : 0;
    static_assert(!WS || (STAGES == 6 && BN == 64), "WS: K and V rings of 2 (L + 1) tiles, L = 2");
    // Q tile (TMA: two, the current query tile's and the next one's, tc::fwd_tma), K and V stages
    // (2-byte elements), one f32 per query row (sl2 · 2^sh, bf16 only), the shared scores (SPLIT).
    static constexpr int SMEM =
        (BM * D * (TMA ? 2 : 1) + 2 * STAGES * BN * D) * 2 + BM * 4 + SBUF + BARS + (WG ? 1024 : 0);
    static_assert(D % 16 == 0 && BN % 16 == 0 && STAGES >= 2, "tile shape");
    static_assert(!DEC || (MT == 1 && (D / 16) % NW == 0), "decode: one m16 tile, warps split D");
    static_assert((BM * CH) % NT == 0 && (TMA || (BN * CH) % NT == 0), "copy loop must divide evenly");
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#define TC_MASK_UNGUARDED 1
#else
#define TC_MASK_UNGUARDED 0
#endif

// fwd's shared memory after the Q tile (TMA: two Q buffers): the K and V stages (1024-byte aligned:
// wgmma reads them through 128-byte-swizzle descriptors), one f32 per query row, the TMA stages'
// barriers (Cfg::SMEM counts it all). One definition for fwd and fwd_tma, which initialises the
// barriers.
template <class C, int D, int BN, int STAGES>
struct Smem {
    uint32_t k, v, row, bar;
    __device__ __forceinline__ explicit Smem(uint32_t base) {
        constexpr int BM = C::BM;
        k = C::WG ? (base + (C::TMA ? 2 : 1) * BM * D * 2 + 1023) & ~1023u : base + BM * D * 2;
        v = k + STAGES * BN * D * 2;
        row = v + STAGES * BN * D * 2;
        bar = row + BM * 4;
    }
};

// TMA prefill (tc_fwdt_*): one query tile of a block's walk over several (fwd_tma, below). Positions
// and counters only.
struct TmaRun {
    int qt, h, b;     // the query tile, its query head and batch element
    uint32_t g0;      // the K/V tiles the walk moved through the stage ring before this query tile's
    int buf;          // its Q buffer (0 or 1); the next query tile's Q goes into the other one
    int nqt, nh, nb;  // the next query tile of the walk (nqt < 0: none)
};

// TMA prefill: the consumers' copy of query tile qt of query head h, batch element b, into the Q
// buffer at dst (rows past Sq zero-filled), one cp.async each of its rows' 16-byte chunks.
template <typename T, int D, int BM, int NT>
__device__ __forceinline__ void tma_load_q(const TcArgs& A, uint32_t dst, int qt, int h, int b, int tid) {
    const T* qb = static_cast<const T*>(A.q) + (b * A.q_bs + h * A.q_hs);
    auto row = [&](int r) -> const T* { return qb + (long long)r * A.q_ss; };
    load_rows<D, BM, NT, T>(dst, row, qt * BM, A.Sq, tid);
}

// PAGED (decode only): K and V are a paged cache read through TcArgs::table (the tc_decp_* kernels).
// TMA_ (tc_fwdt_*): K and V come through the tensor maps tk and tv (Cfg::TMA); R is the query tile
// (the others read their block's place from blockIdx); PROD: the producer warp's part alone (the
// consumers' code is then not in its path, where ptxas would keep their register count). Returns
// the K/V tiles the block walked (the TMA walk's ring count; the other kernels ignore it).
template <typename T, int D, int MT, int NW, int BN, int STAGES, bool QREG, bool CAUSAL, bool DEC, bool PAGED,
          bool TMA_ = false, bool PROD = false>
__device__ __forceinline__ int fwd(const TcArgs& A, const TmaMap* tk = nullptr, const TmaMap* tv = nullptr,
                                   const TmaRun& R = TmaRun{}) {
    static_assert(DEC || !PAGED, "paged caches are read by the decode kernels only");
    const T* __restrict__ q = static_cast<const T*>(A.q);
    const T* __restrict__ k = static_cast<const T*>(A.k);
    const T* __restrict__ v = static_cast<const T*>(A.v);
    T* __restrict__ o = static_cast<T*>(A.o);
    const int* __restrict__ kv_lens = A.kv_lens;
    const unsigned char* __restrict__ mask = A.mask;
    const int Hq = A.Hq, Hkv = A.Hkv, Sq = A.Sq, Skv = A.Skv;
    const long long msb = A.msb, msh = A.msh, msq = A.msq;
    const float scale = A.scale;
    using C = Cfg<D, MT, NW, BN, STAGES, QREG, DEC, TMA_>;
    constexpr int NT = C::NT, BM = C::BM, CH = C::CH;
    constexpr int NB = BN / 8;                    // n8 tiles of S per KV tile
    constexpr int NCW = C::WS ? 2 : NW;            // decode: warps that hold O columns
    constexpr int ND = DEC ? D / 8 / NCW : D / 8;  // n8 tiles of O held by one warp
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sBase = smem_u32(smem);
    const uint32_t sQ = C::TMA ? sBase + (uint32_t)R.buf * (BM * D * 2) : sBase;
    const Smem<C, D, BN, STAGES> lay(sBase);
    const uint32_t sK = lay.k, sV = lay.v;
    const uint32_t sRow = lay.row;  // [BM] f32: sl2 · 2^sh per query row (bf16)

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int b = C::TMA ? R.b : (int)blockIdx.z;
    const int G = Hq / Hkv;
    int L = kv_lens ? kv_lens[b] : Skv;
    L = min(max(L, 0), Skv);
    // Prefill: block (query tile, query head h, batch). Rows q0 .. q0 + BM - 1 of head h.
    // Decode:  block (0, kv head, batch). Rows 0 .. G * Sq - 1 (<= 16) are the Sq query rows of the G
    //          query heads that share this kv head: contiguous in memory, row r is query row r % Sq.
    // Causal prefill: the heaviest query tiles (the last ones) start first. Scheduling only.
    const int qt = C::TMA ? R.qt : (CAUSAL && !DEC) ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int hb = C::TMA ? R.h : (int)blockIdx.y;  // prefill: the query head
    const int hk = DEC ? (int)blockIdx.y : hb / G;
    const int q0 = DEC ? 0 : qt * BM;
    const int nrows = DEC ? G * Sq : Sq;  // rows of this block's view of Q and O
    // Row r of that view: prefill, query row r of head blockIdx.y; decode, query row r % Sq of head
    // hk * G + r / Sq (the G heads that share kv head hk).
    const T* kb = k + (b * A.k_bs + hk * A.k_hs);
    const T* vb = v + (b * A.v_bs + hk * A.v_hs);
    auto q_row = [&](int r) -> const T* {
        if (DEC) return q + (b * A.q_bs + (hk * G + r / Sq) * A.q_hs + (long long)(r % Sq) * A.q_ss);
        return q + (b * A.q_bs + hb * A.q_hs + (long long)r * A.q_ss);
    };
    // PAGED: key j's page from the block table (public; j < L always here, so the entry is one the
    // host validated), then its row within the page. Every row is looked up, whatever the page
    // size: no table load sits behind a branch (the audit's taint pass cannot pair a predicated
    // load with its public address).
    auto k_row = [&](int j) -> const T* {
        if constexpr (PAGED) {
            const long long pg = A.table[b * A.max_pages + (j >> A.page_shift)];
            return k + (pg * A.k_bs + hk * A.k_hs) + (long long)(j & ((1 << A.page_shift) - 1)) * A.k_ss;
        }
        return kb + (long long)j * A.k_ss;
    };
    auto v_row = [&](int j) -> const T* {
        if constexpr (PAGED) {
            const long long pg = A.table[b * A.max_pages + (j >> A.page_shift)];
            return v + (pg * A.v_bs + hk * A.v_hs) + (long long)(j & ((1 << A.page_shift) - 1)) * A.v_ss;
        }
        return vb + (long long)j * A.v_ss;
    };
    // Causal: row i sees keys j <= i + coff (docs/numerics.md §1, either alignment).
    // (Written as a correction of L - Sq rather than a choice of 0: this form keeps the bf16 D = 128
    // causal kernels of sm_86/89/90 within 255 registers; the value is the same.)
    const int coff = L - Sq + (A.top_left ? Sq - L : 0);

    // Keys [0, kv_end) can be visible to some row of this tile; later tiles are skipped by position.
    const int kv_end = visible_end(CAUSAL, L, DEC ? Sq : min(q0 + BM, Sq), Sq, A.top_left);
    const int ntiles = kv_end > 0 ? (kv_end + BN - 1) / BN : 0;
    // The key split (docs/tensorcore-numerics.md §9): chunk c is tiles [c·CT, (c + 1)·CT).
    // Decode, split launch (gridDim.x > 1): the block runs chunk blockIdx.x and leaves the fold to
    //   tc_merge. Decode, one block per kv head (gridDim.x = 1): every chunk, folded in registers at
    //   each boundary (`whole`). TMA prefill (sm_90): every chunk in one launch, each chunk's
    //   partial folded into a state in `part` at the boundary (chunk_out) and the last one in the
    //   epilogue. Other prefill: chunk A.chunk of one launch per chunk (the host launches chunks
    //   0, 1, ... in order on one stream), folded in the epilogue into the state the previous
    //   launch left in `part`: at a chunk boundary inside the mma.sync loop, ptxas spilled the
    //   D = 128 kernels (stack 8-24 bytes, whatever the form of the fold).
    // A block whose keys ended in an earlier chunk has nothing to do (by position).
    constexpr int CT = TC_KCHUNK / BN;
    static_assert(TC_KCHUNK % BN == 0, "a chunk is whole key tiles");
    const bool whole = DEC && gridDim.x == 1;
    const int chunk = DEC ? (int)blockIdx.x : C::TMA ? 0 : A.chunk;  // TMA: the host launches chunk 0
    const int j0 = chunk * CT;
    const int jend = (whole || C::TMA) ? ntiles : min(ntiles, j0 + CT);
    if (chunk > 0 && j0 >= ntiles) return 0;

    // K (or V) of tile j into its stage j % STAGES: a tile wholly before L (decode, contiguous) by
    // load_rows_full, else by load_rows (clamped rows, zero fill). WS issues K and V on their own
    // schedules; the other loops take both at once (load_kv).
    auto load_tile = [&](int j, bool isk) {
        const uint32_t dst = (isk ? sK : sV) + (j % STAGES) * BN * D * 2;
        if (DEC && !PAGED && (j + 1) * BN <= L) {  // by position
            load_rows_full<D, BN, NT, T, C::WG>(dst, isk ? k_row(j * BN) : v_row(j * BN), isk ? A.k_ss : A.v_ss, tid);
            return;
        }
        if (isk) load_rows<D, BN, NT, T, decltype(k_row), C::WG>(dst, k_row, j * BN, L, tid);
        else load_rows<D, BN, NT, T, decltype(v_row), C::WG>(dst, v_row, j * BN, L, tid);
    };
    auto load_k = [&](int j) { load_tile(j, true); };
    auto load_v = [&](int j) { load_tile(j, false); };
    // Both at once, for the other loops (as load_k then load_v, ptxas scheduled the D 256 decode
    // kernels differently: kept as measured).
    auto load_kv = [&](int j) {
        const int st = j % STAGES;
        if (DEC && !PAGED && (j + 1) * BN <= L) {  // by position
            load_rows_full<D, BN, NT, T, C::WG>(sK + st * BN * D * 2, k_row(j * BN), A.k_ss, tid);
            load_rows_full<D, BN, NT, T, C::WG>(sV + st * BN * D * 2, v_row(j * BN), A.v_ss, tid);
            return;
        }
        load_rows<D, BN, NT, T, decltype(k_row), C::WG>(sK + st * BN * D * 2, k_row, j * BN, L, tid);
        load_rows<D, BN, NT, T, decltype(v_row), C::WG>(sV + st * BN * D * 2, v_row, j * BN, L, tid);
    };
    // WS: K and V as two streams of tiles j0, j0 + 1, ... in order, each into its ring's slot
    // j % STAGES, issued L = 2 rounds (of two tiles) before their use: the prologue issues K of tiles
    // 0 and 1, then the groups of rounds -2 and -1 (below). A stream keeps this thread's copy
    // addresses of its next tile and steps them a tile at a time (positions and strides only), so
    // that a whole tile costs its copies and a few adds; a tile that crosses L, and a paged cache,
    // go through load_k / load_v.
    constexpr int WSL = 2;
    struct WsStream {
        const T* p;  // this thread's first element of the next tile (contiguous caches)
        uint32_t s;  // its shared-memory address in the ring
        int j;       // the next tile
    };
    constexpr int RSTEP = NT / CH;  // rows between a thread's copies, as in load_rows_full
    const int cr0 = tid / CH, cc = tid % CH;
    auto ws_stream = [&](const T* base, int ss, uint32_t ring) -> WsStream {
        return {PAGED ? base : base + ((long long)j0 * BN + cr0) * ss + cc * 8,
                ring + (uint32_t)(j0 % STAGES) * BN * D * 2 + soff<D>(cr0, cc), j0};
    };
    WsStream wks = ws_stream(kb, A.k_ss, sK), wvs = ws_stream(vb, A.v_ss, sV);
    auto ws_next = [&](WsStream& st, bool isk) {
        const int j = st.j, ss = isk ? A.k_ss : A.v_ss;
        const uint32_t ring = isk ? sK : sV;
        if (j < jend) {  // position
            if (!PAGED && (j + 1) * BN <= L) {
#pragma unroll
                for (int it = 0; it < BN / RSTEP; ++it)
                    cp_async16(st.s + it * RSTEP * D * 2, st.p + (long long)it * RSTEP * ss, 16);
            } else if (isk) {
                load_k(j);
            } else {
                load_v(j);
            }
        }
        st.j = j + 1;
        if (!PAGED) st.p += (long long)BN * ss;
        const uint32_t nx = st.s + BN * D * 2;
        st.s = nx >= ring + STAGES * BN * D * 2 ? nx - STAGES * BN * D * 2 : nx;
    };
    auto ws_group = [&](int g) {  // round g's group: K of tiles 2(g + 1 + L) + e, V of tiles 2(g - 1 + L) + e
        ws_next(wks, true);
        ws_next(wks, true);
        if (g >= 1 - WSL) {  // V of tile 0 first in round 1 - L's group
            ws_next(wvs, false);
            ws_next(wvs, false);
        }
        cp_async_commit();
    };

    // The computing threads' barrier: TMA, the named barrier of the consumer warps; else the block's.
    auto csync = [&]() {
        if constexpr (C::TMA) bar_consumers<NT>();
        else __syncthreads();
    };
    // TMA: the stages' barriers after the row scales (full K, full V, empty; the walk's K/V tile
    // u = R.g0 + n, n = j - j0, uses stage u % STAGES in its use u / STAGES, whose phase parity is that
    // use's parity: the ring runs on from one query tile to the next, fwd_tma). The producer warp
    // (warp NW) waits for a stage to be empty, then moves the tile's K and V
    // into it: a tile wholly before L by two (D 64: one) TMA boxes each, completing on the full
    // barriers with their byte counts; the tile that crosses L by the warp's own cp.async with the zero
    // fill of load_rows, awaited, fenced for the async proxy (wgmma's reads) and then announced by an
    // arrival. A consumer warp waits on the full barriers before its wgmma reads a tile and arrives
    // on the empty one when its last read of the stage (tile j's P·V) has completed.
    const uint32_t sBar = lay.bar;
    auto bar_fk = [&](int st) -> uint32_t { return sBar + st * 8; };
    auto bar_fv = [&](int st) -> uint32_t { return sBar + (STAGES + st) * 8; };
    auto bar_em = [&](int st) -> uint32_t { return sBar + (2 * STAGES + st) * 8; };
    // The walk's count of this query tile's K/V tile n (TMA), unsigned: its stage and the phase of
    // that stage's use are then a mask and a shift.
    auto ring = [&](int n) -> unsigned { return R.g0 + (unsigned)n; };
    // The stage slot of tile j (j >= j0): TMA, its place in the walk's ring; else j's own.
    auto slot = [&](int j) -> unsigned {
        if constexpr (C::TMA) return ring(j - j0) % STAGES;
        return (unsigned)j % STAGES;
    };
    // A consumer's wait for tile n's K (isk) or V: its stage's full barrier, the phase of that use.
    auto wait_full = [&](bool isk, int n) {
        const unsigned u = ring(n);
        mbar_wait(isk ? bar_fk(u % STAGES) : bar_fv(u % STAGES), (u / STAGES) & 1);
    };
    // A consumer warp's release of tile n's stage, once its last read of it (tile n's P·V) is done.
    auto release = [&](int n) {
        __syncwarp();
        if (lane == 0) mbar_arrive(bar_em(ring(n) % STAGES));
    };
    if constexpr (C::TMA) {
        // The producer warp (warp NW: fwd_tma's PROD instantiation) moves this query tile's K/V tiles
        // into the ring and is done with it.
        if constexpr (PROD) {
            const int ntl = jend - j0;
#pragma unroll 1
            for (int n = 0; n < ntl; ++n) {
                const unsigned u = ring(n);
                const int st = u % STAGES, j = j0 + n;
                if (u >= STAGES) mbar_wait(bar_em(st), ((u / STAGES) + 1) & 1);
                const uint32_t dk = sK + st * BN * D * 2, dv = sV + st * BN * D * 2;
                if ((j + 1) * BN <= L) {  // by position
                    // The tile's D / 64 boxes of one tensor into dst, completing on bar.
                    auto boxes = [&](uint32_t dst, const TmaMap* map, uint32_t bar) {
                        mbar_expect(bar, BN * D * 2);
#pragma unroll
                        for (int pn = 0; pn < D / 64; ++pn)
                            tma_load(dst + pn * BN * 128, map, pn * 64, j * BN, hk, b, bar);
                    };
                    if (lane == 0) {
                        boxes(dk, tk, bar_fk(st));
                        boxes(dv, tv, bar_fv(st));
                    }
                } else {
                    load_rows<D, BN, 32, T, decltype(k_row), true, true>(dk, k_row, j * BN, L, lane);
                    load_rows<D, BN, 32, T, decltype(v_row), true, true>(dv, v_row, j * BN, L, lane);
                    cp_async_commit();
                    cp_async_wait<0>();
                    wg_proxy_fence();
                    __syncwarp();
                    if (lane == 0) {
                        mbar_arrive(bar_fk(st));
                        mbar_arrive(bar_fv(st));
                    }
                }
            }
            return ntl;
        }
        // The consumers. This query tile's Q rows were issued before it (by tma_walk for the walk's
        // first, else by the previous query tile, below). Once they have landed for every consumer
        // thread (and every consumer is past the previous query tile's output, staged in the other
        // buffer), the next query tile's rows go into that buffer: Q is the consumers' only cp.async
        // traffic, one commit group a query tile.
        cp_async_commit();
        cp_async_wait<0>();
        csync();
        if (R.nqt >= 0) {  // position
            // The thread index from a fresh read of %tid: else ptxas keeps the copies' per-thread
            // offsets through the walk's whole loop, and the D 64 consumers spilled.
            uint32_t t;
            asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
            tma_load_q<T, D, BM, NT>(A, sBase + (uint32_t)(R.buf ^ 1) * (BM * D * 2), R.nqt, R.nh, R.nb, (int)t);
        }
    } else {
        load_rows<D, BM, NT, T>(sQ, q_row, q0, nrows, tid);
        // bf16: Q in a commit group of its own, so that it can be scaled before the loop (below) while
        // the first K/V tiles are still in flight. The loop's wait count is the same either way: the
        // extra group is the oldest and is complete by then.
        if (Ty<T>::SCALE_Q) cp_async_commit();
    }
    constexpr int PRO = C::TMA ? 0 : C::WS ? 1 + WSL : STAGES - 1;  // commit groups after Q's
    if constexpr (C::TMA) {
        // nothing to issue: the producer warp moves K and V
    } else if constexpr (C::WS) {
        ws_next(wks, true);
        ws_next(wks, true);
        cp_async_commit();
#pragma unroll
        for (int g = -WSL; g < 0; ++g) ws_group(g);
    } else {
        if (j0 < jend) load_kv(j0);
        cp_async_commit();
#pragma unroll
        for (int s = 1; s < STAGES - 1; ++s) {
            if (j0 + s < jend) load_kv(j0 + s);
            cp_async_commit();
        }
    }
    // Scores in log2 units. The clamp only matters for a scale near FLT_MAX (finite, > 0: validated):
    // sl2 is then never inf, so (s - m) · sl2 is never 0 · inf.
    const float sl2 = fminf(__fmul_rn(scale, 1.4426950408889634f), 3.40282347e38f);
    // bf16, TMA at D 128: step 0 on the Q fragments where the loop reads them (scale_q_regs); at D 64
    // that spilled the causal kernel, which keeps the pass over shared memory.
    constexpr bool QSCALE_REGS = C::TMA && Ty<T>::SCALE_Q && D == 128;
    if constexpr (Ty<T>::SCALE_Q && !QSCALE_REGS) {
        // Step 0 (bf16): scale the Q rows once, outside the loop (nothing of the loop's state is live
        // yet). The loop's first barrier orders these shared-memory writes before any Q fragment read.
        if constexpr (!C::TMA) {  // (TMA: waited for above)
            cp_async_wait<PRO>();  // the Q group (the oldest) landed for this thread
            csync();               // ... and for every thread
        }
        scale_q_rows<D, BM, NT>(sQ, sRow, sl2, tid);
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
    const int wrow = DEC ? 0 : warp * MT * 16;      // this warp's first row in the tile
    // decode: this warp's first d16 column block (WS: warps 2 and 3; 0 for the score warps, unused)
    const int dp0 = DEC ? (C::WS ? max(warp - 2, 0) : warp) * (D / 16 / NCW) : 0;
    // ldmatrix addresses: tile base + compile-time row offset + (lane offset ^ (k-step << 5)). This is
    // soff() rewritten so that the k-step enters by one XOR (chunk 2*kk + b lands at byte
    // ((2*kk + b) ^ (r & 7)) << 4 = (kk << 5) ^ (((b ^ (r & 7))) << 4) within row r).
    const uint32_t offQ = soff<D>(wrow + (lane & 15), lane >> 4);
    const uint32_t offK = soff<D>((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    const uint32_t offV = soff<D>((lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);

    // The key split's fold (docs/tensorcore-numerics.md §9). This row's sl2 · 2^sh (as in the loop).
    auto row_sl2 = [&](int mt, int hf) -> float {
        return Ty<T>::SCALE_Q
            ? reinterpret_cast<const float*>(smem + (sRow - sBase))[wrow + mt * 16 + (lane >> 2) + hf * 8]
            : sl2;
    };
    // Prefill: the fold state of the chunks before the current one, in `part`: NE words per thread,
    // stored word-major ([block][word][thread]: a warp's access is 128 contiguous bytes), each thread
    // reading only what it wrote, in an earlier launch. Words: (M, L) per row half, then its O
    // fragment. Block and thread indices from fresh reads of %ctaid and %tid (TMA: the query tile's
    // index among all, (b · Hq + h) · nqt + qt, stands for the block).
    constexpr int NE = MT * 4 + MT * ND * 4;
    auto fold_state = [&]() -> float* {
        if constexpr (C::TMA)
            return A.part + (((long long)R.b * Hq + R.h) * ((Sq + BM - 1) / BM) + R.qt) * (NE * NT) + tid;
        uint32_t x, y, z, t;
        asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(x));
        asm volatile("mov.u32 %0, %%ctaid.y;\n" : "=r"(y));
        asm volatile("mov.u32 %0, %%ctaid.z;\n" : "=r"(z));
        asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
        const long long blk = ((long long)z * gridDim.y + y) * gridDim.x + x;
        return A.part + blk * (NE * NT) + t;
    };
    // Fold the state st of the finished chunks into row half (mt, hf) of the current chunk, whose max
    // is m and whose quad-summed sum is l: afterwards (m, l, its O fragment) are the folded state.
    auto fold_in = [&](const float* st, int mt, int hf, float& m, float& l) {
        const float M = st[((mt * 2 + hf) * 2) * NT], Ls = st[((mt * 2 + hf) * 2 + 1) * NT];
        float a, bw;
        fold_weights(M, m, row_sl2(mt, hf), a, bw);
        l = fold(Ls, a, l, bw);
        m = fmaxf(M, m);
#pragma unroll
        for (int dn = 0; dn < ND; ++dn)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float& x = oacc[mt][dn][hf * 2 + e];
                x = fold(st[(MT * 4 + (mt * ND + dn) * 4 + hf * 2 + e) * NT], a, x, bw);
            }
    };

    // The epilogue's place of the block: its query tile (the returned x; for decode, blockIdx.x), y
    // and z, from fresh reads of %ctaid rather than kept in registers through the loop (the D = 128
    // kernels have none to spare; this only runs once), or, TMA, the query tile of the walk.
    auto place = [&](uint32_t& y, uint32_t& z) -> int {
        uint32_t x;
        if constexpr (C::TMA) {
            x = R.qt;  // (the query tile itself: not reversed below)
            y = R.h;
            z = R.b;
        } else {
            asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(x));
            asm volatile("mov.u32 %0, %%ctaid.y;\n" : "=r"(y));
            asm volatile("mov.u32 %0, %%ctaid.z;\n" : "=r"(z));
        }
        return (CAUSAL && !DEC && !C::TMA) ? (int)(gridDim.x - 1 - x) : (int)x;
    };

    // The words of row half (mt, hf) into the fold state st, where fold_in reads them: (m, l), then
    // the half's O fragment.
    auto put_state = [&](float* st, int mt, int hf, float m, float l) {
        st[((mt * 2 + hf) * 2) * NT] = m;
        st[((mt * 2 + hf) * 2 + 1) * NT] = l;
#pragma unroll
        for (int dn = 0; dn < ND; ++dn)
#pragma unroll
            for (int e = 0; e < 2; ++e) st[(MT * 4 + (mt * ND + dn) * 4 + hf * 2 + e) * NT] = oacc[mt][dn][hf * 2 + e];
    };

    // TMA prefill, at a chunk boundary inside the loop: the finished chunk's partial (m, quad-summed
    // l, O) becomes the fold state (first chunk) or is folded into it (fold_in), and goes to `part`,
    // as the epilogue of a launch per chunk does it; the rows restart from (-inf, +0, +0). This
    // thread's own words, written and read by it alone.
    auto chunk_out = [&](bool first) {
        float* st = fold_state();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                float l = lrow[mt][hf];
                l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
                l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
                float m = mrow[mt][hf];
                if (!first) fold_in(st, mt, hf, m, l);
                put_state(st, mt, hf, m, l);
#pragma unroll
                for (int dn = 0; dn < ND; ++dn)
#pragma unroll
                    for (int e = 0; e < 2; ++e) oacc[mt][dn][hf * 2 + e] = 0.f;
                mrow[mt][hf] = TC_NEG_INF;
                lrow[mt][hf] = 0.f;
            }
    };

    // Decode, whole: the fold state of the finished chunks (M, L per row half; the O fragment).
    float sM[2], sL[2], sO[DEC ? ND : 1][4];

    // WG: S += Q K^T (K tile at sKs) and O += P V (V tile at sVs, P packed as T pairs) issued as one
    // warpgroup's wgmma, the same k-steps in the same order as the mma.sync forms below; the caller
    // fences, commits and waits.
    auto wg_issue_s = [&](uint32_t sKs, float (&acc)[32]) {
        if constexpr (C::WG) {
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                const WgDesc dk(sKs, 16, 1024);
                Ty<T>::template wg_n64<0>(acc, qf[0][kk], dk.at((kk >> 2) * BN * 128 + (kk & 3) * 32));
            }
        }
    };
    auto wg_issue_o = [&](uint32_t sVs, const uint32_t (&pa)[BN / 16][4]) {
        if constexpr (C::WG) {
            float(&acc)[ND * 4] = reinterpret_cast<float(&)[ND * 4]>(oacc[0]);
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                const unsigned long long desc = WgDesc(sVs, BN * 128, 1024).at(kk * 16 * 128);
                if constexpr (D == 128) Ty<T>::wg_o(acc, pa[kk], desc);
                else Ty<T>::template wg_n64<1>(acc, pa[kk], desc);
            }
        }
    };
    // P (one m16 tile's weights, f32 in the S fragment) rounded to T pairs: the A fragment of P·V's
    // k-step kk (keys 16·kk .. 16·kk + 15: the C fragment of S is the A fragment of P).
    auto pack_a = [&](const float (&p)[NB][4], int kk, uint32_t (&dst)[4]) {
        dst[0] = Ty<T>::pack(p[2 * kk][0], p[2 * kk][1]);
        dst[1] = Ty<T>::pack(p[2 * kk][2], p[2 * kk][3]);
        dst[2] = Ty<T>::pack(p[2 * kk + 1][0], p[2 * kk + 1][1]);
        dst[3] = Ty<T>::pack(p[2 * kk + 1][2], p[2 * kk + 1][3]);
    };
    // WG: every k-step's A fragment of the tile at once (they are issued together).
    auto pack_p = [&](const float (&p)[MT][NB][4], uint32_t (&pa)[BN / 16][4]) {
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) pack_a(p[0], kk, pa[kk]);
    };

    // S = Q K^T for NBC n8 tiles of the K tile at sKs, from tile 2·np0 on, into sacc[.][0 .. NBC):
    // f32 accumulators, k-steps in increasing d order. NBC = NB but under SPLIT (defined below).
    constexpr int NBC = C::SPLIT ? NB / NW : NB;
    auto scores = [&](uint32_t sKs, float (&sacc)[MT][NB][4], int np0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nb = 0; nb < NBC; ++nb)
#pragma unroll
                for (int e = 0; e < 4; ++e) sacc[mt][nb][e] = 0.f;
        if constexpr (C::WG) {
            float(&acc)[32] = reinterpret_cast<float(&)[32]>(sacc[0]);
            wg_keep(acc);
            wg_fence();
            wg_issue_s(sKs, acc);
            wg_commit();
            wg_wait<0>();
            wg_keep(acc);
            return;
        }
        // K fragments are requested one step ahead of the MMAs that use them (ptxas schedules the final
        // order; writing the prefetch distance out keeps it from hoisting every load of the tile).
        {
            constexpr int NP = NBC / 2, NS = (D / 16) * NP;
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
                ldsm_x4(dst, sKs + (np0 + np) * 16 * D * 2 + (offK ^ (kk << 5)));
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
    };

    // Mask tile j's scores by position only: tiles that cross L or the causal diagonal of this tile's
    // first row, and every tile when a boolean mask is given (its values are only ever selected on,
    // never branched on). Returns whether the tile was masked. A masked score is -inf, whose weight
    // is +0 with or without softmax_tile's selection: fma(-inf, sl2e, nms) = -inf (sl2e > 0, nms
    // finite) and ex2.approx(-inf) = +0 (PTX ISA).
    auto mask_tile = [&](int j, float (&sacc)[MT][NB][4]) -> bool {
        const int kbase = j * BN;
        const bool has_mask = mask != nullptr;
        const bool need_mask =
            has_mask || (kbase + BN > L) || (CAUSAL && kbase + BN - 1 > (DEC ? 0 : q0) + coff);
        if (need_mask) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int r = wrow + mt * 16 + (lane >> 2) + hf * 8;
                    const int row = DEC ? r % Sq : q0 + r;  // the query row's index in [0, Sq)
                    const bool row_in = DEC ? r < nrows : row < Sq;
                    // The mask row. On Blackwell (TC_MASK_UNGUARDED) its indices are clamped into the
                    // tensor (positions only), so that every load below has a valid address and needs
                    // no guard: there ptxas spilled and restored the guard predicate of a guarded
                    // address (P2R, then ISETP), which the audit cannot follow. Out-of-range positions
                    // are masked by `in`, not by the load.
                    const unsigned char* mrow_p = nullptr;
                    if (has_mask) {
#if TC_MASK_UNGUARDED
                        const int rc = DEC ? min(r, nrows - 1) : min(row, Sq - 1);
                        const int hq = DEC ? hk * G + rc / Sq : hb;
                        const int rowc = DEC ? rc % Sq : rc;
#else
                        const int hq = DEC ? hk * G + r / Sq : hb;
                        const int rowc = row;
#endif
                        mrow_p = mask + (long long)b * msb + (long long)hq * msh + (long long)rowc * msq;
                    }
#pragma unroll
                    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int col = kbase + nb * 8 + (lane & 3) * 2 + e;
                            bool masked = col >= L || (CAUSAL && col > row + coff);
#if TC_MASK_UNGUARDED
                            // The mask's verdict as integer bits, combined and applied by bit operations
                            // hidden from the optimiser: Blackwell's ptxas turned the boolean form
                            // into a branch on the mask value.
                            unsigned mz = 0u;
                            if (has_mask) {  // a launch parameter: public
                                const unsigned in = (row_in && col < Skv) ? 1u : 0u;
                                const unsigned char* a = mrow_p + min(col, Skv - 1);
                                asm volatile("" : "+l"(a));  // formed here, unconditionally
                                const unsigned z = __ldg(a);
                                mz = (((z | (0u - z)) >> 31) ^ 1u) & in;  // 1 iff in range and 0 (masked)
                                asm volatile("" : "+r"(mz));
                            }
                            const unsigned mm = 0u - ((masked ? 1u : 0u) | mz);
                            const float sv = sacc[mt][nb][hf * 2 + e];
                            sacc[mt][nb][hf * 2 + e] =
                                __uint_as_float((__float_as_uint(sv) & ~mm) | (0xff800000u & mm));
#else
                            if (has_mask) {  // a launch parameter: public
                                const bool in = row_in && col < Skv;
                                // sm_80..sm_90: a load guarded by position (the unguarded form costs
                                // the D = 128 kernels a few registers they do not have).
                                const unsigned char mv = in ? mrow_p[in ? col : 0] : (unsigned char)1;
                                masked = masked || (mv == 0);
                            }
                            sacc[mt][nb][hf * 2 + e] = masked ? TC_NEG_INF : sacc[mt][nb][hf * 2 + e];
#endif
                        }
                }
        }
        return need_mask;
    };

    // O's row half (mt, hf) times a tile's factor: every O element, always (never skipped).
    auto rescale_half = [&](int mt, int hf, float corr) {
#pragma unroll
        for (int dn = 0; dn < ND; ++dn) {
            oacc[mt][dn][hf * 2] = __fmul_rn(oacc[mt][dn][hf * 2], corr);
            oacc[mt][dn][hf * 2 + 1] = __fmul_rn(oacc[mt][dn][hf * 2 + 1], corr);
        }
    };

    // Online softmax of one tile's scores (in place: P). Every row: the same max over its values (own
    // columns in increasing order, then quad butterfly xor 1, xor 2), the same rescale (always
    // applied), the same partial sums. The rescale of O by corr: here, or left in `corr` for
    // `rescale` (WG, whose O is still being written by the previous tile's P·V; WS, whose O is the
    // other warps').
    // The sm_90 loops (wgmma prefill, warp-specialised decode): the row max by a tree and no
    // selection of masked weights (same bits; fewer instructions and a shorter chain a tile).
    constexpr bool SM90_LOOP = C::WG || C::WS;
    auto softmax_tile = [&](float (&sacc)[MT][NB][4], bool need_mask, float (&corr_out)[MT][2]) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                // Decode with at most 8 rows (G·Sq <= 8: one token of up to 8 query heads per kv head,
                // the common case): the fragment's second half holds padding rows 8..15, which are
                // never written. Their softmax is skipped (by position) and P·V gets zeros for them.
                if (DEC && hf == 1 && nrows <= 8) {
#pragma unroll
                    for (int nb = 0; nb < NB; ++nb) {
                        sacc[mt][nb][2] = 0.f;
                        sacc[mt][nb][3] = 0.f;
                    }
                    corr_out[mt][hf] = 1.f;  // (WS applies it to the padding rows' O: unchanged)
                    continue;
                }
                const float m_old = mrow[mt][hf];
                float mx = tile_max<SM90_LOOP>(sacc[mt], hf, m_old);
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                mrow[mt][hf] = mx;
                // A row with nothing visible yet keeps max -inf: subtract 0 instead (selection, no branch),
                // so no -inf - -inf; its scores are -inf and its probabilities are zeroed below.
                const float mu = (mx == TC_NEG_INF) ? 0.f : mx;
                // This row's sl2 · 2^sh (bf16: Q was scaled by 2^-sh; the product (s - mu) · sl2r then
                // rounds exactly as the unscaled (s - mu) · sl2 would), read from shared memory in every
                // tile. A plain load, not asm volatile: ptxas may then place it freely, which the
                // D = 128 kernels need to stay within 255 registers without spilling.
                const float sl2r = Ty<T>::SCALE_Q
                    ? reinterpret_cast<const float*>(smem + (sRow - sBase))[wrow + mt * 16 + (lane >> 2) + hf * 8]
                    : sl2;
                // This tile's scale of the row: sl2r, capped so that |mu * sl2e| <= 2^24 (the cap binds
                // only for scores beyond about 2^26, far outside the accuracy promise). Then one FFMA
                // per score, p = ex2(fma(s, sl2e, nms)) with nms = BIAS - RN(mu * sl2e): for the row's
                // max the argument is BIAS plus the rounding error of mu * sl2e, at most 1 in
                // magnitude (the cap's purpose), so every weight is at most 2^(BIAS + 1) (never inf)
                // and the max's is at least 2^(BIAS - 1) (l > 0 once a key is visible).
                // rcp.approx.ftz flushes a subnormal result to +0, which it is for |mu| >= 2^126 (bf16
                // D = 256 scores reach 2^127): the cap is then 2^-104 instead, still |mu·sl2e| <= 2^24,
                // never 0 (a 0 would make (m_old - mu)·sl2e = -inf·0 = NaN). Where rcp does not flush,
                // 2^24·rcp >= 2^-102 and the max changes nothing.
                const float sl2e = capped_scale(sl2r, mu);
                const float nms = __fsub_rn(Ty<T>::BIAS, __fmul_rn(mu, sl2e));
                const float corr = ex2(__fmul_rn(__fsub_rn(m_old, mu), sl2e));  // ex2(0) = 1 exactly
                float rs = 0.f;
#pragma unroll
                for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float s = sacc[mt][nb][hf * 2 + e];
                        float p = ex2(__fmaf_rn(s, sl2e, nms));  // masked (-inf): +0
                        // The selection changes no bit (mask_tile); the sm_80..89 D = 128 kernels
                        // keep it: without it their ptxas spilled to local memory (2026-11-27).
                        if constexpr (!SM90_LOOP)
                            if (need_mask) p = (s == TC_NEG_INF) ? 0.f : p;
                        sacc[mt][nb][hf * 2 + e] = p;
                        rs = __fadd_rn(rs, p);
                    }
                lrow[mt][hf] = __fmaf_rn(lrow[mt][hf], corr, rs);
                corr_out[mt][hf] = corr;
                if constexpr (!C::WG && !C::WS) rescale_half(mt, hf, corr);
            }
    };

    // WG, WS: O rescaled by the factors softmax_tile left in corr.
    auto rescale = [&](const float (&corr)[MT][2]) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) rescale_half(mt, hf, corr[mt][hf]);
    };

    // Decode, whole: at a chunk boundary, the finished chunk's partial (m, quad-summed l, O) becomes
    // the fold state (first chunk) or is folded into it (§9 step 2, the same operations as
    // tc_merge); l and O restart at +0 (the caller restarts m).
    auto fold_chunk = [&](bool first) {
        if constexpr (DEC) {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                float l = lrow[0][hf];
                l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
                l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
                const float m = mrow[0][hf];
                float a = 0.f, bw = 1.f;
                if (!first) fold_weights(sM[hf], m, row_sl2(0, hf), a, bw);
                sL[hf] = first ? l : fold(sL[hf], a, l, bw);
                sM[hf] = first ? m : fmaxf(sM[hf], m);
#pragma unroll
                for (int dn = 0; dn < ND; ++dn)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        float& x = oacc[0][dn][hf * 2 + e];
                        sO[dn][hf * 2 + e] = first ? x : fold(sO[dn][hf * 2 + e], a, x, bw);
                        x = 0.f;
                    }
                lrow[0][hf] = 0.f;
            }
        }
    };

    // Decode with three or more stages: each tile's scores are computed one tile ahead, so that the
    // next tile's Q·K^T MMAs (independent of the running max) can fill this warp's waits on the
    // current tile's softmax and P·V chain; a decode block has one warp per scheduler and nothing
    // else to hide those waits (docs/perf.md, the decode profile). Same operations on the same
    // values, only issued earlier: no bit changes. Iteration j then needs K of tile j + 1 as well.
    // SPLIT (D 64 and 128): each warp computes NB / NW of the tile's n8 tiles of S, once, and the
    // warps exchange them through shared memory (buffer j & 1 holds tile j; the barrier at the top
    // of each iteration orders the writes before the reads and the reads before the next writes).
    // The exchange costs no barrier of its own: it rides on the loop's. Computed once, the scores
    // cost each warp a quarter of the MMAs and K fragment loads of computing them all.
    constexpr bool PIPE = C::PIPE, SPLIT = C::SPLIT;
    const uint32_t sS = sRow + BM * 4;         // SPLIT: [2][NB][32 lanes] x 4 f32
    float snext[MT][NB][4];  // PIPE: the first NBC n8 tiles
    auto next_scores = [&](int jn, int buf) {  // PIPE: this warp's share of tile jn's scores, to buffer buf
        if constexpr (PIPE) scores(sK + (jn % STAGES) * BN * D * 2, snext, SPLIT ? warp * (NBC / 2) : 0);
        if constexpr (SPLIT) {
#pragma unroll
            for (int i = 0; i < NBC; ++i)
                sts128(sS + ((buf * NB + warp * NBC + i) * 32 + lane) * 16,
                       make_uint4(__float_as_uint(snext[0][i][0]), __float_as_uint(snext[0][i][1]),
                                  __float_as_uint(snext[0][i][2]), __float_as_uint(snext[0][i][3])));
        }
    };
    if constexpr (PIPE) {
        if (j0 < jend) {
            cp_async_wait<STAGES - 2>();
            __syncthreads();  // tile j0 landed for everyone (and, bf16, the scaled Q is visible)
            next_scores(j0, j0 & 1);
        }
    }
    if constexpr (C::WG) {
        // Tile j's P·V overlaps tile j + 1's softmax: each iteration issues S of tile j + 1 and then
        // P·V of tile j as two wgmma groups, waits for the first, runs tile j + 1's mask and softmax
        // while the tensor cores work on the second, then applies tile j + 1's rescale to O. Per row
        // the operations and their order are the other loop's: O is rescaled by tile j's factor
        // before tile j's P·V is added and by tile j + 1's after (only S is computed earlier).
        // Iteration j needs K of tile j + 1 and V of tile j, as the decode pipeline (PIPE) does.
        static_assert(STAGES >= 3, "tile j + 1 must be resident beside tile j");
        float sacc[MT][NB][4], sn[MT][NB][4], corr[MT][2];
        uint32_t pa[BN / 16][4];
        float(&oa)[ND * 4] = reinterpret_cast<float(&)[ND * 4]>(oacc[0]);
        float(&na)[32] = reinterpret_cast<float(&)[32]>(sn[0]);
        if constexpr (C::TMA && Ty<T>::SCALE_Q) csync();  // the scaled Q rows, everyone's
        // TMA: the block's chunks one after another in this launch (docs/tensorcore-numerics.md §9),
        // tiles [c0, c1) each, the producer's pipeline running on across the boundaries; at each
        // boundary the chunk's partial goes into the fold state in `part` (chunk_out) and the rows
        // restart. The other WG kernels run the one chunk of their launch (c1 = jend).
#pragma unroll 1
        for (int c0 = j0; C::TMA ? c0 < jend : c0 == j0; c0 += CT) {
            const int c1 = C::TMA ? min(jend, c0 + CT) : jend;
            if (c0 < c1) {
                if constexpr (C::TMA) {
                    wait_full(true, c0 - j0);
                } else {
                    cp_async_wait<STAGES - 2>();
                    wg_proxy_fence();  // this thread's copies of tile j0, visible to wgmma's reads
                    __syncthreads();   // ... and everyone's (and, bf16, the scaled Q rows)
                }
#pragma unroll
                for (int kk = 0; kk < D / 16; ++kk) ldsm_x4(qf[0][kk], sQ + (offQ ^ (kk << 5)));
                if constexpr (QSCALE_REGS) scale_q_regs<D>(qf[0], sRow, wrow + (lane >> 2), sl2, lane);
                scores(sK + slot(c0) * BN * D * 2, sacc, 0);
                softmax_tile(sacc, mask_tile(c0, sacc), corr);
                rescale(corr);
            }
            // PP (TMA; causal only at D 128): the two warpgroups take turns issuing their GEMMs (named
            // barriers 2 and 3), so that one's softmax runs while the other's S and P·V occupy the tensor
            // cores. Warpgroup 1 lets warpgroup 0 go first; each passes the turn on after issuing, but for
            // warpgroup 1's last, which nobody would wait for. Positions only; no bit moves (the order
            // in which warpgroups issue is not arithmetic). Measured (H100, docs/perf.md): W2 -6.5 % but
            // the causal workloads 1-4 % slower with the softmax of 2026-11-27 morning; with its shorter
            // form (tile_max, no selection; 2026-11-27 evening) turns make the causal D 128 workloads
            // 3 % faster and the causal D 64 one (W5) 0.5-2 % slower, hence the condition.
            constexpr bool PP = C::TMA && NW == 8 && (!CAUSAL || D == 128);
            const int wgi = PP ? __shfl_sync(0xffffffffu, warp, 0) >> 2 : 0;
            if constexpr (PP) {
                if (wgi == 1 && c0 + 1 < c1) bar_arrive_id<NT>(2);
            }
            for (int j = c0; j + 1 < c1; ++j) {
                if constexpr (C::TMA) {
                    const int n = j - j0;
                    wait_full(true, n + 1);
                    wait_full(false, n);
                } else {
                    cp_async_wait<STAGES - 3>();
                    wg_proxy_fence();
                    __syncthreads();  // tile j + 1 landed for everyone; stage (j - 1) % STAGES is free again
                    if (j + STAGES - 1 < c1) load_kv(j + STAGES - 1);
                    cp_async_commit();
                }
                pack_p(sacc, pa);
#pragma unroll
                for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                    for (int e = 0; e < 4; ++e) sn[0][nb][e] = 0.f;
                wg_keep(na);
                wg_keep(oa);
                if constexpr (PP) bar_sync_id<NT>(2 + wgi);  // this warpgroup's turn
                wg_fence();
                wg_issue_s(sK + slot(j + 1) * BN * D * 2, na);
                wg_commit();
                wg_issue_o(sV + slot(j) * BN * D * 2, pa);
                wg_commit();
                if constexpr (PP) {
                    if (wgi == 0 || j + 2 < c1) bar_arrive_id<NT>(3 - wgi);  // the other's turn
                }
                wg_wait<1>();  // S of tile j + 1
                wg_keep(na);
                softmax_tile(sn, mask_tile(j + 1, sn), corr);
                wg_wait<0>();  // P·V of tile j
                wg_keep(oa);
                if constexpr (C::TMA) release(j - j0);
                rescale(corr);
#pragma unroll
                for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                    for (int e = 0; e < 4; ++e) sacc[0][nb][e] = sn[0][nb][e];
            }
            if (c0 < c1) {  // the chunk's last tile's P·V (its V landed with the last iteration's wait)
                if constexpr (C::TMA) wait_full(false, c1 - 1 - j0);
                pack_p(sacc, pa);
                wg_keep(oa);
                wg_fence();
                wg_issue_o(sV + slot(c1 - 1) * BN * D * 2, pa);
                wg_commit();
                wg_wait<0>();
                wg_keep(oa);
            }
            if constexpr (C::TMA) {
                // The chunk's last stage (its P·V has completed), before the next chunk's first wait
                // or, after the query tile's last chunk, for the producer's next query tile.
                release(c1 - 1 - j0);
                if (c1 < jend) chunk_out(c0 == j0);  // position: another chunk follows
            }
        }
    } else if constexpr (C::WS) {
        // Decode, warp-specialised (Cfg::WS). Round r (two key tiles a round): warp w < 2 softmaxes
        // tile 2r + w from the scores it computed in round r - 1, publishes the weights P (rounded,
        // as A fragments), the tile's corr, the row sums rs and the running max m to a slot in
        // shared memory, then computes the scores of tile 2r + 2 + w and publishes their maximum.
        // Warps 2 and 3 apply tiles 2r - 2 and 2r - 1 in order to their half of O's columns:
        // l = fma(l, corr, rs), O = O · corr, O += P V. Per row this is the operation sequence of the
        // other loops (docs/tensorcore-numerics.md §5): the softmax of tile t starts from the running
        // max after tile t - 1, which the score warps form from the published tile maxima (max is
        // exact, so its bits do not depend on who takes it), and with l = +0, so that the l it
        // leaves is rs exactly (fma(+0, corr, rs) = rs, rs >= +0); the O warps then do the fma into
        // their own l. A whole decode's chunk fold happens in the O warps at each chunk's first tile
        // (the score warps restart the running max there). The key tiles' K and V are issued L = 2
        // rounds before use in rings of 2 (L + 1) tiles; a tile's slot is reused two rounds later.
        const int n = jend - j0;
        // The warp index through a shuffle from lane 0: ptxas then knows it is the same in every lane
        // and keeps the shuffles below (under branches on it) convergent, without a collective path.
        const int wu = __shfl_sync(0xffffffffu, warp, 0);
        const bool sw = wu < 2;  // a score warp
        const uint32_t sSlot = sRow + BM * 4, sTm = sSlot + 4 * C::WS_SLOT;
        auto slot = [&](int i) -> uint32_t { return sSlot + (uint32_t)(i & 3) * C::WS_SLOT; };
        auto tm_at = [&](int i, int hf) -> uint32_t { return sTm + ((i & 3) * 16 + (lane >> 2) + hf * 8) * 4; };
        float sacc[MT][NB][4];
        float m_end[2] = {TC_NEG_INF, TC_NEG_INF};  // score warps: the running max after tile 2r - 1
        // Score warps: tile i's scores into sacc, masked by position, and the tile's row maxima
        // published (one lane of each quad).
        auto ws_scores = [&](int i) {
            scores(sK + ((j0 + i) % STAGES) * BN * D * 2, sacc, 0);
            mask_tile(j0 + i, sacc);
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                float mx = tile_max<true>(sacc[0], hf, TC_NEG_INF);
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                if ((lane & 3) == 0)
                    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(tm_at(i, hf)), "f"(mx) : "memory");
            }
        };
        auto tm_load = [&](int i, int hf) -> float {
            float x;
            asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(x) : "r"(tm_at(i, hf)) : "memory");
            return x;
        };
        cp_async_wait<WSL>();
        __syncthreads();  // K of tiles 0 and 1 landed for everyone (and, bf16, the scaled Q)
        if (sw && wu < n) ws_scores(wu);
        const int nr = (n + 1) / 2 + 1;  // the last round applies tile n - 1
        for (int r = 0; r < nr; ++r) {
            cp_async_wait<WSL - 1>();
            __syncthreads();  // round r - L's group landed; round r - 1's slots and maxima visible
            ws_group(r);
            if (sw) {
                const int i = 2 * r + wu;
                // The running max before tile 2r (a chunk's first tile starts from -inf), then
                // before tile i; after tile 2r + 1 for the next round.
                const bool cs = (j0 + 2 * r) % CT == 0;  // position
                float mp[2];
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const float m0 = cs ? TC_NEG_INF : m_end[hf];
                    const float t0 = tm_load(2 * r, hf), t1 = tm_load(2 * r + 1, hf);
                    mp[hf] = wu == 1 ? fmaxf(m0, t0) : m0;
                    m_end[hf] = 2 * r + 1 < n ? fmaxf(fmaxf(m0, t0), t1) : fmaxf(m0, t0);
                }
                if (i < n) {  // position
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf) {
                        mrow[0][hf] = mp[hf];
                        lrow[0][hf] = 0.f;
                    }
                    float corr[MT][2];
                    static_assert(SM90_LOOP, "WS: softmax_tile makes no selection, so needs no mask flag");
                    softmax_tile(sacc, false, corr);
                    const uint32_t sl = slot(i);
#pragma unroll
                    for (int kk = 0; kk < BN / 16; ++kk) {
                        uint32_t pa[4];
                        pack_a(sacc[0], kk, pa);
                        sts128(sl + (kk * 32 + lane) * 16, make_uint4(pa[0], pa[1], pa[2], pa[3]));
                    }
                    sts128(sl + (BN / 16) * 512 + lane * 16,
                           make_uint4(__float_as_uint(corr[0][0]), __float_as_uint(corr[0][1]),
                                      __float_as_uint(lrow[0][0]), __float_as_uint(lrow[0][1])));
                    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(sl + (BN / 16) * 512 + 512 + lane * 8),
                                 "f"(mrow[0][0]), "f"(mrow[0][1])
                                 : "memory");
                }
                if (i + 2 < n) ws_scores(i + 2);  // position
            } else {
#pragma unroll 1
                for (int e = 0; e < 2; ++e) {
                    const int i = 2 * r - 2 + e;
                    if (i < 0 || i >= n) continue;  // position
                    // A whole decode's chunk boundary: the finished chunk (m of its last tile, l, O)
                    // is folded, and l and O restart.
                    if (whole && (j0 + i) % CT == 0 && j0 + i > 0) fold_chunk(j0 + i == CT);
                    const uint32_t sl = slot(i);
                    const uint4 cr = lds128(sl + (BN / 16) * 512 + lane * 16);
                    float m0, m1;
                    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n"
                                 : "=f"(m0), "=f"(m1)
                                 : "r"(sl + (BN / 16) * 512 + 512 + lane * 8)
                                 : "memory");
                    const float corr[MT][2] = {{__uint_as_float(cr.x), __uint_as_float(cr.y)}};
                    lrow[0][0] = __fmaf_rn(lrow[0][0], corr[0][0], __uint_as_float(cr.z));
                    lrow[0][1] = __fmaf_rn(lrow[0][1], corr[0][1], __uint_as_float(cr.w));
                    mrow[0][0] = m0;
                    mrow[0][1] = m1;
                    rescale(corr);
                    // O += P V over this warp's columns, k-steps in key order (the other loops' order).
                    const uint32_t sVs = sV + ((j0 + i) % STAGES) * BN * D * 2;
                    constexpr int NDP = ND / 2, NS = (BN / 16) * NDP;
                    uint32_t bv[2][4], pa[4];
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
                            const uint4 w = lds128(sl + (kk * 32 + lane) * 16);
                            pa[0] = w.x;
                            pa[1] = w.y;
                            pa[2] = w.z;
                            pa[3] = w.w;
                        }
                        Ty<T>::mma(oacc[0][2 * dp], pa, bv[t & 1][0], bv[t & 1][1]);
                        Ty<T>::mma(oacc[0][2 * dp + 1], pa, bv[t & 1][2], bv[t & 1][3]);
                    }
                }
            }
        }
    } else {
        for (int j = j0; j < jend; ++j) {
            cp_async_wait<PIPE ? STAGES - 3 : STAGES - 2>();
            __syncthreads();  // tile j (PIPE: j + 1) landed for everyone; stage (j-1) % STAGES is free again
            if (QREG && j == j0) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int kk = 0; kk < D / 16; ++kk)
                        ldsm_x4(qf[QREG ? mt : 0][QREG ? kk : 0],
                                sQ + mt * 16 * D * 2 + (offQ ^ (kk << 5)));
            }
            if (j + STAGES - 1 < jend) load_kv(j + STAGES - 1);
            cp_async_commit();
            const int st = j % STAGES;
            const uint32_t sKs = sK + st * BN * D * 2, sVs = sV + st * BN * D * 2;

            float sacc[MT][NB][4];
            if constexpr (PIPE) {
                if constexpr (SPLIT) {
#pragma unroll
                    for (int nb = 0; nb < NB; ++nb) {
                        const uint4 w = lds128(sS + (((j & 1) * NB + nb) * 32 + lane) * 16);
                        sacc[0][nb][0] = __uint_as_float(w.x);
                        sacc[0][nb][1] = __uint_as_float(w.y);
                        sacc[0][nb][2] = __uint_as_float(w.z);
                        sacc[0][nb][3] = __uint_as_float(w.w);
                    }
                } else {
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                        for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                            for (int e = 0; e < 4; ++e) sacc[mt][nb][e] = snext[mt][nb][e];
                }
            } else {
                scores(sKs, sacc, 0);
            }

            const bool need_mask = mask_tile(j, sacc);

            // PIPE: the next tile's scores, here so that they share a basic block with this tile's
            // softmax (ptxas schedules within one; behind a branch they ran after it, not beside it).
            // Unconditional: on the last tile it recomputes that tile's scores (K of tile jend - 1 is in
            // shared memory; stage j + 1 may never have been written) into the other buffer, unread;
            // not into tile j's own buffer, which other warps may still be reading (compute-sanitizer's
            // racecheck found that write when it went there: the same values, but a race).
            if constexpr (PIPE) next_scores(min(j + 1, jend - 1), (j + 1) & 1);

            float corr[MT][2];
            softmax_tile(sacc, need_mask, corr);

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
                        for (int mt = 0; mt < MT; ++mt) pack_a(sacc[mt], kk, pa[mt]);
                    }
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        Ty<T>::mma(oacc[mt][2 * dp], pa[mt], bv[t & 1][0], bv[t & 1][1]);
                        Ty<T>::mma(oacc[mt][2 * dp + 1], pa[mt], bv[t & 1][2], bv[t & 1][3]);
                    }
                }
            }

            // Decode, whole: at a chunk boundary with more tiles to come, the chunk's partial
            // becomes the state or is folded into it, and the row state restarts.
            if constexpr (DEC) {
                if (whole && j + 1 < jend && (j + 1) % CT == 0) {
                    fold_chunk(j + 1 == CT);
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf) mrow[0][hf] = TC_NEG_INF;
                }
            }
        }
    }

    cp_async_wait<0>();
    csync();  // every warp is done with shared memory: the Q area becomes the output staging

    // Epilogue: row sum = (l0 + l1) + (l2 + l3) over the quad (same value in all four lanes), then
    // O * (1 / l) with one MUFU.RCP. A row that sees a key has l >= 2^(BIAS - 1) (its max contributes
    // at least that, the rest is >= 0): never subnormal, so rcp.approx.ftz never flushes it. O / l is a convex
    // combination of V rows, but P was rounded to T: it may pass the largest finite T by a hair, so it
    // is clamped to +-MAXT before rounding (else the conversion gives inf). Fully masked rows -> +0
    // exactly, by selection (whatever the sign of O's zeros).
    const float maxt = Ty<T>::maxt();
    // Prefill under the key split: does a later launch continue this block's rows? Recomputed here
    // from fresh reads (the block's tile count as above), not kept through the loop: on sm_80 the
    // D = 128 causal kernels spilled when it was.
    bool more = false, folds = false;
    if (C::TMA) {
        folds = ntiles > CT;  // this launch ran every chunk of the query tile, the last one just now
    } else if (!DEC) {
        uint32_t bx, bz;
        asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(bx));
        asm volatile("mov.u32 %0, %%ctaid.z;\n" : "=r"(bz));
        int Le = kv_lens ? kv_lens[bz] : Skv;
        Le = min(max(Le, 0), Skv);
        const int q0e = (CAUSAL ? (int)(gridDim.x - 1 - bx) : (int)bx) * BM;
        const int ende = visible_end(CAUSAL, Le, min(q0e + BM, Sq), Sq, A.top_left);
        const int nte = ende > 0 ? (ende + BN - 1) / BN : 0;
        more = (A.chunk + 1) * CT < nte;
        folds = A.chunk > 0;
    }
    // WS: the rows' state and O are the O warps' (2 and 3); the score warps only join the barriers
    // (the warp index through a shuffle, as in the loop: the quad sums below stay convergent).
    const bool o_warp = !C::WS || __shfl_sync(0xffffffffu, warp, 0) >= 2;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            if (!o_warp) continue;
            float l = lrow[mt][hf];
            l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
            l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
            // The key split. Prefill: a chunk after the first is folded into the state of the earlier
            // ones; unless it is the block's last, the (folded) state goes back to `part` for the
            // next launch; the last is normalised as below. A split decode block writes its chunk's
            // partial (O, m, l, sl2 · 2^sh) for tc_merge (rows 0..15 of its record, those past G·Sq
            // unused).
            if (folds) {
                float m = mrow[mt][hf];
                fold_in(fold_state(), mt, hf, m, l);
                mrow[mt][hf] = m;
            }
            if constexpr (DEC) {
                if (whole && ntiles > CT) {  // the last chunk into the state of the earlier ones
                    float a, bw;
                    fold_weights(sM[hf], mrow[0][hf], row_sl2(0, hf), a, bw);
                    l = fold(sL[hf], a, l, bw);
#pragma unroll
                    for (int dn = 0; dn < ND; ++dn)
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                            oacc[0][dn][hf * 2 + e] = fold(sO[dn][hf * 2 + e], a, oacc[0][dn][hf * 2 + e], bw);
                    mrow[0][hf] = fmaxf(sM[hf], mrow[0][hf]);  // the folded max (the log-sum-exp's)
                }
            }
            if (more) {
                put_state(fold_state(), mt, hf, mrow[mt][hf], l);
                continue;
            }
            if (DEC && gridDim.x > 1) {
                const int r = (lane >> 2) + hf * 8;
                float* rec = A.part + ((((long long)b * Hkv + hk) * gridDim.x + blockIdx.x) * 16 + r) * (D + 4);
#pragma unroll
                for (int dn = 0; dn < ND; ++dn)
                    *reinterpret_cast<float2*>(rec + (dp0 * 2 + dn) * 8 + (lane & 3) * 2) =
                        make_float2(oacc[mt][dn][hf * 2], oacc[mt][dn][hf * 2 + 1]);
                if (warp == (C::WS ? 2 : 0) && (lane & 3) == 0) {
                    rec[D] = mrow[mt][hf];
                    rec[D + 1] = l;
                    rec[D + 2] = row_sl2(mt, hf);
                }
                continue;
            }
            // Both tests keep a NaN a NaN (l == 0 is false for NaN; min.NaN/max.NaN return NaN where
            // fminf/fmaxf would return the bound): finite input never makes one here, and if a
            // defect ever did, the tests must see it rather than a plausible finite value.
            const bool seen = !(l == 0.f);
            const float inv = seen ? rcp(l) : 0.f;
            const int row = wrow + mt * 16 + (lane >> 2) + hf * 8;
            if (A.lse != nullptr && (lane & 3) == 0) {  // a launch fact; one lane of the row's quad
                uint32_t ly, lz;
                const int lq = place(ly, lz);
                const int rr = DEC ? row : lq * BM + row;
                if (rr < nrows) {  // position only
                    const long long at = DEC ? (long long)((int)ly * G + rr / Sq) * A.lse_hs + rr % Sq
                                             : (long long)ly * A.lse_hs + rr;
                    A.lse[lz * A.lse_bs + at] = row_lse(mrow[mt][hf], l, row_sl2(mt, hf), Ty<T>::BIAS);
                }
            }
            auto fin = [&](float o) { return seen ? clamp_nan(__fmul_rn(o, inv), maxt) : 0.f; };
#pragma unroll
            for (int dn = 0; dn < ND; ++dn) {
                const uint32_t packed = Ty<T>::pack(fin(oacc[mt][dn][hf * 2]), fin(oacc[mt][dn][hf * 2 + 1]));
                const uint32_t addr = sQ + soff<D>(row, (DEC ? dp0 * 2 : 0) + dn) + (lane & 3) * 4;
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(packed) : "memory");
            }
        }
    if ((DEC && gridDim.x > 1) || more) return 0;  // not the output (yet)
    csync();
    // The block's output rows (place: not kept in registers through the loop).
    uint32_t by, bz;
    const int qt_e = place(by, bz);
    const int q0_e = DEC ? 0 : qt_e * BM;
    T* ob = o + bz * A.o_bs;
#pragma unroll
    for (int it = 0; it < BM * CH / NT; ++it) {
        const int idx = tid + it * NT;
        const int r = idx / CH, c = idx % CH;
        if (q0_e + r < nrows) {  // position only
            uint4 val;
            asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w)
                         : "r"(sQ + soff<D>(r, c))
                         : "memory");
            const int rr = q0_e + r;
            T* orow = DEC ? ob + ((int)(by * G) + rr / Sq) * A.o_hs + (long long)(rr % Sq) * A.o_ss
                          : ob + (int)by * A.o_hs + (long long)rr * A.o_ss;
            *reinterpret_cast<uint4*>(orow + c * 8) = val;
        }
    }
    return ntiles;
}

// The walk of fwd_tma (below), by the producer warp (PROD) or by the consumers: the same query tiles
// in the same order.
template <typename T, int D, int NW, int BN, int STAGES, bool CAUSAL, bool PROD>
__device__ __forceinline__ void tma_walk(const TcArgs& A, const TmaMap* tk, const TmaMap* tv) {
    constexpr int BM = Cfg<D, 1, NW, BN, STAGES, true, false, true>::BM;
    const int nqt = (A.Sq + BM - 1) / BM, heads = A.Hq * A.B;
    const bool pairs = CAUSAL && (long long)gridDim.x < (long long)nqt * heads;
    const int per = pairs ? (nqt + 1) / 2 : nqt;  // units a head
    // Units, < 2^31 (the host bounds the rows, B · Hq · Sq): unsigned, so that a unit index plus the
    // grid cannot overflow.
    const uint32_t units = (uint32_t)(per * heads);
    // Query tile w (0: the first, 1: the second of a pair) of unit u.
    auto tile_of = [&](uint32_t u, int w, int& qt, int& h, int& b) {
        const int hd = (int)(u / per), kk = (int)(u - hd * per);
        qt = !CAUSAL ? kk : (pairs && w == 1) ? kk : nqt - 1 - kk;
        h = hd % A.Hq;
        b = hd / A.Hq;
    };
    // The query tile after (u, w): a pair's second, else the block's next unit.
    auto step = [&](uint32_t& u, int& w) {
        const int kk = (int)(u % per);
        if (pairs && w == 0 && kk < nqt - 1 - kk) {
            w = 1;
        } else {
            u += gridDim.x;
            w = 0;
        }
    };
    TmaRun r{};  // g0 = 0, buf = 0
    uint32_t u = blockIdx.x;
    int w = 0;
    if (!PROD && u < units) {  // the first query tile's Q rows, into buffer 0 (position)
        extern __shared__ __align__(128) unsigned char smem[];
        tile_of(u, w, r.qt, r.h, r.b);
        tma_load_q<T, D, BM, NW * 32>(A, smem_u32(smem), r.qt, r.h, r.b, threadIdx.x);
    }
#pragma unroll 1
    while (u < units) {  // position
        tile_of(u, w, r.qt, r.h, r.b);
        step(u, w);
        r.nqt = -1;
        if (u < units) tile_of(u, w, r.nqt, r.nh, r.nb);
        r.g0 += (uint32_t)fwd<T, D, 1, NW, BN, STAGES, true, CAUSAL, false, false, true, PROD>(A, tk, tv, r);
        r.buf ^= 1;
        // The walk's place, from the query tile just done rather than kept through it (registers).
        w = (pairs && r.qt < nqt - 1 - r.qt) ? 1 : 0;
        u = (uint32_t)((r.b * A.Hq + r.h) * per + ((CAUSAL && w == 0) ? nqt - 1 - r.qt : r.qt));
        step(u, w);
    }
}

// The TMA prefill kernels (tc_fwdt_*): a block walks query tiles, one after another, the producer
// warp's K/V ring and the consumers' Q buffers running on from one to the next, so that the next
// query tile's Q rows and first K/V tiles load while the consumers finish the current one (its last
// P·V, its normalisation and output). Which query tiles a block takes depends on positions and the
// launch's grid only; each query tile's arithmetic is fwd's, whichever block runs it, so the grid
// changes no bit (its fold state in `part` is the query tile's).
//   The walk. nqt query tiles per head, heads (b · Hq + h) in order. Causal, with fewer blocks than
// query tiles: units of two, tile nqt - 1 - k then tile k of one head (k < nqt - 1 - k; the middle
// one alone), so that every unit holds about the same work (the causal key counts of the pair sum to
// about the same); block x takes units x, x + gridDim.x, ... (the host sizes the grid so that they
// come out nearly even, src/cuda/tensorcore.rs). Otherwise units of one tile in the same order, the
// heaviest (last) query tile of a causal head first: with a block per query tile that is the
// one-block-per-tile launch of the other kernels.
template <typename T, int D, int NW, int BN, int STAGES, bool CAUSAL>
__device__ __forceinline__ void fwd_tma(const TcArgs& A, const TmaMap* tk, const TmaMap* tv) {
    using C = Cfg<D, 1, NW, BN, STAGES, true, false, true>;
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sBar = Smem<C, D, BN, STAGES>(smem_u32(smem)).bar;  // the stages' barriers
    if (threadIdx.x == 0) {
#pragma unroll
        for (int st = 0; st < STAGES; ++st) {
            mbar_init(sBar + st * 8, 1);                 // full: K
            mbar_init(sBar + (STAGES + st) * 8, 1);      // full: V
            mbar_init(sBar + (2 * STAGES + st) * 8, NW);  // empty: every consumer warp
        }
        mbar_init_fence();
    }
    __syncthreads();  // the barriers, initialised for every thread (the last barrier of all NTL)
    // One block per SM; the producer warpgroup gives registers up and the NW / 4 consumer
    // warpgroups take them (setmaxnreg): two: 40 + 2 · 232 = 3 · 168; three: 32 + 3 · 160 = 4 · 128
    // (with 152 the consumers of the D 64 bf16 causal kernel spilled; the producer's walk over query
    // tiles spilled three words at 24).
    // (Constants here, not Cfg members: those become cubin symbols on every architecture.)
    constexpr int REG_P = NW == 12 ? 32 : 40, REG_C = NW == 12 ? 160 : 232;
    const int warp = threadIdx.x >> 5;
    if (warp >= NW) {  // the producer warpgroup (public: the thread index); one warp of it works
        regs_down<REG_P>();
        if (warp == NW) tma_walk<T, D, NW, BN, STAGES, CAUSAL, true>(A, tk, tv);
        return;
    }
    regs_up<REG_C>();
    tma_walk<T, D, NW, BN, STAGES, CAUSAL, false>(A, tk, tv);
}

}  // namespace tc

using tc::uint32_t;

// ------------------------------------------------------------------------------ instantiations

// The parameters one by one, not one struct: ptxas keeps `__restrict__` on kernel parameters, and
// with it the D = 128 kernels fit in 255 registers (passed as one struct they spilled 8 bytes).
// TC_PARAMS lists them, TC_ARGS gathers them into the TcArgs `A` that tc::fwd takes.
#define TC_PARAMS                                                                                       \
    const void* __restrict__ q, const void* __restrict__ k, const void* __restrict__ v, void* __restrict__ o, \
        const int* __restrict__ kv_lens, const unsigned char* __restrict__ mask, long long q_bs, long long q_hs, \
        long long k_bs, long long k_hs, long long v_bs, long long v_hs, long long o_bs, long long o_hs,      \
        long long msb, long long msh, long long msq, int q_ss, int k_ss, int v_ss, int o_ss, int B, int Hq,  \
        int Hkv, int Sq, int Skv, float scale, int top_left, float* __restrict__ part, int chunk,             \
        float* __restrict__ lse, long long lse_bs, long long lse_hs, const int* __restrict__ table,           \
        int page_shift, int max_pages
#define TC_ARGS                                                                                         \
    const TcArgs A{q,    k,    v,    o,    kv_lens, mask, q_bs, q_hs, k_bs,  k_hs,    v_bs, v_hs,          \
                   o_bs, o_hs, msb,  msh,  msq,     q_ss, k_ss, v_ss, o_ss,  B,       Hq,   Hkv,           \
                   Sq,   Skv,  scale, top_left, part, chunk, lse, lse_bs, lse_hs, table,                     \
                   page_shift, max_pages}
#define TC_KERNEL(NAME, T, D, MT, NW, BN, ST, QREG, MINB, CAUSAL, DEC, PAGED)                           \
    extern "C" __global__ void __launch_bounds__(NW * 32, MINB) NAME(TC_PARAMS) {                       \
        TC_ARGS;                                                                                        \
        if (DEC) tc::pdl_trigger(); /* a split decode's merge may launch now (it waits for this grid) */ \
        tc::fwd<T, D, MT, NW, BN, ST, QREG, CAUSAL, DEC, PAGED>(A);                                     \
    }
// The TMA prefill kernels (tc_fwdt_*, sm_90a): TC_KERNEL's parameters, then the tensor maps of K and
// V. Launched with a producer warpgroup besides the NW computing warps, one block per SM (the
// producer gives up registers to the consumers: REG_P, REG_C in tc::fwd_tma).
#define TC_KERNEL_TMA(NAME, T, D, NW, BN, ST, CAUSAL)                                                   \
    extern "C" __global__ void __launch_bounds__(NW * 32 + 128, 1)                                      \
        NAME(TC_PARAMS, const __grid_constant__ tc::TmaMap tk, const __grid_constant__ tc::TmaMap tv) { \
        TC_ARGS;                                                                                        \
        tc::fwd_tma<T, D, NW, BN, ST, CAUSAL>(A, &tk, &tv);                                            \
    }
#define TC_FAMILY_TMA(D, NW, BN, ST)                                                                  \
    TC_CFG_(tc_cfg_tma_d##D, D, 1, NW, BN, ST, true, false, true)                                   \
    TC_KERNEL_TMA(tc_fwdt_f16_d##D, __half, D, NW, BN, ST, false)                                   \
    TC_KERNEL_TMA(tc_fwdt_f16_d##D##_causal, __half, D, NW, BN, ST, true)                           \
    TC_KERNEL_TMA(tc_fwdt_bf16_d##D, __nv_bfloat16, D, NW, BN, ST, false)                           \
    TC_KERNEL_TMA(tc_fwdt_bf16_d##D##_causal, __nv_bfloat16, D, NW, BN, ST, true)

#define TC_CFG_(NAME, D, MT, NW, BN, ST, QREG, DEC, TMA)                                               \
    extern "C" __constant__ int NAME[4] = {tc::Cfg<D, MT, NW, BN, ST, QREG, DEC, TMA>::BM,            \
                                           tc::Cfg<D, MT, NW, BN, ST, QREG, DEC, TMA>::NTL,           \
                                           tc::Cfg<D, MT, NW, BN, ST, QREG, DEC, TMA>::SMEM, BN};
#define TC_CFG(NAME, D, MT, NW, BN, ST, QREG, DEC) TC_CFG_(NAME, D, MT, NW, BN, ST, QREG, DEC, false)

// All four (dtype x causal) kernels of one head-dim configuration. MINB: blocks per SM the register
// allocation must allow (__launch_bounds__), i.e. a register cap of 65536 / (NW * 32 * MINB).
#define TC_KERNELS_(PREFIX, D, MT, NW, BN, ST, QREG, MINB, DEC, PAGED)                                 \
    TC_KERNEL(PREFIX##_f16_d##D, __half, D, MT, NW, BN, ST, QREG, MINB, false, DEC, PAGED)             \
    TC_KERNEL(PREFIX##_f16_d##D##_causal, __half, D, MT, NW, BN, ST, QREG, MINB, true, DEC, PAGED)     \
    TC_KERNEL(PREFIX##_bf16_d##D, __nv_bfloat16, D, MT, NW, BN, ST, QREG, MINB, false, DEC, PAGED)     \
    TC_KERNEL(PREFIX##_bf16_d##D##_causal, __nv_bfloat16, D, MT, NW, BN, ST, QREG, MINB, true, DEC, PAGED)
#define TC_FAMILY_(PREFIX, CFGNAME, D, MT, NW, BN, ST, QREG, MINB, DEC) \
    TC_CFG(CFGNAME, D, MT, NW, BN, ST, QREG, DEC)                     \
    TC_KERNELS_(PREFIX, D, MT, NW, BN, ST, QREG, MINB, DEC, false)
#define TC_FAMILY(PREFIX, CFGNAME, D, MT, NW, BN, ST, QREG, MINB) \
    TC_FAMILY_(PREFIX, CFGNAME, D, MT, NW, BN, ST, QREG, MINB, false)
#define TC_DECODE(PREFIX, CFGNAME, D, NW, BN, ST, MINB) TC_FAMILY_(PREFIX, CFGNAME, D, 1, NW, BN, ST, false, MINB, true)
// The same decode kernels reading a paged cache (tc_decp_*: the launch configuration of tc_dec_*).
#define TC_DECODE_PAGED(PREFIX, D, NW, BN, ST, MINB) TC_KERNELS_(PREFIX, D, 1, NW, BN, ST, false, MINB, true, true)

// The KV tile size BN of each head dim is part of the numerics (it fixes where the online softmax
// rescales): prefill and decode kernels of one head dim must use the same BN, or D3 breaks.
#define TC_BN_D64 64
#define TC_BN_D128 64
#define TC_BN_D256 32

// Rows per warp (MT m16 tiles) do not change the bits (each row's operation sequence is its own).
// Blackwell's ptxas (sm_100, sm_120) needs more registers for the same code: one m16 tile per warp
// there, where two spilled (built and audited; never run on such a GPU).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#define TC_MT_BIG 1
#else
#define TC_MT_BIG 2
#endif
//        prefix  config          D    MT         NW BN          ST QREG   MINB
#if TC_WGMMA
TC_FAMILY(tc_fwd, tc_cfg_d64,     64,  1,         8, TC_BN_D64,  4, true,  1)
#else
TC_FAMILY(tc_fwd, tc_cfg_d64,     64,  TC_MT_BIG, 4, TC_BN_D64,  3, true,  1)
#endif
#if TC_WGMMA
TC_FAMILY(tc_fwd, tc_cfg_d128,    128, 1,         8, TC_BN_D128, 4, true,  1)
#else
TC_FAMILY(tc_fwd, tc_cfg_d128,    128, TC_MT_BIG, 4, TC_BN_D128, 2, false, 1)
#endif
TC_FAMILY(tc_fwd, tc_cfg_d256,    256, 1, 4, TC_BN_D256, 2, false, 1)
// sm_90a: the same D 64 and 128 prefill fed by TMA (tc_fwdt_*); the host takes them where K and V's
// layout suits a tensor map (src/cuda/tensorcore.rs), tc_fwd_* elsewhere. Same bits.
#if TC_WGMMA
TC_FAMILY_TMA(64, 12, TC_BN_D64, 4)
TC_FAMILY_TMA(128, 8, TC_BN_D128, 4)
#endif
// Decode stages (the stage count does not change the bits). Four for the larger tiles where shared
// memory allows: the pipelined decode loop (tc::fwd, PIPE) needs tile j + 1 resident while it works
// on tile j, so four keep two tiles in flight (H100: 2-12 % faster than three on small calls, the
// same on decode B32; docs/perf.md). sm_86, sm_89 and sm_120 allow 99 KiB per block: two stages
// there for the larger tiles (no pipeline) and five for D 64 (room for the shared scores).
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 890 || __CUDA_ARCH__ == 1200)
#define TC_DEC_ST_BIG 2
#define TC_DEC_ST_D64 5
#else
#define TC_DEC_ST_BIG 4
#define TC_DEC_ST_D64 6
#endif
// D 128 on sm_90: six, the WS loop's rings (K and V of six tiles each: 192 KiB, 207 KiB in all).
#if TC_DEC_WS
#define TC_DEC_ST_D128 6
#else
#define TC_DEC_ST_D128 TC_DEC_ST_BIG
#endif
//        prefix  config          D    NW BN          ST             MINB
TC_DECODE(tc_dec, tc_cfg_dec_d64, 64,  4, TC_BN_D64,  TC_DEC_ST_D64, 2)
TC_DECODE(tc_dec, tc_cfg_dec_d128, 128, 4, TC_BN_D128, TC_DEC_ST_D128, 2)
TC_DECODE(tc_dec, tc_cfg_dec_d256, 256, 4, TC_BN_D256, TC_DEC_ST_BIG, 2)
#if TC_PAGED
TC_DECODE_PAGED(tc_decp, 64, 4, TC_BN_D64, TC_DEC_ST_D64, 2)
TC_DECODE_PAGED(tc_decp, 128, 4, TC_BN_D128, TC_DEC_ST_D128, 2)
TC_DECODE_PAGED(tc_decp, 256, 4, TC_BN_D256, TC_DEC_ST_BIG, 2)
#endif

extern "C" __constant__ int tc_kchunk[1] = {TC_KCHUNK};
// Whether the cubin has the tc_fwdt_* kernels (the sm_90a prefill fed by TMA; TC_FAMILY_TMA above).
extern "C" __constant__ int tc_tma[1] = {TC_WGMMA};
// Whether the cubin has the tc_decp_* kernels (decode reading a paged cache through its block table,
// TcArgs::table). Not on Blackwell (sm_100, sm_120): there ptxas spilled the bf16 D = 128 and
// D = 256 decode kernels with the table's row addressing (8-16 bytes of stack, which the audit
// forbids); the host gathers the used rows for those instead (src/cuda/tensorcore.rs reads this).
extern "C" __constant__ int tc_paged[1] = {TC_PAGED};
// Whether the decode kernels trigger and tc_merge_* waits (tc::pdl_trigger, tc::pdl_wait): the host
// launches the merge with programmatic stream serialisation only where this is 1.
extern "C" __constant__ int tc_pdl[1] = {TC_PDL};

// ------------------------------------------------------------------------- the decode merge
//
// tc_merge_<T>: after a split tc_dec launch (gridDim.x = nch > 1), fold each row's chunk partials in
// increasing chunk order and write the output row (docs/tensorcore-numerics.md §9 steps 2-3). Grid
// (G * Sq, Hkv, B), block D threads: thread d owns output column d of row blockIdx.x (query row
// blockIdx.x % Sq of query head hk * G + blockIdx.x / Sq) and recomputes the row's (M, L) itself
// (the same instructions on the same words in every thread). The chunk count of the row's batch
// element comes from kv_lens (public) exactly as tc_dec's tile count does; chunks past it were not
// written and are not read.
struct TcMerge {
    const float* part;      //   0  [B, Hkv, nch, 16, D + 4]: O (D), m, l, sl2 · 2^sh, unused
    void* o;                //   8  the output, strides o_*
    const int* kv_lens;     //  16  [B] key lengths or NULL (= Skv). PUBLIC
    long long o_bs, o_hs;   //  24
    int o_ss, Hq, Hkv, Sq;  //  40
    int Skv, D, nch;        //  56
    int causal, top_left;   //  68
    float* lse;             //  80  the rows' log-sum-exp (as TcArgs), or NULL
    long long lse_bs, lse_hs;  //  88
};                          // 104 bytes

namespace tc {

template <typename T>
__device__ __forceinline__ void merge(const TcMerge& P) {
    const int r = blockIdx.x, hk = blockIdx.y, b = blockIdx.z, d = threadIdx.x;
    const int D = P.D, Sq = P.Sq, G = P.Hq / P.Hkv;
    int L = P.kv_lens ? P.kv_lens[b] : P.Skv;
    L = min(max(L, 0), P.Skv);
    const int kv_end = visible_end(P.causal, L, Sq, Sq, P.top_left);  // as tc::fwd (decode)
    const int nch = min(kv_end > 0 ? (kv_end + TC_KCHUNK - 1) / TC_KCHUNK : 0, P.nch);
    const float* rec = P.part + (((long long)b * P.Hkv + hk) * P.nch * 16 + r) * (D + 4);
    const long long cstride = 16LL * (D + 4);
    pdl_wait();  // the decode grid has completed and its partials are visible (launched early: sm_90+)
    // Chunk 0 is the state (step 2's start); nch = 0 (no key visible) leaves (-inf, +0, +0).
    float M = TC_NEG_INF, Ls = 0.f, O = 0.f, sl2r = 1.f;
    if (nch > 0) {
        M = rec[D];
        Ls = rec[D + 1];
        sl2r = rec[D + 2];
        O = rec[d];
    }
    // The chunk records go through shared memory a batch of MB chunks at a time, the next batch's
    // copies (cp.async) in flight while this one folds: each record is an L2 round trip, and the
    // plain loop's loads sat a chunk or two ahead of their use (64 chunks: 12.9 µs on an H200,
    // perf.md; ptxas moved even loads written a batch ahead back next to their use). The folds of a
    // batch are straight-line code: a chunk past the last is folded too, on the last chunk's record
    // again, and its result not selected (a select on a position, no branch), so that one chunk's
    // exponents overlap the next one's; the only dependent chain is the max M (one FMNMX a chunk),
    // then L and O (one FFMA each).
    constexpr int MB = 16;
    __shared__ float s_o[2][MB][256];   // [buffer][chunk][column]: thread d's O words (D <= 256)
    __shared__ float s_ml[2][MB][2];    // [buffer][chunk]: the chunk's m, l
    auto issue = [&](int c0, int buf) {
#pragma unroll
        for (int i = 0; i < MB; ++i) {
            const float* rc = rec + min(c0 + i, nch - 1) * cstride;
            cp_async4(smem_u32(&s_o[buf][i][d]), rc + d);
            if (d < 2) cp_async4(smem_u32(&s_ml[buf][i][d]), rc + D + d);  // position
        }
        cp_async_commit();
    };
    if (nch > 1) issue(1, 0);
    for (int c0 = 1, buf = 0; c0 < nch; c0 += MB, buf ^= 1) {
        if (c0 + MB < nch) {
            issue(c0 + MB, buf ^ 1);
        } else {
            cp_async_commit();  // an empty group: the wait below then always leaves one group
        }
        cp_async_wait<1>();
        __syncthreads();  // the batch's m and l, copied by threads 0 and 1
#pragma unroll
        for (int i = 0; i < MB; ++i) {
            const bool live = c0 + i < nch;  // position
            const float mc = s_ml[buf][i][0], lc = s_ml[buf][i][1], oc = s_o[buf][i][d];
            float a, bw;
            fold_weights(M, mc, sl2r, a, bw);
            Ls = live ? fold(Ls, a, lc, bw) : Ls;
            O = live ? fold(O, a, oc, bw) : O;
            M = live ? fmaxf(M, mc) : M;
        }
        __syncthreads();  // every thread past this buffer before the next iteration refills it
    }
    // §7 on the folded (L, O), without its quad sum (L is already the row's).
    const bool seen = !(Ls == 0.f);
    const float inv = seen ? rcp(Ls) : 0.f;
    const float out = seen ? clamp_nan(__fmul_rn(O, inv), Ty<T>::maxt()) : 0.f;
    const uint32_t packed = Ty<T>::pack(out, 0.f);
    T* orow = static_cast<T*>(P.o) + (b * P.o_bs + (hk * G + r / Sq) * P.o_hs + (long long)(r % Sq) * P.o_ss);
    reinterpret_cast<unsigned short*>(orow)[d] = (unsigned short)(packed & 0xffffu);
    if (P.lse != nullptr && d == 0)  // a launch fact; one thread of the row
        P.lse[b * P.lse_bs + (hk * G + r / Sq) * P.lse_hs + r % Sq] = row_lse(M, Ls, sl2r, Ty<T>::BIAS);
}

}  // namespace tc

extern "C" __global__ void __launch_bounds__(256) tc_merge_f16(const TcMerge P) { tc::merge<__half>(P); }
extern "C" __global__ void __launch_bounds__(256) tc_merge_bf16(const TcMerge P) { tc::merge<__nv_bfloat16>(P); }

// ------------------------------------------------------------------ non-finite policy kernels
//
// NonFinitePolicy on device buffers (docs/tensorcore.md, "Non-finite inputs"). Every kernel takes one
// `TcPolicy` by value (src/cuda/launch.rs mirrors it field for field). Each reads every element or
// flag its shape calls for and writes every element it owns, deciding by selection only: loop bounds,
// addresses and branches depend on the shape, kv_lens, the causal flag and which pointers are NULL,
// never on a value (Q, K, V, flags, mask). No atomics; every reduction is of integers (OR, min), so
// its order cannot change a result.
//
//   Reject:    tc_scan_<T> x3 (Q, K, V: one word a block), tc_any_flag -> 3 words, which the host reads
//              to decide once; then the attention kernel.
//   Propagate: tc_sanitize_<T> x3 (copies with NaN/inf -> +0, per-row flags), tc_first_bad (no mask),
//              the attention kernel on the copies, tc_poison_<T> on its output.
struct TcPolicy {
    const void* src;            //   0  sanitize: the [B, s_heads, s_seq, d] tensor to scan (strides s_*)
    void* dst;                  //   8  sanitize: its contiguous [rows, d] copy with NaN, +-inf -> +0
    unsigned* flags;            //  16  sanitize: one bad flag (0/1) per row, written; scan: one (0/1) per
                                //      block, written; any_flag: the Q, K, V flags back to back, read
    const unsigned* badq;       //  24  poison: flags of the Q rows
    const unsigned* badk;       //  32  first_bad, poison: flags of the K rows
    const unsigned* badv;       //  40  first_bad, poison: flags of the V rows
    int* firstbad;              //  48  first_bad: written; poison (no mask): read. [B * Hkv]
    void* out;                  //  56  poison: the attention output (strides o_*), rewritten in place
    const unsigned char* mask;  //  64  poison: boolean mask (values secret) or NULL
    const int* kv_lens;         //  72  poison: key lengths [B] or NULL (Skv). PUBLIC
    unsigned* words;            //  80  any_flag: 3 words (Q, K, V), each 0 or 1
    long long rows;             //  88  sanitize, scan: rows of src; any_flag: Q's flags
    long long rows_kv;          //  96  any_flag: K's flags (= V's)
    long long msb, msh, msq;    // 104  poison: mask strides (as the attention kernels)
    long long s_bs, s_hs, s_ss; // 128  sanitize, scan: element strides of src
    long long o_bs, o_hs, o_ss; // 152  poison: element strides of out
    int d;                      // 176  head dim: 64, 128 or 256 (d / 8 divides 32)
    int B, Hq, Hkv, Sq, Skv;    // 180
    int causal;                 // 200
    int top_left;               // 204  causal alignment, as TcArgs
    int s_heads, s_seq;         // 208  sanitize, scan: src's heads and rows per head (row = (b*s_heads + h)*s_seq + s)
    float* lse;                 // 216  poison: the attention's log-sum-exp (as TcArgs), rewritten in
                                //      place, or NULL
    long long lse_bs, lse_hs;   // 224
    const int* table;           // 240  sanitize, scan: src is a paged K or V cache read through this block
                                //      table (as TcArgs; rows s >= kv_lens[b] are not read: +0,
                                //      not bad), or NULL. PUBLIC
    int page_shift, max_pages;  // 248
};                              // 256 bytes

namespace tc {

// 16-bit element traits of the policy kernels: the exponent mask (all ones = NaN or +-inf) and the
// canonical quiet NaN, twice (docs/numerics.md 7: f16 0x7E00, bf16 0x7FC0).
template <typename T>
struct Bits16;
template <>
struct Bits16<__half> {
    static constexpr uint32_t EXP = 0x7c00u, NAN2 = 0x7e007e00u;
};
template <>
struct Bits16<__nv_bfloat16> {
    static constexpr uint32_t EXP = 0x7f80u, NAN2 = 0x7fc07fc0u;
};

// Two 16-bit elements with NaN/+-inf replaced by +0; `bad` gets 1 if one was.
template <typename T>
__device__ __forceinline__ uint32_t sanitize2(uint32_t w, uint32_t& bad) {
    constexpr uint32_t E = Bits16<T>::EXP;
    const uint32_t blo = (w & E) == E, bhi = ((w >> 16) & E) == E;
    bad |= blo | bhi;
    const uint32_t keep = (blo ? 0u : 0x0000ffffu) | (bhi ? 0u : 0xffff0000u);
    return w & keep;
}

// log2 of a row's 16-byte units (d / 8: 8, 16 or 32).
__device__ __forceinline__ int unit_lg(const TcPolicy& P) { return P.d == 64 ? 3 : (P.d == 128 ? 4 : 5); }

// Where unit c (16 bytes) of row (b, h, s) of src lies, rows in the order (b, h, s), and whether it
// is read (`live`): every unit of the rows of a contiguous tensor (`in`: the row exists); of a
// paged cache only the rows the sequences use, s < L, through the block table (the others +0, not
// bad). Position and public lengths only; a row that does not exist is formed as row 0.
template <typename T>
__device__ __forceinline__ const T* row_src(const TcPolicy& P, bool in, unsigned b, unsigned h, unsigned s, int c,
                                            bool& live) {
    b = in ? b : 0u;
    h = in ? h : 0u;
    s = in ? s : 0u;
    live = in;
    if (P.table) {  // a launch fact
        int L = P.kv_lens[b];
        L = min(max(L, 0), P.Skv);
        live = in && (int)s < L;
        // The entry of a used page (index clamped into row b of the table, max_pages >= 1: the
        // host's condition), page 0 where the row is not used: every address formed is in the cache.
        const int e = P.table[b * P.max_pages + min((int)s >> P.page_shift, P.max_pages - 1)];
        const long long pg = live ? e : 0;
        return static_cast<const T*>(P.src) + (pg * P.s_bs + h * P.s_hs + (long long)(s & ((1u << P.page_shift) - 1u)) * P.s_ss) +
               c * 8;
    }
    return static_cast<const T*>(P.src) + (b * P.s_bs + h * P.s_hs + s * P.s_ss) + c * 8;
}

// Row `row` of src as (b, h, s): 32-bit divisions by the public s_seq and s_heads (rows < 2^31,
// checked by the host): no 64-bit division, whose code is a CALL to a slow path.
__device__ __forceinline__ void row_bhs(const TcPolicy& P, long long row, unsigned& b, unsigned& h, unsigned& s) {
    const unsigned r32 = row < P.rows ? (unsigned)row : 0u;
    const unsigned bh = r32 / (unsigned)P.s_seq;
    s = r32 - bh * (unsigned)P.s_seq;
    b = bh / (unsigned)P.s_heads;
    h = bh - b * (unsigned)P.s_heads;
}

// Propagate's copy: one 16-byte unit per thread, the d / 8 units of a row in consecutive lanes of one
// warp; the row's flag from their OR.
template <typename T>
__device__ __forceinline__ void sanitize(const TcPolicy& P) {
    const int lg = unit_lg(P);
    const int ch = 1 << lg;
    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long row = g >> lg;
    const bool in = row < P.rows;  // position only
    unsigned b, h, s;
    row_bhs(P, row, b, h, s);
    bool live;
    const T* src = row_src<T>(P, in, b, h, s, (int)(g & (ch - 1)), live);
    uint4 w = make_uint4(0, 0, 0, 0);
    if (live) w = *reinterpret_cast<const uint4*>(src);
    uint32_t bad = 0;
    w.x = sanitize2<T>(w.x, bad);
    w.y = sanitize2<T>(w.y, bad);
    w.z = sanitize2<T>(w.z, bad);
    w.w = sanitize2<T>(w.w, bad);
    if (in) reinterpret_cast<uint4*>(P.dst)[g] = w;
    for (int o = 1; o < ch; o <<= 1) bad |= __shfl_xor_sync(0xffffffffu, bad, o);
    if (in && (g & (ch - 1)) == 0) P.flags[row] = bad;
}

// Reject's scan of src: whether any element read is NaN or +-inf, one word per block (the OR over its
// SCAN_UNITS units: SCAN_EACH a thread, their loads issued together, consecutive threads on
// consecutive units), for tc_any_flag. The host launches ceil(units / SCAN_UNITS) blocks of
// SCAN_THREADS. An OR of integers: neither the grid nor the order can change a word. (Until
// 2026-11-29 Reject ran tc_sanitize without copies, one unit a thread and a flag a row, which left
// tc_any_flag a word a row to reduce in one block per tensor; docs/perf.md, "Reject's scan".)
#define SCAN_THREADS 256
#define SCAN_EACH 8
#define SCAN_UNITS (SCAN_THREADS * SCAN_EACH)
template <typename T>
__device__ __forceinline__ void scan(const TcPolicy& P) {
    const int lg = unit_lg(P);
    // A thread's units are g0 + i * SCAN_THREADS: one column c of rows row0 + i * R (SCAN_THREADS is
    // a multiple of the units a row). Its first row's (b, h, s) by division, the next ones by
    // stepping s by R, dividing again only where a step crosses a head's last row (a branch on
    // public shapes): a few instructions a unit where the divisions cost some forty (2026-11-29,
    // H200 under Nsight Compute: the scan of a 537 MB K 170 -> 127 us).
    const long long g0 = (long long)blockIdx.x * SCAN_UNITS + threadIdx.x;
    const int c = (int)(g0 & ((1 << lg) - 1));
    const int R = SCAN_THREADS >> lg;
    long long row = g0 >> lg;
    unsigned b, h, s;
    row_bhs(P, row, b, h, s);
    uint4 w[SCAN_EACH];
#pragma unroll
    for (int i = 0; i < SCAN_EACH; ++i) {
        bool live;
        const T* src = row_src<T>(P, row < P.rows, b, h, s, c, live);  // position only
        w[i] = make_uint4(0, 0, 0, 0);
        if (live) w[i] = *reinterpret_cast<const uint4*>(src);
        row += R;
        s += R;
        if (s >= (unsigned)P.s_seq) row_bhs(P, row, b, h, s);
    }
    uint32_t bad = 0;
#pragma unroll
    for (int i = 0; i < SCAN_EACH; ++i) {
        sanitize2<T>(w[i].x, bad);
        sanitize2<T>(w[i].y, bad);
        sanitize2<T>(w[i].z, bad);
        sanitize2<T>(w[i].w, bad);
    }
    __shared__ unsigned part[SCAN_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) bad |= __shfl_xor_sync(0xffffffffu, bad, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = bad;
    __syncthreads();
    if (threadIdx.x < 32) {
        bad = threadIdx.x < SCAN_THREADS / 32 ? part[threadIdx.x] : 0u;
        for (int o = 16; o > 0; o >>= 1) bad |= __shfl_xor_sync(0xffffffffu, bad, o);
        if (threadIdx.x == 0) P.flags[blockIdx.x] = bad != 0;
    }
}

// The smallest key index j of kv head (b, h) whose K or V row is bad, or Skv if none.
__device__ __forceinline__ void first_bad(const TcPolicy& P) {
    __shared__ int part[32];
    const long long base = ((long long)blockIdx.y * P.Hkv + blockIdx.x) * P.Skv;
    int m = P.Skv;
    for (int j = threadIdx.x; j < P.Skv; j += blockDim.x) {
        const unsigned f = P.badk[base + j] | P.badv[base + j];
        m = min(m, f ? j : P.Skv);
    }
    for (int o = 16; o > 0; o >>= 1) m = min(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x < 32) {
        m = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : P.Skv;
        for (int o = 16; o > 0; o >>= 1) m = min(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (threadIdx.x == 0) P.firstbad[(long long)blockIdx.y * P.Hkv + blockIdx.x] = m;
    }
}

// One warp per output row (b, h, i): bad = the query row was bad, or some valid key j (j < L, causal
// j + Sq <= i + L, mask nonzero) has a bad K or V row (the Exact contract, docs/numerics.md 7). Then
// every element of the row, and its log-sum-exp when there is one, is rewritten: the canonical NaN
// where bad (f32 0x7FC00000 for the log-sum-exp), else itself (bit selection).
template <typename T>
__device__ __forceinline__ void poison(const TcPolicy& P) {
    const int lane = threadIdx.x & 31;
    const int i = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    const int h = blockIdx.y, b = blockIdx.z;
    if (i >= P.Sq) return;  // position only (whole warps)
    const int hk = h / (P.Hq / P.Hkv);
    int L = P.kv_lens ? P.kv_lens[b] : P.Skv;
    L = min(max(L, 0), P.Skv);
    const int lim = P.causal ? min(L, max(0, i + 1 + (P.top_left ? 0 : L - P.Sq))) : L;  // keys [0, lim)
    const long long row = ((long long)b * P.Hq + h) * P.Sq + i;
    const long long kvb = ((long long)b * P.Hkv + hk) * P.Skv;
    uint32_t bad = P.badq[row];
    if (P.mask) {
        const unsigned char* m = P.mask + b * P.msb + h * P.msh + i * P.msq;
        for (int j = lane; j < lim; j += 32) bad |= (uint32_t)(m[j] != 0) & (P.badk[kvb + j] | P.badv[kvb + j]);
    } else {
        bad |= (uint32_t)(P.firstbad[(long long)b * P.Hkv + hk] < lim);
    }
    for (int o = 16; o > 0; o >>= 1) bad |= __shfl_xor_sync(0xffffffffu, bad, o);
    const uint32_t sel = 0u - (bad != 0);  // all ones where the row is bad
    constexpr uint32_t N2 = Bits16<T>::NAN2;
    uint4* o = reinterpret_cast<uint4*>(static_cast<T*>(P.out) + (b * P.o_bs + h * P.o_hs + i * P.o_ss));
    for (int c = lane; c < P.d / 8; c += 32) {
        uint4 w = o[c];
        w.x = (w.x & ~sel) | (N2 & sel);
        w.y = (w.y & ~sel) | (N2 & sel);
        w.z = (w.z & ~sel) | (N2 & sel);
        w.w = (w.w & ~sel) | (N2 & sel);
        o[c] = w;
    }
    if (P.lse != nullptr && lane == 0) {  // a launch fact
        float* l = P.lse + (b * P.lse_bs + h * P.lse_hs + i);
        *l = __uint_as_float((__float_as_uint(*l) & ~sel) | (0x7FC00000u & sel));
    }
}

// Block x ORs flag segment x (Q, K, V: tc_scan's words) into words[x] (0 or 1).
__device__ __forceinline__ void any_flag(const TcPolicy& P) {
    __shared__ unsigned part[32];
    const long long begin = blockIdx.x == 0 ? 0 : P.rows + (blockIdx.x - 1) * P.rows_kv;
    const long long n = blockIdx.x == 0 ? P.rows : P.rows_kv;
    unsigned f = 0;
    // The compile-time block size as the stride (launched with 1024 threads): with blockDim.x,
    // Blackwell's ptxas computes the trip count with a 64-bit division, a CALL the audit forbids.
    for (long long r = threadIdx.x; r < n; r += 1024) f |= P.flags[begin + r];
    for (int o = 16; o > 0; o >>= 1) f |= __shfl_xor_sync(0xffffffffu, f, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = f;
    __syncthreads();
    if (threadIdx.x < 32) {
        f = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0u;
        for (int o = 16; o > 0; o >>= 1) f |= __shfl_xor_sync(0xffffffffu, f, o);
        if (threadIdx.x == 0) P.words[blockIdx.x] = f != 0;
    }
}

}  // namespace tc

// Launch shapes (src/cuda/tensorcore.rs): sanitize grid ceil(rows * d/8 / 256), block 256; scan grid
// ceil(rows * d/8 / SCAN_UNITS), block SCAN_THREADS (tc_scan_cfg); first_bad grid (Hkv, B), block 256;
// poison grid (ceil(Sq / 8), Hq, B), block 256; any_flag grid 3, block 1024.
extern "C" __constant__ int tc_scan_cfg[2] = {SCAN_UNITS, SCAN_THREADS};
extern "C" __global__ void __launch_bounds__(256) tc_sanitize_f16(const TcPolicy P) { tc::sanitize<__half>(P); }
extern "C" __global__ void __launch_bounds__(256) tc_sanitize_bf16(const TcPolicy P) { tc::sanitize<__nv_bfloat16>(P); }
extern "C" __global__ void __launch_bounds__(SCAN_THREADS) tc_scan_f16(const TcPolicy P) { tc::scan<__half>(P); }
extern "C" __global__ void __launch_bounds__(SCAN_THREADS) tc_scan_bf16(const TcPolicy P) { tc::scan<__nv_bfloat16>(P); }
extern "C" __global__ void __launch_bounds__(256) tc_first_bad(const TcPolicy P) { tc::first_bad(P); }
extern "C" __global__ void __launch_bounds__(256) tc_poison_f16(const TcPolicy P) { tc::poison<__half>(P); }
extern "C" __global__ void __launch_bounds__(256) tc_poison_bf16(const TcPolicy P) { tc::poison<__nv_bfloat16>(P); }
extern "C" __global__ void __launch_bounds__(1024) tc_any_flag(const TcPolicy P) { tc::any_flag(P); }
