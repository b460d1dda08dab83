// Elementwise kernels of gpukit-core: binary, scalar, unary, comparison and `where`.
//
// Every kernel is a template over the element type T and an operation code; the Rust side
// requests the instantiations it needs as NVRTC name expressions (`binary_contig<float, 0>`).
// Contiguous kernels use 16-byte vector loads when all pointers are 16-byte aligned (a uniform
// branch), with four independent vectors per thread in flight; strided kernels take a Layout
// by value (shape and per-operand strides, up to 8 dims; a stride of 0 broadcasts).
#include "common.cuh"

// Binary operation codes (keep in sync with ops::BinaryOp).
#define B_ADD 0
#define B_SUB 1
#define B_MUL 2
#define B_DIV 3
#define B_MAX 4
#define B_MIN 5
#define B_POW 6
// Unary operation codes (keep in sync with ops::UnaryOp).
#define U_NEG 0
#define U_ABS 1
#define U_EXP 2
#define U_LOG 3
#define U_SQRT 4
#define U_TANH 5
#define U_RELU 6
#define U_SIGMOID 7
// Comparison codes (keep in sync with ops::CompareOp).
#define C_EQ 0
#define C_NE 1
#define C_LT 2
#define C_LE 3
#define C_GT 4
#define C_GE 5

template <typename C, int OP> __device__ __forceinline__ C bin(C a, C b) {
    if constexpr (OP == B_ADD) return a + b;
    else if constexpr (OP == B_SUB) return a - b;
    else if constexpr (OP == B_MUL) return a * b;
    else if constexpr (OP == B_DIV) {
        // Integer division truncates toward zero; division by zero gives 0 (NumPy gives 0
        // with a warning). Floats follow IEEE.
        if constexpr (Cv<C>::is_int) return b == (C)0 ? (C)0 : (C)(a / b);
        else return a / b;
    } else if constexpr (OP == B_MAX) {
        // NaN propagates, as in numpy.maximum.
        return (a != a || a > b) ? a : b;
    } else if constexpr (OP == B_MIN) {
        return (a != a || a < b) ? a : b;
    } else {
        if constexpr (Cv<C>::is_int) {
            // Integer power by squaring; a negative exponent gives 0 unless |a| == 1.
            if constexpr (!Cv<C>::is_unsigned) {
                if (b < 0) return a == (C)1 ? (C)1 : (a == (C)-1 ? ((b & 1) ? (C)-1 : (C)1) : (C)0);
            }
            C r = 1, base = a;
            unsigned long long e = (unsigned long long)b;
            while (e) {
                if (e & 1ull) r = (C)(r * base);
                base = (C)(base * base);
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

template <typename T, int OP> __device__ __forceinline__ T bin_t(T a, T b) {
    return Cv<T>::down(bin<typename Cv<T>::C, OP>(Cv<T>::up(a), Cv<T>::up(b)));
}

template <typename C, int OP> __device__ __forceinline__ C una(C a) {
    if constexpr (OP == U_NEG) return (C)(-a);
    else if constexpr (OP == U_ABS) {
        if constexpr (Cv<C>::is_unsigned) return a;
        else return a < (C)0 ? (C)(-a) : a;
    } else if constexpr (OP == U_RELU) {
        return a > (C)0 ? a : (a != a ? a : (C)0);
    } else if constexpr (sizeof(C) == 4) {
        if constexpr (OP == U_EXP) return expf(a);
        else if constexpr (OP == U_LOG) return logf(a);
        else if constexpr (OP == U_SQRT) return sqrtf(a);
        else if constexpr (OP == U_TANH) return tanhf(a);
        else return 1.0f / (1.0f + expf(-a));
    } else {
        if constexpr (OP == U_EXP) return exp(a);
        else if constexpr (OP == U_LOG) return log(a);
        else if constexpr (OP == U_SQRT) return sqrt(a);
        else if constexpr (OP == U_TANH) return tanh(a);
        else return 1.0 / (1.0 + exp(-a));
    }
}

template <typename T, int OP> __device__ __forceinline__ T una_t(T a) {
    return Cv<T>::down(una<typename Cv<T>::C, OP>(Cv<T>::up(a)));
}

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

// out[i] = a[i] OP b[i], all contiguous with n elements.
template <typename T, int OP>
__global__ void binary_contig(T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, long long n) {
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
    const long long tid = global_tid(), nt = grid_threads();
    long long tail = 0;
    if (aligned16(out) && aligned16(a) && aligned16(b)) {
        const long long nv = n / V;
        const P* pa = reinterpret_cast<const P*>(a);
        const P* pb = reinterpret_cast<const P*>(b);
        P* po = reinterpret_cast<P*>(out);
        long long i = tid;
        for (; i + 3 * nt < nv; i += 4 * nt) {
            P x[4], y[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) { x[u] = pa[i + u * nt]; y[u] = pb[i + u * nt]; }
#pragma unroll
            for (int u = 0; u < 4; ++u) {
#pragma unroll
                for (int k = 0; k < V; ++k) x[u].v[k] = bin_t<T, OP>(x[u].v[k], y[u].v[k]);
                po[i + u * nt] = x[u];
            }
        }
        for (; i < nv; i += nt) {
            P x = pa[i], y = pb[i];
#pragma unroll
            for (int k = 0; k < V; ++k) x.v[k] = bin_t<T, OP>(x.v[k], y.v[k]);
            po[i] = x;
        }
        tail = nv * V;
    }
    for (long long j = tail + tid; j < n; j += nt) out[j] = bin_t<T, OP>(a[j], b[j]);
}

// out[i] = a[i] OP s (or s OP a[i] when scalar_left), contiguous.
template <typename T, int OP>
__global__ void binary_scalar(T* __restrict__ out, const T* __restrict__ a, double sf, long long si, int scalar_left, long long n) {
    typedef typename Cv<T>::C C;
    const C s = scalar_arg<T>(sf, si);
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
    const long long tid = global_tid(), nt = grid_threads();
    long long tail = 0;
    if (aligned16(out) && aligned16(a)) {
        const long long nv = n / V;
        const P* pa = reinterpret_cast<const P*>(a);
        P* po = reinterpret_cast<P*>(out);
        for (long long i = tid; i < nv; i += nt) {
            P x = pa[i];
#pragma unroll
            for (int k = 0; k < V; ++k) {
                C v = Cv<T>::up(x.v[k]);
                x.v[k] = Cv<T>::down(scalar_left ? bin<C, OP>(s, v) : bin<C, OP>(v, s));
            }
            po[i] = x;
        }
        tail = nv * V;
    }
    for (long long j = tail + tid; j < n; j += nt) {
        C v = Cv<T>::up(a[j]);
        out[j] = Cv<T>::down(scalar_left ? bin<C, OP>(s, v) : bin<C, OP>(v, s));
    }
}

// out (contiguous, the broadcast shape) = a OP b with a and b read through strides.
template <typename T, int OP>
__global__ void binary_strided(T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, Layout<2> l, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long off[2];
        layout_offsets<2>(l, i, off);
        out[i] = bin_t<T, OP>(a[off[0]], b[off[1]]);
    }
}

template <typename T, int OP>
__global__ void unary_contig(T* __restrict__ out, const T* __restrict__ a, long long n) {
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
    const long long tid = global_tid(), nt = grid_threads();
    long long tail = 0;
    if (aligned16(out) && aligned16(a)) {
        const long long nv = n / V;
        const P* pa = reinterpret_cast<const P*>(a);
        P* po = reinterpret_cast<P*>(out);
        long long i = tid;
        for (; i + 3 * nt < nv; i += 4 * nt) {
            P x[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) x[u] = pa[i + u * nt];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
#pragma unroll
                for (int k = 0; k < V; ++k) x[u].v[k] = una_t<T, OP>(x[u].v[k]);
                po[i + u * nt] = x[u];
            }
        }
        for (; i < nv; i += nt) {
            P x = pa[i];
#pragma unroll
            for (int k = 0; k < V; ++k) x.v[k] = una_t<T, OP>(x.v[k]);
            po[i] = x;
        }
        tail = nv * V;
    }
    for (long long j = tail + tid; j < n; j += nt) out[j] = una_t<T, OP>(a[j]);
}

template <typename T, int OP>
__global__ void unary_strided(T* __restrict__ out, const T* __restrict__ a, Layout<1> l, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long off[1];
        layout_offsets<1>(l, i, off);
        out[i] = una_t<T, OP>(a[off[0]]);
    }
}

template <typename T, int OP>
__global__ void compare_strided(unsigned char* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, Layout<2> l, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long off[2];
        layout_offsets<2>(l, i, off);
        out[i] = cmp_t<T, OP>(a[off[0]], b[off[1]]);
    }
}

template <typename T, int OP>
__global__ void compare_contig(unsigned char* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) out[i] = cmp_t<T, OP>(a[i], b[i]);
}

template <typename T, int OP>
__global__ void compare_scalar(unsigned char* __restrict__ out, const T* __restrict__ a, double sf, long long si, int scalar_left, long long n) {
    typedef typename Cv<T>::C C;
    const C s = scalar_arg<T>(sf, si);
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        C v = Cv<T>::up(a[i]);
        out[i] = scalar_left ? cmp<C, OP>(s, v) : cmp<C, OP>(v, s);
    }
}

// out = mask ? a : b, all three read through strides (broadcast).
template <typename T>
__global__ void where_strided(T* __restrict__ out, const unsigned char* __restrict__ mask, const T* __restrict__ a, const T* __restrict__ b, Layout<3> l, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long off[3];
        layout_offsets<3>(l, i, off);
        out[i] = mask[off[0]] ? a[off[1]] : b[off[2]];
    }
}
