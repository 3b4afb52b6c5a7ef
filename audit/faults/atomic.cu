// Planted fault: an atomic float add (order-dependent rounding, contention timing). The audit must
// report the RED/ATOM opcode as forbidden.
extern "C" __global__ void audit_fault_atomic(float* out, const float* in, const int* lens, int n) {
    const unsigned row = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(&out[blockIdx.x], in[row]);
}
