// Planted fault: an mbarrier wait (the TMA kernels' way to wait for a stage) whose phase comes from
// the secret input, so that how long a thread waits, and whether it waits at all, depends on a
// value. The audit must report rule taint-barrier on the SYNCS that tests the phase (and
// taint-branch on the loop around it). sm_90 and later only (mbarrier.try_wait); on older
// architectures the kernel is a plain copy, which test_audit.py does not check. The wait is
// kernels/tensorcore.cu's mbar_wait written out: each fault file compiles on its own.
extern "C" __global__ void audit_fault_wait(float* out, const float* in, const int* lens, int n) {
    const unsigned row = blockIdx.x * blockDim.x + threadIdx.x;
    const float x = in[row];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ unsigned long long bar;
    const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
    if (threadIdx.x == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(b), "r"(lens[0]) : "memory");
    __syncthreads();
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(b) : "memory");
    const unsigned parity = x > 0.0f ? 1u : 0u;  // secret-dependent phase
    asm volatile(
        "{\n"
        ".reg .pred P1;\n"
        "WAIT_AGAIN:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
        "@!P1 bra WAIT_AGAIN;\n"
        "}\n" ::"r"(b),
        "r"(parity)
        : "memory");
#endif
    out[row] = x;
}
