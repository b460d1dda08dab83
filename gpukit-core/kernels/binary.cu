// Binary elementwise kernels of gpukit-core: a OP b for arrays (contiguous or through strides
// with broadcasting) and with a scalar.
//
// Every kernel is a template over the element type T and an operation code; the Rust side
// requests the instantiations it needs as NVRTC name expressions (`binary_contig<float, 0>`).
// Contiguous kernels use 16-byte vector loads when all pointers are 16-byte aligned (a uniform
// branch), four independent vectors per thread in flight (ew_loop in common.cuh); strided kernels take a Layout
// by value (shape and per-operand strides, up to 8 dims; a stride of 0 broadcasts). The output
// may be one of the inputs (in-place operations), so no pointer is __restrict__.
#include "common.cuh"

// Operation codes (keep in sync with ops::BinaryOp).
#define B_ADD 0
#define B_SUB 1
#define B_MUL 2
#define B_DIV 3
#define B_MAX 4
#define B_MIN 5
#define B_POW 6
#define B_MOD 7
#define B_AND 8
#define B_OR 9
#define B_XOR 10

template <typename C, int OP> __device__ __forceinline__ C bin(C a, C b) {
    if constexpr (OP == B_ADD) return wrap_add(a, b);
    else if constexpr (OP == B_SUB) return wrap_sub(a, b);
    else if constexpr (OP == B_MUL) return wrap_mul(a, b);
    else if constexpr (OP == B_DIV) {
        // Integer division truncates toward zero; division by zero gives 0 (NumPy gives 0
        // with a warning); the one overflowing quotient (MIN / -1) wraps to MIN. Floats follow
        // IEEE.
        if constexpr (Cv<C>::is_int) {
            if (b == (C)0) return (C)0;
            if constexpr (!Cv<C>::is_unsigned) {
                if (b == (C)-1) return wrap_sub((C)0, a);
            }
            return (C)(a / b);
        } else return a / b;
    } else if constexpr (OP == B_MAX) {
        // NaN propagates, as in numpy.maximum.
        return (is_nan_c(a) || a > b) ? a : b;
    } else if constexpr (OP == B_MIN) {
        return (is_nan_c(a) || a < b) ? a : b;
    } else if constexpr (OP == B_MOD) {
        // numpy.remainder: the result has the sign of the divisor; x % 0 is 0 for integers and
        // NaN for floats.
        if constexpr (Cv<C>::is_int) {
            if (b == (C)0) return (C)0;
            if constexpr (!Cv<C>::is_unsigned) {
                if (b == (C)-1) return (C)0;
            }
            C r = (C)(a % b);
            if constexpr (!Cv<C>::is_unsigned) {
                if (r != (C)0 && ((r < (C)0) != (b < (C)0))) r = wrap_add(r, b);
            }
            return r;
        } else {
            C r;
            if constexpr (sizeof(C) == 4) r = fmodf(a, b);
            else r = fmod(a, b);
            if (r != (C)0 && ((r < (C)0) != (b < (C)0))) r += b;
            else if (r == (C)0) {
                if constexpr (sizeof(C) == 4) r = copysignf(r, b);
                else r = copysign(r, b);
            }
            return r;
        }
    } else if constexpr (OP == B_AND) {
        return (C)(a & b);
    } else if constexpr (OP == B_OR) {
        return (C)(a | b);
    } else if constexpr (OP == B_XOR) {
        return (C)(a ^ b);
    } else {
        if constexpr (Cv<C>::is_int) {
            // Integer power by squaring; a negative exponent gives 0 unless |a| == 1.
            if constexpr (!Cv<C>::is_unsigned) {
                if (b < 0) return a == (C)1 ? (C)1 : (a == (C)-1 ? ((b & 1) ? (C)-1 : (C)1) : (C)0);
            }
            C r = 1, base = a;
            unsigned long long e = (unsigned long long)b;
            while (e) {
                if (e & 1ull) r = wrap_mul(r, base);
                base = wrap_mul(base, base);
                e >>= 1;
            }
            return r;
        } else if constexpr (sizeof(C) == 4) {
            return powf(a, b);
        } else {
            return pow(a, b);
        }
    }
}

// Vectors per thread of the contiguous kernels (BinaryOp::unroll on the Rust side).
template <int OP> struct binary_unroll { static constexpr int value = OP == B_POW ? EW_UNROLL_HEAVY : EW_UNROLL; };

template <typename T, int OP> __device__ __forceinline__ T bin_t(T a, T b) {
    return Cv<T>::down(bin<typename Cv<T>::C, OP>(Cv<T>::up(a), Cv<T>::up(b)));
}

// out[i] = a[i] OP b[i], all contiguous with n elements.
template <typename T, int OP>
__global__ void binary_contig(T* out, const T* a, const T* b, long long n) {
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
    long long tail = 0;
    if (aligned16(out) && aligned16(a) && aligned16(b)) {
        const long long nv = n / V;
        const P* pa = reinterpret_cast<const P*>(a);
        const P* pb = reinterpret_cast<const P*>(b);
        P* po = reinterpret_cast<P*>(out);
        ew_loop<binary_unroll<OP>::value>(
            nv, [&](long long i) { Pair2<P, P> r; r.a = pa[i]; r.b = pb[i]; return r; },
            [&](long long i, Pair2<P, P> r) {
#pragma unroll
                for (int k = 0; k < V; ++k) r.a.v[k] = bin_t<T, OP>(r.a.v[k], r.b.v[k]);
                po[i] = r.a;
            });
        tail = nv * V;
    }
    for (long long j = tail + global_tid(); j < n; j += grid_threads()) out[j] = bin_t<T, OP>(a[j], b[j]);
}

// out[i] = a[i] OP s (or s OP a[i] when scalar_left), contiguous.
template <typename T, int OP>
__global__ void binary_scalar(T* out, const T* a, double sf, long long si, int scalar_left, long long n) {
    typedef typename Cv<T>::C C;
    const C s = scalar_arg<T>(sf, si);
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
    long long tail = 0;
    if (aligned16(out) && aligned16(a)) {
        const long long nv = n / V;
        const P* pa = reinterpret_cast<const P*>(a);
        P* po = reinterpret_cast<P*>(out);
        ew_loop<binary_unroll<OP>::value>(
            nv, [&](long long i) { return pa[i]; },
            [&](long long i, P x) {
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    C v = Cv<T>::up(x.v[k]);
                    x.v[k] = Cv<T>::down(scalar_left ? bin<C, OP>(s, v) : bin<C, OP>(v, s));
                }
                po[i] = x;
            });
        tail = nv * V;
    }
    for (long long j = tail + global_tid(); j < n; j += grid_threads()) {
        C v = Cv<T>::up(a[j]);
        out[j] = Cv<T>::down(scalar_left ? bin<C, OP>(s, v) : bin<C, OP>(v, s));
    }
}

// out (through stride row 0) = a (row 1) OP b (row 2): broadcasting, views, strided outputs.
template <typename T, int OP>
__global__ void binary_strided(T* out, const T* a, const T* b, Layout<3> l, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long off[3];
        layout_offsets<3>(l, i, off);
        out[off[0]] = bin_t<T, OP>(a[off[1]], b[off[2]]);
    }
}

// out (row 0) = a (row 1) OP s, or s OP a.
template <typename T, int OP>
__global__ void binary_scalar_strided(T* out, const T* a, double sf, long long si, int scalar_left, Layout<2> l, long long n) {
    typedef typename Cv<T>::C C;
    const C s = scalar_arg<T>(sf, si);
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long off[2];
        layout_offsets<2>(l, i, off);
        C v = Cv<T>::up(a[off[1]]);
        out[off[0]] = Cv<T>::down(scalar_left ? bin<C, OP>(s, v) : bin<C, OP>(v, s));
    }
}
