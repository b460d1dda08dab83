// Hopper TF32 and 3xTF32 GEMM: wgmma.mma_async (sm_90a) with one producer warpgroup and two
// consumer warpgroups (warp specialisation, setmaxnreg), operand tiles brought into shared memory
// by the bulk copy engine (cp.async.bulk, cp.async.bulk.tensor) through an mbarrier pipeline, and
// a persistent tile loop. Instructions and helpers are in gemm_wgmma_ops.cuh; conventions
// (row-major, transposes, split-K, beta) in gemm_common.cuh.
//
// Operand roles. wgmma multiplies an "A" operand (64 rows per warpgroup, from registers or shared
// memory) by a "B" operand (BN rows, shared memory only), both K-major for .tf32 (there are no
// transpose immediates for 32-bit types), and the tensor cores ignore the 13 low bits of each
// fp32 value (truncation). The kernel computes D = P Q^T on a BM x BN block tile, P (PR x K) in
// wgmma's A role and Q (QR x K) in its B role:
// - SWAP = false: P = op(A), Q = op(B)^T, C[p][q] = D[p][q];
// - SWAP = true:  P = op(B)^T, Q = op(A), C[q][p] = D[p][q] (C^T = B^T A^T), so that a row-major
//   B (N-major, the common case) can be the register operand, whose transpose is free.
// Where each comes from (template PSRC, QTMA):
// - P: SRC_PACKED (the pack's rounded, swizzled K-major tiles, a bulk copy, wgmma A from shared
//   memory), SRC_TMA_K (the user's K-major layout through a tensor map, BM x 32 boxes with the
//   128-byte swizzle) or SRC_TMA_MN (the user's MN-major layout: BM / 32 boxes of 32 rows x 32 k,
//   [k][row] with the 128-byte swizzle, whole 128-byte lines of the operand per copied row; a
//   warp's fragment loads take two wavefronts each, load_p_fragments). In the two tensor
//   map cases each consumer thread loads its wgmma A fragments from shared memory and rounds them
//   (cvt.rna; the identity on values a rounding tensor map already rounded), wgmma A from registers.
//   SRC_TMA_KS: the user's K-major layout through a rounding tensor map (as Q's below), whose
//   BM x 32 boxes with the 128-byte swizzle land in the packed tile's layout, so that wgmma reads
//   A from shared memory as for SRC_PACKED (no pack, no fragment loads).
// - Q: the pack's tiles (bulk copy), or (QTMA) the user's K-major layout through a tensor map of
//   type TFLOAT32: the copy engine rounds every value to TF32 (round to nearest even, NaN and
//   infinity kept) on its way into shared memory, which the host checks once per device
//   (gemm_tma_probe below) before it plans this path. Q is then read by wgmma as it lands.
// Any source of P goes with either source of Q (packed P beside a tensor-mapped Q: a TT product
// packs only its MN-major A and reads both operands from shared memory). So no operand of a NN,
// NT or TT product with aligned operands needs the pack, and in TN one does.
// 3xTF32 (SPLIT = 3) reads both operands packed (big and small parts, wgmma A from shared memory).
//
// The pack (gemm_wgmma_pack) writes an operand X (rows x K) rounded to TF32 (round to nearest,
// ties away; NaN kept NaN) as contiguous tiles of R rows x 32 k (R = BM for P, BN for Q):
//   packed[(batch, row tile, k tile)] = PARTS x (R x 32 floats), row r at byte r * 128, its
//   16-byte chunk c stored at chunk position c ^ (r & 7),
// which is exactly the canonical 128B-swizzled K-major layout once the tile is copied linearly to
// a 1024-byte aligned shared buffer (and the layout a 32 x R box of a 128B-swizzled tensor map
// lands in). Rows beyond the operand and k beyond K are zeros. A k tile of 32 fp32 is one 128-byte
// row. PARTS = 1 (TF32): the rounded values. PARTS = 2 (3xTF32): the big parts, then the small
// parts (split_tf32), each R x 32.
//
// Block: BM x BN, k tile 32, 384 threads. Warpgroup 0 (producer): after setmaxnreg.dec, one
// thread walks the same work units as the consumers, waits until a stage is empty, posts the
// stage's byte count on its full barrier and issues the copies that complete on it. Warpgroups
// 1 and 2 (consumers, setmaxnreg.inc): cooperative (BM = 128), warpgroup w owns P rows 64(w-1) ..
// 64(w-1)+63 of the tile and all BN columns; ping-pong (PP), each takes every other work unit
// whole (BM = 128: two 64-row slabs; BM = 64: one, which halves the unit, so that a partial last
// wave idles less of the machine), and the two main loops take turns on the tensor cores.
// - SPLIT = 1 (TF32): per k tile 4 x wgmma m64nBNk8 into one accumulator set, one commit group.
//   P from shared memory: after issuing tile kt, wait until at most one group is pending (tile
//   kt - 1 done) and release the stage of tile kt - 1. P from registers: a pending wgmma whose
//   register operands are rewritten makes ptxas serialise every wgmma (warning C7513), so the
//   fragments are double-buffered: tile kt + 1's are loaded into the set tile kt - 1 used, once
//   wait 1 has retired it, while tile kt's wgmma run (the cooperative 128 x 128 tile keeps one
//   set: it retires its tile, wait 0, before it loads the next fragments, measured faster).
// - SPLIT = 3 (3xTF32, BN = 128): per k tile, for each k8 step, small(P) big(Q) + big(P)
//   small(Q) + big(P) big(Q) into a scratch accumulator (the first wgmma of the tile with
//   scale-d = 0), then wait, release the stage, and add the scratch into the main accumulator
//   with fp32 adds (round to nearest): the tensor cores' own accumulation truncates, so the long
//   sum over K is kept outside them. Epilogue NaN repair: a product of an infinite big part with
//   a zero (or opposite-signed) small part makes NaN where the exact product is infinite; every
//   NaN result is therefore recomputed from the big parts alone (fp32 FMAs over its k range),
//   which carry every infinity and NaN of the inputs. That path runs only for NaN outputs.
//
// Work units: unit u = z * tiles + tile, z = batch * splits + split (the batch entry and K slice),
// tile in grouped order (tile_coords); split s covers k tiles [s * ktPerSplit, min(numKT, (s + 1)
// * ktPerSplit)); C is offset by z * strideC. Block b runs units b, b + gridDim.x, ...: a grid of
// one block per unit is the classic one-tile-per-block launch, a grid of one block per SM is
// persistent (the producer runs on into the next unit's stages while the consumers store the
// last one's tile, which hides each tile's pipeline fill).
//
// Accumulator layout of m64nNk8 .f32 (per warpgroup): warp q of the warpgroup owns accumulator
// rows 16q .. 16q+15; lane l (g = l / 4, t = l % 4), 8-column chunk j: d[4j+0], d[4j+1] = row
// 16q+g, columns 8j+2t, 8j+2t+1; d[4j+2], d[4j+3] = row 16q+g+8, same columns. The register A
// fragment has the same row split (a[0], a[2]: row g; a[1], a[3]: row g+8; k = t, t+4). With
// SRC_TMA_MN the kernel feeds accumulator row 16q + g + 8h from P row 16q + 2g + h (a permutation
// within each 16 rows), so that one thread's two rows are adjacent in P (one 8-byte load per k)
// and, with SWAP, adjacent in C (one 8-byte store per column).
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

// One k8 step of a 64 x BN warpgroup tile into the accumulators `d`, the Q operand's k8 slice at
// shared address `qk`; wgmma A from registers (`a`, 4 of them) or from shared memory (`da`).
// HALVES (two blocks per SM): two m64n64 halves on one A operand, Q rows 64 .. 127 starting 64 x
// 128 bytes on (a whole number of swizzle periods), their accumulators d[32 ..].
template <int BN, bool HALVES>
__device__ __forceinline__ void wgmma_step_rs(float* d, const u32* a, u32 qk) {
    const u64 db = smem_desc(qk);
    if (BN == 256) {
        wgmma_n256_rs(d, a, db, 1);
    } else if (BN == 192) {
        wgmma_n192_rs(d, a, db, 1);
    } else if (BN == 128 && HALVES) {
        wgmma_n64_rs(d, a, db, 1);
        wgmma_n64_rs(d + 32, a, smem_desc(qk + 64 * 128), 1);
    } else if (BN == 128) {
        wgmma_n128_rs(d, a, db, 1);
    } else {
        wgmma_n64_rs(d, a, db, 1);
    }
}
template <int BN, bool HALVES>
__device__ __forceinline__ void wgmma_step_ss(float* d, u64 da, u32 qk) {
    const u64 db = smem_desc(qk);
    if (BN == 256) {
        wgmma_n256_ss(d, da, db, 1);
    } else if (BN == 192) {
        wgmma_n192_ss(d, da, db, 1);
    } else if (BN == 128 && HALVES) {
        wgmma_n64_ss(d, da, db, 1);
        wgmma_n64_ss(d + 32, da, smem_desc(qk + 64 * 128), 1);
    } else if (BN == 128) {
        wgmma_n128_ss(d, da, db, 1);
    } else {
        wgmma_n64_ss(d, da, db, 1);
    }
}

// One 8-byte store of the interior epilogue: C[0..1] = alpha (x, y) (+ beta C[0..1] when BETA).
template <bool BETA>
__device__ __forceinline__ void store_pair(float* p, float x, float y, float alpha, float beta) {
    float2 o = make_float2(alpha * x, alpha * y);
    if (BETA) {
        const float2 old = *reinterpret_cast<const float2*>(p);
        o.x = fmaf(beta, old.x, o.x);
        o.y = fmaf(beta, old.y, o.y);
    }
    *reinterpret_cast<float2*>(p) = o;
}

// The epilogue of an interior slab (64 x BN, accumulators `d`, the layout at the top) with vector
// stores. Not swapped: the thread's two C rows start at `r0` and `r1` (column qBase), d[4 j + 2 h
// + e] -> row h, column 8 j + e, at constant offsets. Swapped (C^T = D): C row qBase + 8 j + e
// starts at `r0 + (8 j + e) ldc` and holds d[4 j + e], d[4 j + 2 + e] in two adjacent columns;
// two row pointers step by 8 ldc.
template <int BN, bool SWAP, bool BETA>
__device__ __forceinline__ void store_slab(float* r0, float* r1, int ldc, const float* d,
                                           float alpha, float beta) {
    const long long step = SWAP ? 8LL * ldc : 8;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        if (SWAP) {
            store_pair<BETA>(r0, d[4 * j], d[4 * j + 2], alpha, beta);
            store_pair<BETA>(r1, d[4 * j + 1], d[4 * j + 3], alpha, beta);
        } else {
            store_pair<BETA>(r0, d[4 * j], d[4 * j + 1], alpha, beta);
            store_pair<BETA>(r1, d[4 * j + 2], d[4 * j + 3], alpha, beta);
        }
        r0 += step;
        r1 += step;
    }
}

// Byte offset of float `col` (0 .. 31) of row `r` in a box of 128-byte rows with the 128-byte
// swizzle: row r at r * 128, its 16-byte chunk c at c ^ (r & 7).
__device__ __forceinline__ u32 swizzled_byte(int r, int col) {
    return r * 128 + ((((col >> 2) ^ (r & 7)) << 4) | ((col & 3) * 4));
}

// Where the P operand's tiles come from (see the top of this file).
#define SRC_PACKED 0
#define SRC_TMA_K 1
#define SRC_TMA_MN 2
#define SRC_TMA_KS 3

// SRC_TMA_MN: rows per box (tma::MN_BOX_ROWS on the host; 32 k per box, BK), and its bytes.
constexpr int MN_BOX_ROWS = 32;
constexpr int MN_BOX_BYTES = MN_BOX_ROWS * 32 * 4;

// A work unit: block tile (tp, tq) of output slice z (batch entry bIdx), k tiles ktBegin ..
// ktBegin + nk; a piece of a tail tile (below) also names the tile's slot and its piece index.
struct WorkUnit {
    int tp, tq, z, bIdx, ktBegin, nk;
    int slot, piece;  // piece -1: the whole unit, stored by its own epilogue
};

// Unit u of the launch. Units before tailFrom (or all, tailPieces < 2) are the (tile, slice)
// units in order; the tile units from tailFrom on (the last, partial wave of a persistent grid:
// fewer units than blocks) are each cut along K into tailPieces pieces of whole k tiles, units
// tailFrom + r * tailPieces + j (tail tile r, piece j), so that every block takes at most one
// piece and the last wave is short (stream-K's remedy for tile quantisation; splits is 1 then).
__device__ __forceinline__ WorkUnit work_unit(long long u, int tiles, int tilesP, int tilesQ,
                                              int groupM, int splits, int ktPerSplit, int numKT,
                                              long long tailFrom, int tailPieces) {
    WorkUnit w;
    w.slot = 0;
    w.piece = -1;
    if (tailPieces > 1 && u >= tailFrom) {
        const long long v = u - tailFrom;
        w.slot = (int)(v / tailPieces);
        w.piece = (int)(v - (long long)w.slot * tailPieces);
        u = tailFrom + w.slot;
    }
    w.z = (int)(u / tiles);
    tile_coords((int)(u - (long long)w.z * tiles), tilesP, tilesQ, groupM, w.tp, w.tq);
    w.bIdx = w.z / splits;
    const int split = w.z - w.bIdx * splits;
    if (w.piece >= 0) {
        w.ktBegin = (int)((long long)w.piece * numKT / tailPieces);
        w.nk = (int)((long long)(w.piece + 1) * numKT / tailPieces) - w.ktBegin;
    } else {
        w.ktBegin = split * ktPerSplit;
        w.nk = max(0, min(numKT, w.ktBegin + ktPerSplit) - w.ktBegin);
    }
    return w;
}

// bar.sync on named barrier ID (1 .. 15; 0 is __syncthreads) for COUNT threads (immediates:
// with a register operand ptxas reserves all 16 barriers).
template <int ID, int COUNT>
__device__ __forceinline__ void named_sync() {
    asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(COUNT) : "memory");
}

// The barrier of the consumers that share a work unit: both consumer warpgroups (cooperative,
// barrier 1) or consumer warpgroup cw alone (ping-pong, barriers 2 and 3).
template <bool PP>
__device__ __forceinline__ void unit_sync(int cw) {
    if (!PP) {
        named_sync<1, 256>();
    } else if (cw == 0) {
        named_sync<2, 128>();
    } else {
        named_sync<3, 128>();
    }
}

// This thread's raw wgmma A fragments of one k tile (16 values, module comment) from the P
// operand's part of the stage at `stage` in shared memory: SRC_TMA_K, the 128B-swizzled
// K-major tile; SRC_TMA_MN, the [k][32 rows] boxes, 128B-swizzled (k row r at r * 128, its 16-byte
// chunk c at c ^ (r & 7)).
template <int PSRC>
__device__ __forceinline__ void load_p_fragments(float* f, const unsigned char* stage, int cw, int q,
                                                 int g, int t) {
    if (PSRC == SRC_TMA_K) {
        // Rows 64 cw + 16 q + g (+ 8), k = 8 kk + t (+ 4); row r at r * 128, 16-byte chunk c at
        // c ^ (r & 7), and r & 7 == g.
        const int aRow = cw * 64 + q * 16 + g;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = aRow + 8 * (e & 1);
                const int chunk = 2 * kk + (e >> 1);
                f[4 * kk + e] =
                    *reinterpret_cast<const float*>(stage + r * 128 + ((chunk ^ g) << 4) + (t << 2));
            }
        }
    } else {
        // Rows 2g, 2g + 1 of the warp's 16 (accumulator rows g, g + 8) at k = 8 kk + t + 4 h: one
        // 8-byte load each, from box 2 cw + q / 2, where the warp's rows are the 16-byte chunks
        // c = 4 (q & 1) + g / 2 of each k row. Within a k tile's eight k rows (kk fixed) the
        // swizzle keeps c ^ r in the half of the banks c is in for r < 4 and moves it to the
        // other half for r >= 4, so a load of k = t + 4 h by every lane (h fixed) would put the
        // warp's 256 bytes in 16 banks (two-way conflicts). Load i instead takes h = i ^ (t & 1):
        // two of the four k rows in each half, two wavefronts, as few as 256 bytes allow.
        const unsigned char* sp = stage + (2 * cw + (q >> 1)) * MN_BOX_BYTES;
        const int c = 4 * (q & 1) + (g >> 1);
        const int odd = t & 1;
        const int r0 = t + 4 * odd;        // load 0: h = odd
        const int r1 = t + 4 * (odd ^ 1);  // load 1: h = 1 - odd
        const int off0 = r0 * 128 + ((c ^ r0) << 4) + 8 * (g & 1);
        const int off1 = r1 * 128 + ((c ^ r1) << 4) + 8 * (g & 1);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            // k rows 8 kk + r: 1024 bytes per kk, and (8 kk + r) & 7 == r.
            const float2 v0 = *reinterpret_cast<const float2*>(sp + kk * 1024 + off0);
            const float2 v1 = *reinterpret_cast<const float2*>(sp + kk * 1024 + off1);
            const float2 lo = odd ? v1 : v0;  // h = 0
            const float2 hi = odd ? v0 : v1;  // h = 1
            f[4 * kk + 0] = lo.x;
            f[4 * kk + 1] = lo.y;
            f[4 * kk + 2] = hi.x;
            f[4 * kk + 3] = hi.y;
        }
    }
}

// D = P Q^T per BM x BN tile (module comment). Pp / Qp: packed operands (unused for operands read
// through tmP / tmQ); PR / QR: rows of P and Q; strideP / strideQ: elements between the packed
// batch entries (0: broadcast); tensor maps hold the launch's batch entries from its first
// (coordinate = batch index of the unit), pBroadcast / qBroadcast: operands shared by every entry
// (coordinate 0); nz: output slices (batch entries x splits) of this launch; vec: C (or the
// workspace) allows 8-byte stores.
//
// CM = 2 (the gemm_wgmma_c2 kernels, clusters of two blocks along x): the two blocks of a cluster
// compute P tiles 2 i and 2 i + 1 beside the same Q tile (a work unit is then such a pair, its
// P index i), so that each block copies its own P tile and half of the shared Q tile, which the
// copy engine multicasts into both blocks' stages (half the L2 reads of Q; cuBLAS's TF32 kernels
// on Hopper run in clusters of 2 to 16). A stage may be refilled only when the consumers of both
// blocks have released it: each consumer arrives on the empty barrier of both blocks. A block of
// a pair whose P tile lies beyond PR still copies its half of Q and computes, storing nothing.
template <int BN, int STAGES, int SPLIT, int PSRC, bool QTMA, bool SWAP, int MINB, bool PP, int CM,
          int BM>
__device__ __forceinline__ void gemm_wgmma_body(
    const float* __restrict__ Pp, const float* __restrict__ Qp, float* __restrict__ C,
    const TmaDesc& tmP, const TmaDesc& tmQ, int PR, int QR, int K, int ldc, long long strideP,
    long long strideQ, long long strideC, int pBroadcast, int qBroadcast, float alpha, float beta,
    int splits, int ktPerSplit, int nz, int vec, int groupM, long long tailFrom, int tailPiecesArg,
    float* __restrict__ tailWs, unsigned int* __restrict__ tailCount, const TmaDesc& tmC,
    int cTma) {
    launch_dependents();
    static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256,
                  "consumer warpgroups are 64 x 64, 64 x 128, 64 x 192 or 64 x 256");
    static_assert(BN != 192 || (!PP && BM == 128 && CM == 1),
                  "the 64 x 192 warpgroup tile: the cooperative 128 x 192 block, one per cluster");
    static_assert(SPLIT == 1 || SPLIT == 3, "TF32 (1 product) or 3xTF32 (3 products)");
    static_assert(SPLIT == 1 || BN == 128, "3xTF32 keeps two accumulator sets: BN 128 only");
    static_assert(SPLIT == 1 || (PSRC == SRC_PACKED && !QTMA), "3xTF32 reads packed operands");
    static_assert(!SWAP || PSRC == SRC_TMA_MN, "a swapped product reads the MN-major B as P");
    static_assert(PSRC != SRC_TMA_KS || !SWAP, "P read as K-major boxes by wgmma: not swapped");
    // P in registers (the fragment loads) or in shared memory (wgmma's descriptor).
    constexpr bool P_REGS = PSRC == SRC_TMA_K || PSRC == SRC_TMA_MN;
    static_assert(MINB == 1 || (MINB == 2 && SPLIT == 1 && BN <= 128),
                  "two blocks per SM: TF32 with at most 64 accumulators per thread");
    static_assert(!PP || (SPLIT == 1 && MINB == 1 && (BN == 128 || (BN == 256 && BM == 64))),
                  "ping-pong: TF32, one BM x 128 or 64 x 256 tile per consumer warpgroup");
    static_assert(BM == 128 || (BM == 64 && PP),
                  "block tiles of 128 rows (one 64-row slab per consumer warpgroup, or both slabs "
                  "per ping-pong unit), or of 64 rows (one slab per ping-pong unit)");
    static_assert(CM == 1 || (CM == 2 && SPLIT == 1 && MINB == 1),
                  "clusters of two: TF32 kernels of one block per SM");
    constexpr int BK = 32;
    constexpr int PARTS = SPLIT == 3 ? 2 : 1;
    constexpr int NACC = BN / 2;  // f32 accumulators per thread of a 64 x BN warpgroup tile
    // 64-row slabs of the block tile each consumer warpgroup computes: its own (cooperative), or
    // all of them (ping-pong: the whole tile, of every other work unit; two for BM 128, one for
    // BM 64).
    constexpr int SLABS = PP ? BM / 64 : 1;
    constexpr u32 P_PART = BM * BK * 4;
    constexpr u32 Q_PART = BN * BK * 4;
    constexpr u32 P_BYTES = PARTS * P_PART;
    constexpr u32 Q_BYTES = PARTS * Q_PART;
    constexpr u32 STAGE_BYTES = P_BYTES + Q_BYTES;
    // The output through shared memory and the copy engine (cTma; the host's tma::output_map):
    // each consumer warpgroup stages its slab in chunks of 32 columns (swapped: 32 C rows), as
    // two 32 x 32 boxes of the map with the 128-byte swizzle, in two buffers of its own after the
    // stages, and the copy engine writes each chunk to C while the warpgroup goes on (to the next
    // chunk, then the next unit's main loop). Compiled where the buffers fit beside the stages in
    // the 227 KB a block may have (the host's TileConfig::stages_output); TF32 only, and the host
    // asks for it only with beta 0 (C is not read).
    constexpr u32 C_BOX_BYTES = 32 * 32 * 4;
    constexpr u32 C_CHUNK_BYTES = 2 * C_BOX_BYTES;
    constexpr u32 C_STAGE_BYTES = 2 * 2 * C_CHUNK_BYTES;
    constexpr bool C_TMA =
        SPLIT == 1 && MINB == 1 && STAGES * STAGE_BYTES + 1024 + C_STAGE_BYTES <= 232448;
    // Registers per thread after setmaxnreg (multiples of 8, in 24 .. 256): the producer's and the
    // consumers' shares of the block's entry allocation, 65536 / (384 MINB) rounded down to 8 (168
    // for one block per SM, 80 for two), which they fill exactly: 128 x 40 + 256 x 232 = 384 x 168,
    // 128 x 32 + 256 x 104 = 384 x 80.
    constexpr int PRODUCER_REGS = MINB == 1 ? 40 : 32;
    constexpr int CONSUMER_REGS = MINB == 1 ? 232 : 104;
    static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= 384 * ((65536 / (384 * MINB)) & ~7),
                  "setmaxnreg shares exceed the entry allocation");
    // ptxas sizes a wgmma instruction's operands by the entry register count, not by setmaxnreg
    // (C7602: an m64n128k8 .f32 needs at least 90 at entry): under two blocks' 80, each k8 step of
    // a 64 x 128 warpgroup tile is two m64n64k8 halves on one A operand.
    constexpr bool HALVES = MINB == 2;

    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) u64 full[STAGES];
    __shared__ __align__(8) u64 empty[STAGES];
    // Ping-pong: order[w] completes a phase when consumer warpgroup 1 - w has issued the last
    // wgmma of a unit's main loop, so that the two main loops take turns (module comment).
    __shared__ __align__(8) u64 order[2];
    // Tail pieces: whether the unit's consumers hold its last piece (per consumer warpgroup).
    __shared__ int tailLast[2];
    // The swizzle pattern repeats every 1024 bytes: align the stage buffers to that (the launch
    // asks for 1024 bytes of slack).
    const u32 raw = smem_addr(smem_raw);
    const u32 base = (raw + 1023u) & ~1023u;

    const int tilesP = (PR + BM - 1) / BM;
    const int tilesQ = (QR + BN - 1) / BN;
    // Work units per output slice: block tiles, or (CM = 2) pairs of P tiles beside one Q tile.
    const int unitsP = (tilesP + CM - 1) / CM;
    const int tiles = unitsP * tilesQ;
    const int numKT = (K + BK - 1) / BK;
    // Tail pieces (work_unit): TF32 only (3xTF32 repairs NaN outputs from its own k range).
    const int tailPieces = SPLIT == 1 && tailPiecesArg > 1 ? tailPiecesArg : 0;
    const long long units = tailPieces > 1
                                ? tailFrom + ((long long)tiles * nz - tailFrom) * tailPieces
                                : (long long)tiles * nz;
    // This block's first unit and the step between its units: its cluster's (CM = 2).
    const u32 rank = CM == 1 ? 0u : cluster_rank();
    const int firstUnit = CM == 1 ? (int)blockIdx.x : (int)cluster_index();
    const int unitStep = CM == 1 ? (int)gridDim.x : (int)cluster_count();

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(smem_addr(&full[s]), 1);
            // Each consumer warpgroup (ping-pong: the one whose unit it is) of each block of the
            // cluster releases every stage.
            mbar_init(smem_addr(&empty[s]), (PP ? 1 : 2) * CM);
        }
        mbar_init(smem_addr(&order[0]), 1);
        mbar_init(smem_addr(&order[1]), 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    // CM = 2: the other block's barriers are initialised before any copy or arrival reaches them.
    if (CM == 1) {
        __syncthreads();
    } else {
        cluster_sync();
    }
    // A consumer warpgroup's release of stage `st`: on its own block's empty barrier, and (CM =
    // 2) on the other block's, whose producer multicasts into this block's stage too.
    auto release = [&](int st) {
        const u32 bar = smem_addr(&empty[st]);
        mbar_arrive(bar);
        if (CM == 2) mbar_arrive_cluster(cluster_addr(bar, rank ^ 1u));
    };

    const int wg = threadIdx.x / 128;
    if (wg == 0) {
        // Producer warpgroup: one thread issues every copy.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS) : "memory");
        if (threadIdx.x == 0) {
            int s = 0;
            u32 phase = 0;
            long long it = 0;  // k tiles issued so far (all units)
            for (long long u = firstUnit; u < units; u += unitStep) {
                WorkUnit w = work_unit(u, tiles, unitsP, tilesQ, groupM, splits, ktPerSplit, numKT,
                                        tailFrom, tailPieces);
                w.tp = w.tp * CM + (int)rank;
                // CM = 2: a P tile beyond PR (the second of an odd count) is not copied.
                const bool pIn = w.tp < tilesP;
                const float* pp =
                    Pp + w.bIdx * strideP + (long long)w.tp * numKT * (PARTS * BM * BK);
                // CM = 2: this block's half of each Q tile (rows BN/2 rank ..; a packed tile's rows
                // are 128 bytes apart and its swizzle period is 8 rows, so a half is a plain
                // bulk copy and the tensor map's box is BN/2 rows).
                const float* qp = Qp + w.bIdx * strideQ +
                                  (long long)w.tq * numKT * (PARTS * BN * BK) +
                                  (CM == 1 ? 0 : (int)rank * (BN / 2 * BK));
                const int q0 = w.tq * BN + (CM == 1 ? 0 : (int)rank * (BN / 2));
                const int zp = pBroadcast ? 0 : w.bIdx;
                const int zq = qBroadcast ? 0 : w.bIdx;
                const int p0 = w.tp * BM;
                // SRC_TMA_MN: boxes wholly beyond PR are not copied (their rows feed only outputs
                // that are never stored).
                const int boxes =
                    pIn ? min(BM / MN_BOX_ROWS, (PR - p0 + MN_BOX_ROWS - 1) / MN_BOX_ROWS) : 0;
                const u32 pBytes = PSRC == SRC_TMA_MN ? boxes * MN_BOX_BYTES : (pIn ? P_BYTES : 0u);
                // CM = 2: both halves of Q land here, this block's and the other block's.
                const u32 bytes = pBytes + Q_BYTES;
                for (int i = 0; i < w.nk; ++i, ++it) {
                    const int kt = w.ktBegin + i;
                    if (it >= STAGES) mbar_wait(smem_addr(&empty[s]), phase ^ 1u);
                    const u32 fb = smem_addr(&full[s]);
                    const u32 dst = base + s * STAGE_BYTES;
                    mbar_arrive_expect_tx(fb, bytes);
                    if (PSRC == SRC_TMA_K || PSRC == SRC_TMA_KS) {
                        if (pIn) tma_g2s_3d(dst, &tmP, kt * BK, p0, zp, fb);
                    } else if (PSRC == SRC_TMA_MN) {
                        for (int b = 0; b < boxes; ++b)
                            tma_g2s_3d(dst + b * MN_BOX_BYTES, &tmP, p0 + MN_BOX_ROWS * b,
                                       kt * BK, zp, fb);
                    } else if (pIn) {
                        bulk_g2s(dst, pp + (long long)kt * (PARTS * BM * BK), P_BYTES, fb);
                    }
                    const float* qk = qp + (long long)kt * (PARTS * BN * BK);
                    if (CM == 1) {
                        if (QTMA) {
                            tma_g2s_3d(dst + P_BYTES, &tmQ, kt * BK, q0, zq, fb);
                        } else {
                            bulk_g2s(dst + P_BYTES, qk, Q_BYTES, fb);
                        }
                    } else {
                        // Into both blocks, at this block's half of the stage's Q tile.
                        const u32 qdst = dst + P_BYTES + rank * (Q_BYTES / 2);
                        if (QTMA) {
                            tma_g2s_3d_mc(qdst, &tmQ, kt * BK, q0, zq, fb, 3);
                        } else {
                            bulk_g2s_mc(qdst, qk, Q_BYTES / 2, fb, 3);
                        }
                    }
                    if (++s == STAGES) {
                        s = 0;
                        phase ^= 1u;
                    }
                }
            }
            if (CM == 2) {
                // No block may leave while the other's consumers can still arrive on its empty
                // barriers: wait until every stage filled has been released by the consumers of
                // both blocks (as the next STAGES copies would). Copies into a block's stages
                // complete before its own consumers finish, which wait for them.
                for (int j = 0; j < STAGES; ++j, ++it) {
                    if (it >= STAGES) mbar_wait(smem_addr(&empty[s]), phase ^ 1u);
                    if (++s == STAGES) {
                        s = 0;
                        phase ^= 1u;
                    }
                }
            }
        }
    } else {
    // Consumer warpgroups (the rest of the kernel; one if/else, so that ptxas honours setmaxnreg).
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS) : "memory");
    const int cw = wg - 1;  // P rows 64 cw .. 64 cw + 63 of the block tile
    const int lane = threadIdx.x & 31;
    const int q = (threadIdx.x & 127) >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;
    const bool leader = (threadIdx.x & 127) == 0;
    int s = 0;
    u32 phase = 0;
    u32 orderPhase = 0;
    long long nth = 0;  // this block's work units so far
    for (long long u = firstUnit; u < units; u += unitStep, ++nth) {
    WorkUnit w = work_unit(u, tiles, unitsP, tilesQ, groupM, splits, ktPerSplit, numKT, tailFrom,
                           tailPieces);
    w.tp = w.tp * CM + (int)rank;
    if (PP && (int)(nth & 1) != cw) {
        // Ping-pong: the other consumer's unit; its stages pass by.
        const int adv = s + w.nk;
        s = adv % STAGES;
        phase ^= (u32)(adv / STAGES) & 1u;
        continue;
    }
    // Ping-pong: this main loop starts once the other consumer has issued its last one's wgmma
    // (so every stage of that unit has landed: the full barriers are at most one phase ahead of
    // this consumer's count, and the parity waits below cannot be fooled).
    if (PP && nth > 0) {
        mbar_wait(smem_addr(&order[cw]), orderPhase);
        orderPhase ^= 1u;
    }
    float d[SLABS * NACC];
#pragma unroll
    for (int i = 0; i < SLABS * NACC; ++i) d[i] = 0.0f;

    if (SPLIT == 1 && P_REGS && (PP || BN != 128)) {
        // P from registers: the fragments are double-buffered (fa, fb): tile i's wgmma run while
        // tile i + 1's fragments are loaded into the set that tile i - 1 (retired by wait<1>)
        // used, so that a warpgroup always has a group queued on the tensor cores (ping-pong:
        // one main loop at a time has them; cooperative: the fragment loads no longer wait for
        // the warpgroup's own last group, as cuBLAS's kernels keep two in flight). Measured on
        // an H100 (GEMM_NOTES.md, version 11): the cooperative 128x256 1-2 % faster at 4096^3,
        // the 128x128 2-5 % slower on four shapes (it keeps the single buffer below).
        u32 fa[16 * SLABS], fb[16 * SLABS];
        int prev = 0;
        auto load = [&](u32* af, int st) {
            const unsigned char* stage = smem_raw + (base + st * STAGE_BYTES - raw);
#pragma unroll
            for (int m = 0; m < SLABS; ++m) {
                float f[16];
                load_p_fragments<PSRC>(f, stage, PP ? m : cw, q, g, t);
#pragma unroll
                for (int e = 0; e < 16; ++e) af[16 * m + e] = cvt_rna_tf32(f[e]);
            }
        };
        auto step = [&](u32* cur, u32* nxt, int i) {
            const u32 qAddr = base + s * STAGE_BYTES + P_BYTES;
            fence_regs<SLABS * NACC>(d);
            fence_regs<16 * SLABS>(cur);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk) {
#pragma unroll
                for (int m = 0; m < SLABS; ++m)
                    wgmma_step_rs<BN, HALVES>(d + m * NACC, &cur[16 * m + 4 * kk], qAddr + kk * 32);
            }
            wgmma_commit();
            fence_regs<SLABS * NACC>(d);
            wgmma_wait<1>();
            fence_regs<SLABS * NACC>(d);
            fence_regs<16 * SLABS>(nxt);
            if (i > 0 && leader) release(prev);
            prev = s;
            if (++s == STAGES) {
                s = 0;
                phase ^= 1u;
            }
            if (i + 1 < w.nk) {
                mbar_wait(smem_addr(&full[s]), phase);
                load(nxt, s);
            }
        };
        if (w.nk > 0) {
            mbar_wait(smem_addr(&full[s]), phase);
            load(fa, s);
        }
        for (int i = 0; i < w.nk; i += 2) {
            step(fa, fb, i);
            if (i + 1 < w.nk) step(fb, fa, i + 1);
        }
        if (PP && leader) mbar_arrive(smem_addr(&order[cw ^ 1]));
        wgmma_wait<0>();
        fence_regs<SLABS * NACC>(d);
        if (w.nk > 0 && leader) release(prev);
    } else if (SPLIT == 1) {
        int prev = 0;
        // P from registers (the cooperative 128 x 128 tile, single-buffered; see above): the
        // wgmma A fragments of one k tile (4 k8 steps x 4 registers).
        u32 af[16 * SLABS];
        for (int i = 0; i < w.nk; ++i) {
            mbar_wait(smem_addr(&full[s]), phase);
            const u32 stage = base + s * STAGE_BYTES;
            const u32 qAddr = stage + P_BYTES;
            if (P_REGS) {
                float f[16];
                load_p_fragments<PSRC>(f, smem_raw + (stage - raw), cw, q, g, t);
#pragma unroll
                for (int e = 0; e < 16; ++e) af[e] = cvt_rna_tf32(f[e]);
            }
            fence_regs<SLABS * NACC>(d);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk) {
                if (P_REGS) {
                    wgmma_step_rs<BN, HALVES>(d, &af[4 * kk], qAddr + kk * 32);
                } else {
#pragma unroll
                    for (int m = 0; m < SLABS; ++m) {
                        // Ping-pong: every slab of P, each into its own accumulators.
                        const u64 da = smem_desc(stage + (PP ? m : cw) * (64 * 128) + kk * 32);
                        wgmma_step_ss<BN, HALVES>(d + m * NACC, da, qAddr + kk * 32);
                    }
                }
            }
            wgmma_commit();
            fence_regs<SLABS * NACC>(d);
            if (P_REGS) {
                // Retire this tile before the next one rewrites the fragments (see the top).
                wgmma_wait<0>();
                fence_regs<SLABS * NACC>(d);
                fence_regs<16>(af);
                if (leader) release(s);
            } else {
                // Tile i - 1 is complete once at most one group (tile i) is pending: release its
                // stage to the producer.
                wgmma_wait<1>();
                fence_regs<SLABS * NACC>(d);
                if (i > 0 && leader) release(prev);
            }
            prev = s;
            if (++s == STAGES) {
                s = 0;
                phase ^= 1u;
            }
        }
        if (PP && leader) mbar_arrive(smem_addr(&order[cw ^ 1]));
        wgmma_wait<0>();
        fence_regs<SLABS * NACC>(d);
        // The last stage of the unit (shared-memory P): release it too, the producer may already
        // be waiting for it with the next unit's tiles.
        if (!P_REGS && w.nk > 0 && leader) release(prev);
    } else {
        // 3xTF32: stage = [P big | P small | Q big | Q small].
        float x[NACC];
#pragma unroll
        for (int i = 0; i < NACC; ++i) x[i] = 0.0f;
        for (int i = 0; i < w.nk; ++i) {
            mbar_wait(smem_addr(&full[s]), phase);
            const u32 stage = base + s * STAGE_BYTES;
            const u32 aBig = stage + cw * (64 * 128);
            const u32 aSmall = aBig + P_PART;
            const u32 bBig = stage + P_BYTES;
            const u32 bSmall = bBig + Q_PART;
            fence_regs<NACC>(x);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk) {
                const int o = kk * 32;
                wgmma_n128_ss(x, smem_desc(aSmall + o), smem_desc(bBig + o), kk != 0);
                wgmma_n128_ss(x, smem_desc(aBig + o), smem_desc(bSmall + o), 1);
                wgmma_n128_ss(x, smem_desc(aBig + o), smem_desc(bBig + o), 1);
            }
            wgmma_commit();
            fence_regs<NACC>(x);
            wgmma_wait<0>();
            fence_regs<NACC>(x);
            if (leader) release(s);
#pragma unroll
            for (int j = 0; j < NACC; ++j) d[j] += x[j];
            if (++s == STAGES) {
                s = 0;
                phase ^= 1u;
            }
        }
    }

    if (SPLIT == 1 && w.piece >= 0) {
        // A piece of a tail tile: its partial sums go to its slot of the workspace (the tile's
        // pieces side by side, BM x BN floats each, per block of a cluster); then the unit's
        // consumers count the piece, and the consumers that count last sum every piece's slot
        // in piece order (the same sum whichever finishes last: deterministic) and store the
        // tile through the usual epilogue. Slab layout: float4 i of consumer thread c at
        // (i * 128 + c) * 4, so that a warp's stores and loads are 512 contiguous bytes.
        const int grp = PP ? cw : 0;
        const int ct = threadIdx.x & 127;
        const long long tileSlot = (long long)w.slot * CM + rank;
        float* slots = tailWs + tileSlot * tailPieces * (BM * BN);
        float* mine = slots + (long long)w.piece * (BM * BN);
#pragma unroll
        for (int m = 0; m < SLABS; ++m) {
            float4* dst = reinterpret_cast<float4*>(mine + (PP ? m : cw) * (64 * BN));
#pragma unroll
            for (int i = 0; i < NACC / 4; ++i) {
                const float* v = d + m * NACC + 4 * i;
                __stcg(dst + i * 128 + ct, make_float4(v[0], v[1], v[2], v[3]));
            }
        }
        __threadfence();
        unit_sync<PP>(cw);
        if (leader && (PP || cw == 0)) {
            tailLast[grp] = atomicAdd(tailCount + tileSlot, 1u) == (unsigned)(tailPieces - 1);
        }
        unit_sync<PP>(cw);
        if (!tailLast[grp]) continue;
        __threadfence();
        // The slots summed in piece order, TAIL_CHUNK float4 of each thread's accumulators at a
        // time (cooperative 8: 32 KB in flight per block; more, or more than 4 in the ping-pong
        // kernels, made ptxas spill beside 128 accumulators): piece 0's values, then each other
        // piece's added.
        constexpr int TAIL_CHUNK = PP ? 4 : 8;
        static_assert(NACC / 4 % TAIL_CHUNK == 0, "whole chunks of accumulators");
#pragma unroll
        for (int m = 0; m < SLABS; ++m) {
#pragma unroll
            for (int c = 0; c < NACC / 4; c += TAIL_CHUNK) {
                const float4* src =
                    reinterpret_cast<const float4*>(slots + (PP ? m : cw) * (64 * BN)) + c * 128 + ct;
#pragma unroll
                for (int i = 0; i < TAIL_CHUNK; ++i) {
                    const float4 v = __ldcg(src + i * 128);
                    float* a = d + m * NACC + 4 * (c + i);
                    a[0] = v.x;
                    a[1] = v.y;
                    a[2] = v.z;
                    a[3] = v.w;
                }
                for (int j = 1; j < tailPieces; ++j) {
                    const float4* sj = src + (long long)j * (BM * BN / 4);
#pragma unroll
                    for (int i = 0; i < TAIL_CHUNK; ++i) {
                        const float4 v = __ldcg(sj + i * 128);
                        float* a = d + m * NACC + 4 * (c + i);
                        a[0] += v.x;
                        a[1] += v.y;
                        a[2] += v.z;
                        a[3] += v.w;
                    }
                }
            }
        }
    }

    // Epilogue: C = alpha * D + beta * C (beta == 0 never reads C); SWAP stores D^T. P row of
    // accumulator row g + 8h (module comment):
    float* Cb = C + (long long)w.z * strideC;
#pragma unroll
    for (int m = 0; m < SLABS; ++m) {
    // Ping-pong: slab m of the tile, from accumulators d[m * NACC ..].
    const float* dm = d + m * NACC;
    // C's row stride, opaque per slab: otherwise ptxas hoists the swapped store addresses (the
    // same columns for both slabs) out of the slab loop and spills them beside 128 accumulators.
    int ldcm = ldc;
    if (PP) asm volatile("" : "+r"(ldcm));
    const int pBase = w.tp * BM + (PP ? m : cw) * 64 + q * 16;
    const int qBase = w.tq * BN + 2 * t;
    const int pRow0 = PSRC == SRC_TMA_MN ? pBase + 2 * g : pBase + g;
    const int pRow1 = PSRC == SRC_TMA_MN ? pBase + 2 * g + 1 : pBase + g + 8;
    // 3xTF32: outputs that came out NaN, one bit each (h, j, e) -> bit (h * BN/8 + j) * 2 + e; they
    // are left unwritten here and repaired below.
    unsigned long long nanMask = 0;
    // A TF32 tile wholly inside C (every tile but the last row and column of tiles) with vector
    // stores allowed takes the straight path: no per-element bounds test, one branch on beta for
    // the whole slab, addresses stepped by pointer. The general path below spends about 25
    // instructions per 8-byte store on its tests; at K = 256 ncu sampled half of the consumer
    // warps' time in it (GEMM_NOTES.md, version 12).
    const bool interior =
        SPLIT == 1 && vec && (w.tp + 1) * BM <= PR && (w.tq + 1) * BN <= QR;
    if (C_TMA && cTma) {
        // Through shared memory and the copy engine (C_TMA above), any tile: the copies write
        // nothing beyond C's extents. Chunk c of the slab (accumulator columns 32 c .. 32 c + 31,
        // j = 4 c .. 4 c + 3) goes to buffer c & 1 (BN / 32 is even: the parity runs on across
        // units) as two boxes of 32 slab rows (swapped: 32 P columns) x 32 C columns (swapped:
        // 32 C rows, which are Q rows), box row r at r * 128 with its 16-byte chunk at chunk ^ (r
        // & 7). Before the warpgroup's barrier the leader waits until the previous chunk's
        // copies have read their buffer (the next chunk's): one barrier per chunk.
        const int slab0 = w.tp * BM + (PP ? m : cw) * 64;
        const u32 cbuf = base + STAGES * STAGE_BYTES + cw * (2 * C_CHUNK_BYTES);
        const int l0 = pRow0 - slab0;
        const int l1 = pRow1 - slab0;
#pragma unroll
        for (int c = 0; c < BN / 32; ++c) {
            const u32 buf = cbuf + (c & 1) * C_CHUNK_BYTES;
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const int j = 4 * c + jj;
                if (SWAP) {
                    // C rows 8 jj + 2 t + e of the chunk, columns l0 and l0 + 1 (= l1: SRC_TMA_MN).
                    const u32 box = buf + (l0 >> 5) * C_BOX_BYTES;
                    const int col = l0 & 31;
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int r = 8 * jj + 2 * t + e;
                        st_shared_v2(box + swizzled_byte(r, col), alpha * dm[4 * j + e],
                                     alpha * dm[4 * j + 2 + e]);
                    }
                } else {
                    // Slab rows l0, l1, columns 8 jj + 2 t and the next.
                    const int col = 8 * jj + 2 * t;
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int l = h ? l1 : l0;
                        const int r = l & 31;
                        const u32 box = buf + (l >> 5) * C_BOX_BYTES;
                        st_shared_v2(box + swizzled_byte(r, col), alpha * dm[4 * j + 2 * h],
                                     alpha * dm[4 * j + 2 * h + 1]);
                    }
                }
            }
            fence_proxy_async_shared();
            if (leader) bulk_wait<0, true>();
            unit_sync<true>(cw);
            if (leader) {
                const int q0 = w.tq * BN + 32 * c;
                if (SWAP) {
                    tma_s2g_3d(&tmC, slab0, q0, w.z, buf);
                    tma_s2g_3d(&tmC, slab0 + 32, q0, w.z, buf + C_BOX_BYTES);
                } else {
                    tma_s2g_3d(&tmC, q0, slab0, w.z, buf);
                    tma_s2g_3d(&tmC, q0, slab0 + 32, w.z, buf + C_BOX_BYTES);
                }
                bulk_commit();
            }
        }
    } else if (interior) {
        // The thread's first two C rows: qBase and qBase + 1 (swapped, from column pRow0), or
        // pRow0 and pRow1 (from column qBase).
        float* r0 = Cb + (SWAP ? (long long)qBase * ldcm + pRow0 : (long long)pRow0 * ldcm + qBase);
        float* r1 = SWAP ? r0 + ldcm : Cb + (long long)pRow1 * ldcm + qBase;
        if (beta == 0.0f) {
            store_slab<BN, SWAP, false>(r0, r1, ldcm, dm, alpha, beta);
        } else {
            store_slab<BN, SWAP, true>(r0, r1, ldcm, dm, alpha, beta);
        }
    } else if (SWAP) {
        // This thread's P rows 2g, 2g + 1 are adjacent in C's row q.
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int c = qBase + 8 * j + e;
                if (c >= QR || pRow0 >= PR) continue;
                const float v0 = dm[4 * j + e];
                const float v1 = dm[4 * j + 2 + e];
                const bool in1 = pRow1 < PR;
                float* dst = Cb + (long long)c * ldcm + pRow0;
                if (vec && in1) {
                    float2 o = make_float2(alpha * v0, alpha * v1);
                    if (beta != 0.0f) {
                        const float2 old = *reinterpret_cast<const float2*>(dst);
                        o.x = fmaf(beta, old.x, o.x);
                        o.y = fmaf(beta, old.y, o.y);
                    }
                    *reinterpret_cast<float2*>(dst) = o;
                } else {
                    store1(dst, 0, v0, alpha, beta);
                    if (in1) store1(dst, 1, v1, alpha, beta);
                }
            }
        }
    } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = h ? pRow1 : pRow0;
            if (r >= PR) continue;
            float* crow = Cb + (long long)r * ldcm;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int c = qBase + 8 * j;
                const float v0 = dm[4 * j + 2 * h];
                const float v1 = dm[4 * j + 2 * h + 1];
                bool ok0 = true, ok1 = true;
                if (SPLIT == 3) {
                    ok0 = !isnan(v0);
                    ok1 = !isnan(v1);
                    const int bit = (h * (BN / 8) + j) * 2;
                    if (!ok0 && c < QR) nanMask |= 1ull << bit;
                    if (!ok1 && c + 1 < QR) nanMask |= 1ull << (bit + 1);
                }
                if (vec && c + 1 < QR && ok0 && ok1) {
                    float2* p = reinterpret_cast<float2*>(crow + c);
                    float2 o = make_float2(alpha * v0, alpha * v1);
                    if (beta != 0.0f) {
                        const float2 old = *p;
                        o.x = fmaf(beta, old.x, o.x);
                        o.y = fmaf(beta, old.y, o.y);
                    }
                    *p = o;
                } else {
                    if (c < QR && ok0) store1(crow, c, v0, alpha, beta);
                    if (c + 1 < QR && ok1) store1(crow, c + 1, v1, alpha, beta);
                }
            }
        }
    }
    if (SPLIT == 3) {
        // NaN repair from the big parts (module comment).
        const int kEnd = min(K, (w.ktBegin + w.nk) * BK);
#pragma unroll 1
        while (nanMask) {
            const int bit = __ffsll((long long)nanMask) - 1;
            nanMask &= nanMask - 1;
            const int e = bit & 1;
            const int j = (bit >> 1) % (BN / 8);
            const int h = (bit >> 1) / (BN / 8);
            const int r = h ? pRow1 : pRow0;
            const int c = qBase + 8 * j + e;
            const float* pB = Pp + w.bIdx * strideP;
            const float* qB = Qp + w.bIdx * strideQ;
            float v = 0.0f;
#pragma unroll 1
            for (int k = w.ktBegin * BK; k < kEnd; ++k) {
                v = fmaf(packed_big<BM, PARTS>(pB, numKT, r, k),
                         packed_big<BN, PARTS>(qB, numKT, c, k), v);
            }
            store1(Cb + (long long)r * ldcm, c, v, alpha, beta);
        }
    }
    }  // slabs
    }  // work units
    // The output's last copies: done before the block's shared memory goes.
    if (C_TMA && cTma && leader) bulk_wait<0, false>();
    }  // consumer warpgroups
}

// The kernels (arguments as gemm_wgmma_body's): gemm_wgmma, one block per work unit or
// persistent, and gemm_wgmma_c2, the same in clusters of two blocks that share Q's tiles (CM
// above).
template <int BN, int STAGES, int SPLIT, int PSRC, bool QTMA, bool SWAP, int MINB = 1,
          bool PP = false, int BM = 128>
__global__ void __launch_bounds__(384, MINB)
    gemm_wgmma(const float* __restrict__ Pp, const float* __restrict__ Qp, float* __restrict__ C,
               const __grid_constant__ TmaDesc tmP, const __grid_constant__ TmaDesc tmQ, int PR,
               int QR, int K, int ldc, long long strideP, long long strideQ, long long strideC,
               int pBroadcast, int qBroadcast, float alpha, float beta, int splits,
               int ktPerSplit, int nz, int vec, int groupM, long long tailFrom, int tailPieces,
               float* __restrict__ tailWs, unsigned int* __restrict__ tailCount,
               const __grid_constant__ TmaDesc tmC, int cTma) {
    gemm_wgmma_body<BN, STAGES, SPLIT, PSRC, QTMA, SWAP, MINB, PP, 1, BM>(
        Pp, Qp, C, tmP, tmQ, PR, QR, K, ldc, strideP, strideQ, strideC, pBroadcast, qBroadcast,
        alpha, beta, splits, ktPerSplit, nz, vec, groupM, tailFrom, tailPieces, tailWs, tailCount,
        tmC, cTma);
}

template <int BN, int STAGES, int SPLIT, int PSRC, bool QTMA, bool SWAP, int MINB = 1,
          bool PP = false, int BM = 128>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
    gemm_wgmma_c2(const float* __restrict__ Pp, const float* __restrict__ Qp, float* __restrict__ C,
                  const __grid_constant__ TmaDesc tmP, const __grid_constant__ TmaDesc tmQ, int PR,
                  int QR, int K, int ldc, long long strideP, long long strideQ, long long strideC,
                  int pBroadcast, int qBroadcast, float alpha, float beta, int splits,
                  int ktPerSplit, int nz, int vec, int groupM, long long tailFrom,
                  int tailPieces, float* __restrict__ tailWs, unsigned int* __restrict__ tailCount,
                  const __grid_constant__ TmaDesc tmC, int cTma) {
    gemm_wgmma_body<BN, STAGES, SPLIT, PSRC, QTMA, SWAP, MINB, PP, 2, BM>(
        Pp, Qp, C, tmP, tmQ, PR, QR, K, ldc, strideP, strideQ, strideC, pBroadcast, qBroadcast,
        alpha, beta, splits, ktPerSplit, nz, vec, groupM, tailFrom, tailPieces, tailWs, tailCount,
        tmC, cTma);
}

// Whether this GPU's tensor copies round f32 to TF32 for a map of type TFLOAT32 (the host plans
// the tensor-mapped Q only if they do): one 32-float box copied through `map` into shared memory
// and written to `out` as it landed. One block of 32 threads.
__global__ void __launch_bounds__(32) gemm_tma_probe(const __grid_constant__ TmaDesc map,
                                                     float* __restrict__ out) {
    __shared__ __align__(128) float buf[32];
    __shared__ __align__(8) u64 bar;
    if (threadIdx.x == 0) {
        mbar_init(smem_addr(&bar), 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbar_arrive_expect_tx(smem_addr(&bar), 32 * 4);
        tma_g2s_3d(smem_addr(buf), &map, 0, 0, 0, smem_addr(&bar));
    }
    mbar_wait(smem_addr(&bar), 0);
    out[threadIdx.x] = buf[threadIdx.x];
}
