// Planted fault: a branch on a value loaded from the secret input (an early exit / skipped loop when
// the value is not positive). The audit must report rule taint-branch on the BRA (or EXIT).
extern "C" __global__ void audit_fault_branch(float* out, const float* in, const int* lens, int n) {
    const unsigned row = blockIdx.x * blockDim.x + threadIdx.x;
    const float x = in[row];
    float acc = 0.0f;
    if (x > 0.0f) {  // secret-dependent control flow
        for (int j = 0; j < lens[blockIdx.x]; ++j) {
            acc = __fmaf_rn(in[row * n + j], x, acc);
        }
    }
    out[row] = acc;
}
