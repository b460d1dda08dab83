// Split-K reduction and the beta-only path of gpukit GEMM (see gemm_common.cuh for conventions).

// Deterministic split-K reduction (fixed summation order) and the K == 0 / beta-only path
// (splits == 0): C = alpha * sum_s W[b, s] + beta * C.
extern "C" __global__ void gemm_splitk_reduce(const float* __restrict__ W, float* C, int M, int N,
                                              int ldw, long long strideW, int ldc,
                                              long long strideC, int splits, int batch,
                                              float alpha, float beta) {
    long long total = (long long)batch * M * N;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        int c = (int)(i % N);
        long long t = i / N;
        int r = (int)(t % M);
        int b = (int)(t / M);
        float sum = 0.0f;
        const float* w = W + (long long)b * splits * strideW + (long long)r * ldw + c;
        for (int s = 0; s < splits; ++s) sum += w[s * strideW];
        float* dst = C + b * strideC + (long long)r * ldc + c;
        float out = alpha * sum;
        if (beta != 0.0f) out = fmaf(beta, *dst, out);
        *dst = out;
    }
}
