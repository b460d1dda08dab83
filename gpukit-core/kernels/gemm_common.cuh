// Shared device helpers of gpukit's GEMM kernels (gemm_tf32.cu, gemm_sgemm.cu).
//
// Conventions (all kernels): row-major storage, C[M x N] = alpha * op(A) * op(B) + beta * C.
//   op(A)[m][k] = TA ? A[k * lda + m] : A[m * lda + k]
//   op(B)[k][n] = TB ? B[n * ldb + k] : B[k * ldb + n]
// blockIdx.z = batch * splits + split; split s covers k in [s * kPerSplit, min(K, (s+1) * kPerSplit)).
// C is offset by blockIdx.z * strideC (for split-K the caller passes a workspace with one
// M x N slice per (batch, split)). beta == 0 never reads C (BLAS semantics: NaN in C is ignored).
#pragma once

typedef unsigned int u32;

__device__ __forceinline__ u32 smem_addr(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

// Programmatic dependent launch (compute capability 9.0; gemm/launch.rs). Every GEMM kernel
// calls launch_dependents() first: the split-K reduction that may follow it on the stream,
// launched with programmatic stream serialization, can then start as soon as every block of the
// GEMM has started (its blocks wait on the SMs the GEMM's last blocks leave idle) instead of
// after the GEMM has completed. The reduction calls wait_for_prerequisite_grid() before touching
// memory: it returns once the GEMM grid has completed and its writes are visible. Launched
// without that attribute, both are no-ops; below sm_90 they compile to nothing.
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// 16-byte asynchronous copy global -> shared; bytes beyond src_bytes (0..16) are zero-filled.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(src_bytes));
}

// 4-byte asynchronous copy; src_bytes is 0 (zero-fill) or 4.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(src_bytes));
}

// 16-byte asynchronous copy of a source known to be in bounds (no zero-fill operand).
__device__ __forceinline__ void cp_async16_full(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}

// 4-byte asynchronous copy of a source known to be in bounds.
__device__ __forceinline__ void cp_async4_full(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Grouped ("swizzled") tile order: consecutive blocks walk GROUP_M tile rows before moving to the
// next tile column, so blocks resident at the same time share A rows and B columns in L2.
__device__ __forceinline__ void tile_coords(int pid, int tilesM, int tilesN, int groupM, int& tm,
                                            int& tn) {
    int width = groupM * tilesN;
    int group = pid / width;
    int firstM = group * groupM;
    int gsize = min(tilesM - firstM, groupM);
    int inGroup = pid - group * width;
    tm = firstM + inGroup % gsize;
    tn = inGroup / gsize;
}

// Copies a ROWS x COLS tile whose COLS are contiguous in global memory (row stride ld) into shared
// memory laid out the same way with row stride LD. Elements outside rowsValid x colsValid are
// zero-filled. VEC: 16-byte copies (needs 16-byte aligned base and ld % 4 == 0); else 4-byte copies.
template <int ROWS, int COLS, int LD, int NT, bool VEC>
__device__ __forceinline__ void load_tile_direct(float* s, const float* g, const float* base,
                                                 long long ld, int rowsValid, int colsValid,
                                                 int tid) {
    if (VEC) {
        constexpr int CPR = COLS / 4;
        constexpr int TOTAL = ROWS * CPR;
#pragma unroll
        for (int i = 0; i < (TOTAL + NT - 1) / NT; ++i) {
            int idx = tid + i * NT;
            if (TOTAL % NT == 0 || idx < TOTAL) {
                int r = idx / CPR;
                int c = (idx % CPR) * 4;
                int rem = r < rowsValid ? colsValid - c : 0;
                if (rem >= 4 || rem <= 0) {
                    cp_async16(s + r * LD + c, rem > 0 ? g + r * ld + c : base, rem > 0 ? 16 : 0);
                } else {
                    // A row's last 1-3 columns: element copies, so that no access of this
                    // thread reaches past the operand's last element (a 16-byte copy with a
                    // 4-12 byte source size reads only that much, but its address range ends
                    // past the allocation: compute-sanitizer's memcheck reports it)
#pragma unroll 1
                    for (int e = 0; e < 4; ++e) {
                        cp_async4(s + r * LD + c + e, e < rem ? g + r * ld + c + e : base,
                                  e < rem ? 4 : 0);
                    }
                }
            }
        }
    } else {
        // The scalar path is the fallback for unaligned operands: kept rolled so that its
        // per-element addresses do not pin registers for the whole main loop.
        constexpr int TOTAL = ROWS * COLS;
#pragma unroll 1
        for (int i = 0; i < (TOTAL + NT - 1) / NT; ++i) {
            int idx = tid + i * NT;
            if (TOTAL % NT == 0 || idx < TOTAL) {
                int r = idx / COLS;
                int c = idx % COLS;
                bool ok = r < rowsValid && c < colsValid;
                cp_async4(s + r * LD + c, ok ? g + r * ld + c : base, ok ? 4 : 0);
            }
        }
    }
}

// Copies a ROWS x COLS tile whose COLS are contiguous in global memory into shared memory
// transposed: s[c * LD + r]. 4-byte copies; eight consecutive lanes read eight consecutive
// columns of one row (a 32-byte sector) and write eight shared rows, four rows per warp, so the
// stores hit 32 distinct banks when LD % 32 == 4.
// UNROLL: unrolled on the fast (aligned) path, rolled on the fallback path.
template <int ROWS, int COLS, int LD, int NT, bool UNROLL>
__device__ __forceinline__ void load_tile_transposed(float* s, const float* g, const float* base,
                                                     long long ld, int rowsValid, int colsValid,
                                                     int tid) {
    static_assert(COLS % 8 == 0, "transposed tile needs COLS % 8 == 0");
    constexpr int TOTAL = ROWS * COLS;
    constexpr int U = UNROLL ? (TOTAL + NT - 1) / NT : 1;
#pragma unroll U
    for (int i = 0; i < (TOTAL + NT - 1) / NT; ++i) {
        int e = tid + i * NT;
        if (TOTAL % NT == 0 || e < TOTAL) {
            int kl = e & 7;
            int r = (e >> 3) % ROWS;
            int c = (e / (8 * ROWS)) * 8 + kl;
            bool ok = r < rowsValid && c < colsValid;
            cp_async4(s + c * LD + r, ok ? g + r * ld + c : base, ok ? 4 : 0);
        }
    }
}

// Fast paths of the two loaders for a tile that lies entirely inside the operand (no bounds, no
// zero-fill): every thread's copies are one base address plus compile-time offsets, so a stage
// costs a few instructions per copy instead of the per-element index and bounds arithmetic of
// the checked loaders (which stay the path for edge tiles). `g` points at the tile's first
// element; the layouts written are exactly those of the checked loaders.
template <int ROWS, int COLS, int LD, int NT>
__device__ __forceinline__ void load_tile_direct_full(float* s, const float* g, long long ld,
                                                      int tid) {
    constexpr int CPR = COLS / 4;
    constexpr int TOTAL = ROWS * CPR;
    if constexpr (NT % CPR == 0 && TOTAL % NT == 0) {
        constexpr int RSTEP = NT / CPR;  // rows between one thread's consecutive copies
        const int r = tid / CPR;
        const int c = (tid % CPR) * 4;
        const float* src = g + r * ld + c;
        float* dst = s + r * LD + c;
#pragma unroll
        for (int i = 0; i < TOTAL / NT; ++i)
            cp_async16_full(dst + i * RSTEP * LD, src + (long long)(i * RSTEP) * ld);
    } else {
        load_tile_direct<ROWS, COLS, LD, NT, true>(s, g, g, ld, ROWS, COLS, tid);
    }
}

template <int ROWS, int COLS, int LD, int NT>
__device__ __forceinline__ void load_tile_transposed_full(float* s, const float* g, long long ld,
                                                          int tid) {
    static_assert(COLS % 8 == 0, "transposed tile needs COLS % 8 == 0");
    constexpr int TOTAL = ROWS * COLS;
    if constexpr (NT % 8 == 0 && (8 * ROWS) % NT == 0 && TOTAL % NT == 0) {
        // Element e = tid + i * NT of the checked loader: kl = e & 7, r = (e >> 3) % ROWS,
        // c = (e / (8 * ROWS)) * 8 + kl. With NT | 8 * ROWS, iteration i = cb * P + ir
        // (P = 8 * ROWS / NT) has r = (tid >> 3) + ir * NT / 8 and c = cb * 8 + (tid & 7).
        constexpr int P = 8 * ROWS / NT;
        const int r = tid >> 3;
        const int c = tid & 7;
        const float* src = g + r * ld + c;
        float* dst = s + c * LD + r;
#pragma unroll
        for (int i = 0; i < TOTAL / NT; ++i) {
            const int cb = i / P;
            const int ir = i % P;
            cp_async4_full(dst + cb * 8 * LD + ir * (NT / 8),
                           src + (long long)(ir * (NT / 8)) * ld + cb * 8);
        }
    } else {
        load_tile_transposed<ROWS, COLS, LD, NT, true>(s, g, g, ld, ROWS, COLS, tid);
    }
}

// C[r][c] = alpha * v + beta * C[r][c] for one element (beta == 0 does not read C).
__device__ __forceinline__ void store1(float* C, long long off, float v, float alpha, float beta) {
    float out = alpha * v;
    if (beta != 0.0f) out = fmaf(beta, C[off], out);
    C[off] = out;
}
