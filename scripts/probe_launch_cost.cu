// What does one kernel launch cost the host on this machine, before detattn does anything of its
// own? `detattn bench` reports the host's time to enqueue a call (host_us): ~5.5 µs for one
// TensorCore launch, ~10 for a split decode's two, ~19.5 for the Exact decode's four on an H200
// (docs/perf.md, "A call's host time"). This probe times bare launches of empty kernels through the
// driver API (as the crate launches: cuLaunchKernel with a pointer per parameter, with one packed
// buffer, and cuLaunchKernelEx with programmatic stream serialisation), 64 launches back to back
// between synchronisations, the host's time only.
//
//   nvcc -arch=sm_90a -O3 -o /tmp/probe_launch scripts/probe_launch_cost.cu -lcuda && /tmp/probe_launch
//
// Not part of the crate or its tests: a measurement aid, its output recorded in docs/perf.md.
#include <cuda.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>

struct Args36 {  // the TensorCore kernels' parameter block: 240 bytes
    long long w[30];
};
extern "C" __global__ void empty1(int) {}
extern "C" __global__ void empty36(long long a0, long long a1, long long a2, long long a3, long long a4,
                                   long long a5, long long a6, long long a7, long long a8, long long a9,
                                   long long a10, long long a11, long long a12, long long a13, long long a14,
                                   long long a15, long long a16, int b0, int b1, int b2, int b3, int b4, int b5,
                                   int b6, int b7, int b8, float f, int t, long long p, int c, long long l,
                                   long long l1, long long l2, long long tb, int ps, int mp) {}

int main() {
    cudaFree(0);  // the runtime's primary context, current on this thread
    CUcontext ctx;
    cuCtxGetCurrent(&ctx);
    cudaFunction_t g1, g36;  // the runtime's handles of the two kernels are driver CUfunctions
    cudaGetFuncBySymbol(&g1, (const void*)empty1);
    cudaGetFuncBySymbol(&g36, (const void*)empty36);
    CUfunction f1 = (CUfunction)g1, f36 = (CUfunction)g36;
    CUstream s;
    cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    long long vals[40] = {0};
    void* ptrs[40];
    for (int i = 0; i < 40; ++i) ptrs[i] = &vals[i];
    Args36 packed{};
    size_t psize = 240;
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &psize, CU_LAUNCH_PARAM_END};
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg{};
    cfg.gridDimX = 1; cfg.gridDimY = 1; cfg.gridDimZ = 1;
    cfg.blockDimX = 128; cfg.blockDimY = 1; cfg.blockDimZ = 1;
    cfg.hStream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    auto time = [&](const char* name, auto launch) {
        std::vector<double> us;
        for (int rep = 0; rep < 40; ++rep) {
            cuStreamSynchronize(s);
            auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < 64; ++i) launch();
            auto t1 = std::chrono::steady_clock::now();
            if (rep >= 5) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 64);
        }
        cuStreamSynchronize(s);
        std::sort(us.begin(), us.end());
        printf("%-58s %6.2f us a launch (median of %zu, host only)\n", name, us[us.size() / 2], us.size());
    };
    time("cuLaunchKernel, 1 int parameter", [&] { cuLaunchKernel(f1, 1, 1, 1, 128, 1, 1, 0, s, ptrs, nullptr); });
    time("cuLaunchKernel, 36 parameters, a pointer each", [&] { cuLaunchKernel(f36, 1, 1, 1, 128, 1, 1, 0, s, ptrs, nullptr); });
    time("cuLaunchKernel, 36 parameters, one packed buffer", [&] { cuLaunchKernel(f36, 1, 1, 1, 128, 1, 1, 0, s, nullptr, extra); });
    time("cuLaunchKernelEx (programmatic serialisation), 36 pointers", [&] { cuLaunchKernelEx(&cfg, f36, ptrs, nullptr); });
    time("cuCtxSetCurrent + cuLaunchKernel, 1 int parameter", [&] {
        cuCtxSetCurrent(ctx);
        cuLaunchKernel(f1, 1, 1, 1, 128, 1, 1, 0, s, ptrs, nullptr);
    });
    const char* e = cudaGetErrorString(cudaGetLastError());
    printf("last runtime error: %s\n", e);
    return 0;
}
