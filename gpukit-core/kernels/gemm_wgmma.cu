// Hopper TF32 GEMM: wgmma.mma_async (sm_90a) on operands packed into 128-byte-swizzled K-major
// tiles, loaded by the bulk copy engine (cp.async.bulk) into a 4-stage mbarrier pipeline, with one
// producer warpgroup and two consumer warpgroups (warp specialisation, setmaxnreg).
// Conventions (row-major, transposes, beta) are in gemm_common.cuh.
//
// Why a pack: wgmma with .tf32 operands reads both A and B K-major from shared memory (there are no
// transpose immediates for tf32), and the tensor cores ignore the 13 low bits of each fp32 value
// (truncation). gemm_wgmma_pack therefore writes op(A) (M x K) and op(B)^T (N x K), rounded to TF32
// (round to nearest, ties away), as contiguous tiles of R rows x 32 k (R = BM for A, BN for B):
//   packed[(batch, row tile, k tile)] = R x 32 floats, row r at byte r * 128, its 16-byte chunk c
//   stored at chunk position c ^ (r & 7),
// which is exactly the canonical 128B-swizzled K-major layout once the tile is copied linearly to
// a 1024-byte aligned shared buffer. Rows beyond M (N) and k beyond K are zeros, so the GEMM
// kernel needs no bounds checks until its epilogue. A k tile of 32 fp32 is one 128-byte swizzle row.
//
// GEMM block: BM x BN = 128 x 256, k tile 32, 384 threads. Warpgroup 0 (producer): after
// setmaxnreg.dec, one thread waits until a stage is empty, posts the expected byte count on the
// stage's full barrier and issues two bulk copies (A 16 KB, B 32 KB) that complete on it.
// Warpgroups 1 and 2 (consumers, setmaxnreg.inc): warpgroup w owns rows 64(w-1) .. 64(w-1)+63 and
// all 256 columns: per k tile 4 x wgmma m64n256k8 (128 f32 accumulators per thread), committed as
// one group; after issuing tile kt it waits until at most one group is pending (tile kt - 1 done)
// and releases the stage of tile kt - 1 (one arrival per consumer warpgroup).
//
// Shared-memory matrix descriptor (sm_90): bits 0-13 start address >> 4, bits 16-29 leading byte
// offset >> 4 (unused for swizzled K-major layouts; 1 by convention), bits 32-45 stride byte
// offset >> 4 (1024 bytes between groups of 8 rows), bits 62-63 layout (1 = 128-byte swizzle).
// The k8 step inside the 128-byte row advances the start address by 32 bytes.
//
// Accumulator layout of m64nNk8 .f32 (per warpgroup): warp q of the warpgroup owns rows
// 16q .. 16q+15; lane l (g = l / 4, t = l % 4), 8-column chunk j: d[4j+0], d[4j+1] = row 16q+g,
// columns 8j+2t, 8j+2t+1; d[4j+2], d[4j+3] = row 16q+g+8, same columns.
#include "gemm_common.cuh"

typedef unsigned long long u64;

// TF32 rounding of an fp32 bit pattern: round to nearest, ties away from zero (add half a TF32
// ulp, clear the 13 low bits; carries into the exponent round up to the next binade or to
// infinity). NaNs stay NaN (quieted), infinities stay infinite.
__device__ __forceinline__ u32 round_tf32(u32 bits) {
    if ((bits & 0x7fffffffu) > 0x7f800000u) return bits | 0x00400000u;
    return (bits + 0x1000u) & 0xffffe000u;
}

__device__ __forceinline__ uint4 round4(float a, float b, float c, float d) {
    return make_uint4(round_tf32(__float_as_uint(a)), round_tf32(__float_as_uint(b)),
                      round_tf32(__float_as_uint(c)), round_tf32(__float_as_uint(d)));
}

// Packs both operands in one launch: op(A) (M x K) into tiles of BM rows and op(B)^T (N x K) into
// tiles of BN rows, in the tiled, swizzled, TF32-rounded layout described above. For an operand X
// with "row-contiguous" flag rc: op(X)[r][k] = rc ? X[k * ld + r] : X[r * ld + k], batch entry b
// at X + b * stride (A: rc = TA; B: rc = !TB since op(B)^T[n][k] = op(B)[k][n]).
// Grid: x = k tile (32 k); y = block of 64 rows, the padded rows of A first, then those of B;
// z = batch entry (an operand with fewer entries, i.e. broadcast, skips the surplus z).
// Rows that are k-contiguous (rc = 0) stream straight through: each thread reads one 16-byte chunk
// (four scalar loads when X is not 16-byte aligned, ld % 4 != 0 or the chunk crosses K) and stores
// it rounded at its swizzled position; a warp reads and writes four whole 128-byte rows. For
// rc = 1 the 64 x 32 tile is read along r (16-byte loads when aligned) and transposed through
// shared memory. Elements beyond the operand's rows or K are written as zeros.
template <int BM, int BN>
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
    float* tp = P + ((b * numTiles + tile) * numKT + kt) * (long long)tileRows * 32 +
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
            *reinterpret_cast<uint4*>(tp + r * 32 + ((c ^ (r & 7)) * 4)) =
                round4(v.x, v.y, v.z, v.w);
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
        *reinterpret_cast<uint4*>(tp + r * 32 + ((c ^ (r & 7)) * 4)) =
            round4(s[r][4 * c], s[r][4 * c + 1], s[r][4 * c + 2], s[r][4 * c + 3]);
    }
}

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done = 0;
    while (!done) {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n"
            "}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    }
}

__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile(
        "{\n"
        ".reg .b64 st;\n"
        "mbarrier.arrive.shared::cta.b64 st, [%0];\n"
        "}\n" ::"r"(bar)
        : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    asm volatile(
        "{\n"
        ".reg .b64 st;\n"
        "mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n"
        "}\n" ::"r"(bar),
        "r"(bytes)
        : "memory");
}

// Bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared
// memory, completing `bytes` transactions on the mbarrier `bar`.
__device__ __forceinline__ void bulk_g2s(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
            "r"(dst),
        "l"(src), "r"(bytes), "r"(bar)
        : "memory");
}

// Descriptor of a 128B-swizzled K-major operand starting at shared address `addr`.
__device__ __forceinline__ u64 smem_desc(u32 addr) {
    return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) |
           ((u64)1 << 62);
}

// Keeps the compiler from moving accesses of the accumulators across wgmma fences and waits.
__device__ __forceinline__ void fence_acc(float* d) {
#pragma unroll
    for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D(64 x 256, f32) += A(64 x 8, tf32, descriptor) * B(8 x 256, tf32, K-major descriptor).
__device__ __forceinline__ void wgmma_m64n256k8(float* d, u64 descA, u64 descB) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(descA), "l"(descB)
        : "memory");
}

template <int BM, int BN, int STAGES, bool VEC>
__global__ void __launch_bounds__(384, 1)
    gemm_wgmma(const float* __restrict__ Ap, const float* __restrict__ Bp, float* __restrict__ C,
               int M, int N, int K, int ldc, long long strideAp, long long strideBp,
               long long strideC, float alpha, float beta, int groupM) {
    static_assert(BM == 128 && BN == 256, "one m64n256 wgmma per consumer warpgroup and k step");
    constexpr int BK = 32;
    constexpr u32 A_BYTES = BM * BK * 4;
    constexpr u32 B_BYTES = BN * BK * 4;
    constexpr u32 STAGE_BYTES = A_BYTES + B_BYTES;

    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) u64 full[STAGES];
    __shared__ __align__(8) u64 empty[STAGES];
    // The swizzle pattern repeats every 1024 bytes: align the stage buffers to that (the launch
    // asks for 1024 bytes of slack).
    const u32 base = (smem_addr(smem_raw) + 1023u) & ~1023u;

    const int tilesM = (M + BM - 1) / BM;
    const int tilesN = (N + BN - 1) / BN;
    const int numKT = (K + BK - 1) / BK;
    int tm, tn;
    tile_coords(blockIdx.x, tilesM, tilesN, groupM, tm, tn);
    const long long z = blockIdx.z;

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
            const float* a = Ap + z * strideAp + (long long)tm * numKT * (BM * BK);
            const float* b = Bp + z * strideBp + (long long)tn * numKT * (BN * BK);
            int s = 0;
            u32 phase = 0;
            for (int kt = 0; kt < numKT; ++kt) {
                if (kt >= STAGES) mbar_wait(smem_addr(&empty[s]), phase ^ 1u);
                const u32 fb = smem_addr(&full[s]);
                const u32 dst = base + s * STAGE_BYTES;
                mbar_arrive_expect_tx(fb, STAGE_BYTES);
                bulk_g2s(dst, a + (long long)kt * (BM * BK), A_BYTES, fb);
                bulk_g2s(dst + A_BYTES, b + (long long)kt * (BN * BK), B_BYTES, fb);
                if (++s == STAGES) {
                    s = 0;
                    phase ^= 1u;
                }
            }
        }
    } else {
        // Consumer warpgroups.
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int cw = wg - 1;  // rows 64 cw .. 64 cw + 63 of the block tile
        float d[128];
#pragma unroll
        for (int i = 0; i < 128; ++i) d[i] = 0.0f;
        int s = 0;
        int prev = 0;
        u32 phase = 0;
        for (int kt = 0; kt < numKT; ++kt) {
            mbar_wait(smem_addr(&full[s]), phase);
            const u32 aAddr = base + s * STAGE_BYTES + cw * (64 * 128);
            const u32 bAddr = base + s * STAGE_BYTES + A_BYTES;
            fence_acc(d);
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
            for (int kk = 0; kk < BK / 8; ++kk) {
                wgmma_m64n256k8(d, smem_desc(aAddr + kk * 32), smem_desc(bAddr + kk * 32));
            }
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            fence_acc(d);
            // Tile kt - 1 is complete once at most one group (tile kt) is pending: release its
            // stage to the producer.
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
            fence_acc(d);
            if (kt > 0 && (threadIdx.x & 127) == 0) mbar_arrive(smem_addr(&empty[prev]));
            prev = s;
            if (++s == STAGES) {
                s = 0;
                phase ^= 1u;
            }
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        fence_acc(d);

        // Epilogue: C = alpha * D + beta * C (beta == 0 never reads C).
        const int lane = threadIdx.x & 31;
        const int q = (threadIdx.x & 127) >> 5;
        const int g = lane >> 2;
        const int t = lane & 3;
        float* Cb = C + z * strideC;
        const int rowBase = tm * BM + cw * 64 + q * 16 + g;
        const int colBase = tn * BN + 2 * t;
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
                if (VEC && c + 1 < N) {
                    float2* p = reinterpret_cast<float2*>(crow + c);
                    float2 o = make_float2(alpha * v0, alpha * v1);
                    if (beta != 0.0f) {
                        const float2 old = *p;
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
