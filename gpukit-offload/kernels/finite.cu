// Non-finite checks of a call's operands on the device (gpukit-offload, src/gpu/finite.rs).
//
// One launch checks every operand of a group: the bit k of *flag is set when operand k holds
// NaN or infinity in the part a LAPACK routine reads (a dense block, a vector of reals, the
// referenced triangle of a triangular or symmetric / Hermitian matrix: a unit triangle's
// diagonal and the imaginary parts of a Hermitian diagonal are not read). A guarded group
// (the inputs of a routine) then overwrites every flagged operand with the identity pattern
// (1 on the diagonal, 0 elsewhere), so the routine queued after the check never meets a
// non-finite value and runs to its end quickly; the host reads the flag with the results and
// hands the call to the CPU library. A single-block launch guards inline; a larger one leaves
// that to offload_guard_*, launched after it on the same stream.
//
// The PTX beside this file is NVRTC's output for compute_75 with its `.version` line set to
// 7.0 and its `used_bytes_mask` pragmas (load hints of PTX ISA 8.3) left out; nothing else in
// it is newer (ptxas checks that), so drivers from CUDA 11.0 on load it. See
// src/gpu/kernels.rs for the test that rebuilds it.

#define MAX_OPERANDS 4

struct Operand {
    unsigned long long ptr;  // device address of the packed operand (ld = rows)
    long long rows;          // rows of the packed operand (a vector: its length)
    long long elems;         // elements to scan: rows * cols
    int kind;                // 0 dense, 1 reals of the real type, 2 triangle, 3 symmetric
    int lower;               // triangle / symmetric: the lower triangle is referenced
    int skip_diag;           // unit triangle: the diagonal is not referenced
    int herm;                // Hermitian: the imaginary parts of the diagonal are not referenced
};

struct Group {
    Operand op[MAX_OPERANDS];
    int count;     // operands in use
    int complex_;  // elements are (re, im) pairs (kind 1 operands excepted)
    int guard;     // overwrite flagged operands (single-block launches only)
    int pad;
};

template <typename T>
__device__ __forceinline__ bool referenced(const Operand& o, long long e) {
    if (o.kind < 2) return true;
    long long i = e % o.rows, j = e / o.rows;
    if (o.lower ? i < j : i > j) return false;
    return !(i == j && o.skip_diag);
}

template <typename T>
__device__ unsigned scan(const Group& g, long long start, long long stride) {
    unsigned f = 0;
    for (int k = 0; k < g.count; ++k) {
        const Operand& o = g.op[k];
        const T* p = reinterpret_cast<const T*>(o.ptr);
        const bool pairs = g.complex_ && o.kind != 1;
        bool bad = false;
        for (long long e = start; e < o.elems; e += stride) {
            if (!referenced<T>(o, e)) continue;
            if (!pairs) {
                bad |= !isfinite(p[e]);
            } else {
                bad |= !isfinite(p[2 * e]);
                const bool diag = o.kind >= 2 && (e % o.rows) == (e / o.rows);
                if (!(diag && o.herm)) bad |= !isfinite(p[2 * e + 1]);
            }
        }
        if (bad) f |= 1u << k;
    }
    return f;
}

template <typename T>
__device__ void overwrite(const Group& g, unsigned flag, long long start, long long stride) {
    for (int k = 0; k < g.count; ++k) {
        if (!(flag & (1u << k))) continue;
        const Operand& o = g.op[k];
        T* p = reinterpret_cast<T*>(o.ptr);
        const bool pairs = g.complex_ && o.kind != 1;
        for (long long e = start; e < o.elems; e += stride) {
            const T v = (e % o.rows) == (e / o.rows) ? T(1) : T(0);
            if (!pairs) {
                p[e] = v;
            } else {
                p[2 * e] = v;
                p[2 * e + 1] = T(0);
            }
        }
    }
}

template <typename T>
__device__ void finite(const Group& g, unsigned* flag) {
    __shared__ unsigned block_flag;
    if (threadIdx.x == 0) block_flag = 0;
    __syncthreads();
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const unsigned f = scan<T>(g, tid, stride);
    if (f) atomicOr(&block_flag, f);
    __syncthreads();
    const unsigned b = block_flag;
    if (b && threadIdx.x == 0) atomicOr(flag, b);
    if (b && g.guard && gridDim.x == 1) overwrite<T>(g, b, threadIdx.x, blockDim.x);
}

template <typename T>
__device__ void guard(const Group& g, const unsigned* flag) {
    const unsigned f = *(volatile const unsigned*)flag;
    if (!f) return;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    overwrite<T>(g, f, tid, (long long)gridDim.x * blockDim.x);
}

extern "C" __global__ void offload_finite_f32(Group g, unsigned* flag) { finite<float>(g, flag); }
extern "C" __global__ void offload_finite_f64(Group g, unsigned* flag) { finite<double>(g, flag); }
extern "C" __global__ void offload_guard_f32(Group g, const unsigned* flag) { guard<float>(g, flag); }
extern "C" __global__ void offload_guard_f64(Group g, const unsigned* flag) { guard<double>(g, flag); }
