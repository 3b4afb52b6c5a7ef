// Planted fault: a local array indexed at run time, which lives in local memory (STL/LDL, stack > 0),
// the same instructions and budget breach a register spill produces. The indices come from the public
// `lens` buffer, so this kernel trips only the local-memory rules, not the taint pass.
extern "C" __global__ void audit_fault_spill(float* out, const float* in, const int* lens, int n) {
    const unsigned row = blockIdx.x * blockDim.x + threadIdx.x;
    float buf[32];
    for (int j = 0; j < 32; ++j) {
        buf[j] = 0.0f;
    }
    const int len = lens[0];
    const int step = lens[1];
    for (int j = 0; j < len; ++j) {
        buf[(j * step) & 31] = __fadd_rn(buf[(j * step) & 31], in[row * n + j]);
    }
    out[row] = buf[lens[2] & 31];
}
