// The `Exact` attention kernels (docs/numerics.md), bit-identical to the CPU reference
// (src/cpu/prepare.rs, src/cpu/kernel.rs). Four kinds of kernel, all launched by src/cuda/:
//
//   detattn_prepare_<dt>      §2: one warp per row of Q, or of K and V (a launch each, prep_job
//                             picks which): sanitise, per-row power-of-two shift, scaled f32 copy
//                             (row stride DP, zero-padded), bad flag.
//   detattn_reject_part,      §7 Reject on the device: OR of the three bad-flag arrays, no atomics
//   detattn_reject_flags      (a word per slice and array, then one block ORs those; the host reads
//                             three words and decides once).
//   detattn_exact<DP>_<dt>    §3-§5, §7 for head_dim <= DP (DP = 64, 128, 256): a block owns BM
//                             query rows of one (b, h) and prepares them itself (§2, the same
//                             operations as prepare); K/V tiles of 64 keys are staged in shared
//                             memory and reused by every row of the block; each thread runs a
//                             micro-tile of score chains side by side, each chain sequential in d.
//   detattn_exact_generic_<dt> the same contract for any head_dim (up to 8192): one block of 64
//                             threads per query row, accumulators in a global f32 scratch. Slower.
//
// Determinism: every output row is computed from its own inputs in the order numerics.md fixes;
// nothing depends on how rows are grouped into blocks, on the grid, or on scheduling. No atomics.
// Constant time: loops and addresses depend only on shapes, key lengths and the causal flag
// (public); values (and mask entries) only ever enter selections, never branches.

#include <cuda_fp16.h>

#include "numerics.cuh"

using namespace detattn;

// The kernel ABI: one struct passed by value, mirrored by `ExactParams` in src/cuda/exact.rs (same
// field order: pointers, then 64-bit strides, then 32-bit scalars). Change both together, and the
// byte ranges of its audit/rules.toml entries.
//
// Q, K, V and out are logically [B, H, S, D]; element (b, h, s, d) of X is at
// X[b*X_bs + h*X_hs + s*X_ss + d] (element strides; the host folds the layout's offset into the
// pointer). Every layout reads and writes the same logical elements, so no bit depends on it.
struct Params {
    const void* q;          // [B, Hq, Sq, D] input dtype, strides q_*
    const void* k;          // [B, Hkv, Skv, D], strides k_*
    const void* v;          // [B, Hkv, Skv, D], strides v_*
    const unsigned char* mask;  // [Bm, Hm, Sq, Skv], 0/1, or null (dense)
    void* out;              // [B, Hq, Sq, D] input dtype, strides o_*; only its rows are written
    const int* kv_lens;     // [B]
    float* qp;              // prepared Q: [B*Hq*Sq, DP]
    float* kp;              // prepared K: [B*Hkv*SkvPad, DP]
    float* vp;              // prepared V: [B*Hkv*SkvPad, DP]
    int* sq;                // [B*Hq*Sq] row shifts of Q
    int* sk;                // [B*Hkv*SkvPad] row shifts of K
    unsigned* badq;         // [B*Hq*Sq]
    unsigned* badk;         // [B*Hkv*SkvPad]
    unsigned* badv;         // [B*Hkv*SkvPad]
    unsigned* flags;        // [3] reject flags (q, k, v), then the [REJECT_PARTS][3] words of the slices
    float* acc;             // generic path scratch [B*Hq*Sq, DP]
    float* lse;             // §10 one f32 per query row at b*lse_bs + h*lse_hs + i, or null (none asked)
    long long q_bs, q_hs, q_ss, k_bs, k_hs, k_ss, v_bs, v_hs, v_ss, o_bs, o_hs, o_ss, lse_bs, lse_hs;
    int B, Hq, Hkv, Sq, Skv, D;
    int DP;                 // prepared row stride (>= D, multiple of 4)
    int skv_pad;            // Skv rounded up to a multiple of 64
    int causal, has_mask, mask_per_batch, mask_per_head, propagate;
    float scale;
    // prepare: first head of this launch (the host splits huge grids); prep_job = 0 prepares Q,
    // 1 K and V
    int prep_head0, prep_job;
    int group;              // Hq / Hkv
    int bh0;                // first (b*Hq + h) of this launch (the host splits huge grids)
    int top_left;           // causal alignment: 1 = top-left (j <= i), 0 = bottom-right (numerics.md §1)
    // scan (decodes under Reject): rows of one head a chunk of Q and of K/V, and which of Q, K, V
    // (bits 0, 1, 2) read in 16-byte units (rows aligned, whole units)
    int scan_rq, scan_rkv, scan_vec;
    // scan and the reject_flags after it: the scan's blocks a tensor (<= REJECT_PARTS; 0: all)
    int scan_parts;
    int pad_;  // (344 bytes)
};

// ------------------------------------------------------------------------------ element types

// Inputs widen to f32 exactly; the output rounds once, to nearest even (§7).
struct ElemF32 {
    typedef float T;
    __device__ static float load(const T* p, long long i) { return p[i]; }
    __device__ static float widen1(T x) { return x; }
    // Eight elements from 16-byte aligned shared memory (32 bytes here, 16 for the 2-byte types).
    __device__ static void widen8(const unsigned char* s, float (&x)[8]) {
        const float4 a = *reinterpret_cast<const float4*>(s), b = *reinterpret_cast<const float4*>(s + 16);
        x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w;
        x[4] = b.x; x[5] = b.y; x[6] = b.z; x[7] = b.w;
    }
    // The largest magnitude's bits of eight elements (as widen8 reads them) folded into m, and the
    // exponent field of the element that m's bits stand for: the bit patterns of |x| order as the
    // magnitudes do (NaN above inf above every finite), so that field is the largest exponent field
    // of the elements folded in (§2.3, on inputs the scan found finite): one integer max an element
    // instead of a shift, a mask and a max.
    __device__ static void absmax8(const unsigned char* s, unsigned& m) {
        const uint4 a = *reinterpret_cast<const uint4*>(s), b = *reinterpret_cast<const uint4*>(s + 16);
        const unsigned w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) m = max(m, w[e] & 0x7FFFFFFFu);
    }
    __device__ static unsigned expfield_of(unsigned m) { return expfield(__uint_as_float(m)); }
    // N = 1 or 4 elements from shared memory aligned to N elements (dec_values).
    template <int N>
    __device__ static void widen(const T* s, float (&x)[N]) {
        static_assert(N == 1 || N == 4, "one or four elements");
        if constexpr (N == 1) {
            x[0] = s[0];
        } else {
            const float4 a = *reinterpret_cast<const float4*>(s);
            x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w;
        }
    }
    __device__ static unsigned round_bits(float x) { return __float_as_uint(x); }
    __device__ static void store_bits(T* p, long long i, unsigned b) { p[i] = __uint_as_float(b); }
    static constexpr unsigned NAN_BITS = 0x7FC00000u;
    __device__ static float maxt() { return __int_as_float(0x7F7FFFFF); }
};
// The widening loads both 2-byte element types share; E supplies widen1 (one element) and widen2
// (the two elements of a 32-bit word).
template <class E>
struct Elem16Widen {
    __device__ static void widen8(const unsigned char* s, float (&x)[8]) {
        const uint4 w = *reinterpret_cast<const uint4*>(s);
        E::widen2(w.x, x[0], x[1]);
        E::widen2(w.y, x[2], x[3]);
        E::widen2(w.z, x[4], x[5]);
        E::widen2(w.w, x[6], x[7]);
    }
    // ElemF32::absmax8 on 2-byte elements: both halves of a word at once (a 16x2 unsigned max;
    // magnitudes of f16 and bf16 order as their bit patterns do, subnormals included), m holding
    // the low elements' largest in its low half and the high ones' in its high half; widening the
    // larger of the two gives the largest exponent field of the widened elements.
    __device__ static void absmax8(const unsigned char* s, unsigned& m) {
        const uint4 w = *reinterpret_cast<const uint4*>(s);
        m = __vmaxu2(m, w.x & 0x7FFF7FFFu);
        m = __vmaxu2(m, w.y & 0x7FFF7FFFu);
        m = __vmaxu2(m, w.z & 0x7FFF7FFFu);
        m = __vmaxu2(m, w.w & 0x7FFF7FFFu);
    }
    __device__ static unsigned expfield_of(unsigned m) {
        return expfield(E::widen1((unsigned short)max(m & 0xFFFFu, m >> 16)));
    }
    template <int N>
    __device__ static void widen(const unsigned short* s, float (&x)[N]) {
        static_assert(N == 1 || N == 4, "one or four elements");
        if constexpr (N == 1) {
            x[0] = E::widen1(s[0]);
        } else {
            const uint2 w = *reinterpret_cast<const uint2*>(s);
            E::widen2(w.x, x[0], x[1]);
            E::widen2(w.y, x[2], x[3]);
        }
    }
};
struct ElemF16 : Elem16Widen<ElemF16> {
    typedef unsigned short T;
    __device__ static float load(const T* p, long long i) { return widen1(p[i]); }
    __device__ static float widen1(T x) { return __half2float(__ushort_as_half(x)); }
    // The two halves of a 32-bit word, low element first.
    __device__ static void widen2(unsigned u, float& lo, float& hi) {
        lo = widen1((unsigned short)(u & 0xFFFFu));
        hi = widen1((unsigned short)(u >> 16));
    }
    // IEEE binary32 -> binary16, round to nearest even, subnormals kept.
    __device__ static unsigned round_bits(float x) { return __half_as_ushort(__float2half_rn(x)); }
    __device__ static void store_bits(T* p, long long i, unsigned b) { p[i] = (unsigned short)b; }
    static constexpr unsigned NAN_BITS = 0x7E00u;
    __device__ static float maxt() { return 65504.0f; }
};
struct ElemBf16 : Elem16Widen<ElemBf16> {
    typedef unsigned short T;
    __device__ static float load(const T* p, long long i) { return widen1(p[i]); }
    __device__ static float widen1(T x) { return __uint_as_float((unsigned)x << 16); }
    // The two halves of a 32-bit word, low element first (a shift and a mask, no conversion).
    __device__ static void widen2(unsigned u, float& lo, float& hi) {
        lo = __uint_as_float(u << 16);
        hi = __uint_as_float(u & 0xFFFF0000u);
    }
    // §7: (b + 0x7FFF + ((b >> 16) & 1)) >> 16 on finite b, unsigned 32-bit.
    __device__ static unsigned round_bits(float x) {
        unsigned b = __float_as_uint(x);
        return (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
    }
    __device__ static void store_bits(T* p, long long i, unsigned b) { p[i] = (unsigned short)b; }
    static constexpr unsigned NAN_BITS = 0x7FC0u;
    __device__ static float maxt() { return __int_as_float(0x7F7F0000); }
};

// Round one finite output value, or write the canonical NaN where the row is poisoned (§7).
// The value of `x`, hidden from the optimiser: a mask that went through here cannot be turned
// back into a branch (e.g. by unswitching a loop on a loop-invariant data-derived flag).
__device__ __forceinline__ unsigned opaque(unsigned x) {
    asm volatile("" : "+r"(x));
    return x;
}

template <class E>
__device__ __forceinline__ void store_out(typename E::T* out, long long idx, float o, bool poisoned) {
    unsigned m = opaque(mask_of(poisoned));
    E::store_bits(out, idx, (E::NAN_BITS & m) | (E::round_bits(o) & ~m));
}

// Integer division of public indices (block and row numbers by shape values) in NB fixed
// shift-subtract steps, for n < 2^NB (udiv: any n): the compiler's `/` on a run-time divisor uses
// MUFU.RCP (and a CALL for 64 bits), which the audit forbids on this path. Used a few times per
// block or warp only; each step waits on the last, so fewer bits are a shorter chain.
template <int NB>
__device__ __forceinline__ unsigned udiv_bits(unsigned n, unsigned d) {
    unsigned q = 0u, r = 0u;
#pragma unroll
    for (int i = NB - 1; i >= 0; --i) {
        r = (r << 1) | ((n >> i) & 1u);
        const unsigned ge = mask_of(r >= d);
        r -= d & ge;
        q |= (1u << i) & ge;
    }
    return q;
}
__device__ __forceinline__ unsigned udiv(unsigned n, unsigned d) { return udiv_bits<32>(n, d); }

// One past the last key row i of batch b sees, by position (key length, causal and its
// alignment, numerics.md §1): public.
template <class PP>  // Params or DecParams
__device__ __forceinline__ int key_limit(const PP& P, int L, int i) {
    if (P.causal) {
        int lim = i + 1 + (P.top_left ? 0 : L - P.Sq);
        return min(max(lim, 0), L);
    }
    return L;
}

// The mask row (b, h, i) (§1: its head index counts query heads), i clamped to the tensor; null
// without a mask. mask_val clamps j, so every address is valid; callers combine the value with
// positional validity. Both depend on positions only.
template <class PP>
__device__ __forceinline__ const unsigned char* mask_row(const PP& P, int b, int h, int i) {
    if (!P.has_mask) return nullptr;  // a launch parameter, public
    int bi = P.mask_per_batch ? b : 0;
    int hm = P.mask_per_head ? P.Hq : 1;
    int hi = P.mask_per_head ? h : 0;
    i = min(i, P.Sq - 1);
    return P.mask + (((long long)bi * hm + hi) * P.Sq + i) * (long long)P.Skv;
}
// All ones where the mask says "attend" (or there is no mask), else zero.
// The address is formed unconditionally and passed through an empty asm: left to itself the
// compiler computes it under the has_mask predicate into registers that, when the predicate is
// false, still hold score values, and the audit's taint pass (which does not pair a predicated
// load with the predicated writes of its address) then sees a secret-dependent address.
template <class PP>
__device__ __forceinline__ unsigned mask_val(const PP& P, const unsigned char* row, int j) {
    const unsigned char* a = row + min(j, P.Skv - 1);
    asm volatile("" : "+l"(a));
    if (!P.has_mask) return 0xFFFFFFFFu;
    // __ldg: a global load (the asm hid the address space); the mask is read-only here.
    return mask_of(__ldg(a) != 0);  // a compare and a select, not a branch
}

// ------------------------------------------------------------------------------ §2 prepare

// The §2 preparation of one row, by one warp: sanitise, bad flag, row shift (when `scale`), and
// the prepared copy (columns D..DP-1 zero). `exists` false (padding rows past Skv): zeros, shift
// 0, no bad flag. Shared by the prepare kernel and the fast kernel's query rows, so that both
// produce the same bits by construction.
template <class E>
__device__ __forceinline__ void prepare_row(const typename E::T* src, bool exists, int D, int DP, bool scale,
                                            float* dst, int* shift_out, unsigned* bad_out) {
    const int lane = threadIdx.x & 31;
    unsigned bad = 0, emax = 0;
    if (exists) {
        for (int d = lane; d < D; d += 32) {
            float x = E::load(src, d);
            bad |= nonfinite_mask(x);
            emax = max(emax, expfield(sanitize(x)));
        }
    }
    // Integer max and OR are exact and order-free.
    for (int o = 16; o > 0; o >>= 1) {
        bad |= __shfl_xor_sync(0xFFFFFFFFu, bad, o);
        emax = max(emax, __shfl_xor_sync(0xFFFFFFFFu, emax, o));
    }
    const int shift = scale ? row_shift(emax) : 0;
    const float f = pow2(shift);
    for (int d = lane; d < DP; d += 32) {
        float x = 0.0f;
        if (exists && d < D) x = sanitize(E::load(src, d));
        dst[d] = scale ? __fmul_rn(x, f) : x;  // §2.5: one multiply per element
    }
    if (lane == 0) {
        if (shift_out) *shift_out = shift;
        *bad_out = bad != 0 ? 1u : 0u;
    }
}

// §2 for a row a warp holds in registers (lane l holds elements l + 32e, zeros past D): the
// operations of prepare_row — sanitise in place, the row's bad flag (0 or 1) and, when `scale`,
// its shift from the largest exponent field (0 otherwise), then one multiply per element. The
// integer max and OR over the warp are exact and order-free. Used where several rows' loads
// should be in flight at once: the K rows of prepare_kv_regs and the fast kernel's query rows.
template <int EPL>
__device__ __forceinline__ void prepare_regs(float (&x)[EPL], bool scale, int& shift, unsigned& bad) {
    unsigned b = 0, emax = 0;
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
        b |= nonfinite_mask(x[e]);
        x[e] = sanitize(x[e]);
        emax = max(emax, expfield(x[e]));
    }
    for (int o = 16; o > 0; o >>= 1) {
        b |= __shfl_xor_sync(0xFFFFFFFFu, b, o);
        emax = max(emax, __shfl_xor_sync(0xFFFFFFFFu, emax, o));
    }
    shift = scale ? row_shift(emax) : 0;
    bad = b != 0 ? 1u : 0u;
    if (scale) {
        const float f = pow2(shift);
#pragma unroll
        for (int e = 0; e < EPL; ++e) x[e] = __fmul_rn(x[e], f);  // §2.5: one multiply per element
    }
}

// prepare_row for a K row and a V row at once, for DP = 32 * EPL: each lane loads its EPL
// elements of both rows first (the loads overlap), then prepare_regs on each (V: sanitised only).
template <class E, int EPL>
__device__ __forceinline__ void prepare_kv_regs(const Params& P, const typename E::T* k, const typename E::T* v,
                                                bool exists, long long r) {
    const int lane = threadIdx.x & 31;
    float xk[EPL], xv[EPL];
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
        const int d = lane + 32 * e;
        const bool in = exists && d < P.D;  // position only
        xk[e] = in ? E::load(k, d) : 0.0f;
        xv[e] = in ? E::load(v, d) : 0.0f;
    }
    int shift, unused;
    unsigned badk, badv;
    prepare_regs<EPL>(xk, true, shift, badk);
    prepare_regs<EPL>(xv, false, unused, badv);
    float* dk = P.kp + r * P.DP;
    float* dv = P.vp + r * P.DP;
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
        dk[lane + 32 * e] = xk[e];
        dv[lane + 32 * e] = xv[e];
    }
    if (lane == 0) {
        P.sk[r] = shift;
        P.badk[r] = badk;
        P.badv[r] = badv;
    }
}

// One warp per row. prep_job = 0: rows of Q; 1: key rows, the warp preparing row j of K (scaled)
// and row j of V (sanitised, §2: no shift), padded to skv_pad rows per head (padding rows: zeros,
// shift 0, no bad flag). One launch for Q (when the generic kernel reads it or the device scan
// needs its flags), one for K and V, each a grid of its own rows and heads (until 2026-11-29 one
// launch covered both, blockIdx.z the tensor, sized by the larger of each: seven empty blocks in
// eight on a GQA decode; docs/perf.md, "Reject's scan"). Each case names its
// buffers directly: choosing pointers by an index would compile to a constant-bank load at a
// computed offset, which the audit cannot tell apart from a load of the public kv_lens. Blocks
// past a tensor's rows or heads leave at once (positions only).
template <class E>
__device__ void prepare(const Params& P) {
    typedef typename E::T T;
    const bool is_q = P.prep_job == 0;  // a launch fact: public
    const int j = (int)(blockIdx.x * (blockDim.x / 32) + (threadIdx.x / 32));
    const long long head = (long long)blockIdx.y + P.prep_head0;
    if (is_q) {
        if (j >= P.Sq || head >= (long long)P.B * P.Hq) return;  // a warp shares j: it leaves whole
        const long long r = head * P.Sq + j;
        const int b = (int)udiv((unsigned)head, (unsigned)P.Hq), h = (int)head - b * P.Hq;
        const T* src = (const T*)P.q + (b * P.q_bs + h * P.q_hs + j * P.q_ss);
        prepare_row<E>(src, true, P.D, P.DP, true, P.qp + r * P.DP, P.sq + r, P.badq + r);
    } else {
        if (j >= P.skv_pad || head >= (long long)P.B * P.Hkv) return;
        const long long r = head * P.skv_pad + j;
        const bool exists = j < P.Skv;
        const int b = (int)udiv((unsigned)head, (unsigned)P.Hkv), h = (int)head - b * P.Hkv;
        const long long jj = exists ? j : 0;
        const T* k = (const T*)P.k + (b * P.k_bs + h * P.k_hs + jj * P.k_ss);
        const T* v = (const T*)P.v + (b * P.v_bs + h * P.v_hs + jj * P.v_ss);
        // DP is public: the fast kernels' row widths hold a row in registers, so both rows' loads
        // are in flight at once; wider rows (the generic kernel) take the looping form.
        if (P.DP == 64) {
            prepare_kv_regs<E, 2>(P, k, v, exists, r);
        } else if (P.DP == 128) {
            prepare_kv_regs<E, 4>(P, k, v, exists, r);
        } else if (P.DP == 256) {
            prepare_kv_regs<E, 8>(P, k, v, exists, r);
        } else {
            prepare_row<E>(k, exists, P.D, P.DP, true, P.kp + r * P.DP, P.sk + r, P.badk + r);
            prepare_row<E>(v, exists, P.D, P.DP, false, P.vp + r * P.DP, nullptr, P.badv + r);
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) detattn_prepare_f32(const Params P) { prepare<ElemF32>(P); }
extern "C" __global__ void __launch_bounds__(256) detattn_prepare_f16(const Params P) { prepare<ElemF16>(P); }
extern "C" __global__ void __launch_bounds__(256) detattn_prepare_bf16(const Params P) { prepare<ElemBf16>(P); }

// ------------------------------------------------------------------------------ §7 Reject scan

// Two launches, no atomics (OR is exact and order-free): detattn_reject_part, REJECT_PARTS blocks,
// block x ORs the x-th slice of each flag array into flags[3 + 3x + t]; then detattn_reject_flags,
// one block, ORs those words into flags[0..3]. (Until 2026-11-29 one block read every flag: at a
// decode of B32, Hkv 8, 8 192 keys, 4.2 M words on one SM; docs/perf.md, "Reject's scan".)
// The strides are compile-time block sizes: with blockDim.x, Blackwell's ptxas computes a loop's
// trip count with a 64-bit division, a CALL to a slow path the audit forbids.
constexpr int REJECT_THREADS = 1024;
constexpr int REJECT_PARTS = 256;  // src/cuda/exact.rs sizes the flags buffer by it
__device__ __forceinline__ void reject_or(unsigned (&f)[3], unsigned* out) {
    __shared__ unsigned part[3][32];
    for (int t = 0; t < 3; ++t) {
        for (int o = 16; o > 0; o >>= 1) f[t] |= __shfl_xor_sync(0xFFFFFFFFu, f[t], o);
        if ((threadIdx.x & 31) == 0) part[t][threadIdx.x / 32] = f[t];
    }
    __syncthreads();
    if (threadIdx.x < 3) {
        unsigned x = 0;
        for (int w = 0; w < REJECT_THREADS / 32; ++w) x |= part[threadIdx.x][w];
        out[threadIdx.x] = x;
    }
}
extern "C" __global__ void __launch_bounds__(REJECT_THREADS) detattn_reject_part(const Params P) {
    const long long nq = (long long)P.B * P.Hq * P.Sq;
    const long long nkv = (long long)P.B * P.Hkv * P.skv_pad;
    const long long x = blockIdx.x;
    const long long sq = (nq + REJECT_PARTS - 1) / REJECT_PARTS, skv = (nkv + REJECT_PARTS - 1) / REJECT_PARTS;
    const long long q1 = min(nq, (x + 1) * sq), kv1 = min(nkv, (x + 1) * skv);
    unsigned f[3] = {0u, 0u, 0u};
    for (long long i = x * sq + threadIdx.x; i < q1; i += REJECT_THREADS) f[0] |= P.badq[i];
    for (long long i = x * skv + threadIdx.x; i < kv1; i += REJECT_THREADS) {
        f[1] |= P.badk[i];
        f[2] |= P.badv[i];
    }
    reject_or(f, P.flags + 3 + 3 * blockIdx.x);
}
extern "C" __global__ void __launch_bounds__(REJECT_THREADS) detattn_reject_flags(const Params P) {
    unsigned f[3] = {0u, 0u, 0u};
    const int parts = P.scan_parts > 0 ? P.scan_parts : REJECT_PARTS;  // public
    for (int i = threadIdx.x; i < parts; i += REJECT_THREADS)
        for (int t = 0; t < 3; ++t) f[t] |= P.flags[3 + 3 * i + t];
    reject_or(f, P.flags);
}

// ------------------------------------------------------------------------------ §7 Reject scan of a decode

// The decode kernels read the caller's rows and prepare none, so a decode under Reject scans Q, K
// and V where they lie instead of preparing them (until 2026-11-29 `prepare` wrote f32 copies of K
// and V for the scan alone: 1.9 ms of a 2 ms Python call at a decode of B32 on an H200;
// docs/perf.md, "Reject's scan"). Grid (scan_parts, 3), blockIdx.y the tensor (0 Q, 1 K, 2 V):
// block x ORs whether an element it reads is NaN or ±inf into flags[3 + 3x + y], which
// detattn_reject_flags then ORs as it does reject_part's words. A tensor's rows (b, h, s) are cut
// into chunks of scan_r{q,kv} rows of one head (src/cuda/exact.rs picks them, and scan_parts: at
// most REJECT_PARTS, at most the chunks of the larger tensor); block x takes chunks x, x +
// scan_parts, …, so a row's address needs no division. A warp reads rpw rows a
// pass, lane (sub, c) unit c of row sub, scan_passes() passes' loads issued together;
// a unit is 16 bytes where every row of the tensor is 16-byte aligned and whole units (scan_vec),
// else one element. Only the rows' D elements are read (never a padded layout's gaps). Shapes,
// strides and lengths choose what is read; the values only enter an OR of integers, which no
// order or grid can change.
constexpr int SCAN_T = 256;  // src/cuda/exact.rs mirrors it

// Nonzero when a 32-bit word of E elements (one f32, or two 16-bit ones) holds a NaN or ±inf, by
// bit operations alone: x is zero in exactly the fields of those elements (an all-ones exponent,
// whose mask is the canonical NaN without its quiet bit, XORed away), and with every field's top
// bit clear, (x - one a field) & ~x sets a field's top bit only where some field of x is zero
// (the classic zero-byte test, exact as a yes or no).
template <class E>
__device__ __forceinline__ unsigned scan_word(unsigned w) {
    constexpr bool F32 = sizeof(typename E::T) == 4;
    constexpr unsigned M = E::NAN_BITS & (E::NAN_BITS - 1u);
    constexpr unsigned MM = F32 ? M : M | (M << 16);
    constexpr unsigned ONE = F32 ? 1u : 0x00010001u, TOP = F32 ? 0x80000000u : 0x80008000u;
    const unsigned x = (w & MM) ^ MM;
    return (x - ONE) & ~x & TOP;
}

// The passes a warp's loads of one step cover: six 16-byte loads a lane in flight (four measured
// 53 µs for dec1's 134 MB, 2.5 TB/s: 2026-11-29, docs/perf.md; eight spill on sm_80), four 4- or
// 2-byte ones (the element-wise form, for layouts that are not whole aligned units).
template <bool VEC>
__host__ __device__ constexpr int scan_passes() { return VEC ? 6 : 4; }

template <class E, bool VEC>
__device__ __forceinline__ unsigned scan_tensor(const typename E::T* base, long long bs, long long hs, long long ss,
                                                int planes, int H, int S, int D, int rpc, unsigned parts) {
    typedef typename E::T T;
    constexpr int NP = scan_passes<VEC>();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int U = VEC ? D * (int)sizeof(T) / 16 : D;  // units a row
    int lg = 0;                                       // lanes a row: 2^lg, U rounded up, at most 32
    while (lg < 5 && (1 << lg) < U) ++lg;
    const int rpw = 32 >> lg;
    const int sub = lane >> lg, c0 = lane & ((1 << lg) - 1);
    const int ku = (U + 31) >> 5;  // units a lane a row, past 32 units
    const int step = NP * (SCAN_T / 32) * rpw;
    // Chunk ch is part `part` of head `plane` = (b, h); the block's next chunk is `parts`
    // further, i.e. dq heads and dr parts on (dq = db heads of H and dh more): stepped, not
    // divided again. blockIdx.x, parts, dq and plane0 are at most REJECT_PARTS = 256, so those
    // divisions take nine steps, not 32: a block's set-up before its first load is one chain.
    static_assert(REJECT_PARTS < 512, "nine-bit divisions");
    const unsigned cs = udiv((unsigned)(S + rpc - 1), (unsigned)rpc);  // chunks a head
    const unsigned nch = (unsigned)planes * cs;                         // < 2^31: the host's condition
    unsigned bad = 0u;
    if (blockIdx.x >= nch) return bad;  // no chunk for this block (position)
    const unsigned plane0 = udiv_bits<9>(blockIdx.x, cs), dq = udiv_bits<9>(parts, cs);
    const unsigned dr = parts - dq * cs, db = udiv_bits<9>(dq, (unsigned)H), dh = dq - db * H;
    unsigned part = blockIdx.x - plane0 * cs, b = udiv_bits<9>(plane0, (unsigned)H), h = plane0 - b * H;
#pragma unroll 1
    for (unsigned ch = blockIdx.x; ch < nch; ch += parts) {
        const T* pb = base + ((long long)b * bs + (long long)h * hs);
        const int s0 = (int)part * rpc, s1 = min(S, s0 + rpc);
#pragma unroll 1
        for (int sb = s0; sb < s1; sb += step) {
#pragma unroll 1
            for (int k = 0; k < ku; ++k) {
                const int c = c0 + 32 * k;
                // Every load is made, at a row and unit clamped into the chunk's rows and the
                // row's units, and what a pass past them read is masked off: no address computed
                // under a predicate (ptxas then merged loaded values into address registers, which
                // the audit cannot tell from a secret address).
                const int s = sb + warp * rpw + sub, cc = min(c, U - 1);
                if constexpr (VEC) {
                    uint4 w[NP];
#pragma unroll
                    for (int p = 0; p < NP; ++p) {
                        const int sp = min(s + p * rpw * (SCAN_T / 32), s1 - 1);
                        w[p] = reinterpret_cast<const uint4*>(pb + sp * ss)[cc];
                    }
#pragma unroll
                    for (int p = 0; p < NP; ++p) {
                        const unsigned live = mask_of(s + p * rpw * (SCAN_T / 32) < s1 && c < U);  // position
                        bad |= (scan_word<E>(w[p].x) | scan_word<E>(w[p].y) | scan_word<E>(w[p].z) |
                                scan_word<E>(w[p].w)) & live;
                    }
                } else {
                    float x[NP];
#pragma unroll
                    for (int p = 0; p < NP; ++p) x[p] = E::load(pb + min(s + p * rpw * (SCAN_T / 32), s1 - 1) * ss, cc);
#pragma unroll
                    for (int p = 0; p < NP; ++p)
                        bad |= nonfinite_mask(x[p]) & mask_of(s + p * rpw * (SCAN_T / 32) < s1 && c < U);
                }
            }
        }
        part += dr;
        const unsigned carry = part >= cs ? 1u : 0u;
        part -= carry * cs;
        h += dh + carry;
        b += db;
        if (h >= (unsigned)H) {  // public
            h -= H;
            ++b;
        }
    }
    return bad;
}

template <class E>
__device__ __forceinline__ void scan(const Params& P) {
    typedef typename E::T T;
    const int t = (int)blockIdx.y;  // the tensor: a launch fact
    // Each tensor's fields named directly (see prepare: no pointer chosen by an index).
    const void* base = P.q;
    long long bs = P.q_bs, hs = P.q_hs, ss = P.q_ss;
    int h = P.Hq, s = P.Sq, rpc = P.scan_rq;
    if (t == 1) {
        base = P.k;
        bs = P.k_bs, hs = P.k_hs, ss = P.k_ss;
        h = P.Hkv, s = P.Skv, rpc = P.scan_rkv;
    } else if (t == 2) {
        base = P.v;
        bs = P.v_bs, hs = P.v_hs, ss = P.v_ss;
        h = P.Hkv, s = P.Skv, rpc = P.scan_rkv;
    }
    unsigned bad;
    if ((P.scan_vec >> t) & 1)
        bad = scan_tensor<E, true>((const T*)base, bs, hs, ss, P.B * h, h, s, P.D, rpc, (unsigned)P.scan_parts);
    else
        bad = scan_tensor<E, false>((const T*)base, bs, hs, ss, P.B * h, h, s, P.D, rpc, (unsigned)P.scan_parts);
    __shared__ unsigned part[SCAN_T / 32];
    for (int o = 16; o > 0; o >>= 1) bad |= __shfl_xor_sync(0xFFFFFFFFu, bad, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = bad;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned x = 0u;
#pragma unroll
        for (int w = 0; w < SCAN_T / 32; ++w) x |= part[w];
        P.flags[3 + 3 * blockIdx.x + t] = x != 0u ? 1u : 0u;
    }
}

extern "C" __global__ void __launch_bounds__(SCAN_T) detattn_scan_f32(const Params P) { scan<ElemF32>(P); }
extern "C" __global__ void __launch_bounds__(SCAN_T) detattn_scan_f16(const Params P) { scan<ElemF16>(P); }
extern "C" __global__ void __launch_bounds__(SCAN_T) detattn_scan_bf16(const Params P) { scan<ElemBf16>(P); }

// ------------------------------------------------------------------------------ §3-§5 fast path

// Threads: NT = 16 key/column lanes (tx, the low 4 bits of the thread index) x NT/16 row lanes
// (ty). Scores: thread (ty, tx) owns rows ty + RS*k (RS = NT/16, k < RM = BM/RS) and keys
// tx + 16c (c < 4) of the tile: RM*4 chains side by side, each sequential in d (§3).
// Values: the same thread owns the same rows and columns 64c + 4tx + e (c < DP/64, e < 4); so the
// row's softmax state (m, alpha, bad) lives in the registers of the threads that need it.
// l (§4): one sequential chain per row, run by thread `row` (thread index == row, row < BM).
// Why these shapes: a 16-byte shared load costs a warp four wavefronts whatever its broadcast, and
// the SM serves one wavefront per clock against four warp FMAs, so the kernel is bound by the words
// each thread loads per FMA, (RM + 4)/(4 RM) for the scores and (RM + 4 NC)/(4 RM NC) for the
// values: many rows per thread (Nsight Compute on the 256-thread, 4-row layout: L1 wavefronts 83%
// busy, FMA pipe 50%). The instantiations below choose BM and NT per head dim.

template <int DP, int BM, bool KV_SHARED>
struct Smem {
    static constexpr int QS = DP + 4;       // padded row strides (floats): conflict-free float4 reads
    static constexpr int PS = TILE + 4;
    static constexpr int Q_OFF = 0;
    static constexpr int K_OFF = Q_OFF + BM * QS;
    // KV_SHARED: V is staged into K's buffer once the scores are done (one buffer, two loads).
    static constexpr int V_OFF = KV_SHARED ? K_OFF : K_OFF + TILE * QS;
    static constexpr int P_OFF = K_OFF + (KV_SHARED ? 1 : 2) * TILE * QS;
    static constexpr int A_OFF = P_OFF + BM * PS;
    static constexpr int L_OFF = A_OFF + BM;
    static constexpr int SK_OFF = L_OFF + BM;
    static constexpr int BAD_OFF = SK_OFF + TILE;   // bad flags of the tile's K rows
    static constexpr int BADV_OFF = BAD_OFF + TILE; // and of its V rows
    static constexpr int SQ_OFF = BADV_OFF + TILE;  // row shifts of the block's query rows
    static constexpr int BADQ_OFF = SQ_OFF + BM;    // and their bad flags
    static constexpr int FLOATS = BADQ_OFF + BM;
    static constexpr int BYTES = FLOATS * 4;
};

// Asynchronous global -> shared copies (sm_80+ cp.async: LDGSTS in SASS). They move bytes only;
// no arithmetic, so they cannot change a bit of the result. wait<N>: all but the N most recent
// committed groups have landed (for this thread; a barrier then publishes them to the block).
__device__ __forceinline__ void cp_async16(void* s, const void* g) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_async4(void* s, const void* g) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(s);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(a), "l"(g) : "memory");
}
// cp_async16 that copies the 16 bytes when `full` and otherwise writes 16 zero bytes and reads
// nothing (src-size 0); `g` must still be a valid address.
__device__ __forceinline__ void cp_async16z(void* s, const void* g, bool full) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(s);
    const unsigned n = full ? 16u : 0u;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(g), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <int DP, int QS, int NT>
__device__ __forceinline__ void copy_rows_async(float* s, const float* g, int rows) {
    const int per_row = DP / 4;
    const int n = rows * per_row;
    for (int e = threadIdx.x; e < n; e += NT) {
        int row = e / per_row, c4 = e % per_row;
        cp_async16(s + row * QS + c4 * 4, g + (long long)row * DP + c4 * 4);
    }
}

// Copy `rows` rows of DP floats (global, contiguous) into shared memory with row stride QS.
template <int DP, int QS, int NT>
__device__ __forceinline__ void copy_rows(float* s, const float* g, int rows) {
    const int per_row = DP / 4;
    const int n = rows * per_row;
    for (int e = threadIdx.x; e < n; e += NT) {
        int row = e / per_row, c4 = e % per_row;
        float4 x = *reinterpret_cast<const float4*>(g + (long long)row * DP + c4 * 4);
        *reinterpret_cast<float4*>(s + row * QS + c4 * 4) = x;
    }
}

// The max of each of a thread's RM rows over the 16 tx lanes of the row (lanes differing in their
// low 4 bits), in every one of them. Max is exact, so the butterfly's order does not matter.
template <int RM>
__device__ __forceinline__ void row_max16(float (&mt)[RM]) {
#pragma unroll
    for (int o = 8; o > 0; o >>= 1)
#pragma unroll
        for (int k = 0; k < RM; ++k) mt[k] = fmaxf(mt[k], __shfl_xor_sync(0xFFFFFFFFu, mt[k], o));
}

template <class E, int DP, int BM, int NT, bool KV_SHARED>
__device__ void exact_fast(const Params& P) {
    typedef Smem<DP, BM, KV_SHARED> S;
    constexpr int RS = NT / 16;  // row stride between a thread's rows
    constexpr int RM = BM / RS;
    static_assert(NT % 32 == 0 && BM % RS == 0 && NT >= TILE && NT >= BM, "tile shape");
    constexpr int NC = DP / 64;
    extern __shared__ float4 smem4[];
    float* sm = reinterpret_cast<float*>(smem4);
    float* Qs = sm + S::Q_OFF;
    float* Ks = sm + S::K_OFF;
    float* Vs = sm + S::V_OFF;
    float* Ps = sm + S::P_OFF;
    float* As = sm + S::A_OFF;
    float* Ls = sm + S::L_OFF;
    int* skS = reinterpret_cast<int*>(sm + S::SK_OFF);
    unsigned* badS = reinterpret_cast<unsigned*>(sm + S::BAD_OFF);
    unsigned* badvS = reinterpret_cast<unsigned*>(sm + S::BADV_OFF);

    const int tid = threadIdx.x;
    const int tx = tid & 15, ty = tid >> 4;
    const int warp = tid >> 5, lane = tid & 31;
    const int nrb = (P.Sq + BM - 1) / BM;
    // Grid: x = row blocks of one head, y = (b, h) pairs (offset bh0 when the host splits).
    const int bh = P.bh0 + (int)blockIdx.y;
    // Heaviest row blocks first (causal: the last rows see the most keys). Position only.
    const int rb = nrb - 1 - (int)blockIdx.x;
    const int b = (int)udiv((unsigned)bh, (unsigned)P.Hq), h = bh - b * P.Hq;
    const int bhkv = b * P.Hkv + (int)udiv((unsigned)h, (unsigned)P.group);
    const int i0 = rb * BM;
    const int L = P.kv_lens[b];
    const int block_limit = key_limit(P, L, min(i0 + BM - 1, P.Sq - 1));
    const int ntiles = (block_limit + TILE - 1) / TILE;

    // §2 for the block's query rows, here rather than in a launch of its own: warp w prepares
    // rows w, w + NT/32, ... by prepare_regs (the operations of prepare_row; zero columns
    // D..DP-1). Every lane first loads all its elements of all its rows, so that the rows' loads
    // overlap. Rows past Sq repeat the last row and are not written.
    int* sqS = reinterpret_cast<int*>(sm + S::SQ_OFF);
    unsigned* badqS = reinterpret_cast<unsigned*>(sm + S::BADQ_OFF);
    {
        constexpr int RPW = BM / (NT / 32), EPL = DP / 32;
        static_assert(BM % (NT / 32) == 0 && DP % 32 == 0, "whole rows per warp, whole lanes per row");
        float x[RPW][EPL];
#pragma unroll
        for (int r = 0; r < RPW; ++r) {
            const int i = min(i0 + warp + (NT / 32) * r, P.Sq - 1);
            const typename E::T* src = (const typename E::T*)P.q + (b * P.q_bs + h * P.q_hs + i * P.q_ss);
#pragma unroll
            for (int e = 0; e < EPL; ++e) {
                const int d = lane + 32 * e;
                x[r][e] = d < P.D ? E::load(src, d) : 0.0f;  // position only
            }
        }
#pragma unroll
        for (int r = 0; r < RPW; ++r) {
            int shift;
            unsigned bad;
            prepare_regs<EPL>(x[r], true, shift, bad);
            const int row = warp + (NT / 32) * r;
#pragma unroll
            for (int e = 0; e < EPL; ++e) Qs[row * S::QS + lane + 32 * e] = x[r][e];
            if (lane == 0) {
                sqS[row] = shift;
                badqS[row] = bad;
            }
        }
    }
    __syncthreads();

    // Row indices and key limits are recomputed where needed (cheap integer work, general tiles
    // and the epilogue only) rather than held in registers across the tile loop.
    int sqr[RM];
    float m[RM];
    unsigned badr[RM];
    float acc[RM][NC * 4];
#pragma unroll
    for (int k = 0; k < RM; ++k) {
        sqr[k] = sqS[ty + RS * k];
        m[k] = -DA_FLT_MAX;
        badr[k] = 0u;
#pragma unroll
        for (int c = 0; c < NC * 4; ++c) acc[k][c] = 0.0f;
    }
    float lval = 0.0f;  // the l chain of row `tid` (tid < BM)
    // Tiles 0..nfull-1 are valid for every row of the block by position (the block's first row
    // sees the fewest keys) and there is no mask: public facts, so branching on them is allowed.
    const int nfull = P.has_mask ? 0 : key_limit(P, L, i0) / TILE;

    const long long kv0 = (long long)bhkv * P.skv_pad;
    // Separate K and V buffers: a two-stage pipeline. K of tile t+1 (with its shifts and bad
    // flags) is fetched while tile t's values are accumulated, V of tile t+1 while its scores
    // are computed. One buffer (KV_SHARED): plain loads, one after the other.
    auto issue_k = [&](int t) {
        const long long j = kv0 + (long long)t * TILE;
        copy_rows_async<DP, S::QS, NT>(Ks, P.kp + j * DP, TILE);
        if (tid < TILE) {
            cp_async4(skS + tid, P.sk + j + tid);
            cp_async4(badS + tid, P.badk + j + tid);
            cp_async4(badvS + tid, P.badv + j + tid);
        }
    };
    if (!KV_SHARED && ntiles > 0) {
        issue_k(0);
        cp_commit();
        copy_rows_async<DP, S::QS, NT>(Vs, P.vp + kv0 * DP, TILE);
        cp_commit();
    }
    for (int t = 0; t < ntiles; ++t) {
        const int j0 = t * TILE;
        if (KV_SHARED) {
            copy_rows<DP, S::QS, NT>(Ks, P.kp + (kv0 + j0) * DP, TILE);
            if (tid < TILE) {
                skS[tid] = P.sk[kv0 + j0 + tid];
                badS[tid] = P.badk[kv0 + j0 + tid];
                badvS[tid] = P.badv[kv0 + j0 + tid];
            }
        } else {
            cp_wait<1>();  // K(t) landed; V(t) may still be in flight
        }
        __syncthreads();

        // §3: RM x 4 chains, each sequential in d.
        float s[RM][4];
#pragma unroll
        for (int k = 0; k < RM; ++k)
#pragma unroll
            for (int c = 0; c < 4; ++c) s[k][c] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < DP; d += 4) {
            float4 kv[4];
#pragma unroll
            for (int c = 0; c < 4; ++c) kv[c] = *reinterpret_cast<const float4*>(Ks + (tx + 16 * c) * S::QS + d);
#pragma unroll
            for (int k = 0; k < RM; ++k) {
                const float4 qv = *reinterpret_cast<const float4*>(Qs + (ty + RS * k) * S::QS + d);
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    s[k][c] = __fmaf_rn(qv.x, kv[c].x, s[k][c]);
                    s[k][c] = __fmaf_rn(qv.y, kv[c].y, s[k][c]);
                    s[k][c] = __fmaf_rn(qv.z, kv[c].z, s[k][c]);
                    s[k][c] = __fmaf_rn(qv.w, kv[c].w, s[k][c]);
                }
            }
        }

        // §4: finish scores, select by validity, tile max, weights.
        // Two copies of the same operations: a tile whose 64 keys are all valid for every row of
        // the block (by position, and no mask: public launch facts) needs no validity selection,
        // and its bad flags are the same for every row; any other tile takes the general copy. The
        // selections the full copy leaves out are identities there (sel(true, x, _) = x,
        // e & ~0 = e), so the bits are those of the general copy. The full copy also runs its
        // RM rows phase by phase (all finishes, then the RM shuffle reductions interleaved, then
        // the weights), so that the rows' dependency chains overlap; every value still goes
        // through exactly the operations of the general copy.
        if (t < nfull) {
            // Every key of the tile is valid for every row: one OR of the four keys' flags,
            // then the same word into each row's flags (OR is exact and order-free).
            unsigned bt = 0u;
            int skc[4];
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                bt |= badS[tx + 16 * c] | badvS[tx + 16 * c];
                skc[c] = skS[tx + 16 * c];
            }
            float mt[RM];
#pragma unroll
            for (int k = 0; k < RM; ++k) {
                badr[k] |= bt;
                mt[k] = -DA_FLT_MAX;
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    s[k][c] = score_finish(s[k][c], P.scale, sqr[k], skc[c]);  // xm = x here
                    mt[k] = fmaxf(mt[k], s[k][c]);
                }
            }
            row_max16<RM>(mt);
#pragma unroll
            for (int k = 0; k < RM; ++k) {
                const float mnew = __fadd_rn(fmaxf(m[k], mt[k]), 0.0f);
                const float alpha = detattn::exp(clamp_z(__fsub_rn(m[k], mnew)));
                float* prow = Ps + (ty + RS * k) * S::PS;
#pragma unroll
                for (int c = 0; c < 4; ++c)
                    prow[tx + 16 * c] = __fmul_rn(detattn::exp(clamp_z(__fsub_rn(s[k][c], mnew))), DA_W);
                if (tx == 0) As[ty + RS * k] = alpha;
                m[k] = mnew;
#pragma unroll
                for (int c = 0; c < NC * 4; ++c) acc[k][c] = __fmul_rn(acc[k][c], alpha);
            }
        } else {
            // Phase by phase as the full copy (so that the rows' shuffle reductions overlap):
            // finish and select every score, then the max, then the weights. A key's validity is
            // kept as one bit per (row, key) between the phases.
            float mt[RM];
            unsigned vbits[RM];
#pragma unroll
            for (int k = 0; k < RM; ++k) {
                // The mask row and key limit, recomputed here (general tiles only) rather than
                // kept in registers across the tile loop: exact64 has none to spare.
                const int ic = min(i0 + ty + RS * k, P.Sq - 1);
                const unsigned char* mrow = mask_row(P, b, h, ic);
                const int lim = key_limit(P, L, ic);
                mt[k] = -DA_FLT_MAX;
                vbits[k] = 0u;
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int jt = tx + 16 * c, j = j0 + jt;
                    const float x = score_finish(s[k][c], P.scale, sqr[k], skS[jt]);
                    const unsigned vm = mask_of(j < lim) & mask_val(P, mrow, j);
                    s[k][c] = sel(vm != 0u, x, -DA_FLT_MAX);  // xm
                    badr[k] |= vm & (badS[jt] | badvS[jt]);
                    vbits[k] |= (vm & 1u) << c;
                    mt[k] = fmaxf(mt[k], s[k][c]);
                }
            }
            row_max16<RM>(mt);
#pragma unroll
            for (int k = 0; k < RM; ++k) {
                const float mnew = __fadd_rn(fmaxf(m[k], mt[k]), 0.0f);
                const float alpha = detattn::exp(clamp_z(__fsub_rn(m[k], mnew)));
                float* prow = Ps + (ty + RS * k) * S::PS;
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const unsigned vm = 0u - ((vbits[k] >> c) & 1u);
                    float e = __fmul_rn(detattn::exp(clamp_z(__fsub_rn(s[k][c], mnew))), DA_W);
                    prow[tx + 16 * c] = __uint_as_float(__float_as_uint(e) & vm);
                }
                if (tx == 0) As[ty + RS * k] = alpha;
                m[k] = mnew;
#pragma unroll
                for (int c = 0; c < NC * 4; ++c) acc[k][c] = __fmul_rn(acc[k][c], alpha);
            }
        }
        if (KV_SHARED) {
            __syncthreads();
            copy_rows<DP, S::QS, NT>(Vs, P.vp + (kv0 + j0) * DP, TILE);
            __syncthreads();
        } else {
            cp_wait<0>();  // V(t) landed
            __syncthreads();
            // Every thread is past its reads of Ks and skS/badS: fetch tile t+1's K.
            if (t + 1 < ntiles) issue_k(t + 1);
            cp_commit();
        }

        // §4: l chain (one lane per row) and acc_d = fma(p_j, v_jd, acc_d) in increasing j.
        if (tid < BM) {
            lval = __fmul_rn(lval, As[tid]);
            const float* prow = Ps + tid * S::PS;
#pragma unroll
            for (int j = 0; j < TILE; j += 4) {
                float4 p4 = *reinterpret_cast<const float4*>(prow + j);
                lval = __fadd_rn(lval, p4.x);
                lval = __fadd_rn(lval, p4.y);
                lval = __fadd_rn(lval, p4.z);
                lval = __fadd_rn(lval, p4.w);
            }
        }
        // Unrolled by two: the next step's weight and value loads are issued while this step's
        // FMAs run (the FMAs and their order per accumulator are the same as without unrolling).
#pragma unroll 2
        for (int j = 0; j < TILE; j += 4) {
            float4 p4[RM];
#pragma unroll
            for (int k = 0; k < RM; ++k) p4[k] = *reinterpret_cast<const float4*>(Ps + (ty + RS * k) * S::PS + j);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float* vrow = Vs + (j + e) * S::QS + 4 * tx;
#pragma unroll
                for (int c = 0; c < NC; ++c) {
                    float4 v4 = *reinterpret_cast<const float4*>(vrow + 64 * c);
#pragma unroll
                    for (int k = 0; k < RM; ++k) {
                        float p = e == 0 ? p4[k].x : e == 1 ? p4[k].y : e == 2 ? p4[k].z : p4[k].w;
                        acc[k][4 * c + 0] = __fmaf_rn(p, v4.x, acc[k][4 * c + 0]);
                        acc[k][4 * c + 1] = __fmaf_rn(p, v4.y, acc[k][4 * c + 1]);
                        acc[k][4 * c + 2] = __fmaf_rn(p, v4.z, acc[k][4 * c + 2]);
                        acc[k][4 * c + 3] = __fmaf_rn(p, v4.w, acc[k][4 * c + 3]);
                    }
                }
            }
        }
        __syncthreads();
        if (!KV_SHARED) {
            // Every thread is past its reads of Vs: fetch tile t+1's V.
            if (t + 1 < ntiles) copy_rows_async<DP, S::QS, NT>(Vs, P.vp + (kv0 + j0 + TILE) * DP, TILE);
            cp_commit();
        }
    }

    // §5, §7.
    // (opaque: the address is formed here, not hoisted above the tile loop, where exact64 would
    // have to spill it.)
    if (tid < BM) (sm + S::L_OFF)[opaque((unsigned)tid)] = lval;
    __syncthreads();
    typename E::T* out = (typename E::T*)P.out;
    const float maxt = E::maxt();
#pragma unroll
    for (int k = 0; k < RM; ++k) {
        unsigned bad = badr[k];
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) bad |= __shfl_xor_sync(0xFFFFFFFFu, bad, o);  // OR: exact, order-free
        const int irow = i0 + ty + RS * k;
        if (irow >= P.Sq) continue;  // padding rows of the last block: position only
        typename E::T* orow = out + (b * P.o_bs + h * P.o_hs + irow * P.o_ss);
        const bool poisoned = (P.propagate != 0) & ((bad | badqS[ty + RS * k]) != 0u);
        const float ls = l_safe(Ls[ty + RS * k]);
        const float rl = recip(ls);
        if (P.lse != nullptr && tx == 0)  // a launch fact
            P.lse[b * P.lse_bs + h * P.lse_hs + irow] = row_lse(m[k], Ls[ty + RS * k], poisoned);
#pragma unroll
        for (int c = 0; c < NC; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int d = 64 * c + 4 * tx + e;
                if (d < P.D) store_out<E>(orow, d, finalize_r(acc[k][4 * c + e], ls, rl, maxt), poisoned);
            }
    }
}

// The tile shapes, one per head-dim bound: rows per block (BM), threads (NT), blocks per SM the
// registers must allow (MINB: a cap of 65536 / (NT * MINB) registers), and whether K and V share
// one shared-memory buffer (staged one after the other instead of side by side). Shared memory
// decides the rest: D <= 64: 3 blocks of 71 KB per SM; D <= 128: 2 blocks of 107 KB (sm_86,
// sm_89 and sm_120 give a block at most 99 KB: one buffer there, 73 KB); D <= 256: one buffer, 16
// rows. The host reads them from detattn_exact_cfg below (src/cuda/exact.rs). No bit depends on them.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 890 || __CUDA_ARCH__ == 1200)
constexpr bool DA_SHARED128 = true;
#else
constexpr bool DA_SHARED128 = false;
#endif
template <int DP>
struct FastCfg;
// D <= 64: three blocks per SM need 71 KB each, which only sm_90 and sm_100 (228 KB per SM) hold;
// elsewhere the register cap of three blocks (170) would only cost spills (sm_80), so two.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900 || __CUDA_ARCH__ == 1000)
constexpr int DA_MINB64 = 3;
#else
constexpr int DA_MINB64 = 2;
#endif
template <>
struct FastCfg<64> {
    static constexpr int BM = 64, NT = 128, MINB = DA_MINB64;
    static constexpr bool SHARED = false;
};
template <>
struct FastCfg<128> {
    static constexpr int BM = 48, NT = 128, MINB = 2;
    static constexpr bool SHARED = DA_SHARED128;
};
template <>
struct FastCfg<256> {
    static constexpr int BM = 16, NT = 256, MINB = 1;
    static constexpr bool SHARED = true;
};

#define DA_FAST(DP, NAME, E)                                                                          \
    extern "C" __global__ void __launch_bounds__(FastCfg<DP>::NT, FastCfg<DP>::MINB) NAME(const Params P) { \
        exact_fast<E, DP, FastCfg<DP>::BM, FastCfg<DP>::NT, FastCfg<DP>::SHARED>(P);                 \
    }
DA_FAST(64, detattn_exact64_f32, ElemF32)
DA_FAST(64, detattn_exact64_f16, ElemF16)
DA_FAST(64, detattn_exact64_bf16, ElemBf16)
DA_FAST(128, detattn_exact128_f32, ElemF32)
DA_FAST(128, detattn_exact128_f16, ElemF16)
DA_FAST(128, detattn_exact128_bf16, ElemBf16)
DA_FAST(256, detattn_exact256_f32, ElemF32)
DA_FAST(256, detattn_exact256_f16, ElemF16)
DA_FAST(256, detattn_exact256_bf16, ElemBf16)

// {BM, NT, dynamic shared bytes, K and V in one buffer} of the fast kernels for D <= 64, 128, 256.
#define DA_CFG_ROW(DP) \
    { FastCfg<DP>::BM, FastCfg<DP>::NT, Smem<DP, FastCfg<DP>::BM, FastCfg<DP>::SHARED>::BYTES, FastCfg<DP>::SHARED ? 1 : 0 }
extern "C" __constant__ int detattn_exact_cfg[3][4] = {DA_CFG_ROW(64), DA_CFG_ROW(128), DA_CFG_ROW(256)};

// ------------------------------------------------------------------------------ any head_dim

// One block of 64 threads per query row (b, h, i); thread j of the block owns key j of each
// tile (its score chain, sequential in d) and columns d = tid + 64n of the accumulator, which
// lives in the global scratch P.acc (each element touched by one thread only).
constexpr int GT = 64;

template <class E>
__device__ void exact_generic(const Params& P) {
    __shared__ float Ps[TILE];
    __shared__ float red[2];
    __shared__ unsigned redb[2];
    const int tid = threadIdx.x;
    // Grid: x = query rows, y = (b, h) pairs (offset bh0 when the host splits).
    const int i = (int)blockIdx.x;
    const int bh = P.bh0 + (int)blockIdx.y;
    const long long gi = (long long)bh * P.Sq + i;
    const int b = (int)udiv((unsigned)bh, (unsigned)P.Hq), h = bh - b * P.Hq;
    const int bhkv = b * P.Hkv + (int)udiv((unsigned)h, (unsigned)P.group);
    const int L = P.kv_lens[b];
    const int lim = key_limit(P, L, i);
    const int ntiles = (lim + TILE - 1) / TILE;
    const int DP = P.DP;
    const float* qrow = P.qp + gi * DP;
    float* arow = P.acc + gi * DP;
    const int sq = P.sq[gi];
    const unsigned char* mrow = mask_row(P, b, h, i);
    for (int d = tid; d < DP; d += GT) arow[d] = 0.0f;
    float m = -DA_FLT_MAX, l = 0.0f;
    unsigned bad = 0u;
    const long long kv0 = (long long)bhkv * P.skv_pad;
    for (int t = 0; t < ntiles; ++t) {
        const int j = t * TILE + tid;
        const float* krow = P.kp + (kv0 + j) * DP;
        float s = 0.0f;
        for (int d = 0; d < DP; ++d) s = __fmaf_rn(qrow[d], krow[d], s);
        const float x = score_finish(s, P.scale, sq, P.sk[kv0 + j]);
        const unsigned vm = mask_of(j < lim) & mask_val(P, mrow, j);
        const float xm = sel(vm != 0u, x, -DA_FLT_MAX);
        bad |= vm & (P.badk[kv0 + j] | P.badv[kv0 + j]);
        float mt = xm;
        for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xFFFFFFFFu, mt, o));
        if ((tid & 31) == 0) red[tid / 32] = mt;
        __syncthreads();
        mt = fmaxf(red[0], red[1]);
        const float mnew = __fadd_rn(fmaxf(m, mt), 0.0f);
        const float alpha = detattn::exp(clamp_z(__fsub_rn(m, mnew)));
        const float e = __fmul_rn(detattn::exp(clamp_z(__fsub_rn(xm, mnew))), DA_W);
        Ps[tid] = __uint_as_float(__float_as_uint(e) & vm);
        m = mnew;
        __syncthreads();
        const float* vt = P.vp + (kv0 + (long long)t * TILE) * DP;
        for (int d = tid; d < DP; d += GT) {
            float a = __fmul_rn(arow[d], alpha);
            for (int jj = 0; jj < TILE; ++jj) a = __fmaf_rn(Ps[jj], vt[(long long)jj * DP + d], a);
            arow[d] = a;
        }
        // Every thread runs the same l chain on the same values (so no broadcast is needed).
        l = __fmul_rn(l, alpha);
        for (int jj = 0; jj < TILE; ++jj) l = __fadd_rn(l, Ps[jj]);
        __syncthreads();
    }
    // §10 wants the row's final m at the end; through shared memory rather than a register kept
    // live (that spilled under this kernel's 64-register cap). Every thread holds the same m.
    __shared__ float mfin;
    if (tid == 0) mfin = m;
    for (int o = 16; o > 0; o >>= 1) bad |= __shfl_xor_sync(0xFFFFFFFFu, bad, o);
    if ((tid & 31) == 0) redb[tid / 32] = bad;
    __syncthreads();
    bad = redb[0] | redb[1] | P.badq[gi];
    const bool poisoned = (P.propagate != 0) & (bad != 0u);
    const float ls = l_safe(l);
    const float rl = recip(ls);
    typename E::T* orow = (typename E::T*)P.out + (b * P.o_bs + h * P.o_hs + i * P.o_ss);
    for (int d = tid; d < P.D; d += GT) store_out<E>(orow, d, finalize_r(arow[d], ls, rl, E::maxt()), poisoned);
    if (P.lse != nullptr && tid == 0)  // a launch fact
        P.lse[b * P.lse_bs + h * P.lse_hs + i] = row_lse(mfin, l, poisoned);
}

// GEN_MINB: a cap of 85 registers (80 used). Without one, sm_120's ptxas aimed at full occupancy
// with 40 registers and spilled 16 bytes; with minBlocks 1 alone it took 254. A cap of 64 (16
// blocks) spilled nowhere until the §10 log-sum-exp write, which then spilled 8 bytes on sm_80..90.
constexpr int GEN_MINB = 12;
extern "C" __global__ void __launch_bounds__(GT, GEN_MINB) detattn_exact_generic_f32(const Params P) { exact_generic<ElemF32>(P); }
extern "C" __global__ void __launch_bounds__(GT, GEN_MINB) detattn_exact_generic_f16(const Params P) { exact_generic<ElemF16>(P); }
extern "C" __global__ void __launch_bounds__(GT, GEN_MINB) detattn_exact_generic_bf16(const Params P) { exact_generic<ElemBf16>(P); }

// ------------------------------------------------------------------------------ decode (G·Sq ≤ 16)

// Decode spreads one KV head's work over the whole GPU without changing a bit (numerics.md §4,
// "Where the work may run"): every score depends only on its q and k rows, so `dec_scores` computes
// them anywhere, one block per (tile of keys, KV head), with each tile's maximum; the prefix
// maximum of the tile maxima is exact, so `dec_weights` recomputes it in any block and turns the
// scores into the weights p and the tiles' alpha, once; and the chains of §4 are one per (row,
// column d), independent across d, so `dec_values` runs them in blocks of 8 or 128 columns (and
// the rows' l chains in one more block), each chain sequential over the keys as §4 says.
// `dec_finish` divides and writes. The rows of one
// launch are the R = group·Sq query rows that read one KV head (r = hg·Sq + i, query head
// kvh·group + hg), R ≤ DEC_R; the host uses these kernels only then.
//
// Scratch, per KV head (bkv = b·Hkv + kvh), all written before being read:
//   x   [R][xpad]   the score of §3 where the key is valid for the row, else DEC_INVALID (a NaN
//                   pattern no score has: §3 saturates to finite values); then (dec_weights) p
//   tm  [R][xpad/64] each tile's maximum of xm (§4);  al [R][xpad/64] each tile's alpha
//   bk  [R][xpad/64] 1 where a valid key of the tile has a bad K row (§7)
//   acc [R][D], l [R]  the chains' final values;  bv [R][nslice]  valid keys with a bad V slice
// xpad is Skv rounded up to DEC_KT keys; keys past Skv are invalid for every row.

constexpr int DEC_R = 16;          // rows per KV head at most
constexpr int DEC_NT = 256;        // threads of dec_scores_wide and dec_weights
constexpr int DEC_KT = 256;        // keys per dec_scores / dec_scores_wide block: score rows are padded to it
constexpr int DEC_WK = 4;          // dec_weights: DEC_KT-key groups per block (DEC_WK · DEC_KT keys)
constexpr int DEC_DMAX = 256;      // largest head dim of dec_scores (dec_scores_wide past it)
constexpr int DEC_ST = TILE;       // dec_scores: threads, one key each, one tile per block
constexpr int DEC_VT = 128;        // threads of dec_values_wide (the shapes: DecVShape)
constexpr unsigned DEC_INVALID = 0x7FC00000u;

// The launch parameters of the decode kernels (src/cuda/exact.rs: DecParams; 304 bytes). The
// first six pointers sit where Params has them, so kv_lens is bytes [40, 48) in both.
struct DecParams {
    const void* q;
    const void* k;
    const void* v;
    const unsigned char* mask;
    void* out;
    const int* kv_lens;
    float* x;
    float* tm;
    unsigned* bk;
    float* acc;
    float* l;
    unsigned* bv;
    float* al;
    float* lse;             // as in Params
    long long q_bs, q_hs, q_ss, k_bs, k_hs, k_ss, v_bs, v_hs, v_ss, o_bs, o_hs, o_ss, lse_bs, lse_hs;
    int B, Hq, Hkv, Sq, Skv, D;
    int group, R, xpad, nslice;
    int causal, top_left, has_mask, mask_per_batch, mask_per_head, propagate;
    int bkv0;  // first KV head (b·Hkv + kvh) of this launch (the host splits huge grids)
    float scale;
    // 1 when every K (k_vec) or V (v_vec) row the kernels read starts at a 16-byte aligned
    // address and holds a whole number of 16-byte units (public: the layout's addresses, strides
    // and head dim): rows then move by cp.async in 16-byte units, else element by element.
    int k_vec, v_vec;
};

// The KV head of a block and its batch element, key length and largest key limit (the last query
// row's: every row's limit is at most it). Public.
struct DecHead {
    int bkv, b, kvh, L, kl;
};
__device__ __forceinline__ DecHead dec_head(const DecParams& P) {
    DecHead H;
    H.bkv = P.bkv0 + (int)blockIdx.y;
    H.b = (int)udiv((unsigned)H.bkv, (unsigned)P.Hkv);
    H.kvh = H.bkv - H.b * P.Hkv;
    H.L = P.kv_lens[H.b];
    H.kl = key_limit(P, H.L, P.Sq - 1);
    return H;
}

// Row r of a KV head: its query head h and row i (r = hg·Sq + i), by a loop over at most DEC_R
// values rather than a division.
__device__ __forceinline__ void dec_row(const DecParams& P, int kvh, int r, int& h, int& i) {
    int hg = 0;
#pragma unroll
    for (int k = 1; k < DEC_R; ++k) hg += (r >= k * P.Sq) ? 1 : 0;
    i = r - hg * P.Sq;
    h = kvh * P.group + hg;
}

// Stages of raw rows in shared memory: `rows` rows (row `row` is key j0 + row of `base`, row
// stride ss elements) of `units` 16-byte units at shared row stride `sstride` bytes, of which the
// first `n` elements are read (n ≤ units·16/size), the rest and every row at or past `jend`
// zeros. Only bytes move: no bit of a value changes. Three ways, by public layout facts:
// - dec_rows_units: every row 16-byte aligned with n a whole number of units (the host's k_vec)
//   and `units` a power of two up to DEC_ST, DEC_ST rows: thread i copies unit i mod units of
//   rows i / units + k·(DEC_ST / units) by cp.async (the caller commits), so a warp's
//   instruction reads consecutive units of consecutive rows, whole 32-byte sectors (a thread
//   per row had each sector fetched twice through L2, which bound dec_scores at large batches:
//   perf.md);
// - dec_rows_own: aligned rows of any other unit count, as many rows as threads: thread i copies
//   row i, unit after unit;
// - dec_rows_scalar: any layout, element by element (loads and stores now, a warp per row).
// (dec_values copies its aligned V slices itself: DecVLoads.) The caller's next barrier publishes
// them.
template <class E>
__device__ __forceinline__ void dec_rows_units(unsigned char* s, int sstride, const typename E::T* base, long long ss,
                                               int j0, int jend, int units, int n) {
    constexpr int EU = 16 / (int)sizeof(typename E::T);
    // Shifts, not divisions: units is a power of two.
    const int lg = 31 - __clz(units);
    const int rp = DEC_ST >> lg;  // rows a pass
    const int u = (int)threadIdx.x & (units - 1);
    int j = j0 + ((int)threadIdx.x >> lg);
    const bool uok = u * EU < n;
    const typename E::T* g = base + (long long)j * ss + u * EU;
    unsigned char* d = s + ((int)threadIdx.x >> lg) * sstride + u * 16;
    const long long gstep = (long long)rp * ss;
#pragma unroll 1
    for (int k = 0; k < units; ++k) {
        const bool ok = uok && j < jend;
        cp_async16z(d, ok ? g : base, ok);
        g += gstep;
        d += rp * sstride;
        j += rp;
    }
}
template <class E>
__device__ __forceinline__ void dec_rows_own(unsigned char* s, int sstride, const typename E::T* base, long long ss,
                                             int j0, int jend, int units, int n) {
    constexpr int EU = 16 / (int)sizeof(typename E::T);
    const int j = j0 + (int)threadIdx.x;
    const bool live = j < jend;
    const typename E::T* g = base + (long long)(live ? j : 0) * ss;
    unsigned char* d = s + threadIdx.x * sstride;
    for (int u = 0; u < units; ++u) {
        const bool ok = live && u * EU < n;
        cp_async16z(d + u * 16, g + (ok ? u : 0) * EU, ok);
    }
}
template <class E, int NT>
__device__ __forceinline__ void dec_rows_scalar(unsigned char* s, int sstride, const typename E::T* base, long long ss,
                                                int j0, int rows, int jend, int units, int n, unsigned t) {
    typedef typename E::T T;
    constexpr int EU = 16 / (int)sizeof(T);
    const int lane = t & 31;
    for (int row = t >> 5; row < rows; row += NT / 32) {
        const int j = j0 + row;
        const bool live = j < jend;
        const T* g = base + (long long)(live ? j : 0) * ss;
        T* d = reinterpret_cast<T*>(s + row * sstride);
        for (int e = lane; e < units * EU; e += 32) {
            const bool ok = live && e < n;
            const T x = g[ok ? e : 0];
            d[e] = ok ? x : T(0);
        }
    }
}

// Dynamic shared bytes of dec_scores (src/cuda/exact.rs mirrors it): the tile's K rows, raw, at
// a stride of an odd number of 16-byte units (a warp's per-thread row reads then hit distinct
// banks), then the query rows scaled and transposed, qT[d][rs], d < D8 = D rounded up to 8, rs
// the rows rounded up to a group of four (4, 8 or 16: dec_scores_rows).
__host__ __device__ constexpr int dec_k_units(int d, int es) { return ((((d + 7) & ~7) * es / 16) | 1); }
__host__ __device__ constexpr int dec_scores_rows(int r) { return r <= 4 ? 4 : r <= 8 ? 8 : DEC_R; }
__host__ __device__ constexpr int dec_scores_smem(int d, int es, int r) {
    return DEC_ST * dec_k_units(d, es) * 16 + ((d + 7) & ~7) * dec_scores_rows(r) * 4;
}
static_assert(dec_scores_smem(DEC_DMAX, 4, DEC_R) <= 101376, "dec_scores within sm_86/sm_89/sm_120's 99 KB");

// dec_scores' shared state besides the staged rows: the query rows' shifts and the halves of
// each tile's maxima and bad-key flags.
struct DecRows {
    int shq[DEC_R];
    float redm[DEC_ST / 32][DEC_R];
    unsigned redb[DEC_ST / 32][DEC_R];
};

// The facts of each row that dec_scores' finish needs every tile, by position only: its key limit
// and its mask row. Up to eight rows (NG ≤ 2: the usual decode, GQA groups of up to 8, or 4 with two
// speculative tokens) they are formed once per block and kept in registers (12 or 24): formed every
// tile they took about 260 of the finish's ~570 instructions a warp and tile at four rows (dec_row's
// loop over the rows, the mask row's 64-bit address; docs/perf.md). With 16 rows they are formed
// again each tile: kept for 16 rows they spill (8-16 bytes of stack on sm_90, sm_100 and sm_120).
template <int NG>
struct DecRowFacts {
    static constexpr bool KEEP = NG <= 2;
    int lim[KEEP ? 4 * NG : 1];
    const unsigned char* mrow[KEEP ? 4 * NG : 1];
    __device__ __forceinline__ static void form(const DecParams& P, const DecHead& H, int r, int& lm,
                                                const unsigned char*& mr) {
        int h, i;
        dec_row(P, H.kvh, r, h, i);
        lm = key_limit(P, H.L, i);
        mr = mask_row(P, H.b, h, i);
    }
    __device__ __forceinline__ DecRowFacts(const DecParams& P, const DecHead& H) {
        if (KEEP) {
#pragma unroll
            for (int r = 0; r < 4 * NG; ++r) form(P, H, min(r, P.R - 1), lim[r], mrow[r]);
        }
    }
    // Row r < R (r a compile-time index in the caller's unrolled loops).
    __device__ __forceinline__ void get(const DecParams& P, const DecHead& H, int r, int& lm,
                                        const unsigned char*& mr) const {
        if (KEEP) {
            lm = lim[r];
            mr = mrow[r];
        } else {
            form(P, H, r, lm, mr);
        }
    }
};

// dec_scores' tiles for rows in NG groups of four (R ≤ 4·NG), non-finite inputs handled (PROP)
// or excluded by the caller's check (Reject: sanitising would be the identity). Every tile of the
// block is computed, also one past the last row's last valid key: there every key is invalid by
// position, so the tile gets the markers a skipped tile gets (§4: a tile without a valid key
// leaves the state as it was). A fixed trip count keeps the warps' shuffles converged.
template <class E, int NG, bool PROP>
__device__ __forceinline__ void dec_scores_tile(const DecParams& P, const DecHead& H, int t, const unsigned char* ks,
                                                int ku, const float* qT, DecRows& S, const DecRowFacts<NG>& F);

template <class E, int NG, bool PROP>
__device__ __forceinline__ void dec_scores_run(const DecParams& P, const DecHead& H, int t0, unsigned char* ks, int ku,
                                               const float* qT, DecRows& S) {
    typedef typename E::T T;
    const int D8 = (P.D + 7) & ~7;
    const T* kbase = (const T*)P.k + (H.b * P.k_bs + H.kvh * P.k_hs);
    const int units = D8 * (int)sizeof(T) / 16;
    const bool pow2u = (units & (units - 1)) == 0 && units <= DEC_ST;  // public
    const DecRowFacts<NG> F(P, H);
#pragma unroll 1
    for (int t = t0; t < t0 + DEC_KT / TILE; ++t) {
        const int j0 = t * TILE;
        if (P.k_vec && pow2u)  // launch facts
            dec_rows_units<E>(ks, ku * 16, kbase, P.k_ss, j0, P.Skv, units, P.D);
        else if (P.k_vec)
            dec_rows_own<E>(ks, ku * 16, kbase, P.k_ss, j0, P.Skv, units, P.D);
        else
            dec_rows_scalar<E, DEC_ST>(ks, ku * 16, kbase, P.k_ss, j0, DEC_ST, P.Skv, D8 * (int)sizeof(T) / 16, P.D,
                                       threadIdx.x);
        cp_commit();
        cp_wait<0>();
        __syncthreads();  // the tile (and, the first time, the query rows) for every thread
        dec_scores_tile<E, NG, PROP>(P, H, t, ks, ku, qT, S, F);
        __syncthreads();  // every read of the tile and of S.redm done before the next tile
    }
}

// One tile of dec_scores_run.
template <class E, int NG, bool PROP>
__device__ __forceinline__ void dec_scores_tile(const DecParams& P, const DecHead& H, int t, const unsigned char* ks,
                                                int ku, const float* qT, DecRows& S, const DecRowFacts<NG>& F) {
    typedef typename E::T T;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int R = P.R, D8 = (P.D + 7) & ~7;
    const int ntile = P.xpad / TILE;
    const long long rbase = (long long)H.bkv * R;
    const unsigned char* kr = ks + tid * ku * 16;  // this thread's key row, raw
    // §2.3 for the key row: its largest exponent field after sanitising (the zeros past D and
    // past Skv change nothing), and its bad flag (§2.2).
    unsigned emax = 0u, bad = 0u;
    if constexpr (PROP) {
#pragma unroll 2
        for (int c = 0; c < D8; c += 8) {
            float x[8];
            E::widen8(kr + c * (int)sizeof(T), x);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                bad |= nonfinite_mask(x[e]);
                emax = max(emax, expfield(sanitize(x[e])));
            }
        }
    } else {
        // The same field through the largest magnitude's bits (E::absmax8): fewer instructions
        // an element, and the kernel is bound by its instruction count (perf.md).
        unsigned m = 0u;
#pragma unroll 2
        for (int c = 0; c < D8; c += 8) E::absmax8(kr + c * (int)sizeof(T), m);
        emax = E::expfield_of(m);
    }
    const int shk = row_shift(emax);
    const float fk = pow2(shk);
    // §3: the chains of this key against every row, each sequential in d. Past D both the key
    // and the query rows are zero, and fma(0, 0, s) = s for the s these chains hold (never −0:
    // they start at +0, and a sum of a product and +0 is −0 only when both are −0).
    float s[NG][4];
#pragma unroll
    for (int g = 0; g < NG; ++g)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[g][c] = 0.0f;
#pragma unroll 1
    for (int c = 0; c < D8; c += 8) {
        float x[8];
        E::widen8(kr + c * (int)sizeof(T), x);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const float k = __fmul_rn(PROP ? sanitize(x[e]) : x[e], fk);  // §2.5
            const float* qd = qT + (c + e) * (4 * NG);  // NG groups of four: dec_scores_rows(R)
#pragma unroll
            for (int g = 0; g < NG; ++g) {
                const float4 q4 = *reinterpret_cast<const float4*>(qd + 4 * g);
                s[g][0] = __fmaf_rn(q4.x, k, s[g][0]);
                s[g][1] = __fmaf_rn(q4.y, k, s[g][1]);
                s[g][2] = __fmaf_rn(q4.z, k, s[g][2]);
                s[g][3] = __fmaf_rn(q4.w, k, s[g][3]);
            }
        }
    }
    // §3 finish, validity (§1), the tile maximum and bad-key flag per row (§4, §7): a warp holds
    // half the tile; the halves meet in shared memory.
    const int j = t * TILE + tid;
#pragma unroll
    for (int g = 0; g < NG; ++g) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int r = 4 * g + c;
            if (r < R) {  // public
                int lim;
                const unsigned char* mrow;
                F.get(P, H, r, lim, mrow);
                const float x = score_finish(s[g][c], P.scale, S.shq[r], shk);
                const unsigned vm = mask_of(j < lim) & mask_val(P, mrow, j);
                P.x[(rbase + r) * P.xpad + j] = __uint_as_float((__float_as_uint(x) & vm) | (DEC_INVALID & ~vm));
                float mt = sel(vm != 0u, x, -DA_FLT_MAX);
                for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xFFFFFFFFu, mt, o));
                const bool bb = __any_sync(0xFFFFFFFFu, (vm & bad) != 0u);
                if (lane == 0) {
                    S.redm[warp][r] = mt;
                    S.redb[warp][r] = bb ? 1u : 0u;
                }
            }
        }
    }
    __syncthreads();
    if (tid < R) {
        P.tm[(rbase + tid) * ntile + t] = fmaxf(S.redm[0][tid], S.redm[1][tid]);
        P.bk[(rbase + tid) * ntile + t] = S.redb[0][tid] | S.redb[1][tid];
    }
}

// Scores (§2, §3) of DEC_KT keys (four tiles of 64) for the R rows of one KV head, head dim ≤
// DEC_DMAX, one thread per key of a tile. First a warp per query row runs §2 on it (largest
// exponent by shuffles: exact, order-free) and stores it scaled and transposed, so that one
// 16-byte broadcast load gives four rows' q_d. Then per tile: its K rows staged raw in shared
// memory (cp.async where aligned), §2 by each thread on its key row (two passes over it: the
// exponent, then the chains) and the chains of its key against every row. A block whose tiles
// are all past the last row's last valid key only writes their markers (position).
template <class E>
__device__ void dec_scores(const DecParams& P) {
    typedef typename E::T T;
    extern __shared__ __align__(16) unsigned char dsb[];
    __shared__ DecRows S;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const DecHead H = dec_head(P);
    const int R = P.R;
    const int D8 = (P.D + 7) & ~7;
    const int ku = dec_k_units(P.D, (int)sizeof(T));
    unsigned char* ks = dsb;
    float* qT = reinterpret_cast<float*>(dsb + DEC_ST * ku * 16);
    const int t0 = (int)blockIdx.x * (DEC_KT / TILE);
    if (t0 * TILE >= H.kl) {
        // No row has a valid key in the block's tiles (position): markers, −FLT_MAX, no bad key.
        const int ntile = P.xpad / TILE;
        const long long rbase = (long long)H.bkv * R;
        for (int e = threadIdx.x; e < R * DEC_KT; e += DEC_ST)
            P.x[(rbase + e / DEC_KT) * P.xpad + t0 * TILE + e % DEC_KT] = __uint_as_float(DEC_INVALID);
        if ((int)threadIdx.x < R * (DEC_KT / TILE)) {
            const int r = threadIdx.x / (DEC_KT / TILE), t = t0 + threadIdx.x % (DEC_KT / TILE);
            P.tm[(rbase + r) * ntile + t] = -DA_FLT_MAX;
            P.bk[(rbase + r) * ntile + t] = 0u;
        }
        return;
    }
    // The query rows, a warp per row (lane l holds elements l + 32e), and zeros in the rows past
    // R of the last group of four the chains read (their chains are computed and dropped). The
    // trip count is the same for both warps (ng: public), so their shuffles stay converged.
    const int ng = dec_scores_rows(R) / 4;  // row groups, as dec_scores_run is instantiated
#pragma unroll 1
    for (int k = 0; k < 2 * ng; ++k) {
        const int r = warp + (DEC_ST / 32) * k;
        int h, i;
        dec_row(P, H.kvh, min(r, R - 1), h, i);
        const T* src = (const T*)P.q + (H.b * P.q_bs + h * P.q_hs + i * P.q_ss);
        float x[DEC_DMAX / 32];
        unsigned emax = 0u;
#pragma unroll
        for (int e = 0; e < DEC_DMAX / 32; ++e) {
            const int d = lane + 32 * e;
            const float v = E::load(src, min(d, P.D - 1));
            x[e] = sel(d < P.D && r < R, sanitize(v), 0.0f);
            emax = max(emax, expfield(x[e]));
        }
        for (int o = 16; o > 0; o >>= 1) emax = max(emax, __shfl_xor_sync(0xFFFFFFFFu, emax, o));
        const int shift = row_shift(emax);
        const float f = pow2(shift);
#pragma unroll
        for (int e = 0; e < DEC_DMAX / 32; ++e) {
            const int d = lane + 32 * e;
            if (d < D8) qT[d * (4 * ng) + r] = __fmul_rn(x[e], f);  // §2.5
        }
        if (lane == 0) S.shq[r] = shift;
    }
    // Row groups of four, fixed at compile time (R: public); non-finite handling by the policy.
#define DA_SC(NG)                                                                  \
    do {                                                                           \
        if (P.propagate) dec_scores_run<E, NG, true>(P, H, t0, ks, ku, qT, S);     \
        else dec_scores_run<E, NG, false>(P, H, t0, ks, ku, qT, S);                \
    } while (0)
    if (ng == 1) {
        DA_SC(1);
    } else if (ng == 2) {
        DA_SC(2);
    } else {
        DA_SC(4);
    }
#undef DA_SC
}

// Scores for head dims past DEC_DMAX (dec_scores above takes the others): DEC_KT keys (four
// tiles) for the R rows of one KV head. Thread j owns key j
// and the rows in groups of four, a group skipped when it holds no row (R: public): up to 16
// chains, each sequential in d (§3), out of shared memory one head-dim chunk of DEC_DC at a time.
// The row shifts (§2.3) need each row's largest exponent first: a first pass over the rows in
// global memory, a warp per row, four rows' loads in flight at once.
constexpr int DEC_SC = 32;  // head-dim chunk of dec_scores
template <class E>
__device__ void dec_scores_wide(const DecParams& P) {
    typedef typename E::T T;
    __shared__ __align__(16) float qs[DEC_SC][DEC_R];  // transposed: four rows per float4
    __shared__ float ks[DEC_KT][DEC_SC + 1];
    __shared__ int shq[DEC_R], shk[DEC_KT];
    __shared__ unsigned badk[DEC_KT];
    __shared__ float redm[DEC_NT / 32][DEC_R];
    __shared__ unsigned redb[DEC_NT / 32][DEC_R];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const DecHead H = dec_head(P);
    const int j0 = (int)blockIdx.x * DEC_KT;
    const int R = P.R;
    const int ntile = P.xpad / TILE;
    const int t0 = (int)blockIdx.x * (DEC_KT / TILE);
    const long long rbase = (long long)H.bkv * R;
    if (j0 >= H.kl) {
        // No row has a valid key here (position): markers, −FLT_MAX, no bad key.
        for (int r = 0; r < R; ++r) P.x[(rbase + r) * P.xpad + j0 + tid] = __uint_as_float(DEC_INVALID);
        if (tid < R * (DEC_KT / TILE)) {
            const int r = tid / (DEC_KT / TILE), t = tid % (DEC_KT / TILE);
            P.tm[(rbase + r) * ntile + t0 + t] = -DA_FLT_MAX;
            P.bk[(rbase + r) * ntile + t0 + t] = 0u;
        }
        return;
    }
    const T* kbase = (const T*)P.k + (H.b * P.k_bs + H.kvh * P.k_hs);
    // Pass 1: rows 4w'.. of the DEC_R + DEC_KT rows (Q rows first, those past R absent), four at
    // a time per warp so that their loads overlap; the largest exponent by shuffles, the bad
    // flag by a vote (both exact and order-free).
    constexpr int ROWS = DEC_R + DEC_KT;
#pragma unroll 1
    for (int k = 0; k < (ROWS + DEC_NT / 8 - 1) / (DEC_NT / 8); ++k) {  // a fixed trip count: converged shuffles
        const int w4 = warp * 4 + k * (DEC_NT / 8);
        const T* src[4];
        bool exists[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int w = w4 + u;
            if (w < DEC_R) {
                int h, i;
                dec_row(P, H.kvh, min(w, R - 1), h, i);
                src[u] = (const T*)P.q + (H.b * P.q_bs + h * P.q_hs + i * P.q_ss);
                exists[u] = w < R;
            } else {
                const int j = j0 + (w - DEC_R);
                exists[u] = w < ROWS && j < P.Skv;
                src[u] = kbase + (exists[u] ? j : 0) * P.k_ss;
            }
        }
        unsigned bad[4] = {0u, 0u, 0u, 0u}, emax[4] = {0u, 0u, 0u, 0u};
        for (int d = lane; d < P.D; d += 32) {
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const float x = E::load(src[u], d);
                bad[u] |= nonfinite_mask(x) & mask_of(exists[u]);
                emax[u] = max(emax[u], expfield(sanitize(x)) & mask_of(exists[u]));
            }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            for (int o = 16; o > 0; o >>= 1) emax[u] = max(emax[u], __shfl_xor_sync(0xFFFFFFFFu, emax[u], o));
            const bool anybad = __any_sync(0xFFFFFFFFu, bad[u] != 0u);
            const int w = w4 + u;
            if (lane == 0 && w < ROWS) {
                if (w < DEC_R) {
                    shq[w] = row_shift(emax[u]);
                } else {
                    shk[w - DEC_R] = row_shift(emax[u]);
                    badk[w - DEC_R] = anybad ? 1u : 0u;
                }
            }
        }
    }
    __syncthreads();
    // Pass 2: the chains, chunk by chunk of the head dim (each chain in increasing d).
    const int ng = (R + 3) / 4;  // row groups holding a row: public
    float s[4][4];
#pragma unroll
    for (int g = 0; g < 4; ++g)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[g][c] = 0.0f;
    for (int d0 = 0; d0 < P.D; d0 += DEC_SC) {
        const int dn = min(DEC_SC, P.D - d0);
        // Q: DEC_R x DEC_SC elements, zero past R and past D.
        for (int e = tid; e < DEC_R * DEC_SC; e += DEC_NT) {
            const int row = e / DEC_SC, d = e % DEC_SC;  // constant divisor: shifts
            int h, i;
            dec_row(P, H.kvh, min(row, R - 1), h, i);
            const T* src = (const T*)P.q + (H.b * P.q_bs + h * P.q_hs + i * P.q_ss);
            const float x = __fmul_rn(sanitize(E::load(src, d0 + min(d, dn - 1))), pow2(shq[row]));
            qs[d][row] = sel(row < R && d < dn, x, 0.0f);
        }
        // K: a warp per row, DEC_SC consecutive elements (coalesced), zero past Skv and past D.
        for (int e = tid; e < DEC_KT * DEC_SC; e += DEC_NT) {
            const int kr = e / DEC_SC, d = e % DEC_SC;
            const int j = j0 + kr;
            const bool ex = j < P.Skv;
            const float x = __fmul_rn(sanitize(E::load(kbase + (ex ? j : 0) * P.k_ss, d0 + min(d, dn - 1))), pow2(shk[kr]));
            ks[kr][d] = sel(ex && d < dn, x, 0.0f);
        }
        __syncthreads();
        for (int d = 0; d < dn; ++d) {
            const float kv = ks[tid][d];
#pragma unroll
            for (int g = 0; g < 4; ++g) {
                if (g < ng) {
                    const float4 q4 = *reinterpret_cast<const float4*>(&qs[d][4 * g]);
                    s[g][0] = __fmaf_rn(q4.x, kv, s[g][0]);
                    s[g][1] = __fmaf_rn(q4.y, kv, s[g][1]);
                    s[g][2] = __fmaf_rn(q4.z, kv, s[g][2]);
                    s[g][3] = __fmaf_rn(q4.w, kv, s[g][3]);
                }
            }
        }
        __syncthreads();
    }
    // §3 finish, validity (§1), each tile's maximum and bad-key flag per row (§4, §7): a warp
    // holds half a tile; the two halves meet in shared memory.
    const int j = j0 + tid;
#pragma unroll
    for (int g = 0; g < 4; ++g) {
        if (g < ng) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const int r = 4 * g + c;
                if (r < R) {
                    int h, i;
                    dec_row(P, H.kvh, r, h, i);
                    const float x = score_finish(s[g][c], P.scale, shq[r], shk[tid]);
                    const unsigned vm = mask_of(j < key_limit(P, H.L, i)) &
                                        mask_val(P, mask_row(P, H.b, h, i), j);
                    P.x[(rbase + r) * P.xpad + j] = __uint_as_float((__float_as_uint(x) & vm) | (DEC_INVALID & ~vm));
                    float mt = sel(vm != 0u, x, -DA_FLT_MAX);
                    for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xFFFFFFFFu, mt, o));
                    const bool bb = __any_sync(0xFFFFFFFFu, (vm & badk[tid]) != 0u);
                    if (lane == 0) {
                        redm[warp][r] = mt;
                        redb[warp][r] = bb ? 1u : 0u;
                    }
                }
            }
        }
    }
    __syncthreads();
    if (tid < R * (DEC_KT / TILE)) {
        const int r = tid / (DEC_KT / TILE), t = tid % (DEC_KT / TILE);
        P.tm[(rbase + r) * ntile + t0 + t] = fmaxf(redm[2 * t][r], redm[2 * t + 1][r]);
        P.bk[(rbase + r) * ntile + t0 + t] = redb[2 * t][r] | redb[2 * t + 1][r];
    }
}

// The weights of §4, once per key and row (not once per column block): DEC_WK groups of DEC_KT
// keys (DEC_WK · 4 tiles) of one KV head per block, so that the block's set-up (the head, the
// maximum over the earlier tiles, the tiles' running maxima) is paid once per 1024 keys, and each
// thread's key loads of all groups are in flight together. The running maximum after tile t is the
// maximum of the tile maxima of tiles 0 … t and −FLT_MAX, zero made +0 (max is exact, so a block
// reduces the tiles before its own in any order and gets the bits of §4's sequential mnew); alpha
// of tile t follows from the maxima after t − 1 and t. p overwrites the score in x (+0 where the
// key is invalid; a valid key's p is never 0: clamp keeps exp(·) ≥ e^-80 and W·e^-80 is a
// normal-or-subnormal non-zero float, subnormals being kept), alpha goes to al [R][xpad / 64].
// Groups past the last valid key of every row are not written (position): dec_values never reads
// them; their loads are clamped into the row (addresses by position only).
template <class E>
__device__ void dec_weights(const DecParams& P) {
    constexpr int NT = DEC_WK * DEC_KT / TILE;  // tiles per block
    __shared__ float mn[DEC_R][NT];
    __shared__ float red[2][DEC_R];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const DecHead H = dec_head(P);
    const int R = P.R;
    const int ntile = P.xpad / TILE;
    const int t0 = (int)blockIdx.x * NT;
    const long long rbase = (long long)H.bkv * R;
    if (t0 * TILE >= H.kl) return;  // position
    // Each row's maximum over the tiles before this block's: warp w reduces rows w and w + 8 (rows
    // past R repeat row R - 1, unused), its lanes striding the tiles. Every load unconditional, the
    // trip counts public and the same for the whole warp (its shuffles stay converged).
    static_assert(DEC_R == 2 * (DEC_NT / 32), "two rows per warp");
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const int r = warp + (DEC_NT / 32) * k;
        const float* tr = P.tm + (rbase + min(r, R - 1)) * ntile;
        float m = -DA_FLT_MAX;
        for (int t = lane; t < t0; t += 32) m = fmaxf(m, tr[t]);
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
        if (lane == 0) red[k][r] = m;
    }
    __syncthreads();
    if (tid < R) {
        // the state after tile t0 - 1 (or the initial −FLT_MAX)
        float m = __fadd_rn(red[tid / (DEC_NT / 32)][tid], 0.0f);
        // Every tile maximum loaded first (tiles past the row's padded length clamped to its last:
        // their alpha is not written and their running maximum never read).
        float tmv[NT];
#pragma unroll
        for (int k = 0; k < NT; ++k) tmv[k] = P.tm[(rbase + tid) * ntile + min(t0 + k, ntile - 1)];
#pragma unroll
        for (int k = 0; k < NT; ++k) {
            const float mnew = __fadd_rn(fmaxf(m, tmv[k]), 0.0f);
            const float a = detattn::exp(clamp_z(__fsub_rn(m, mnew)));
            if (t0 + k < ntile) P.al[(rbase + tid) * ntile + t0 + k] = a;  // position
            mn[tid][k] = mnew;
            m = mnew;
        }
    }
    __syncthreads();
    const int j0 = t0 * TILE + tid;
#pragma unroll 1
    for (int r = 0; r < R; ++r) {
        float* xr = P.x + (rbase + r) * P.xpad;
        float x[DEC_WK];
#pragma unroll
        for (int g = 0; g < DEC_WK; ++g) x[g] = xr[min(j0 + g * DEC_KT, P.xpad - 1)];
#pragma unroll
        for (int g = 0; g < DEC_WK; ++g) {
            const unsigned vm = mask_of(__float_as_uint(x[g]) != DEC_INVALID);
            const float xm = sel(vm != 0u, x[g], -DA_FLT_MAX);
            const float e = __fmul_rn(detattn::exp(clamp_z(__fsub_rn(xm, mn[r][(g * DEC_KT + tid) / TILE]))), DA_W);
            if ((t0 + g * (DEC_KT / TILE)) * TILE < H.kl)  // the group holds a valid key (position)
                xr[j0 + g * DEC_KT] = __uint_as_float(__float_as_uint(e) & vm);
        }
    }
}

// The chains of §4 for the columns of slice blockIdx.x < nslice of the R rows of one KV head, and
// the rows' l chains (§4: the same chain with v = 1, so no column block pays for it). Stages of
// VK keys go through a ring of NS buffers in shared memory by cp.async: a stage's V slice raw,
// its weights p (dec_weights) and its tiles' alpha. Each chain is sequential over the keys. Two
// shapes, the same chains and so the same bits; the host picks one by the number of KV heads
// (public):
// - narrow (W false, dec_values_narrow): 8 columns a block, stages of two tiles, the l chains in
//   one more block (blockIdx.x = nslice). Many blocks with little work a key: a launch of few KV
//   heads (dec1: 8 heads) needs every chain it can run at once, and each chain warp is then
//   about alone on its scheduler, so a key costs it the latency of whatever its FFMA waits for
//   (docs/perf.md). Three warps: warp 2 issues every copy, warp 1 widens 2-byte V into f32 (§1:
//   exact), four keys of a column side by side, one stage ahead of the chains; warp 0, lane
//   (rq, c), runs column c for rows rq + 4k (k < RPW), its operands 16-byte loads issued a few
//   groups of four keys ahead into a ring of registers. f32 V is not widened: the chains read it
//   raw. Eight columns, not 32: a chain warp's 16-byte loads cost shared memory about one
//   wavefront a key an operand, and four chain warps on one SM were bound by that, not by their
//   FFMAs (docs/perf.md); 8-column blocks spread dec1's chains over every SM.
// - wide (W true, dec_values_run): 128 columns a block, four row warps, four adjacent columns a
//   lane (one 8-byte shared load a key for 2-byte V, widened by the lane), stages of one tile,
//   each row's l chain run by its warp's lanes alongside (every lane the same chain: a few
//   additions a key; slice 0's lane 0 stores it). A V key row then leaves shared memory to the
//   four row warps only (not to 16 warps of four blocks) and the weights leave L2 once per KV
//   head (not five times): with many heads the narrow shape is bound by shared-memory wavefronts
//   (docs/perf.md).
// RP: the rows the stage has room for, DEC_R or (when R ≤ 4, the usual decode) 4: a smaller
// stage lets more blocks share an SM.
template <class E, bool W>
struct DecVShape {
    static constexpr int ES = (int)sizeof(typename E::T);
    static constexpr int DS = W ? 128 : 8;              // columns a block
    static constexpr int CPL = W ? DS / 32 : 0;         // columns a lane (wide)
    static constexpr int VK = W ? TILE : 2 * TILE;      // keys a stage
    static constexpr int TPS = VK / TILE;               // tiles a stage
    static constexpr int NS = (W && ES == 4) ? 2 : 4;   // stages in the ring (wide f32: within 99 KB)
    static constexpr int PS = VK + 4;                   // row stride of a stage's weights (floats): rows in distinct banks
    static constexpr int NT = W ? DEC_VT : 96;          // threads a block
    static constexpr int CT = W ? DEC_VT : 32;          // threads that issue the copies (narrow: warp 2)
    static constexpr bool WID = !W && ES == 2;          // the narrow shape's warp 1 widens V
};
template <class E, int RP, bool W>
struct DecVLayout {
    typedef DecVShape<E, W> Sh;
    static constexpr int NS = Sh::NS;
    static constexpr int VBYTES = Sh::VK * Sh::DS * Sh::ES;  // V [VK][DS], raw
    static constexpr int PBYTES = RP * Sh::PS * 4;           // p [RP][PS]
    static constexpr int ABYTES = RP * Sh::TPS * 4;          // alpha [RP][tiles]
    static constexpr int STAGE = VBYTES + PBYTES + ABYTES;
    static constexpr int WBYTES = Sh::VK * Sh::DS * 4;       // V widened (WID): [VK / 4][DS][4] f32
    static constexpr int SMEM = NS * STAGE + (Sh::WID ? 2 * WBYTES : 0);  // dynamic shared bytes (host: values_smem)
};
constexpr int DEC_RSMALL = 4;  // the smaller stage's rows
template <bool W>
__host__ __device__ constexpr bool dec_stages_fit() {
    return DecVLayout<ElemF32, DEC_R, W>::STAGE % 16 == 0 && DecVLayout<ElemF16, DEC_R, W>::STAGE % 16 == 0 &&
           DecVLayout<ElemF32, DEC_RSMALL, W>::STAGE % 16 == 0 && DecVLayout<ElemF16, DEC_RSMALL, W>::STAGE % 16 == 0 &&
           DecVLayout<ElemF32, DEC_R, W>::SMEM <= 101376 && DecVLayout<ElemF16, DEC_R, W>::SMEM <= 101376;
}
static_assert(dec_stages_fit<false>() && dec_stages_fit<true>(),
              "16-byte stages, one block within sm_86/sm_89/sm_120's 99 KB");

// dec_values' loads, one stage at a time into its buffer of the ring: the V slice (not in the l
// block), the weights of the R rows and their tiles' alpha, by the shape's CT threads (t: the
// thread's index among them). What a thread copies is the same in every stage but for the
// stage's first key, so its addresses are formed once and stepped by a stage (public: positions
// and strides); that keeps the chain warps' issue slots for the chains.
template <class E, int RP, bool LBLOCK, bool W>
struct DecVLoads {
    typedef typename E::T T;
    typedef DecVShape<E, W> Sh;
    typedef DecVLayout<E, RP, W> Lay;
    static constexpr int VU = Sh::DS * Sh::ES / 16;  // 16-byte units of a row of the slice
    static constexpr int EU = 16 / Sh::ES;           // elements per unit
    static constexpr int VROWS = Sh::CT / VU;        // rows a pass of the copying threads copies
    static constexpr int PU = Sh::VK / 4;            // 16-byte units of a stage's weight row
    static constexpr int PROWS = Sh::CT / PU;        // weight rows a pass copies
    const T* vb;      // the slice's first column, key 0
    int n;            // columns of the slice that exist
    const T* v0;      // this thread's unit of its first row, key 0
    long long vstep;  // elements from a row to the row VROWS further
    int vrow, vok;    // that first row (0 .. VROWS-1), and whether its unit holds columns that exist
    const float* x0;  // weights of row tid >> PUL, this thread's unit, key 0
    const float* a0;  // alpha of (row tid / TPS, tile tid % TPS) of tile 0
    // The weight row a thread copies first and its unit in the row: shifts (PU is a power of two).
    static constexpr int PUL = PU == 32 ? 5 : 4;
    static_assert(PU == 1 << PUL, "PU a power of two");
    int t;            // this thread's index among the CT that copy
    __device__ __forceinline__ DecVLoads(const DecParams& P, const T* vbase, long long rbase, int ntile, int dlim, int t_)
        : t(t_) {
        const int tid = t_, u = tid % VU;
        vb = vbase;
        n = min(Sh::DS, dlim);
        vrow = tid / VU;
        vok = u * EU < n;
        v0 = vbase + (long long)vrow * P.v_ss + (vok ? u * EU : 0);
        vstep = (long long)VROWS * P.v_ss;
        x0 = P.x + (rbase + (tid >> PUL)) * P.xpad + 4 * (tid & (PU - 1));
        a0 = P.al + (rbase + min(tid / Sh::TPS, P.R - 1)) * ntile + tid % Sh::TPS;
    }
    __device__ __forceinline__ void issue(const DecParams& P, unsigned char* dsb, int st, int nst) const {
        const int tid = t, R = P.R;
        if (st < nst) {  // position
            unsigned char* sb = dsb + (st % Lay::NS) * Lay::STAGE;
            const int j0 = st * Sh::VK;
            if (!LBLOCK) {
                if (P.v_vec) {  // a launch fact
                    const T* g = v0 + (long long)j0 * P.v_ss;
                    unsigned char* d = sb + vrow * (Sh::DS * Sh::ES) + (tid % VU) * 16;
                    auto pass = [&](int i) {
                        const bool ok = vok && j0 + vrow + i * VROWS < P.Skv;
                        cp_async16z(d + i * VROWS * (Sh::DS * Sh::ES), ok ? g : v0, ok);
                        g += vstep;
                    };
                    // (Unrolled or not by element size and shape: what keeps every
                    // architecture's ptxas from putting a value on the stack, which the audit
                    // forbids.)
                    if (Sh::ES == 4 || W) {
#pragma unroll 1
                        for (int i = 0; i < Sh::VK / VROWS; ++i) pass(i);
                    } else {
#pragma unroll
                        for (int i = 0; i < Sh::VK / VROWS; ++i) pass(i);
                    }
                } else {
                    dec_rows_scalar<E, Sh::CT>(sb, Sh::DS * Sh::ES, vb, P.v_ss, j0, Sh::VK, P.Skv, VU, n, tid);
                }
            }
            float* ps = reinterpret_cast<float*>(sb + Lay::VBYTES) + (tid >> PUL) * Sh::PS + 4 * (tid & (PU - 1));
            const float* g = x0 + j0;
            for (int r = tid >> PUL; r < R; r += PROWS) {  // public bound
                cp_async16(ps, g);
                ps += PROWS * Sh::PS;
                g += (long long)PROWS * P.xpad;
            }
            float* as = reinterpret_cast<float*>(sb + Lay::VBYTES + Lay::PBYTES);
            if (tid < R * Sh::TPS) cp_async4(as + tid, a0 + st * Sh::TPS);
        }
        cp_commit();
    }
};

// The slice's bad-V flag per row (§7; bit r of `rows`: row r), ORed over the block's NT threads:
// exact and order-free.
template <int NT>
__device__ __forceinline__ void dec_values_bad(const DecParams& P, unsigned* bv, unsigned rows) {
    __shared__ unsigned redb[NT / 32];
    for (int o = 16; o > 0; o >>= 1) rows |= __shfl_xor_sync(0xFFFFFFFFu, rows, o);
    if ((threadIdx.x & 31) == 0) redb[threadIdx.x >> 5] = rows;
    __syncthreads();
    if ((int)threadIdx.x < P.R) {
        unsigned b = 0u;
#pragma unroll
        for (int w = 0; w < NT / 32; ++w) b |= redb[w];
        bv[(long long)threadIdx.x * P.nslice] = (b >> threadIdx.x) & 1u;
    }
}

// The wide shape (W true): four row warps; thread (warp w, lane c) runs the CPL columns CPL·c …
// CPL·c + CPL − 1 of the slice for rows w + 4k (k < RPW), and its rows' l chains alongside.
template <class E, int RP, int RPW, bool PROP>
__device__ __forceinline__ void dec_values_run(const DecParams& P, const DecHead& H, int slice, unsigned char* dsb) {
    typedef typename E::T T;
    typedef DecVShape<E, true> Sh;
    typedef DecVLayout<E, RP, true> Lay;
    constexpr int TPS = Sh::TPS, CPL = Sh::CPL, NS = Lay::NS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int R = P.R;
    const int ntile = P.xpad / TILE;
    const long long rbase = (long long)H.bkv * R;
    const int nst = (H.kl + Sh::VK - 1) / Sh::VK;  // stages up to the last row's last valid key
    const int c0 = slice * Sh::DS;
    const int dlim = P.D - c0;  // columns of the slice that exist: min(DS, dlim)
    const T* vbase = (const T*)P.v + (H.b * P.v_bs + H.kvh * P.v_hs) + c0;
    const DecVLoads<E, RP, false, true> loads(P, vbase, rbase, ntile, dlim, tid);
    // The warps holding a row run its column chains and its l chain (by position).
    const bool crun = warp < R;
    float acc[RPW][CPL];
#pragma unroll
    for (int k = 0; k < RPW; ++k)
#pragma unroll
        for (int c = 0; c < CPL; ++c) acc[k][c] = 0.0f;
    float lq[RPW];  // the l chains of the thread's rows
#pragma unroll
    for (int q = 0; q < RPW; ++q) lq[q] = 0.0f;
    unsigned bad = 0u;  // bit k: a valid key of row warp + 4k has a non-finite V element in this lane's columns
#pragma unroll 1
    for (int st = 0; st < NS - 1; ++st) loads.issue(P, dsb, st, nst);
#pragma unroll 1
    for (int st = 0; st < nst; ++st) {
        cp_wait<NS - 2>();
        __syncthreads();  // stage st has landed for every thread; stage st - 1's buffer is free
        loads.issue(P, dsb, st + NS - 1, nst);
        const unsigned char* sb = dsb + (st % NS) * Lay::STAGE;
        const T* vs = reinterpret_cast<const T*>(sb);
        const float* ps = reinterpret_cast<const float*>(sb + Lay::VBYTES);
        const float* as = reinterpret_cast<const float*>(sb + Lay::VBYTES + Lay::PBYTES);
        // Alpha multiplies the chains before each tile's first key.
        if (crun) {  // public
#pragma unroll
            for (int k = 0; k < TPS; ++k) {
#pragma unroll
                for (int q = 0; q < RPW; ++q) {
#pragma unroll
                    for (int c = 0; c < CPL; ++c) acc[q][c] = __fmul_rn(acc[q][c], as[min(warp + 4 * q, R - 1) * TPS + k]);
                    lq[q] = __fmul_rn(lq[q], as[min(warp + 4 * q, R - 1) * TPS + k]);
                }
                // (Unrolled four times (f32: not at all), not sixteen: fully unrolled, the ptxas
                // of sm_100 and sm_120 put a value on the stack.)
#pragma unroll 4
                for (int jj = k * TILE; jj < (k + 1) * TILE; jj += 4) {
                    float v[4][CPL];
                    unsigned vb[4];  // all ones when one of the lane's V elements of the key is non-finite
#pragma unroll
                    for (int u = 0; u < 4; ++u) {
                        E::template widen<CPL>(vs + (jj + u) * Sh::DS + CPL * lane, v[u]);
                        vb[u] = 0u;
                        if (PROP) {
                            vb[u] = nonfinite_mask(v[u][0]);
                            v[u][0] = sanitize(v[u][0]);
#pragma unroll
                            for (int c = 1; c < CPL; ++c) {
                                vb[u] |= nonfinite_mask(v[u][c]);
                                v[u][c] = sanitize(v[u][c]);
                            }
                        }
                    }
#pragma unroll
                    for (int q = 0; q < RPW; ++q) {
                        const float4 p4 =
                            *reinterpret_cast<const float4*>(ps + min(warp + 4 * q, R - 1) * Sh::PS + jj);
#pragma unroll
                        for (int c = 0; c < CPL; ++c) {
                            acc[q][c] = __fmaf_rn(p4.x, v[0][c], acc[q][c]);
                            acc[q][c] = __fmaf_rn(p4.y, v[1][c], acc[q][c]);
                            acc[q][c] = __fmaf_rn(p4.z, v[2][c], acc[q][c]);
                            acc[q][c] = __fmaf_rn(p4.w, v[3][c], acc[q][c]);
                        }
                        // The row's l chain (every lane and slice runs it; slice 0's lane 0 stores it).
                        lq[q] = __fadd_rn(lq[q], p4.x);
                        lq[q] = __fadd_rn(lq[q], p4.y);
                        lq[q] = __fadd_rn(lq[q], p4.z);
                        lq[q] = __fadd_rn(lq[q], p4.w);
                        if (PROP) {
                            // A valid key has p ≠ 0 (dec_weights); a selection, not a branch.
                            const unsigned hit = (mask_of(p4.x != 0.0f) & vb[0]) | (mask_of(p4.y != 0.0f) & vb[1]) |
                                                 (mask_of(p4.z != 0.0f) & vb[2]) | (mask_of(p4.w != 0.0f) & vb[3]);
                            bad |= hit & (1u << q);
                        }
                    }
                }
            }
        }
    }
#pragma unroll
    for (int q = 0; q < RPW; ++q) {
        const int r = warp + 4 * q;
        if (slice == 0 && lane == 0 && r < R) P.l[rbase + r] = lq[q];  // public
#pragma unroll
        for (int c = 0; c < CPL; ++c)
            if (r < R && CPL * lane + c < dlim) P.acc[(rbase + r) * P.D + c0 + CPL * lane + c] = acc[q][c];  // public
    }
    // The slice's bad-V flag per row (§7), ORed over the block: exact and order-free.
    unsigned rows = 0u;  // bit r: row r
#pragma unroll
    for (int q = 0; q < RPW; ++q) rows |= (CPL * lane < dlim ? (bad >> q) & 1u : 0u) << min(warp + 4 * q, 31);
    dec_values_bad<Sh::NT>(P, P.bv + rbase * P.nslice + slice, rows);
}

// The narrow shape (W false; above): warp 0 the chains, warp 1 widens, warp 2 copies. Block
// nslice runs the l chains instead (lane r of warp 0: row r), warp 2 copying the weights.
template <class E, int RP, int RPW, bool PROP, bool LBLOCK>
__device__ __forceinline__ void dec_values_narrow(const DecParams& P, const DecHead& H, int slice, unsigned char* dsb) {
    typedef typename E::T T;
    typedef DecVShape<E, false> Sh;
    typedef DecVLayout<E, RP, false> Lay;
    constexpr int TPS = Sh::TPS, NS = Lay::NS, DS = Sh::DS;
    constexpr int NG = Sh::VK / 4;  // groups of four keys a stage
    constexpr int GW = 4 * DS;      // floats of a widened group: [DS][4]
    // Groups a chain lane's operands are loaded ahead; 16 rows (four chains a lane) take a shorter
    // ring, which keeps their operands within registers.
    constexpr int DR = RPW == 4 ? 2 : 4;
    static_assert(DS == 8 && Sh::VK == 2 * TILE && NG == 32 && Sh::NT == 96 && Sh::CT == 32,
                  "a chain warp of 4 rows x 8 columns, 32 groups a stage, a widening and a copying warp");
    // The warp index through a shuffle: ptxas then knows it uniform in a warp, so the branches on
    // the role below need no reconvergence blocks (bf16: BSSY 110 -> 68; dec_values at dec1 -4 %,
    // docs/perf.md).
    const int tid = threadIdx.x, lane = tid & 31, warp = __shfl_sync(0xFFFFFFFFu, tid >> 5, 0);
    const bool chain = warp == 0, widener = warp == 1, copier = warp == 2;  // public
    const int R = P.R;
    const int ntile = P.xpad / TILE;
    const long long rbase = (long long)H.bkv * R;
    const int nst = (H.kl + Sh::VK - 1) / Sh::VK;  // stages up to the last row's last valid key
    const int c0 = LBLOCK ? 0 : slice * DS;
    const int dlim = P.D - c0;  // columns of the slice that exist: min(DS, dlim)
    const T* vbase = (const T*)P.v + (H.b * P.v_bs + H.kvh * P.v_hs) + c0;
    const DecVLoads<E, RP, LBLOCK, false> loads(P, vbase, rbase, ntile, dlim, lane);
    float* wb = reinterpret_cast<float*>(dsb + NS * Lay::STAGE);  // WID: two widened stages in turn
    // Chain lane (rq, c): column c of the slice, rows rq + 4k. Widening lane (cw, kk): column cw,
    // the keys 4g + kk of a stage.
    const int c = lane & 7, rq = lane >> 3;
    const int cw = lane >> 2, kk = lane & 3;
    float acc[RPW];
#pragma unroll
    for (int q = 0; q < RPW; ++q) acc[q] = 0.0f;
    float l = 0.0f;       // the l block's chain (lane r of warp 0: row r)
    unsigned rows = 0u;   // bit r: a valid key of row r has a non-finite V element in this thread's columns
    const int lrow = min(lane, R - 1);
    if (copier) {  // public
#pragma unroll 1
        for (int st = 0; st < NS - 2; ++st) loads.issue(P, dsb, st, nst);
    }
    // Iteration st: warp 1 widens stage st, warp 0 runs the chains over stage st - 1. The ring
    // buffer warp 2 refills held stage st - 2, and the widened buffer warp 1 writes held stage
    // st - 2 too: both done with at the barrier.
#pragma unroll 1
    for (int st = 0; st <= nst; ++st) {
        if (copier) cp_wait<NS - 3>();  // public
        __syncthreads();  // stage st has landed; stage st - 1 is widened; stage st - 2 is free
        unsigned nfb = 0u;  // (WID, PROP) warp 1, bit g: key 4g + kk of stage st is non-finite in column cw
        const unsigned char* sw = dsb + (st % NS) * Lay::STAGE;
        if (copier) {  // public
            loads.issue(P, dsb, st + NS - 2, nst);
        } else if (widener) {  // public
            if (Sh::WID && !LBLOCK && st < nst) {  // public
                const T* vs = reinterpret_cast<const T*>(sw) + kk * DS + cw;
                float* w = wb + (st & 1) * (NG * GW) + cw * 4 + kk;
                // Every load before the first store: ptxas keeps shared loads and stores it cannot
                // tell apart in source order, so a load, widen and store after another waits on
                // every load.
                float v[NG];
#pragma unroll
                for (int g = 0; g < NG; ++g) v[g] = E::widen1(vs[g * GW]);
#pragma unroll
                for (int g = 0; g < NG; ++g) {
                    if (PROP) {
                        nfb |= nonfinite_mask(v[g]) & (1u << g);
                        v[g] = sanitize(v[g]);
                    }
                    w[g * GW] = v[g];
                }
            }
        }
        if (Sh::WID && PROP && !LBLOCK) {
            // Bit g of lane (cw, kk): key 4g + kk is non-finite in one of the slice's 8 columns.
            // (The shuffles run in every warp, outside the branches on the warp: a collective
            // under a branch ptxas cannot prove uniform is an ENDCOLLECTIVE, which the audit
            // rejects.)
            for (int o = 4; o < 32; o <<= 1) nfb |= __shfl_xor_sync(0xFFFFFFFFu, nfb, o);
            if (widener && st < nst) {  // public
                // Lane (cw, kk) checks the keys 4g + kk of groups g = cw + 8t against each row's
                // weights (a valid key has p ≠ 0): selections, no branch on a value.
                const int g0 = cw;
                const float* ps = reinterpret_cast<const float*>(sw + Lay::VBYTES) + 4 * g0 + kk;
#pragma unroll 1
                for (int r = 0; r < R; ++r) {  // public bound
                    unsigned hr = 0u;
#pragma unroll
                    for (int t = 0; t < NG / 8; ++t) hr |= (nfb >> (g0 + 8 * t)) & mask_of(ps[r * Sh::PS + 32 * t] != 0.0f);
                    rows |= (hr & 1u) << r;
                }
            }
        }
        if (chain && st > 0) {  // public
            const unsigned char* sb = dsb + ((st - 1) % NS) * Lay::STAGE;
            const float* ps = reinterpret_cast<const float*>(sb + Lay::VBYTES);
            const float* as = reinterpret_cast<const float*>(sb + Lay::VBYTES + Lay::PBYTES);
            if (LBLOCK) {
                if (warp == 0) {  // public
                    // The same register ring as the column chains, so that this block keeps up
                    // with them (a load a group just before its additions waits out the load's
                    // latency every four keys).
                    const float* pr = ps + lrow * Sh::PS;
                    float4 lr[4];
#pragma unroll
                    for (int d = 0; d < 4; ++d) lr[d] = *reinterpret_cast<const float4*>(pr + 4 * d);
#pragma unroll
                    for (int k = 0; k < TPS; ++k) {
                        l = __fmul_rn(l, as[lrow * TPS + k]);
#pragma unroll
                        for (int g = k * (TILE / 4); g < (k + 1) * (TILE / 4); ++g) {
                            const float4 p4 = lr[g % 4];
                            lr[g % 4] = *reinterpret_cast<const float4*>(pr + 4 * min(g + 4, NG - 1));
                            l = __fadd_rn(l, p4.x);
                            l = __fadd_rn(l, p4.y);
                            l = __fadd_rn(l, p4.z);
                            l = __fadd_rn(l, p4.w);
                        }
                    }
                }
            } else {
                const float* wv = wb + ((st - 1) & 1) * (NG * GW) + c * 4;
                const T* vs = reinterpret_cast<const T*>(sb) + c;
                // Four keys' v of the lane's column: widened (one 16-byte load), or f32 raw.
                auto ldv = [&](int g) -> float4 {
                    if (Sh::WID) return *reinterpret_cast<const float4*>(wv + g * GW);
                    return make_float4(E::widen1(vs[(4 * g) * DS]), E::widen1(vs[(4 * g + 1) * DS]),
                                       E::widen1(vs[(4 * g + 2) * DS]), E::widen1(vs[(4 * g + 3) * DS]));
                };
                auto ldp = [&](int q, int g) -> float4 {
                    return *reinterpret_cast<const float4*>(ps + min(rq + 4 * q, R - 1) * Sh::PS + 4 * g);
                };
                // Each group's operands loaded DR groups before its FFMAs, into slots the source
                // names (scripts/probe_chain_issue.cu: a lone warp then runs near the FFMA latency).
                float4 vr[DR], pr[DR][RPW];
#pragma unroll
                for (int d = 0; d < DR; ++d) {
                    vr[d] = ldv(d);
#pragma unroll
                    for (int q = 0; q < RPW; ++q) pr[d][q] = ldp(q, d);
                }
#pragma unroll
                for (int k = 0; k < TPS; ++k) {
                    // Alpha multiplies the chains before each tile's first key.
#pragma unroll
                    for (int q = 0; q < RPW; ++q) acc[q] = __fmul_rn(acc[q], as[min(rq + 4 * q, R - 1) * TPS + k]);
                    // Group g from ring slot sl, whose operands are then reloaded for group gn.
                    auto group = [&](int sl, int gn) {
                        float4 v4 = vr[sl], p4[RPW];
#pragma unroll
                        for (int q = 0; q < RPW; ++q) p4[q] = pr[sl][q];
                        vr[sl] = ldv(gn);
#pragma unroll
                        for (int q = 0; q < RPW; ++q) pr[sl][q] = ldp(q, gn);
                        unsigned vb[4] = {0u, 0u, 0u, 0u};  // (f32, PROP) all ones: the key's element is non-finite
                        if (!Sh::WID && PROP) {
                            vb[0] = nonfinite_mask(v4.x), v4.x = sanitize(v4.x);
                            vb[1] = nonfinite_mask(v4.y), v4.y = sanitize(v4.y);
                            vb[2] = nonfinite_mask(v4.z), v4.z = sanitize(v4.z);
                            vb[3] = nonfinite_mask(v4.w), v4.w = sanitize(v4.w);
                        }
#pragma unroll
                        for (int q = 0; q < RPW; ++q) {
                            acc[q] = __fmaf_rn(p4[q].x, v4.x, acc[q]);
                            acc[q] = __fmaf_rn(p4[q].y, v4.y, acc[q]);
                            acc[q] = __fmaf_rn(p4[q].z, v4.z, acc[q]);
                            acc[q] = __fmaf_rn(p4[q].w, v4.w, acc[q]);
                            if (!Sh::WID && PROP) {
                                const unsigned hit = (mask_of(p4[q].x != 0.0f) & vb[0]) | (mask_of(p4[q].y != 0.0f) & vb[1]) |
                                                     (mask_of(p4[q].z != 0.0f) & vb[2]) | (mask_of(p4[q].w != 0.0f) & vb[3]);
                                rows |= (hit & 1u) << min(rq + 4 * q, 31);
                            }
                        }
                    };
                    // The reloads past the stage's last group read its last group again, unused
                    // (no branch). 2-byte V fully unrolled, so that a slot is a register (rolled,
                    // ptxas moved every slot into the next one each iteration: ~1.4 instructions a
                    // key); f32 rolled by DR groups (unrolled, its four loads a group, hoisted by
                    // ptxas, spilled).
                    if (Sh::WID) {
#pragma unroll
                        for (int g = k * (TILE / 4); g < (k + 1) * (TILE / 4); ++g) group(g % DR, min(g + DR, NG - 1));
                    } else {
#pragma unroll 1
                        for (int g0 = k * (TILE / 4); g0 < (k + 1) * (TILE / 4); g0 += DR)
#pragma unroll
                            for (int sl = 0; sl < DR; ++sl) group(sl, min(g0 + sl + DR, NG - 1));
                    }
                }
            }
        }
    }
    if (LBLOCK) {
        if (warp == 0 && lane < R) P.l[rbase + lane] = l;  // public
        return;
    }
    if (chain) {  // public
#pragma unroll
        for (int q = 0; q < RPW; ++q) {
            const int r = rq + 4 * q;
            if (r < R && c < dlim) P.acc[(rbase + r) * P.D + c0 + c] = acc[q];  // public
        }
        rows &= c < dlim ? ~0u : 0u;  // (a column past the slice reads zeros: never a hit)
    }
    dec_values_bad<Sh::NT>(P, P.bv + rbase * P.nslice + slice, rows);
}

template <class E, bool W>
__device__ void dec_values(const DecParams& P) {
    extern __shared__ __align__(16) unsigned char dsb[];
    const DecHead H = dec_head(P);
    const int slice = (int)blockIdx.x;
    // The stage's rows and the rows per warp or lane at compile time (R: public; the host sizes
    // the shared memory by R the same way); non-finite handling by the policy.
#define DA_VR(RP, RPW)                                                                  \
    do {                                                                                \
        if (W) {                                                                        \
            if (P.propagate) dec_values_run<E, RP, RPW, true>(P, H, slice, dsb);        \
            else dec_values_run<E, RP, RPW, false>(P, H, slice, dsb);                   \
        } else if (slice == P.nslice) {                                                 \
            dec_values_narrow<E, RP, 1, false, true>(P, H, slice, dsb);                 \
        } else {                                                                        \
            if (P.propagate) dec_values_narrow<E, RP, RPW, true, false>(P, H, slice, dsb); \
            else dec_values_narrow<E, RP, RPW, false, false>(P, H, slice, dsb);         \
        }                                                                               \
    } while (0)
    if (P.R <= DEC_RSMALL) {
        DA_VR(DEC_RSMALL, 1);
    } else if (P.R <= 8) {
        DA_VR(DEC_R, 2);
    } else {
        DA_VR(DEC_R, 4);
    }
#undef DA_VR
}

// §5 and §7 for one row (blockIdx.x = r) of one KV head: the row's bad flag (its Q row, the bad
// keys of dec_scores and the bad V slices of dec_values, ORed: exact and order-free), then the
// division and the rounding, one thread per column.
constexpr int DEC_FT = 128;
template <class E>
__device__ void dec_finish(const DecParams& P) {
    typedef typename E::T T;
    __shared__ unsigned redb[DEC_FT / 32];
    const int tid = threadIdx.x;
    const DecHead H = dec_head(P);
    const int r = (int)blockIdx.x;
    const long long row = (long long)H.bkv * P.R + r;
    int h, i;
    dec_row(P, H.kvh, r, h, i);
    const T* qrow = (const T*)P.q + (H.b * P.q_bs + h * P.q_hs + i * P.q_ss);
    unsigned bad = 0u;
    for (int d = tid; d < P.D; d += DEC_FT) bad |= nonfinite_mask(E::load(qrow, d));
    const int ntile = P.xpad / TILE;
    for (int t = tid; t < ntile; t += DEC_FT) bad |= P.bk[row * ntile + t];
    for (int s = tid; s < P.nslice; s += DEC_FT) bad |= P.bv[row * P.nslice + s];
    for (int o = 16; o > 0; o >>= 1) bad |= __shfl_xor_sync(0xFFFFFFFFu, bad, o);
    if ((tid & 31) == 0) redb[tid >> 5] = bad;
    __syncthreads();
    bad = 0u;
#pragma unroll
    for (int w = 0; w < DEC_FT / 32; ++w) bad |= redb[w];
    const bool poisoned = (P.propagate != 0) & (bad != 0u);
    const float ls = l_safe(P.l[row]);
    const float rl = recip(ls);
    T* orow = (T*)P.out + (H.b * P.o_bs + h * P.o_hs + i * P.o_ss);
    for (int d = tid; d < P.D; d += DEC_FT)
        store_out<E>(orow, d, finalize_r(P.acc[row * P.D + d], ls, rl, E::maxt()), poisoned);
    // (After the output: placed before it, sm_120's ptxas moved the row's reciprocal to the
    // uniform datapath, whose float opcodes the Exact path does not allow.)
    if (P.lse != nullptr) {  // a launch fact
        // §10 needs the row's final maximum: that of its tile maxima (exact, order-free; tiles
        // with no valid key hold −FLT_MAX), as dec_weights' chain ends with it.
        __shared__ float redm[DEC_FT / 32];
        float m = -DA_FLT_MAX;
        const int nt = (H.kl + TILE - 1) / TILE;  // tiles dec_scores wrote (position)
        for (int t = tid; t < nt; t += DEC_FT) m = fmaxf(m, P.tm[row * ntile + t]);
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
        if ((tid & 31) == 0) redm[tid >> 5] = m;
        __syncthreads();
        if (tid == 0) {
            m = -DA_FLT_MAX;
#pragma unroll
            for (int w = 0; w < DEC_FT / 32; ++w) m = fmaxf(m, redm[w]);
            P.lse[H.b * P.lse_bs + h * P.lse_hs + i] = row_lse(__fadd_rn(m, 0.0f), P.l[row], poisoned);
        }
    }
}

// dec_scores declares ten blocks per SM as its minimum (96 registers): with one, ptxas took up
// to 217 registers once the K copy was by units (8 blocks), and without any the ptxas of sm_86
// and sm_120 kept a value on the stack (the audit forbids local memory); dec_values must not
// (with any minimum, ptxas puts its chains' arrays on the stack); dec_values_wide declares one
// (without it, the ptxas of sm_100 and sm_120 kept addresses on the stack; with it, 210-227
// registers on sm_80-sm_90, two blocks an SM: audit/rules.toml).
#define DA_DEC(E, SUF)                                                                                          \
    extern "C" __global__ void __launch_bounds__(DEC_ST, 10) detattn_dec_scores_##SUF(const DecParams P) { dec_scores<E>(P); } \
    extern "C" __global__ void __launch_bounds__(DEC_NT) detattn_dec_scores_wide_##SUF(const DecParams P) { dec_scores_wide<E>(P); } \
    extern "C" __global__ void __launch_bounds__(DEC_NT) detattn_dec_weights_##SUF(const DecParams P) { dec_weights<E>(P); } \
    extern "C" __global__ void __launch_bounds__(96, 4) detattn_dec_values_##SUF(const DecParams P) { dec_values<E, false>(P); } \
    extern "C" __global__ void __launch_bounds__(DEC_VT, 1) detattn_dec_values_wide_##SUF(const DecParams P) { dec_values<E, true>(P); } \
    extern "C" __global__ void __launch_bounds__(DEC_FT) detattn_dec_finish_##SUF(const DecParams P) { dec_finish<E>(P); }
DA_DEC(ElemF32, f32)
DA_DEC(ElemF16, f16)
DA_DEC(ElemBf16, bf16)

// The decode launch table, read by the host (src/cuda/exact.rs, DecCfg): {rows per KV head at
// most, threads of dec_scores_wide and dec_weights, threads of dec_scores (one key each),
// threads of dec_values, columns per dec_values block, keys per dec_weights block (the padding of
// the score rows), dec_finish threads, the largest head dim of dec_scores (past it
// dec_scores_wide), dec_values' dynamic shared bytes for 2-byte and for 4-byte elements, groups
// per dec_weights block, the rows of dec_values' smaller stage, and its dynamic shared bytes for
// 2-byte and 4-byte elements (dec_values takes the smaller stage when R is at most its rows),
// then the same for dec_values_wide: threads, columns, dynamic shared bytes (2-byte, 4-byte) of
// the stage of DEC_R rows and of the smaller stage}.
// dec_scores takes dec_scores_smem(D, element size, R) dynamic shared bytes, which the host mirrors.
extern "C" __constant__ int detattn_dec_cfg[20] = {
    DEC_R, DEC_NT, DEC_ST, DecVShape<ElemF32, false>::NT, DecVShape<ElemF32, false>::DS, DEC_KT, DEC_FT, DEC_DMAX,
    DecVLayout<ElemF16, DEC_R, false>::SMEM, DecVLayout<ElemF32, DEC_R, false>::SMEM, DEC_WK,
    DEC_RSMALL, DecVLayout<ElemF16, DEC_RSMALL, false>::SMEM, DecVLayout<ElemF32, DEC_RSMALL, false>::SMEM,
    DEC_VT, DecVShape<ElemF32, true>::DS,
    DecVLayout<ElemF16, DEC_R, true>::SMEM, DecVLayout<ElemF32, DEC_R, true>::SMEM,
    DecVLayout<ElemF16, DEC_RSMALL, true>::SMEM, DecVLayout<ElemF32, DEC_RSMALL, true>::SMEM};

// ------------------------------------------------------------------------------ paged KV gather

// A paged KV cache into the contiguous [B, Hkv, Skv, D] tensors it stands for, for the device
// entry point of paged caches (src/cuda/paged.rs): both paths then run on those tensors, so a
// paged cache gives the contiguous bits by construction. A plain copy, in units of U (2 bytes,
// or 16 when every address and stride allows): element bits move, never change. Mirrored by
// `GatherArgs` in src/cuda/paged.rs (same field order); audit/rules.toml names its byte ranges.
//
// Constant time: addresses depend on the block table and the sequences' rows and lengths only
// (public: docs/threat-model.md); the copied values enter no branch and no address.
struct Gather {
    const void* src;        // pages: unit u of row (page, h, r) at src + page*p_bs + h*p_hs + r*p_ss + u
    void* dst;              // [B, Hkv, Skv, units] contiguous; rows not copied keep their zeros
    const int* table;       // [S, max_pages] page numbers (public)
    const int* seqs;        // [S, 3]: batch element, first row, key length (public)
    long long p_bs, p_hs, p_ss;  // page strides, in units
    int S, Hkv, Skv, units, max_pages, page_shift;
};

constexpr int GATHER_THREADS = 256;
constexpr int GATHER_ROWS = 32;  // rows per block: warp w copies rows w, w + 8, ...

// Block (x, y, z): rows 32x .. 32x + 31 of head y of sequence z (the host keeps y and z within
// the grid's limits). Each warp copies a row at a time, its lanes striding the row's units.
template <typename U>
__device__ __forceinline__ void gather(const Gather G) {
    const int s = blockIdx.z, h = blockIdx.y;
    if (s >= G.S || h >= G.Hkv) return;
    const int batch = G.seqs[3 * s], row0 = G.seqs[3 * s + 1], len = G.seqs[3 * s + 2];
    const int in_page = (1 << G.page_shift) - 1;
    const int lane = threadIdx.x & 31;
    const U* src = (const U*)G.src + h * G.p_hs;
    U* dst = (U*)G.dst + (((long long)batch * G.Hkv + h) * G.Skv + row0) * G.units;
#pragma unroll 1
    for (int r = threadIdx.x >> 5; r < GATHER_ROWS; r += GATHER_THREADS / 32) {
        const int j = blockIdx.x * GATHER_ROWS + r;
        if (j >= len) return;
        const long long page = G.table[(long long)s * G.max_pages + (j >> G.page_shift)];
        const U* from = src + page * G.p_bs + (long long)(j & in_page) * G.p_ss;
        U* to = dst + (long long)j * G.units;
#pragma unroll 1
        for (int u = lane; u < G.units; u += 32) to[u] = from[u];
    }
}

extern "C" __global__ void __launch_bounds__(GATHER_THREADS) detattn_kv_gather_u16(const Gather G) { gather<unsigned short>(G); }
extern "C" __global__ void __launch_bounds__(GATHER_THREADS) detattn_kv_gather_u128(const Gather G) { gather<uint4>(G); }
