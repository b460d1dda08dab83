// FP32 SIMT GEMM (exact single precision, no tensor cores): register-blocked, warp-tiled.
// Two warp tiles (template WM x WN):
// - 64 x 32 (version 2, kept for the 64x64 block of small problems): each thread owns an 8 x 8
//   block of C as 2 x 2 sub-blocks of 4 x 4; a warp is 8 x 4 threads; per k step a thread does
//   4 LDS.128 and 64 FFMA (a 256-thread block of it is capped at 128 registers).
// - 64 x 64 (version 3): each thread owns 16 x 8 of C (4 x 2 sub-blocks of 4 x 4); a warp is
//   4 x 8 threads with lane = ly * 8 + lx, so a quarter-warp reads one float4 of A (broadcast)
//   and 8 contiguous float4 of B; per k step a thread does 6 LDS.128 and 128 FFMA, and the
//   fragments of step k + 1 are loaded while step k computes (register double buffering, also
//   across k tiles). 8 warps per SM (one 256-thread block or two 128-thread blocks), up to 255
//   registers.
// Shared memory holds both operands MN-contiguous ([BK][BM + 4], [BK][BN + 4]) so the fragments
// are float4 loads; operands that are K-contiguous in global memory (A not transposed, B
// transposed) are transposed on the way in by 4-byte cp.async (see load_tile_transposed), the
// others are copied with 16-byte cp.async. STAGES-deep cp.async pipeline, one barrier per k tile.
// Conventions (row-major, transposes, split-K, beta) are in gemm_common.cuh.
#include "gemm_common.cuh"

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool TA, bool TB, bool VEC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32,
                                  (WM == 64 && WN == 64 && (BM / WM) * (BN / WN) >= 8) ? 1 : 2)
    gemm_sgemm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
               int M, int N, int K, int lda, int ldb, int ldc, long long strideA,
               long long strideB, long long strideC, float alpha, float beta, int splits,
               int kPerSplit, int groupM) {
    launch_dependents();
    static_assert(WM == 64 && (WN == 32 || WN == 64), "warp tile is 64x32 or 64x64");
    // BIG: the 64x64 warp tile (16 x 8 per thread, version 3).
    constexpr bool BIG = WN == 64;
    constexpr int LX = BIG ? 8 : 4;  // lanes along N
    constexpr int TM = BIG ? 16 : 8;  // C rows per thread (groups of 4, LY * 4 apart)
    constexpr int TN = 8;             // C columns per thread (groups of 4, LX * 4 apart)
    constexpr int LY = 32 / LX;
    constexpr int WARPS_N = BN / WN;
    constexpr int NT = (BM / WM) * WARPS_N * 32;
    constexpr int A_LD = BM + 4;
    constexpr int B_LD = BN + 4;
    constexpr int A_STAGE = BK * A_LD;
    constexpr int B_STAGE = BK * B_LD;

    extern __shared__ __align__(16) float smem[];
    float* As = smem;
    float* Bs = smem + STAGES * A_STAGE;

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int wy = warp / WARPS_N;
    const int wx = warp % WARPS_N;
    const int ly = lane / LX;
    const int lx = lane % LX;

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
    // the unchecked loaders. Aligned instantiations of 256-thread blocks with A not transposed
    // only, on sm_90: the others spill (12-64 B) with the extra path.
    // The 64x64 warp tile runs under a 255-register cap: the fast path for every VEC variant
    // (0 spills for 128x256, 256x128 and 128x128 blocks with BK 8; a BK 16 block with B
    // transposed, 16-24 transposing copies per thread and stage, spilled 52-300 B).
    // A transposed B with more than 8 transposing copies per thread and stage (the 64x256 block
    // of 128 threads: 16) spilled 52-180 B on sm_80 and sm_90 with the unchecked path or the
    // unrolled checked loader: neither for it (its B loads take the rolled loader).
    constexpr bool TB_FEW = !TB || BN * BK / NT <= 8;
#if __CUDA_ARCH__ >= 900
    constexpr bool FAST_OK = VEC && TB_FEW && (BIG || (!TA && NT >= 256));
#else
    constexpr bool FAST_OK = VEC && TB_FEW && BIG;  // 64x32 on sm_80: spills 24 B with the extra path
#endif
    const bool fullMN = m0 + BM <= M && n0 + BN <= N;
    auto load_stage = [&](int slot, int kt) {
        const int k0 = kBegin + kt * BK;
        float* as = As + slot * A_STAGE;
        float* bs = Bs + slot * B_STAGE;
        if (FAST_OK && fullMN && k0 + BK <= kEnd) {  // unchecked (gemm_common.cuh)
            if (TA) {
                load_tile_direct_full<BK, BM, A_LD, NT>(as, Ab + (long long)k0 * lda + m0, lda,
                                                        tid);
            } else {
                load_tile_transposed_full<BM, BK, A_LD, NT>(as, Ab + (long long)m0 * lda + k0,
                                                            lda, tid);
            }
            if (TB) {
                load_tile_transposed_full<BN, BK, B_LD, NT>(bs, Bb + (long long)n0 * ldb + k0,
                                                            ldb, tid);
            } else {
                load_tile_direct_full<BK, BN, B_LD, NT>(bs, Bb + (long long)k0 * ldb + n0, ldb,
                                                        tid);
            }
        } else {
            if (TA) {  // A stored K x M: rows k, m contiguous -> [k][m] directly
                load_tile_direct<BK, BM, A_LD, NT, VEC>(as, Ab + (long long)k0 * lda + m0, Ab, lda,
                                                        kEnd - k0, M - m0, tid);
            } else {  // A stored M x K: rows m, k contiguous -> transpose into [k][m]
                load_tile_transposed<BM, BK, A_LD, NT, VEC>(as, Ab + (long long)m0 * lda + k0, Ab, lda,
                                                       M - m0, kEnd - k0, tid);
            }
            if (TB) {  // B stored N x K: rows n, k contiguous -> transpose into [k][n]
                load_tile_transposed<BN, BK, B_LD, NT, VEC && TB_FEW>(bs, Bb + (long long)n0 * ldb + k0, Bb, ldb,
                                                       N - n0, kEnd - k0, tid);
            } else {  // B stored K x N -> [k][n] directly
                load_tile_direct<BK, BN, B_LD, NT, VEC>(bs, Bb + (long long)k0 * ldb + n0, Bb, ldb,
                                                        kEnd - k0, N - n0, tid);
            }
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    const int aOff = wy * WM + ly * 4;  // rows aOff + g * LY * 4 + 0..3
    const int bOff = wx * WN + lx * 4;  // cols bOff + h * LX * 4 + 0..3

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < numK) load_stage(s, s);
        cp_async_commit();
    }

    if constexpr (!BIG) {
        // Version 2 main loop (64x32 warp tile, 128-register cap: no fragment double buffering).
        for (int kt = 0; kt < numK; ++kt) {
            cp_async_wait<STAGES - 2>();
            __syncthreads();
            {
                int next = kt + STAGES - 1;
                if (next < numK) load_stage(next % STAGES, next);
                cp_async_commit();
            }
            const float* as = As + (kt % STAGES) * A_STAGE;
            const float* bs = Bs + (kt % STAGES) * B_STAGE;
#pragma unroll
            for (int k = 0; k < BK; ++k) {
                float a[8], b[8];
                float4 t0 = *reinterpret_cast<const float4*>(as + k * A_LD + aOff);
                float4 t1 = *reinterpret_cast<const float4*>(as + k * A_LD + aOff + 32);
                float4 u0 = *reinterpret_cast<const float4*>(bs + k * B_LD + bOff);
                float4 u1 = *reinterpret_cast<const float4*>(bs + k * B_LD + bOff + 16);
                a[0] = t0.x; a[1] = t0.y; a[2] = t0.z; a[3] = t0.w;
                a[4] = t1.x; a[5] = t1.y; a[6] = t1.z; a[7] = t1.w;
                b[0] = u0.x; b[1] = u0.y; b[2] = u0.z; b[3] = u0.w;
                b[4] = u1.x; b[5] = u1.y; b[6] = u1.z; b[7] = u1.w;
#pragma unroll
                for (int i = 0; i < 8; ++i)
#pragma unroll
                    for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
        }
    } else {
        // Version 3 main loop: fragments of step k + 1 are loaded while step k computes. The
        // first fragments of k tile kt + 1 are loaded at the last step of tile kt, after the
        // wait and the barrier that make that tile visible; that barrier also ends every read
        // of tile kt's slot, which the next iteration's cp.async then refills.
        float a[2][TM], b[2][TN];
        auto load_frag = [&](int buf, const float* as, const float* bs, int k) {
#pragma unroll
            for (int g = 0; g < TM / 4; ++g) {
                float4 t = *reinterpret_cast<const float4*>(as + k * A_LD + aOff + g * LY * 4);
                a[buf][g * 4 + 0] = t.x;
                a[buf][g * 4 + 1] = t.y;
                a[buf][g * 4 + 2] = t.z;
                a[buf][g * 4 + 3] = t.w;
            }
#pragma unroll
            for (int h = 0; h < TN / 4; ++h) {
                float4 u = *reinterpret_cast<const float4*>(bs + k * B_LD + bOff + h * LX * 4);
                b[buf][h * 4 + 0] = u.x;
                b[buf][h * 4 + 1] = u.y;
                b[buf][h * 4 + 2] = u.z;
                b[buf][h * 4 + 3] = u.w;
            }
        };
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        load_frag(0, As, Bs, 0);
        int readSlot = 0;              // slot of tile kt
        int writeSlot = STAGES - 1;    // slot of tile kt + STAGES - 1
        for (int kt = 0; kt < numK; ++kt) {
            {
                int next = kt + STAGES - 1;
                if (next < numK) load_stage(writeSlot, next);
                cp_async_commit();
            }
            const float* as = As + readSlot * A_STAGE;
            const float* bs = Bs + readSlot * B_STAGE;
            const int nextSlot = readSlot + 1 == STAGES ? 0 : readSlot + 1;
#pragma unroll
            for (int k = 0; k < BK; ++k) {
                if (k + 1 < BK) {
                    load_frag((k + 1) & 1, as, bs, k + 1);
                } else {
                    cp_async_wait<STAGES - 2>();
                    __syncthreads();
                    // Tile kt + 1 (its slot holds stale but in-bounds data past the last tile).
                    load_frag((k + 1) & 1, As + nextSlot * A_STAGE, Bs + nextSlot * B_STAGE, 0);
                }
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j)
                        acc[i][j] = fmaf(a[k & 1][i], b[k & 1][j], acc[i][j]);
            }
            writeSlot = readSlot;
            readSlot = nextSlot;
        }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = m0 + aOff + (i & 3) + (i >> 2) * LY * 4;
        if (r >= M) continue;
        float* crow = Cb + (long long)r * ldc;
#pragma unroll
        for (int h = 0; h < TN / 4; ++h) {
            const int c = n0 + bOff + h * LX * 4;
            const float* v = &acc[i][h * 4];
            if (VEC && c + 3 < N) {
                float4* p = reinterpret_cast<float4*>(crow + c);
                float4 o = make_float4(alpha * v[0], alpha * v[1], alpha * v[2], alpha * v[3]);
                if (beta != 0.0f) {
                    float4 old = *p;
                    o.x = fmaf(beta, old.x, o.x);
                    o.y = fmaf(beta, old.y, o.y);
                    o.z = fmaf(beta, old.z, o.z);
                    o.w = fmaf(beta, old.w, o.w);
                }
                *p = o;
            } else {
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    if (c + q < N) store1(crow, c + q, v[q], alpha, beta);
            }
        }
    }
}
