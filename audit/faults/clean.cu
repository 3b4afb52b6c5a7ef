// Clean control kernel: the audit must PASS it. It does what the Exact kernel does in miniature:
// a loop whose bound comes from a public buffer (`lens`, declared public in audit/rules.toml), secret
// loads at addresses that depend only on public values, a running maximum by selection (FSEL/FMNMX,
// no branch), secret data through shared memory read back at public addresses, and explicit
// round-to-nearest arithmetic (no division, no transcendental).
// Signature shared by every planted fault: (float* out, const float* in, const int* lens, int n).
extern "C" __global__ void audit_clean(float* out, const float* in, const int* lens, int n) {
    __shared__ float tile[128];
    const unsigned t = threadIdx.x;
    const unsigned row = blockIdx.x * blockDim.x + t;
    const int len = lens[blockIdx.x];  // public: loop bound
    float acc = 0.0f;
    float m = -3.0e38f;
    for (int j = 0; j < len; ++j) {
        const float x = in[row * n + j];   // secret value, public address
        m = x > m ? x : m;                  // selection, not a branch
        acc = __fmaf_rn(x, 0.5f, acc);
    }
    tile[t & 127] = acc;                    // secret value into shared memory
    __syncthreads();
    const float other = tile[(t + 1) & 127];  // public address
    out[row] = __fadd_rn(__fmul_rn(other, m), acc);
}
