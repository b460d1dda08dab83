// Unary elementwise kernels of gpukit-core (math functions, rounding, bitwise not, sign) and
// clip. Contiguous kernels use 16-byte vector loads with four vectors per thread in flight
// (ew_loop in common.cuh);
// strided kernels read and write through a Layout (views, strided outputs). The output may be
// the input (in-place operations), so no pointer is __restrict__.
#include "common.cuh"
#include "elementwise.cuh"  // una<C, OP> and the operation codes

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
