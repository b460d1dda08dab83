// Shared helpers of gpukit-core's built-in kernels (included as an in-memory header).
//
// NVRTC ships no cuda_fp16.h / cuda_bf16.h, so the two 16-bit float types are defined here as
// plain 16-bit storage with conversions through PTX `cvt`. Arithmetic on them happens in float.
#pragma once

#if !defined(__CUDA_FP16_H__)
struct __align__(2) __half { unsigned short bits; };
#endif
#if !defined(__CUDA_BF16_H__)
struct __align__(2) __nv_bfloat16 { unsigned short bits; };
#endif

#define GK_MAX_DIMS 8

// Shape and per-operand element strides of a broadcast / strided launch, passed by value.
// Rust builds the same bytes (shape::layout_bytes): ndim, use32, shape[8], magic[8] and shift[8]
// (u32 pairs packed in i64 words), then K stride rows of 8 (all little-endian).
//
// With use32 (every linear index < 2^31) the index is split into coordinates with PyTorch's
// IntDivider: q = (umulhi(n, magic) + n) >> shift, exact for n < 2^31, instead of a 64-bit
// division per dimension.
template <int K> struct Layout {
    long long ndim;
    long long use32;
    long long shape[GK_MAX_DIMS];
    unsigned int magic_shift[GK_MAX_DIMS][2];
    long long stride[K][GK_MAX_DIMS];
};

// Offsets of operand k for the row-major linear index `i` of the output.
template <int K>
__device__ __forceinline__ void layout_offsets(const Layout<K>& l, long long i, long long (&off)[K]) {
#pragma unroll
    for (int k = 0; k < K; ++k) off[k] = 0;
    if (l.use32) {
        unsigned int n = (unsigned int)i;
        for (int d = (int)l.ndim - 1; d >= 0; --d) {
            const unsigned int q = (__umulhi(n, l.magic_shift[d][0]) + n) >> l.magic_shift[d][1];
            const long long c = (long long)(n - q * (unsigned int)l.shape[d]);
            n = q;
#pragma unroll
            for (int k = 0; k < K; ++k) off[k] += c * l.stride[k][d];
        }
        return;
    }
    for (int d = (int)l.ndim - 1; d >= 0; --d) {
        long long extent = l.shape[d];
        long long c = i % extent;
        i /= extent;
#pragma unroll
        for (int k = 0; k < K; ++k) off[k] += c * l.stride[k][d];
    }
}

// Compute type: float for the 16-bit floats, the type itself otherwise.
template <typename T> struct Cv {
    typedef T C;
    static __device__ __forceinline__ C up(T x) { return x; }
    static __device__ __forceinline__ T down(C x) { return x; }
    static constexpr bool is_int = false;
    static constexpr bool is_unsigned = false;
};
template <> struct Cv<__half> {
    typedef float C;
    static __device__ __forceinline__ float up(__half x) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
        return f;
    }
    static __device__ __forceinline__ __half down(float f) {
        __half h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
        return h;
    }
    static constexpr bool is_int = false;
    static constexpr bool is_unsigned = false;
};
template <> struct Cv<__nv_bfloat16> {
    typedef float C;
    static __device__ __forceinline__ float up(__nv_bfloat16 x) {
        return __uint_as_float(((unsigned int)x.bits) << 16);
    }
    static __device__ __forceinline__ __nv_bfloat16 down(float f) {
        __nv_bfloat16 h;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
        return h;
    }
    static constexpr bool is_int = false;
    static constexpr bool is_unsigned = false;
};
#define GK_INT_CV(T, U)                                                                   \
    template <> struct Cv<T> {                                                            \
        typedef T C;                                                                      \
        static __device__ __forceinline__ C up(T x) { return x; }                         \
        static __device__ __forceinline__ T down(C x) { return x; }                       \
        static constexpr bool is_int = true;                                              \
        static constexpr bool is_unsigned = U;                                            \
    };
GK_INT_CV(int, false)
GK_INT_CV(unsigned int, true)
GK_INT_CV(long long, false)
GK_INT_CV(unsigned char, true)
GK_INT_CV(unsigned long long, true)
GK_INT_CV(signed char, false)

// Integer arithmetic that wraps around (two's complement) without signed overflow, which is
// undefined behaviour in C++: computed in unsigned 64 bits, truncated to the type.
template <typename C> __device__ __forceinline__ C wrap_add(C a, C b) {
    if constexpr (Cv<C>::is_int) return (C)((unsigned long long)a + (unsigned long long)b);
    else return a + b;
}
template <typename C> __device__ __forceinline__ C wrap_sub(C a, C b) {
    if constexpr (Cv<C>::is_int) return (C)((unsigned long long)a - (unsigned long long)b);
    else return a - b;
}
template <typename C> __device__ __forceinline__ C wrap_mul(C a, C b) {
    if constexpr (Cv<C>::is_int) return (C)((unsigned long long)a * (unsigned long long)b);
    else return a * b;
}

// Truth value of an element (NaN is true, as in NumPy).
template <typename T> __device__ __forceinline__ bool truthy(T x) {
    return Cv<T>::up(x) != (typename Cv<T>::C)0;
}
template <typename C> __device__ __forceinline__ bool is_nan_c(C x) {
    if constexpr (Cv<C>::is_int) return false;
    else return x != x;
}

// A scalar argument reaches the kernel as a double (for floats) and an i64 (for integers), so
// that 64-bit integers stay exact.
template <typename T>
__device__ __forceinline__ typename Cv<T>::C scalar_arg(double sf, long long si) {
    typedef typename Cv<T>::C C;
    if constexpr (Cv<T>::is_int) return (C)si;
    else return (C)sf;
}

// Conversion between any two element types (for astype and fill).
template <typename To, typename From> __device__ __forceinline__ To convert(From x) {
    typedef typename Cv<From>::C CF;
    typedef typename Cv<To>::C CT;
    CF v = Cv<From>::up(x);
    return Cv<To>::down((CT)v);
}

template <typename T, int N> struct __align__(sizeof(T) * N) Pack { T v[N]; };

__device__ __forceinline__ long long global_tid() {
    return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long grid_threads() {
    return (long long)gridDim.x * blockDim.x;
}
__device__ __forceinline__ bool aligned16(const void* p) {
    return (((unsigned long long)p) & 15ull) == 0;
}

// Vectors per thread of the contiguous elementwise kernels (EW_UNROLL in src/kernels.rs), and
// of the arithmetic-heavy ones (power, logarithm: EW_UNROLL_HEAVY), whose registers at four
// vectors would halve the resident warps.
#define EW_UNROLL 4
#define EW_UNROLL_HEAVY 1

// The loop of a contiguous elementwise kernel over `nv` vectors: a block covers a contiguous
// chunk of U * blockDim vectors (a warp reads U x 512 contiguous bytes per operand), every
// thread first loads its U vectors (`load(i)`, all in flight at once: no store
// comes between them), then computes and stores them (`store(i, loaded)`). The Rust side sizes
// the grid to cover the array (kernels::grid_vec); the outer loop strides over the grid only
// past its cap. The output may alias an input element for element: every vector is loaded
// before it is stored, by the same thread.
template <int U = EW_UNROLL, typename L, typename S>
__device__ __forceinline__ void ew_loop(long long nv, L load, S store) {
    const long long bd = blockDim.x;
    const long long chunk = U * bd;
    for (long long base = (long long)blockIdx.x * chunk + threadIdx.x; base < nv; base += (long long)gridDim.x * chunk) {
        if (base + (U - 1) * bd < nv) {
            decltype(load(0ll)) x[U];
#pragma unroll
            for (int u = 0; u < U; ++u) x[u] = load(base + u * bd);
#pragma unroll
            for (int u = 0; u < U; ++u) store(base + u * bd, x[u]);
        } else {
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const long long i = base + u * bd;
                if (i < nv) store(i, load(i));
            }
        }
    }
}

// Two packs loaded together (the inputs of a binary elementwise step).
template <typename P, typename Q> struct Pair2 { P a; Q b; };
template <typename P, typename Q, typename R> struct Triple3 { P a; Q b; R c; };
