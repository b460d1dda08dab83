// Test kernels for gpukit-jit's integration tests.
#include "scale_factor.h"

extern "C" __global__ void scale(float* x, float factor, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) x[idx] *= factor * SCALE_UNIT;
}

template <typename T>
__global__ void axpy(T* y, const T* x, T alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += alpha * x[i];
}

// Reverses n <= blockDim.x * 16 floats through dynamic shared memory (tests > 48 KiB).
extern "C" __global__ void reverse_smem(const float* in, float* out, int n) {
    extern __shared__ float buf[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = in[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i];
}
