// Test and benchmark kernels of gpukit-sched (compiled at run time through gpukit-jit).

// Each block records the SM it ran on (%smid) and then spins `spin` clock cycles so that the
// blocks spread over every SM the launch may use.
extern "C" __global__ void record_smid(unsigned int* out, int n, long long spin) {
    unsigned int smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (threadIdx.x == 0 && blockIdx.x < n) {
        out[blockIdx.x] = smid;
    }
    long long t0 = clock64();
    while (clock64() - t0 < spin) {
    }
}

// Compute-bound: four independent FMA chains per thread, `iters` rounds. Every block does the
// same work, so throughput scales with the SMs the launch gets. Writes one value per thread so
// the compiler keeps the arithmetic.
extern "C" __global__ void fma_spin(float* out, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float a = 1.0f + threadIdx.x * 1e-6f, b = 0.5f + blockIdx.x * 1e-7f, c = 0.25f, d = 0.125f;
    const float m = 0.9999f, k = 1e-4f;
    for (int r = 0; r < iters; ++r) {
        a = fmaf(a, m, k);
        b = fmaf(b, m, k);
        c = fmaf(c, m, k);
        d = fmaf(d, m, k);
    }
    out[i] = a + b + c + d;
}

// Spins for `cycles` clock cycles on every thread of every block: a GPU-filling hog when
// launched with many blocks, a ~5 us latency probe when launched with one small block.
extern "C" __global__ void spin_cycles(unsigned int* flag, long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    if (threadIdx.x == 0 && blockIdx.x == 0 && flag) {
        atomicAdd(flag, 1u);
    }
}

// Does nothing: for launch-overhead measurements.
extern "C" __global__ void noop(int x) {
    if (x == 0x7fffffff) {
        asm volatile("trap;");
    }
}

// Runs until the host sets `*flag` (a kernel that "never ends" until released): one thread
// polls, with a short sleep between reads.
extern "C" __global__ void wait_flag(const volatile unsigned int* flag) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        while (*flag == 0) {
            __nanosleep(1000);
        }
    }
}

// Stores `v` at `p`: with an address outside every allocation, an illegal address on purpose.
extern "C" __global__ void poke(unsigned int* p, unsigned int v) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        *p = v;
    }
}
