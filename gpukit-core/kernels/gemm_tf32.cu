// TF32 tensor-core GEMM: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, inputs rounded with
// cvt.rna.tf32.f32, cp.async multistage pipeline in dynamic shared memory, padded shared layouts
// (conflict-free fragment loads), warp tiles of WM x WN, grouped block order for L2 reuse.
// Conventions (row-major, transposes, split-K, beta) are in gemm_common.cuh.
//
// Shared memory keeps each operand in its global layout:
//   A, !TA: [BM][BK + 4] (k contiguous)   fragment a[g][t] -> bank 4g + t      (distinct)
//   A,  TA: [BK][BM + 8] (m contiguous)   fragment a[g][t] -> bank 8t + g      (distinct)
//   B, !TB: [BK][BN + 8] (n contiguous)   fragment b[t][g] -> bank 8t + g      (distinct)
//   B,  TB: [BN][BK + 4] (k contiguous)   fragment b[t][g] -> bank 4g + t      (distinct)
#include "gemm_common.cuh"

__device__ __forceinline__ u32 to_tf32(float x) {
    u32 r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void mma_tf32(float* c, const u32* a, const u32* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool TA, bool TB, bool VEC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    gemm_tf32(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
              int M, int N, int K, int lda, int ldb, int ldc, long long strideA,
              long long strideB, long long strideC, float alpha, float beta, int splits,
              int kPerSplit, int groupM) {
    constexpr int WARPS_N = BN / WN;
    constexpr int NT = (BM / WM) * WARPS_N * 32;
    constexpr int MT = WM / 16;  // m16 tiles per warp
    constexpr int NTL = WN / 8;  // n8 tiles per warp
    constexpr int A_ROWS = TA ? BK : BM;
    constexpr int A_COLS = TA ? BM : BK;
    constexpr int A_LD = A_COLS + (TA ? 8 : 4);
    constexpr int B_ROWS = TB ? BN : BK;
    constexpr int B_COLS = TB ? BK : BN;
    constexpr int B_LD = B_COLS + (TB ? 4 : 8);
    constexpr int A_STAGE = A_ROWS * A_LD;
    constexpr int B_STAGE = B_ROWS * B_LD;
    static_assert(BK % 8 == 0 && WM % 16 == 0 && WN % 8 == 0, "tile shape");

    extern __shared__ __align__(16) float smem[];
    float* As = smem;
    float* Bs = smem + STAGES * A_STAGE;

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int wy = warp / WARPS_N;
    const int wx = warp % WARPS_N;
    const int g = lane >> 2;
    const int t = lane & 3;

    int tm, tn;
    tile_coords(blockIdx.x, (M + BM - 1) / BM, (N + BN - 1) / BN, groupM, tm, tn);
    const int z = blockIdx.z;
    const int bIdx = z / splits;
    const int split = z - bIdx * splits;
    const float* Ab = A + bIdx * strideA;
    const float* Bb = B + bIdx * strideB;
    float* Cb = C + z * strideC;
    const int m0 = tm * BM;
    const int n0 = tn * BN;
    const int kBegin = split * kPerSplit;
    const int kEnd = min(K, kBegin + kPerSplit);
    const int numK = kEnd > kBegin ? (kEnd - kBegin + BK - 1) / BK : 0;

    auto load_stage = [&](int slot, int kt) {
        const int k0 = kBegin + kt * BK;
        float* as = As + slot * A_STAGE;
        float* bs = Bs + slot * B_STAGE;
        if (TA) {
            load_tile_direct<A_ROWS, A_COLS, A_LD, NT, VEC>(as, Ab + (long long)k0 * lda + m0, Ab,
                                                            lda, kEnd - k0, M - m0, tid);
        } else {
            load_tile_direct<A_ROWS, A_COLS, A_LD, NT, VEC>(as, Ab + (long long)m0 * lda + k0, Ab,
                                                            lda, M - m0, kEnd - k0, tid);
        }
        if (TB) {
            load_tile_direct<B_ROWS, B_COLS, B_LD, NT, VEC>(bs, Bb + (long long)n0 * ldb + k0, Bb,
                                                            ldb, N - n0, kEnd - k0, tid);
        } else {
            load_tile_direct<B_ROWS, B_COLS, B_LD, NT, VEC>(bs, Bb + (long long)k0 * ldb + n0, Bb,
                                                            ldb, kEnd - k0, N - n0, tid);
        }
    };

    float acc[MT][NTL][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NTL; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < numK) load_stage(s, s);
        cp_async_commit();
    }

    const int aRow = wy * WM + g;  // this lane's first A row inside the block tile
    const int bCol = wx * WN + g;  // this lane's first B column inside the block tile

    for (int kt = 0; kt < numK; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        // Refill the slot that everyone finished reading in the previous iteration.
        {
            int next = kt + STAGES - 1;
            if (next < numK) load_stage(next % STAGES, next);
            cp_async_commit();
        }
        const float* as = As + (kt % STAGES) * A_STAGE;
        const float* bs = Bs + (kt % STAGES) * B_STAGE;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            u32 af[MT][4];
            u32 bf[NTL][2];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const int r = aRow + i * 16;
                const int k = kk + t;
                if (TA) {
                    af[i][0] = to_tf32(as[k * A_LD + r]);
                    af[i][1] = to_tf32(as[k * A_LD + r + 8]);
                    af[i][2] = to_tf32(as[(k + 4) * A_LD + r]);
                    af[i][3] = to_tf32(as[(k + 4) * A_LD + r + 8]);
                } else {
                    af[i][0] = to_tf32(as[r * A_LD + k]);
                    af[i][1] = to_tf32(as[(r + 8) * A_LD + k]);
                    af[i][2] = to_tf32(as[r * A_LD + k + 4]);
                    af[i][3] = to_tf32(as[(r + 8) * A_LD + k + 4]);
                }
            }
#pragma unroll
            for (int j = 0; j < NTL; ++j) {
                const int n = bCol + j * 8;
                const int k = kk + t;
                if (TB) {
                    bf[j][0] = to_tf32(bs[n * B_LD + k]);
                    bf[j][1] = to_tf32(bs[n * B_LD + k + 4]);
                } else {
                    bf[j][0] = to_tf32(bs[k * B_LD + n]);
                    bf[j][1] = to_tf32(bs[(k + 4) * B_LD + n]);
                }
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NTL; ++j) mma_tf32(acc[i][j], af[i], bf[j]);
        }
    }
    cp_async_wait<0>();

    // Epilogue: c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1] of each m16n8 tile.
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = m0 + wy * WM + i * 16 + g + h * 8;
            if (r >= M) continue;
            float* crow = Cb + (long long)r * ldc;
#pragma unroll
            for (int j = 0; j < NTL; ++j) {
                const int c = n0 + wx * WN + j * 8 + 2 * t;
                float v0 = acc[i][j][2 * h];
                float v1 = acc[i][j][2 * h + 1];
                if (VEC && c + 1 < N) {
                    float2* p = reinterpret_cast<float2*>(crow + c);
                    float2 o = make_float2(alpha * v0, alpha * v1);
                    if (beta != 0.0f) {
                        float2 old = *p;
                        o.x = fmaf(beta, old.x, o.x);
                        o.y = fmaf(beta, old.y, o.y);
                    }
                    *p = o;
                } else {
                    if (c < N) store1(crow, c, v0, alpha, beta);
                    if (c + 1 < N) store1(crow, c + 1, v1, alpha, beta);
                }
            }
        }
    }
}
