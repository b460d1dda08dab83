// Unary elementwise kernels of gpukit-core (math functions, rounding, bitwise not, sign) and
// clip. Contiguous kernels use 16-byte vector loads with four vectors per thread in flight
// (ew_loop in common.cuh);
// strided kernels read and write through a Layout (views, strided outputs). The output may be
// the input (in-place operations), so no pointer is __restrict__.
#include "common.cuh"

// Operation codes (keep in sync with ops::UnaryOp).
#define U_NEG 0
#define U_ABS 1
#define U_EXP 2
#define U_LOG 3
#define U_SQRT 4
#define U_TANH 5
#define U_RELU 6
#define U_SIGMOID 7
#define U_SIN 8
#define U_COS 9
#define U_FLOOR 10
#define U_CEIL 11
#define U_ROUND 12
#define U_TRUNC 13
#define U_NOT 14
#define U_SIGN 15

template <typename C, int OP> __device__ __forceinline__ C una(C a) {
    if constexpr (OP == U_NEG) {
        if constexpr (Cv<C>::is_int) return wrap_sub((C)0, a);
        else return -a;
    } else if constexpr (OP == U_ABS) {
        if constexpr (Cv<C>::is_unsigned) return a;
        else if constexpr (Cv<C>::is_int) return a < (C)0 ? wrap_sub((C)0, a) : a;
        else if constexpr (sizeof(C) == 4) return fabsf(a);
        else return fabs(a);
    } else if constexpr (OP == U_RELU) {
        return a > (C)0 ? a : (is_nan_c(a) ? a : (C)0);
    } else if constexpr (OP == U_SIGN) {
        if (is_nan_c(a)) return a;
        return a > (C)0 ? (C)1 : (a < (C)0 ? (C)-1 : (C)0);
    } else if constexpr (Cv<C>::is_int) {
        // Rounding an integer is the integer itself; bitwise not.
        if constexpr (OP == U_NOT) return (C)(~a);
        else return a;
    } else if constexpr (sizeof(C) == 4) {
        if constexpr (OP == U_EXP) return expf(a);
        else if constexpr (OP == U_LOG) return logf(a);
        else if constexpr (OP == U_SQRT) return sqrtf(a);
        else if constexpr (OP == U_TANH) return tanhf(a);
        else if constexpr (OP == U_SIGMOID) return 1.0f / (1.0f + expf(-a));
        else if constexpr (OP == U_SIN) return sinf(a);
        else if constexpr (OP == U_COS) return cosf(a);
        else if constexpr (OP == U_FLOOR) return floorf(a);
        else if constexpr (OP == U_CEIL) return ceilf(a);
        else if constexpr (OP == U_ROUND) return rintf(a);  // half to even, as numpy.round
        else return truncf(a);
    } else {
        if constexpr (OP == U_EXP) return exp(a);
        else if constexpr (OP == U_LOG) return log(a);
        else if constexpr (OP == U_SQRT) return sqrt(a);
        else if constexpr (OP == U_TANH) return tanh(a);
        else if constexpr (OP == U_SIGMOID) return 1.0 / (1.0 + exp(-a));
        else if constexpr (OP == U_SIN) return sin(a);
        else if constexpr (OP == U_COS) return cos(a);
        else if constexpr (OP == U_FLOOR) return floor(a);
        else if constexpr (OP == U_CEIL) return ceil(a);
        else if constexpr (OP == U_ROUND) return rint(a);
        else return trunc(a);
    }
}

// Vectors per thread of the contiguous kernel (UnaryOp::unroll on the Rust side).
template <int OP> struct unary_unroll { static constexpr int value = OP == U_LOG ? EW_UNROLL_HEAVY : EW_UNROLL; };

template <typename T, int OP> __device__ __forceinline__ T una_t(T a) {
    return Cv<T>::down(una<typename Cv<T>::C, OP>(Cv<T>::up(a)));
}

template <typename T, int OP>
__global__ void unary_contig(T* out, const T* a, long long n) {
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
    long long tail = 0;
    if (aligned16(out) && aligned16(a)) {
        const long long nv = n / V;
        const P* pa = reinterpret_cast<const P*>(a);
        P* po = reinterpret_cast<P*>(out);
        ew_loop<unary_unroll<OP>::value>(
            nv, [&](long long i) { return pa[i]; },
            [&](long long i, P x) {
#pragma unroll
                for (int k = 0; k < V; ++k) x.v[k] = una_t<T, OP>(x.v[k]);
                po[i] = x;
            });
        tail = nv * V;
    }
    for (long long j = tail + global_tid(); j < n; j += grid_threads()) out[j] = una_t<T, OP>(a[j]);
}

// out (row 0) = OP(a (row 1)).
template <typename T, int OP>
__global__ void unary_strided(T* out, const T* a, Layout<2> l, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long off[2];
        layout_offsets<2>(l, i, off);
        out[off[0]] = una_t<T, OP>(a[off[1]]);
    }
}

// clip(x, lo, hi) = min(max(x, lo), hi); NaN stays NaN (numpy.clip).
template <typename C> __device__ __forceinline__ C clip_c(C x, C lo, C hi) {
    C v = x < lo ? lo : x;
    return v > hi ? hi : v;
}

template <typename T>
__global__ void clip_contig(T* out, const T* a, double lof, long long loi, double hif, long long hii, long long n) {
    typedef typename Cv<T>::C C;
    const C lo = scalar_arg<T>(lof, loi), hi = scalar_arg<T>(hif, hii);
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
    long long tail = 0;
    if (aligned16(out) && aligned16(a)) {
        const long long nv = n / V;
        const P* pa = reinterpret_cast<const P*>(a);
        P* po = reinterpret_cast<P*>(out);
        ew_loop(
            nv, [&](long long i) { return pa[i]; },
            [&](long long i, P x) {
#pragma unroll
                for (int k = 0; k < V; ++k) x.v[k] = Cv<T>::down(clip_c<C>(Cv<T>::up(x.v[k]), lo, hi));
                po[i] = x;
            });
        tail = nv * V;
    }
    for (long long j = tail + global_tid(); j < n; j += grid_threads()) out[j] = Cv<T>::down(clip_c<C>(Cv<T>::up(a[j]), lo, hi));
}

template <typename T>
__global__ void clip_strided(T* out, const T* a, double lof, long long loi, double hif, long long hii, Layout<2> l, long long n) {
    typedef typename Cv<T>::C C;
    const C lo = scalar_arg<T>(lof, loi), hi = scalar_arg<T>(hif, hii);
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long off[2];
        layout_offsets<2>(l, i, off);
        out[off[0]] = Cv<T>::down(clip_c<C>(Cv<T>::up(a[off[1]]), lo, hi));
    }
}
