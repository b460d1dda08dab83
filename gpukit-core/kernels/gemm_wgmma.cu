// Hopper TF32 and 3xTF32 GEMM: wgmma.mma_async (sm_90a) on 128-byte-swizzled K-major tiles,
// loaded by the bulk copy engine (cp.async.bulk, cp.async.bulk.tensor) into an mbarrier pipeline,
// with one producer warpgroup and two consumer warpgroups (warp specialisation, setmaxnreg).
// Instructions and helpers are in gemm_wgmma_ops.cuh; conventions (row-major, transposes, split-K,
// beta) in gemm_common.cuh.
//
// Why a pack: wgmma with .tf32 operands reads B (and A, unless A comes from registers) K-major from
// shared memory (there are no transpose immediates for tf32), and the tensor cores ignore the 13
// low bits of each fp32 value (truncation). gemm_wgmma_pack therefore writes op(A) (M x K) and
// op(B)^T (N x K) rounded to TF32 (round to nearest, ties away) as contiguous tiles of R rows x
// 32 k (R = 128 for A, BN for B):
//   packed[(batch, row tile, k tile)] = PARTS x (R x 32 floats), row r at byte r * 128, its
//   16-byte chunk c stored at chunk position c ^ (r & 7),
// which is exactly the canonical 128B-swizzled K-major layout once the tile is copied linearly to
// a 1024-byte aligned shared buffer. Rows beyond M (N) and k beyond K are zeros, so the GEMM
// kernel needs no bounds checks until its epilogue. A k tile of 32 fp32 is one 128-byte row.
// PARTS = 1 (TF32): the rounded values. PARTS = 2 (3xTF32): the big parts, then the small parts
// (split_tf32), each R x 32.
//
// TMA_A (TF32 only, A not transposed, 16-byte aligned, lda % 4 == 0): A is not packed; a tensor
// map reads its 128 x 32 boxes straight from the user's layout into the same swizzled layout (zero
// fill beyond M and K), and each consumer thread rounds its A fragments on the way into registers
// (cvt.rna) and issues wgmma with A from registers. B is still packed.
//
// GEMM block: 128 x BN, k tile 32, 384 threads. Warpgroup 0 (producer): after setmaxnreg.dec, one
// thread waits until a stage is empty, posts the stage's byte count on its full barrier and issues
// the copies of A and B that complete on it. Warpgroups 1 and 2 (consumers, setmaxnreg.inc): warp-
// group w owns rows 64(w-1) .. 64(w-1)+63 and all BN columns.
// - SPLIT = 1 (TF32): per k tile 4 x wgmma m64nBNk8 into one accumulator set, committed as one
//   group; after issuing tile kt it waits until at most one group is pending (tile kt - 1 done) and
//   releases the stage of tile kt - 1 (one arrival per consumer warpgroup).
// - SPLIT = 3 (3xTF32, BN = 128): per k tile, for each k8 step, small(A) big(B) + big(A) small(B)
//   + big(A) big(B) into a scratch accumulator (the first wgmma of the tile with scale-d = 0), then
//   wait, release the stage, and add the scratch into the main accumulator with fp32 adds (round to
//   nearest): the tensor cores' own accumulation truncates, so the long sum over K is kept outside
//   them. Epilogue NaN repair: a product of an infinite big part with a zero (or opposite-signed)
//   small part makes NaN where the exact product is infinite; every NaN result is therefore
//   recomputed from the big parts alone (fp32 FMAs over its k range), which carry every infinity
//   and NaN of the inputs. That path runs only for NaN outputs.
//
// Split-K: blockIdx.z = batch * splits + split; split s covers k tiles [s * ktPerSplit,
// min(numKT, (s + 1) * ktPerSplit)); C is offset by blockIdx.z * strideC.
//
// Accumulator layout of m64nNk8 .f32 (per warpgroup): warp q of the warpgroup owns rows
// 16q .. 16q+15; lane l (g = l / 4, t = l % 4), 8-column chunk j: d[4j+0], d[4j+1] = row 16q+g,
// columns 8j+2t, 8j+2t+1; d[4j+2], d[4j+3] = row 16q+g+8, same columns.
#include "gemm_wgmma_ops.cuh"

// Stores the four values of one 16-byte chunk (row r, chunk c) of a packed tile: rounded (PARTS =
// 1), or split into the big tile at `tp` and the small tile at `tp + partStride` (PARTS = 2).
template <int PARTS>
__device__ __forceinline__ void pack_store(float* tp, long long partStride, int r, int c,
                                           float x0, float x1, float x2, float x3) {
    const int off = r * 32 + ((c ^ (r & 7)) * 4);
    if (PARTS == 1) {
        *reinterpret_cast<uint4*>(tp + off) =
            make_uint4(round_tf32(__float_as_uint(x0)), round_tf32(__float_as_uint(x1)),
                       round_tf32(__float_as_uint(x2)), round_tf32(__float_as_uint(x3)));
    } else {
        uint4 b, s;
        split_tf32(x0, b.x, s.x);
        split_tf32(x1, b.y, s.y);
        split_tf32(x2, b.z, s.z);
        split_tf32(x3, b.w, s.w);
        *reinterpret_cast<uint4*>(tp + off) = b;
        *reinterpret_cast<uint4*>(tp + partStride + off) = s;
    }
}

// Packs both operands in one launch: op(A) (M x K) into tiles of BM rows and op(B)^T (N x K) into
// tiles of BN rows, in the tiled, swizzled layout described above. For an operand X with
// "row-contiguous" flag rc: op(X)[r][k] = rc ? X[k * ld + r] : X[r * ld + k], batch entry b at
// X + b * stride (A: rc = TA; B: rc = !TB since op(B)^T[n][k] = op(B)[k][n]). M = 0 packs B only.
// Grid: x = k tile (32 k); y = block of 64 rows, the padded rows of A first, then those of B;
// z = batch entry (an operand with fewer entries, i.e. broadcast, skips the surplus z).
// Rows that are k-contiguous (rc = 0) stream straight through: each thread reads one 16-byte chunk
// (four scalar loads when X is not 16-byte aligned, ld % 4 != 0 or the chunk crosses K) and stores
// it at its swizzled position; a warp reads and writes four whole 128-byte rows. For rc = 1 the
// 64 x 32 tile is read along r (16-byte loads when aligned) and transposed through shared memory.
// Elements beyond the operand's rows or K are written as zeros.
template <int BM, int BN, int PARTS>
__global__ void __launch_bounds__(256)
    gemm_wgmma_pack(const float* __restrict__ A, float* __restrict__ Ap, int M, int lda,
                    long long strideA, int aRowContig, int aEntries, const float* __restrict__ B,
                    float* __restrict__ Bp, int N, int ldb, long long strideB, int bRowContig,
                    int bEntries, int K, int numKT) {
    __shared__ float s[64][33];
    const int tid = threadIdx.x;
    const int kt = blockIdx.x;
    const int k0 = kt * 32;
    const int aTiles = (M + BM - 1) / BM;
    const int aBlocks = aTiles * (BM / 64);
    const bool isA = (int)blockIdx.y < aBlocks;
    const int y = isA ? (int)blockIdx.y : (int)blockIdx.y - aBlocks;
    const long long b = blockIdx.z;
    if (b >= (isA ? aEntries : bEntries)) return;
    const float* X = isA ? A : B;
    float* P = isA ? Ap : Bp;
    const int rows = isA ? M : N;
    const int ld = isA ? lda : ldb;
    const long long stride = isA ? strideA : strideB;
    const bool rc = (isA ? aRowContig : bRowContig) != 0;
    const int tileRows = isA ? BM : BN;
    const long long numTiles = isA ? aTiles : (N + BN - 1) / BN;

    const float* Xb = X + b * stride;
    const int r0 = y * 64;
    const int tile = r0 / tileRows;
    const int rowInTile0 = r0 - tile * tileRows;  // a multiple of 64: (row & 7) == (r & 7)
    const long long partStride = (long long)tileRows * 32;
    float* tp = P + ((b * numTiles + tile) * numKT + kt) * PARTS * partStride +
                (long long)rowInTile0 * 32;
    const bool vec = (reinterpret_cast<unsigned long long>(Xb) & 15) == 0 && (ld & 3) == 0;

    if (!rc) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int q = tid + 256 * i;
            const int r = q >> 3;
            const int c = q & 7;
            const int gr = r0 + r;
            const int gk = k0 + 4 * c;
            const float* src = Xb + (long long)gr * ld + gk;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (gr < rows) {
                if (vec && gk + 3 < K) {
                    v = *reinterpret_cast<const float4*>(src);
                } else {
                    if (gk < K) v.x = src[0];
                    if (gk + 1 < K) v.y = src[1];
                    if (gk + 2 < K) v.z = src[2];
                    if (gk + 3 < K) v.w = src[3];
                }
            }
            pack_store<PARTS>(tp, partStride, r, c, v.x, v.y, v.z, v.w);
        }
        return;
    }

    // Row-contiguous source X[k][r]: load the 32 x 64 (k, r) tile along r into s[r][k].
    if (vec) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int q = tid + 256 * i;
            const int k = q >> 4;
            const int r = 4 * (q & 15);
            const int gk = k0 + k;
            const int gr = r0 + r;
            const float* src = Xb + (long long)gk * ld + gr;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (gk < K) {
                if (gr + 3 < rows) {
                    v = *reinterpret_cast<const float4*>(src);
                } else {
                    if (gr < rows) v.x = src[0];
                    if (gr + 1 < rows) v.y = src[1];
                    if (gr + 2 < rows) v.z = src[2];
                }
            }
            s[r][k] = v.x;
            s[r + 1][k] = v.y;
            s[r + 2][k] = v.z;
            s[r + 3][k] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int idx = tid + 256 * i;
            const int r = idx & 63;
            const int k = idx >> 6;
            const int gr = r0 + r;
            const int gk = k0 + k;
            s[r][k] = (gr < rows && gk < K) ? Xb[(long long)gk * ld + gr] : 0.0f;
        }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int q = tid + 256 * i;
        const int r = q >> 3;
        const int c = q & 7;
        pack_store<PARTS>(tp, partStride, r, c, s[r][4 * c], s[r][4 * c + 1], s[r][4 * c + 2],
                          s[r][4 * c + 3]);
    }
}

// Element (r, k) of a packed operand's big part: r a row of the operand (tile r / R), k < numKT*32.
template <int R, int PARTS>
__device__ __forceinline__ float packed_big(const float* P, int numKT, int r, int k) {
    const int tile = r / R;
    const int rr = r - tile * R;
    const int kt = k >> 5;
    const int kk = k & 31;
    const float* t = P + ((long long)tile * numKT + kt) * PARTS * (R * 32);
    return t[rr * 32 + (((kk >> 2) ^ (rr & 7)) << 2) + (kk & 3)];
}

template <int BN, int STAGES, int SPLIT, bool VEC, bool TMA_A>
__global__ void __launch_bounds__(384, 1)
    gemm_wgmma(const float* __restrict__ Ap, const float* __restrict__ Bp, float* __restrict__ C,
               const __grid_constant__ TmaDesc tmA, int M, int N, int K, int ldc,
               long long strideAp, long long strideBp, long long strideC, int aBatch0,
               int aBroadcast, float alpha, float beta, int splits, int ktPerSplit, int groupM) {
    static_assert(BN == 128 || BN == 256, "consumer warpgroups are 64 x 128 or 64 x 256");
    static_assert(SPLIT == 1 || SPLIT == 3, "TF32 (1 product) or 3xTF32 (3 products)");
    static_assert(SPLIT == 1 || BN == 128, "3xTF32 keeps two accumulator sets: BN 128 only");
    static_assert(!(TMA_A && SPLIT == 3), "3xTF32 reads both operands packed");
    constexpr int BM = 128;
    constexpr int BK = 32;
    constexpr int PARTS = SPLIT == 3 ? 2 : 1;
    constexpr int NACC = BN / 2;  // f32 accumulators per thread of a 64 x BN warpgroup tile
    constexpr u32 A_PART = BM * BK * 4;
    constexpr u32 B_PART = BN * BK * 4;
    constexpr u32 A_BYTES = PARTS * A_PART;
    constexpr u32 B_BYTES = PARTS * B_PART;
    constexpr u32 STAGE_BYTES = A_BYTES + B_BYTES;

    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) u64 full[STAGES];
    __shared__ __align__(8) u64 empty[STAGES];
    // The swizzle pattern repeats every 1024 bytes: align the stage buffers to that (the launch
    // asks for 1024 bytes of slack).
    const u32 raw = smem_addr(smem_raw);
    const u32 base = (raw + 1023u) & ~1023u;

    const int tilesM = (M + BM - 1) / BM;
    const int tilesN = (N + BN - 1) / BN;
    const int numKT = (K + BK - 1) / BK;
    int tm, tn;
    tile_coords(blockIdx.x, tilesM, tilesN, groupM, tm, tn);
    const int z = blockIdx.z;
    const int bIdx = z / splits;
    const int split = z - bIdx * splits;
    const int ktBegin = split * ktPerSplit;
    const int nk = max(0, min(numKT, ktBegin + ktPerSplit) - ktBegin);
    const float* ApB = Ap + bIdx * strideAp;
    const float* BpB = Bp + bIdx * strideBp;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(smem_addr(&full[s]), 1);
            mbar_init(smem_addr(&empty[s]), 2);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();

    const int wg = threadIdx.x / 128;
    if (wg == 0) {
        // Producer warpgroup.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (threadIdx.x == 0) {
            const float* a = ApB + (long long)tm * numKT * (PARTS * BM * BK);
            const float* b = BpB + (long long)tn * numKT * (PARTS * BN * BK);
            const int za = aBroadcast ? 0 : aBatch0 + bIdx;
            int s = 0;
            u32 phase = 0;
            for (int i = 0; i < nk; ++i) {
                const int kt = ktBegin + i;
                if (i >= STAGES) mbar_wait(smem_addr(&empty[s]), phase ^ 1u);
                const u32 fb = smem_addr(&full[s]);
                const u32 dst = base + s * STAGE_BYTES;
                mbar_arrive_expect_tx(fb, STAGE_BYTES);
                if (TMA_A) {
                    tma_g2s_3d(dst, &tmA, kt * BK, tm * BM, za, fb);
                } else {
                    bulk_g2s(dst, a + (long long)kt * (PARTS * BM * BK), A_BYTES, fb);
                }
                bulk_g2s(dst + A_BYTES, b + (long long)kt * (PARTS * BN * BK), B_BYTES, fb);
                if (++s == STAGES) {
                    s = 0;
                    phase ^= 1u;
                }
            }
        }
    } else {
    // Consumer warpgroups (the rest of the kernel; one if/else, so that ptxas honours setmaxnreg).
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int cw = wg - 1;  // rows 64 cw .. 64 cw + 63 of the block tile
    const int lane = threadIdx.x & 31;
    const int q = (threadIdx.x & 127) >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;
    const bool leader = (threadIdx.x & 127) == 0;
    float d[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) d[i] = 0.0f;

    if (SPLIT == 1) {
        int s = 0;
        int prev = 0;
        u32 phase = 0;
        // TMA_A: the A fragments of one k tile (4 k8 steps x 4 registers), this thread's words
        // of the raw stage: rows 64 cw + 16 q + g (+ 8), k = 8 kk + t (+ 4), 128B-swizzled (row r
        // at r * 128, 16-byte chunk c at c ^ (r & 7); r & 7 == g).
        u32 af[16];
        const int aRow = cw * 64 + q * 16 + g;
        for (int i = 0; i < nk; ++i) {
            mbar_wait(smem_addr(&full[s]), phase);
            const u32 stage = base + s * STAGE_BYTES;
            const u32 bAddr = stage + A_BYTES;
            if (TMA_A) {
                const unsigned char* sa = smem_raw + (stage - raw);
#pragma unroll
                for (int kk = 0; kk < BK / 8; ++kk) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int r = aRow + 8 * (e & 1);
                        const int chunk = 2 * kk + (e >> 1);
                        const float x = *reinterpret_cast<const float*>(
                            sa + r * 128 + ((chunk ^ g) << 4) + (t << 2));
                        af[4 * kk + e] = cvt_rna_tf32(x);
                    }
                }
            }
            fence_regs<NACC>(d);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk) {
                const u64 db = smem_desc(bAddr + kk * 32);
                if (TMA_A) {
                    if (BN == 256)
                        wgmma_n256_rs(d, &af[4 * kk], db, 1);
                    else
                        wgmma_n128_rs(d, &af[4 * kk], db, 1);
                } else {
                    const u64 da = smem_desc(stage + cw * (64 * 128) + kk * 32);
                    if (BN == 256)
                        wgmma_n256_ss(d, da, db, 1);
                    else
                        wgmma_n128_ss(d, da, db, 1);
                }
            }
            wgmma_commit();
            fence_regs<NACC>(d);
            if (TMA_A) {
                // Registers that a pending wgmma reads must not be written while it is in flight
                // (ptxas would serialise every wgmma, C7513): retire this tile before the next
                // one loads its A fragments. The other consumer warpgroup keeps the tensor cores
                // busy meanwhile.
                wgmma_wait<0>();
                fence_regs<NACC>(d);
                fence_regs<16>(af);
                if (leader) mbar_arrive(smem_addr(&empty[s]));
            } else {
                // Tile i - 1 is complete once at most one group (tile i) is pending: release its
                // stage to the producer.
                wgmma_wait<1>();
                fence_regs<NACC>(d);
                if (i > 0 && leader) mbar_arrive(smem_addr(&empty[prev]));
            }
            prev = s;
            if (++s == STAGES) {
                s = 0;
                phase ^= 1u;
            }
        }
        wgmma_wait<0>();
        fence_regs<NACC>(d);
    } else {
        // 3xTF32: stage = [A big | A small | B big | B small].
        float w[NACC];
#pragma unroll
        for (int i = 0; i < NACC; ++i) w[i] = 0.0f;
        int s = 0;
        u32 phase = 0;
        for (int i = 0; i < nk; ++i) {
            mbar_wait(smem_addr(&full[s]), phase);
            const u32 stage = base + s * STAGE_BYTES;
            const u32 aBig = stage + cw * (64 * 128);
            const u32 aSmall = aBig + A_PART;
            const u32 bBig = stage + A_BYTES;
            const u32 bSmall = bBig + B_PART;
            fence_regs<NACC>(w);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk) {
                const int o = kk * 32;
                wgmma_n128_ss(w, smem_desc(aSmall + o), smem_desc(bBig + o), kk != 0);
                wgmma_n128_ss(w, smem_desc(aBig + o), smem_desc(bSmall + o), 1);
                wgmma_n128_ss(w, smem_desc(aBig + o), smem_desc(bBig + o), 1);
            }
            wgmma_commit();
            fence_regs<NACC>(w);
            wgmma_wait<0>();
            fence_regs<NACC>(w);
            if (leader) mbar_arrive(smem_addr(&empty[s]));
#pragma unroll
            for (int j = 0; j < NACC; ++j) d[j] += w[j];
            if (++s == STAGES) {
                s = 0;
                phase ^= 1u;
            }
        }
    }

    // Epilogue: C = alpha * D + beta * C (beta == 0 never reads C).
    float* Cb = C + (long long)z * strideC;
    const int rowBase = tm * BM + cw * 64 + q * 16 + g;
    const int colBase = tn * BN + 2 * t;
    // 3xTF32: outputs that came out NaN, one bit each (h, j, e) -> bit (h * BN/8 + j) * 2 + e; they
    // are left unwritten here and repaired below.
    unsigned long long nanMask = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = rowBase + 8 * h;
        if (r >= M) continue;
        float* crow = Cb + (long long)r * ldc;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int c = colBase + 8 * j;
            const float v0 = d[4 * j + 2 * h];
            const float v1 = d[4 * j + 2 * h + 1];
            bool ok0 = true, ok1 = true;
            if (SPLIT == 3) {
                ok0 = !isnan(v0);
                ok1 = !isnan(v1);
                const int bit = (h * (BN / 8) + j) * 2;
                if (!ok0 && c < N) nanMask |= 1ull << bit;
                if (!ok1 && c + 1 < N) nanMask |= 1ull << (bit + 1);
            }
            if (VEC && c + 1 < N && ok0 && ok1) {
                float2* p = reinterpret_cast<float2*>(crow + c);
                float2 o = make_float2(alpha * v0, alpha * v1);
                if (beta != 0.0f) {
                    const float2 old = *p;
                    o.x = fmaf(beta, old.x, o.x);
                    o.y = fmaf(beta, old.y, o.y);
                }
                *p = o;
            } else {
                if (c < N && ok0) store1(crow, c, v0, alpha, beta);
                if (c + 1 < N && ok1) store1(crow, c + 1, v1, alpha, beta);
            }
        }
    }
    if (SPLIT == 3) {
        const int kEnd = min(numKT, ktBegin + ktPerSplit) * BK;
#pragma unroll 1
        while (nanMask) {
            const int bit = __ffsll((long long)nanMask) - 1;
            nanMask &= nanMask - 1;
            const int e = bit & 1;
            const int j = (bit >> 1) % (BN / 8);
            const int h = (bit >> 1) / (BN / 8);
            const int r = rowBase + 8 * h;
            const int c = colBase + 8 * j + e;
            float v = 0.0f;
#pragma unroll 1
            for (int k = ktBegin * BK; k < kEnd; ++k) {
                v = fmaf(packed_big<BM, PARTS>(ApB, numKT, r, k),
                         packed_big<BN, PARTS>(BpB, numKT, c, k), v);
            }
            store1(Cb + (long long)r * ldc, c, v, alpha, beta);
        }
    }
    }  // consumer warpgroups
}
