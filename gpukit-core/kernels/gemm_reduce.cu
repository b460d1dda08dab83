// Split-K reduction and the beta-only path of gpukit GEMM (see gemm_common.cuh for conventions).
#include "gemm_common.cuh"

// Sum of slices s .. end - 1 of one group of four columns (slice j at w[j * step]): eight slices
// in flight, then four, then one at a time; the same additions in the same order (slice s, s + 1,
// ...) whatever the grouping, so the same bits.
__device__ __forceinline__ float4 sum_slices(const float4* w, int s, int end, long long step) {
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (; s + 8 <= end; s += 8) {
        float4 v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = w[(s + j) * step];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            sum.x += v[j].x;
            sum.y += v[j].y;
            sum.z += v[j].z;
            sum.w += v[j].w;
        }
    }
    for (; s + 4 <= end; s += 4) {
        const float4 v0 = w[s * step];
        const float4 v1 = w[(s + 1) * step];
        const float4 v2 = w[(s + 2) * step];
        const float4 v3 = w[(s + 3) * step];
        sum.x = (((sum.x + v0.x) + v1.x) + v2.x) + v3.x;
        sum.y = (((sum.y + v0.y) + v1.y) + v2.y) + v3.y;
        sum.z = (((sum.z + v0.z) + v1.z) + v2.z) + v3.z;
        sum.w = (((sum.w + v0.w) + v1.w) + v2.w) + v3.w;
    }
    for (; s < end; ++s) {
        const float4 v = w[s * step];
        sum.x += v.x;
        sum.y += v.y;
        sum.z += v.z;
        sum.w += v.w;
    }
    return sum;
}

// Most threads of one reduction block (blockDim.x * blockDim.y): the lanes' partial sums share
// one float4 each of shared memory.
#define REDUCE_MAX_THREADS 256

// Deterministic split-K reduction and the K == 0 / beta-only path (splits == 0):
// C = alpha * sum_s W[b, s] + beta * C. W holds `splits` slices of M rows x ldw per batch entry
// (strideW elements apart, 16-byte aligned, ldw and strideW multiples of 4, columns N .. ldw - 1
// unused). Thread (x, y) of a block takes group blockIdx.x * blockDim.x + x of four adjacent
// columns (16-byte loads; grid-stride) and lane y of blockDim.y: the y-th of blockDim.y runs of
// consecutive slices (balanced: their lengths differ by at most one). With many slices and a
// small output (192 x 160 summed over 32 slices is 7680 groups: 30 warps on 132 SMs) one thread
// per group waited on 32 / 8 rounds of loads; the lanes put every slice's load in flight at once.
// Lane 0 adds the lanes' sums in lane order (((run 0 + run 1) + run 2) ...), a fixed order: the
// same bits on every run. Stored with one 16-byte store where C allows it.
extern "C" __global__ void gemm_splitk_reduce(const float* __restrict__ W, float* C, int M, int N,
                                              int ldw, long long strideW, int ldc,
                                              long long strideC, int splits, int batch,
                                              float alpha, float beta) {
    // Launched after a split-K GEMM with programmatic stream serialization (launch.rs): no
    // memory is touched before the GEMM grid has completed.
    wait_for_prerequisite_grid();
    __shared__ float4 part[REDUCE_MAX_THREADS];
    const int gx = blockDim.x, lanes = blockDim.y, x = threadIdx.x, y = threadIdx.y;
    // The host launches at most REDUCE_MAX_THREADS threads a block; more would overrun `part`.
    if (gx * lanes > REDUCE_MAX_THREADS) __trap();
    const int n4 = (N + 3) / 4;
    const long long total = (long long)batch * M * n4;
    const bool vecC = (reinterpret_cast<unsigned long long>(C) & 15) == 0 && (ldc & 3) == 0 &&
                      (batch <= 1 || (strideC & 3) == 0);
    const long long step = strideW / 4;  // float4s between slices
    // Lane y's run: slices y * splits / lanes .. (y + 1) * splits / lanes - 1 (none empty when
    // splits >= lanes, as the host launches them).
    const int s0 = (int)((long long)y * splits / lanes);
    const int s1 = (int)((long long)(y + 1) * splits / lanes);
    // Every thread of the block takes the same trips (base is uniform): the barriers below are
    // reached by all of them.
    for (long long base = blockIdx.x * (long long)gx; base < total;
         base += (long long)gridDim.x * gx) {
        const long long i = base + x;
        const int c4 = (int)(i % n4);
        const long long t = i / n4;
        const int r = (int)(t % M);
        const int b = (int)(t / M);
        const int c = 4 * c4;
        float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i < total && s0 < s1) {
            const float4* w = reinterpret_cast<const float4*>(
                W + (long long)b * splits * strideW + (long long)r * ldw + c);
            sum = sum_slices(w, s0, s1, step);
        }
        if (lanes > 1) {
            part[y * gx + x] = sum;
            __syncthreads();
            if (y == 0) {
                for (int j = 1; j < lanes; ++j) {
                    const float4 v = part[j * gx + x];
                    sum.x += v.x;
                    sum.y += v.y;
                    sum.z += v.z;
                    sum.w += v.w;
                }
            }
            __syncthreads();
        }
        if (y != 0 || i >= total) continue;
        float* dst = C + b * strideC + (long long)r * ldc + c;
        if (vecC && c + 3 < N) {
            float4 o = make_float4(alpha * sum.x, alpha * sum.y, alpha * sum.z, alpha * sum.w);
            if (beta != 0.0f) {
                const float4 old = *reinterpret_cast<const float4*>(dst);
                o.x = fmaf(beta, old.x, o.x);
                o.y = fmaf(beta, old.y, o.y);
                o.z = fmaf(beta, old.z, o.z);
                o.w = fmaf(beta, old.w, o.w);
            }
            *reinterpret_cast<float4*>(dst) = o;
        } else {
            const float v[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                if (c + e < N) {
                    float out = alpha * v[e];
                    if (beta != 0.0f) out = fmaf(beta, dst[e], out);
                    dst[e] = out;
                }
            }
        }
    }
}
