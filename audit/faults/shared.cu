// Planted fault: secret data stored to shared memory, read back by another thread, and used as a
// loop bound. The taint must flow through shared memory (STS -> LDS) to the loop's BRA.
extern "C" __global__ void audit_fault_shared(float* out, const float* in, const int* lens, int n) {
    __shared__ int s[128];
    const unsigned t = threadIdx.x;
    const unsigned row = blockIdx.x * blockDim.x + t;
    s[t & 127] = __float_as_int(in[row]) & 15;
    __syncthreads();
    const int k = s[(t + 1) & 127];
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) {
        acc = __fmaf_rn(acc, 0.5f, 1.0f);
    }
    out[row] = acc;
}
