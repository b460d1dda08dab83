// Kernels of gpukit-core that produce u8 masks (0 / 1) or select with one: comparisons,
// predicates (isnan, isinf, isfinite, logical_not), logical and / or / xor, and `where`.
#include "common.cuh"

// Comparison codes (keep in sync with ops::CompareOp).
#define C_EQ 0
#define C_NE 1
#define C_LT 2
#define C_LE 3
#define C_GT 4
#define C_GE 5
// Predicate codes (ops::Predicate).
#define P_ISNAN 0
#define P_ISINF 1
#define P_ISFINITE 2
#define P_NOT 3
// Logical codes (ops::LogicalOp).
#define L_AND 0
#define L_OR 1
#define L_XOR 2

template <typename C, int OP> __device__ __forceinline__ unsigned char cmp(C a, C b) {
    if constexpr (OP == C_EQ) return a == b;
    else if constexpr (OP == C_NE) return a != b;
    else if constexpr (OP == C_LT) return a < b;
    else if constexpr (OP == C_LE) return a <= b;
    else if constexpr (OP == C_GT) return a > b;
    else return a >= b;
}

template <typename T, int OP> __device__ __forceinline__ unsigned char cmp_t(T a, T b) {
    return cmp<typename Cv<T>::C, OP>(Cv<T>::up(a), Cv<T>::up(b));
}

template <typename T, int P> __device__ __forceinline__ unsigned char pred_t(T x) {
    typedef typename Cv<T>::C C;
    const C v = Cv<T>::up(x);
    if constexpr (P == P_NOT) return !truthy<T>(x);
    else if constexpr (Cv<C>::is_int) return P == P_ISFINITE;
    else if constexpr (P == P_ISNAN) return v != v;
    else if constexpr (P == P_ISINF) return v == v && (v - v) != (v - v);
    else return (v - v) == (v - v);  // finite: inf - inf and nan - nan are NaN
}

template <int L> __device__ __forceinline__ unsigned char logic(bool a, bool b) {
    if constexpr (L == L_AND) return a && b;
    else if constexpr (L == L_OR) return a || b;
    else return a != b;
}

// Contiguous mask kernels handle G = 16 / sizeof(T) elements per step (16-byte input loads, a
// G-byte mask store; ew_loop in common.cuh) when every pointer is aligned for it (16 bytes for
// the inputs, G for the mask), element by element otherwise.
template <typename T> struct MaskG {
    static constexpr int G = 16 / sizeof(T);
    typedef Pack<T, G> P;
    typedef Pack<unsigned char, G> M;
};

__device__ __forceinline__ bool aligned_to(const void* p, int bytes) {
    return (((unsigned long long)p) % (unsigned long long)bytes) == 0;
}

template <typename T, int OP>
__global__ void compare_contig(unsigned char* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, long long n) {
    typedef MaskG<T> G_;
    constexpr int G = G_::G;
    typedef typename G_::P P;
    typedef typename G_::M M;
    long long tail = 0;
    if (aligned16(a) && aligned16(b) && aligned_to(out, G)) {
        const long long ng = n / G;
        const P* pa = reinterpret_cast<const P*>(a);
        const P* pb = reinterpret_cast<const P*>(b);
        M* po = reinterpret_cast<M*>(out);
        ew_loop(
            ng, [&](long long i) { Pair2<P, P> r; r.a = pa[i]; r.b = pb[i]; return r; },
            [&](long long i, Pair2<P, P> r) {
                M m;
#pragma unroll
                for (int k = 0; k < G; ++k) m.v[k] = cmp_t<T, OP>(r.a.v[k], r.b.v[k]);
                po[i] = m;
            });
        tail = ng * G;
    }
    for (long long j = tail + global_tid(); j < n; j += grid_threads()) out[j] = cmp_t<T, OP>(a[j], b[j]);
}

// out (row 0, u8) = a (row 1) OP b (row 2).
template <typename T, int OP>
__global__ void compare_strided(unsigned char* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, Layout<3> l, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long off[3];
        layout_offsets<3>(l, i, off);
        out[off[0]] = cmp_t<T, OP>(a[off[1]], b[off[2]]);
    }
}

// out (row 0) = a (row 1) OP s, or s OP a.
template <typename T, int OP>
__global__ void compare_scalar(unsigned char* __restrict__ out, const T* __restrict__ a, double sf, long long si, int scalar_left, Layout<2> l, long long n) {
    typedef typename Cv<T>::C C;
    const C s = scalar_arg<T>(sf, si);
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long off[2];
        layout_offsets<2>(l, i, off);
        C v = Cv<T>::up(a[off[1]]);
        out[off[0]] = scalar_left ? cmp<C, OP>(s, v) : cmp<C, OP>(v, s);
    }
}

template <typename T, int P_>
__global__ void predicate_contig(unsigned char* __restrict__ out, const T* __restrict__ a, long long n) {
    typedef MaskG<T> G_;
    constexpr int G = G_::G;
    typedef typename G_::P P;
    typedef typename G_::M M;
    long long tail = 0;
    if (aligned16(a) && aligned_to(out, G)) {
        const long long ng = n / G;
        const P* pa = reinterpret_cast<const P*>(a);
        M* po = reinterpret_cast<M*>(out);
        ew_loop(
            ng, [&](long long i) { return pa[i]; },
            [&](long long i, P x) {
                M m;
#pragma unroll
                for (int k = 0; k < G; ++k) m.v[k] = pred_t<T, P_>(x.v[k]);
                po[i] = m;
            });
        tail = ng * G;
    }
    for (long long j = tail + global_tid(); j < n; j += grid_threads()) out[j] = pred_t<T, P_>(a[j]);
}

template <typename T, int P>
__global__ void predicate_strided(unsigned char* __restrict__ out, const T* __restrict__ a, Layout<2> l, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long off[2];
        layout_offsets<2>(l, i, off);
        out[off[0]] = pred_t<T, P>(a[off[1]]);
    }
}

template <typename T, int L>
__global__ void logical_contig(unsigned char* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, long long n) {
    typedef MaskG<T> G_;
    constexpr int G = G_::G;
    typedef typename G_::P P;
    typedef typename G_::M M;
    long long tail = 0;
    if (aligned16(a) && aligned16(b) && aligned_to(out, G)) {
        const long long ng = n / G;
        const P* pa = reinterpret_cast<const P*>(a);
        const P* pb = reinterpret_cast<const P*>(b);
        M* po = reinterpret_cast<M*>(out);
        ew_loop(
            ng, [&](long long i) { Pair2<P, P> r; r.a = pa[i]; r.b = pb[i]; return r; },
            [&](long long i, Pair2<P, P> r) {
                M m;
#pragma unroll
                for (int k = 0; k < G; ++k) m.v[k] = logic<L>(truthy<T>(r.a.v[k]), truthy<T>(r.b.v[k]));
                po[i] = m;
            });
        tail = ng * G;
    }
    for (long long j = tail + global_tid(); j < n; j += grid_threads()) out[j] = logic<L>(truthy<T>(a[j]), truthy<T>(b[j]));
}

template <typename T, int L>
__global__ void logical_strided(unsigned char* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, Layout<3> l, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long off[3];
        layout_offsets<3>(l, i, off);
        out[off[0]] = logic<L>(truthy<T>(a[off[1]]), truthy<T>(b[off[2]]));
    }
}

// out (row 0) = mask (row 1) ? a (row 2) : b (row 3). The output may be `b` (masked
// assignment in place), so those pointers are not __restrict__.
template <typename T>
__global__ void where_strided(T* out, const unsigned char* __restrict__ mask, const T* a, const T* b, Layout<4> l, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long off[4];
        layout_offsets<4>(l, i, off);
        out[off[0]] = mask[off[1]] ? a[off[2]] : b[off[3]];
    }
}

// out = mask ? a : b, all contiguous with n elements (G = 16 / sizeof(T) per step when aligned:
// a G-byte mask load and 16-byte value loads; ew_loop in common.cuh).
template <typename T>
__global__ void where_contig(T* out, const unsigned char* __restrict__ mask, const T* a, const T* b, long long n) {
    typedef MaskG<T> G_;
    constexpr int G = G_::G;
    typedef typename G_::P P;
    typedef typename G_::M M;
    long long tail = 0;
    if (aligned16(out) && aligned16(a) && aligned16(b) && aligned_to(mask, G)) {
        const long long ng = n / G;
        const M* pm = reinterpret_cast<const M*>(mask);
        const P* pa = reinterpret_cast<const P*>(a);
        const P* pb = reinterpret_cast<const P*>(b);
        P* po = reinterpret_cast<P*>(out);
        ew_loop(
            ng, [&](long long i) { Triple3<M, P, P> r; r.a = pm[i]; r.b = pa[i]; r.c = pb[i]; return r; },
            [&](long long i, Triple3<M, P, P> r) {
                P o;
#pragma unroll
                for (int k = 0; k < G; ++k) o.v[k] = r.a.v[k] ? r.b.v[k] : r.c.v[k];
                po[i] = o;
            });
        tail = ng * G;
    }
    for (long long j = tail + global_tid(); j < n; j += grid_threads()) out[j] = mask[j] ? a[j] : b[j];
}

// out (row 0) = mask (row 1) ? s : b (row 2); in place when out is b.
template <typename T>
__global__ void where_scalar(T* out, const unsigned char* __restrict__ mask, double sf, long long si, const T* b, Layout<3> l, long long n) {
    const T s = Cv<T>::down(scalar_arg<T>(sf, si));
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long off[3];
        layout_offsets<3>(l, i, off);
        out[off[0]] = mask[off[1]] ? s : b[off[2]];
    }
}
