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

// Contiguous mask kernels handle four elements per step (one 4-byte store) when every pointer
// is aligned for it; `F(k)` is the mask value of element k.
template <typename T, typename F>
__device__ __forceinline__ void mask4(unsigned char* __restrict__ out, long long n, bool aligned, F f) {
    const long long tid = global_tid(), nt = grid_threads();
    long long tail = 0;
    if (aligned) {
        const long long n4 = n / 4;
        for (long long q = tid; q < n4; q += nt) {
            const long long k = 4 * q;
            uchar4 m;
            m.x = f(k); m.y = f(k + 1); m.z = f(k + 2); m.w = f(k + 3);
            reinterpret_cast<uchar4*>(out)[q] = m;
        }
        tail = n4 * 4;
    }
    for (long long j = tail + tid; j < n; j += nt) out[j] = f(j);
}

template <typename T> __device__ __forceinline__ bool aligned4x(const T* p) {
    return (((unsigned long long)p) % (4 * sizeof(T))) == 0;
}

template <typename T, int OP>
__global__ void compare_contig(unsigned char* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, long long n) {
    const bool al = aligned4x(out) && aligned4x(a) && aligned4x(b);
    mask4<T>(out, n, al, [&](long long k) { return cmp_t<T, OP>(a[k], b[k]); });
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

template <typename T, int P>
__global__ void predicate_contig(unsigned char* __restrict__ out, const T* __restrict__ a, long long n) {
    const bool al = aligned4x(out) && aligned4x(a);
    mask4<T>(out, n, al, [&](long long k) { return pred_t<T, P>(a[k]); });
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
    const bool al = aligned4x(out) && aligned4x(a) && aligned4x(b);
    mask4<T>(out, n, al, [&](long long k) { return logic<L>(truthy<T>(a[k]), truthy<T>(b[k])); });
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

// out = mask ? a : b, all contiguous with n elements (four per step when aligned).
template <typename T>
__global__ void where_contig(T* out, const unsigned char* __restrict__ mask, const T* a, const T* b, long long n) {
    typedef Pack<T, 4> P;
    const long long tid = global_tid(), nt = grid_threads();
    long long tail = 0;
    if (aligned4x(out) && aligned4x(a) && aligned4x(b) && aligned4x(mask)) {
        const long long n4 = n / 4;
        for (long long q = tid; q < n4; q += nt) {
            const uchar4 m = reinterpret_cast<const uchar4*>(mask)[q];
            const P x = reinterpret_cast<const P*>(a)[q], y = reinterpret_cast<const P*>(b)[q];
            P r;
            r.v[0] = m.x ? x.v[0] : y.v[0];
            r.v[1] = m.y ? x.v[1] : y.v[1];
            r.v[2] = m.z ? x.v[2] : y.v[2];
            r.v[3] = m.w ? x.v[3] : y.v[3];
            reinterpret_cast<P*>(out)[q] = r;
        }
        tail = n4 * 4;
    }
    for (long long j = tail + tid; j < n; j += nt) out[j] = mask[j] ? a[j] : b[j];
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
