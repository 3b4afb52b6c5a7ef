// Planted fault: an IEEE float division written with `/` (prec-div=true). NVRTC emits MUFU.RCP plus an
// FCHK test and a CALL to a slow-path subroutine taken for special operands: all three are forbidden,
// and the branch to the slow path is guarded by a predicate computed from secret data.
extern "C" __global__ void audit_fault_div(float* out, const float* in, const int* lens, int n) {
    const unsigned row = blockIdx.x * blockDim.x + threadIdx.x;
    out[row] = in[row] / in[row + n];
}
