// TF32 tensor-core GEMM: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, inputs rounded to
// TF32 (round to nearest, ties away), cp.async multistage pipeline in dynamic shared memory,
// padded shared layouts (conflict-free fragment loads), warp tiles of WM x WN, grouped block order
// for L2 reuse. Conventions (row-major, transposes, split-K, beta) are in gemm_common.cuh.
//
// Shared memory keeps each operand in its global layout:
//   A, !TA: [BM][BK + 4] (k contiguous)   fragment a[g][t] -> bank 4g + t      (distinct)
//   A,  TA: [BK][BM + 8] (m contiguous)   fragment a[g][t] -> bank 8t + g      (distinct)
//   B, !TB: [BK][BN + 8] (n contiguous)   fragment b[t][g] -> bank 8t + g      (distinct)
//   B,  TB: [BN][BK + 4] (k contiguous)   fragment b[t][g] -> bank 4g + t      (distinct)
// K-contiguous operands are read with ldmatrix.x4 (a TF32 word is a pair of b16 elements, and
// ldmatrix hands lane l word l % 4 of row l / 4 of each 8 x 4-word matrix: exactly the mma
// fragment layout), one instruction per A fragment or per two B fragments; 8 rows of 144 bytes
// per phase hit 32 distinct banks. M/N-contiguous operands are read with 32-bit loads.
//
// Version 2 (issue 4 tuning): edge-free tiles use the unchecked cp.async loaders, stage slots are
// counters instead of k % STAGES. Version 4: rounding with cvt.rna again (NaN-safe, see to_tf32).
#include "gemm_common.cuh"

// Rounds an f32 (given as bits) to TF32 for the mma: cvt.rna.tf32.f32, round to nearest with ties
// away from zero. ptxas lowers it on sm_80/sm_90 to an |x| < inf test and a predicated add of half
// a TF32 ulp (0x1000); the tensor cores ignore the 13 low mantissa bits. NaN and infinity pass
// unchanged, so they propagate as in cuBLAS. (Version 2 used the bare add `bits + 0x1000`: one
// instruction, but it turns CUDA's canonical NaN 0x7fffffff into 0x80000fff, i.e. -0.0 once the
// low bits are dropped, and NaNs with a small payload into infinities.)
__device__ __forceinline__ u32 to_tf32(u32 bits) {
    u32 r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(bits)));
    return r;
}
__device__ __forceinline__ u32 to_tf32(float x) { return to_tf32(__float_as_uint(x)); }

// ldmatrix.x4 (b16 view): lane l supplies the address of row l % 8 of matrix l / 8 and receives
// word l % 4 of row l / 4 of each of the four 8 x 16-byte matrices.
__device__ __forceinline__ void ldsm_x4(u32* r, const float* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
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
    launch_dependents();
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
    static_assert(BK % 8 == 0 && WM % 16 == 0 && WN % 16 == 0, "tile shape");

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

    // Block tile entirely inside M and N (the k extent is checked per stage): such stages take
    // the unchecked loaders (aligned instantiations only).
    constexpr bool FAST_OK = VEC;
    const bool fullMN = m0 + BM <= M && n0 + BN <= N;
    auto load_stage = [&](int slot, int kt) {
        const int k0 = kBegin + kt * BK;
        float* as = As + slot * A_STAGE;
        float* bs = Bs + slot * B_STAGE;
        if (FAST_OK && fullMN && k0 + BK <= kEnd) {  // unchecked (gemm_common.cuh)
            if (TA) {
                load_tile_direct_full<A_ROWS, A_COLS, A_LD, NT>(as, Ab + (long long)k0 * lda + m0,
                                                                lda, tid);
            } else {
                load_tile_direct_full<A_ROWS, A_COLS, A_LD, NT>(as, Ab + (long long)m0 * lda + k0,
                                                                lda, tid);
            }
            if (TB) {
                load_tile_direct_full<B_ROWS, B_COLS, B_LD, NT>(bs, Bb + (long long)n0 * ldb + k0,
                                                                ldb, tid);
            } else {
                load_tile_direct_full<B_ROWS, B_COLS, B_LD, NT>(bs, Bb + (long long)k0 * ldb + n0,
                                                                ldb, tid);
            }
        } else {
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
    // ldmatrix row addresses (K-contiguous operands): lane l -> matrix q = l / 8, row l % 8.
    // A: matrices (rows +0, k +0), (rows +8, k +0), (rows +0, k +4), (rows +8, k +4) = a0..a3.
    // B: matrices (n +0, k +0), (n +0, k +4), (n +8, k +0), (n +8, k +4) = b[j][0..1], b[j+1][0..1].
    const int q = lane >> 3;
    const int aLdsm = (wy * WM + (lane & 7) + 8 * (q & 1)) * A_LD + 4 * (q >> 1);
    const int bLdsm = (wx * WN + (lane & 7) + 8 * (q >> 1)) * B_LD + 4 * (q & 1);

    int readSlot = 0;               // slot of k tile kt
    int writeSlot = STAGES - 1;     // slot of k tile kt + STAGES - 1
    for (int kt = 0; kt < numK; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        // Refill the slot that everyone finished reading in the previous iteration.
        {
            int next = kt + STAGES - 1;
            if (next < numK) load_stage(writeSlot, next);
            cp_async_commit();
        }
        const float* as = As + readSlot * A_STAGE;
        const float* bs = Bs + readSlot * B_STAGE;
        readSlot = readSlot == STAGES - 1 ? 0 : readSlot + 1;
        writeSlot = writeSlot == STAGES - 1 ? 0 : writeSlot + 1;
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
                    ldsm_x4(af[i], as + aLdsm + i * 16 * A_LD + kk);
#pragma unroll
                    for (int e = 0; e < 4; ++e) af[i][e] = to_tf32(af[i][e]);
                }
            }
#pragma unroll
            for (int j = 0; j < NTL; ++j) {
                const int n = bCol + j * 8;
                const int k = kk + t;
                if (TB) {
                    if (j % 2 == 0) {
                        u32 r4[4];
                        ldsm_x4(r4, bs + bLdsm + j * 8 * B_LD + kk);
                        bf[j][0] = to_tf32(r4[0]);
                        bf[j][1] = to_tf32(r4[1]);
                        bf[j + 1][0] = to_tf32(r4[2]);
                        bf[j + 1][1] = to_tf32(r4[3]);
                    }
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
