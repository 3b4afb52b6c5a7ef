// Planted fault: expf, which NVRTC lowers to an FFMA range reduction plus MUFU.EX2 (an approximate
// hardware unit). The audit must report MUFU as forbidden on the Exact path.
extern "C" __global__ void audit_fault_mufu(float* out, const float* in, const int* lens, int n) {
    const unsigned row = blockIdx.x * blockDim.x + threadIdx.x;
    out[row] = expf(in[row]);
}
