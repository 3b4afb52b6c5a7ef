// Planted fault: a table lookup indexed by a secret value (cache-timing leak). The audit must report
// rule taint-address on the load whose address derives from the secret.
extern "C" __global__ void audit_fault_address(float* out, const float* in, const int* lens, int n) {
    const unsigned row = blockIdx.x * blockDim.x + threadIdx.x;
    const int k = __float_as_int(in[row]) & 255;
    out[row] = in[n + k];
}
