// Reduction kernels of gpukit-core: sum, mean, max, min and argmax/argmin, over all elements
// (two passes: per-block partials, then one block) or along one axis of a contiguous array
// viewed as [outer, R, inner].
//
// Order: every thread accumulates a short strided run (a few hundred elements at most for
// 1e8 inputs), then warps and blocks combine in a tree, so the error grows like
// O(run + log n) ulps, not O(n): no catastrophic error at 1e8 elements. Column reductions
// (inner > 1) sum chunks of 256 rows and then add the chunk sums (two-level blocking).
// Accumulators: double for f64, float for f32 / f16 / bf16, 64-bit integers for integer sums.
#include "common.cuh"

// Reduction codes (keep in sync with ops::ReduceOp).
#define R_SUM 0
#define R_MEAN 1
#define R_MAX 2
#define R_MIN 3
// Arg-reduction codes.
#define A_MAX 0
#define A_MIN 1

template <typename T, int OP> struct Acc { typedef typename Cv<T>::C type; };
template <int OP> struct Acc<int, OP> { typedef long long type; };
template <int OP> struct Acc<long long, OP> { typedef long long type; };
template <int OP> struct Acc<unsigned int, OP> { typedef unsigned long long type; };
template <int OP> struct Acc<unsigned char, OP> { typedef unsigned long long type; };

template <typename A> __device__ __forceinline__ A lowest() {
    if constexpr (sizeof(A) == 4 && !Cv<A>::is_int) return __int_as_float(0xff800000);
    else if constexpr (sizeof(A) == 8 && !Cv<A>::is_int) return __longlong_as_double(0xfff0000000000000ll);
    else if constexpr (Cv<A>::is_unsigned) return (A)0;
    else if constexpr (sizeof(A) == 4) return (A)(-0x7fffffff - 1);
    else return (A)(-0x7fffffffffffffffll - 1);
}
template <typename A> __device__ __forceinline__ A highest() {
    if constexpr (sizeof(A) == 4 && !Cv<A>::is_int) return __int_as_float(0x7f800000);
    else if constexpr (sizeof(A) == 8 && !Cv<A>::is_int) return __longlong_as_double(0x7ff0000000000000ll);
    else if constexpr (Cv<A>::is_unsigned) return (A)0xffffffffffffffffull;
    else if constexpr (sizeof(A) == 4) return (A)0x7fffffff;
    else return (A)0x7fffffffffffffffll;
}

template <typename A, int OP> __device__ __forceinline__ A identity() {
    if constexpr (OP == R_MAX) return lowest<A>();
    else if constexpr (OP == R_MIN) return highest<A>();
    else return (A)0;
}

template <typename A, int OP> __device__ __forceinline__ A combine(A a, A b) {
    if constexpr (OP == R_MAX) {
        if (a != a) return a;
        if (b != b) return b;
        return a > b ? a : b;
    } else if constexpr (OP == R_MIN) {
        if (a != a) return a;
        if (b != b) return b;
        return a < b ? a : b;
    } else {
        return a + b;
    }
}

// Tree over the block; the result is valid in thread 0. Ends with a barrier so it can be called
// again.
template <typename A, int OP> __device__ A block_reduce(A v) {
    __shared__ A sh[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = combine<A, OP>(v, __shfl_down_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < nw ? sh[lane] : identity<A, OP>();
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = combine<A, OP>(v, __shfl_down_sync(0xffffffffu, v, o));
    }
    __syncthreads();
    return v;
}

template <typename T, int OP> __device__ __forceinline__ typename Acc<T, OP>::type acc_of(T x) {
    typedef typename Acc<T, OP>::type A;
    return (A)Cv<T>::up(x);
}

// Pass 1: each block writes one partial (accumulator type) to partial[blockIdx.x].
template <typename T, int OP>
__global__ void reduce_partial(const T* __restrict__ x, long long n, void* partial) {
    typedef typename Acc<T, OP>::type A;
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
    const long long tid = global_tid(), nt = grid_threads();
    A acc[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) acc[u] = identity<A, OP>();
    long long tail = 0;
    if (aligned16(x)) {
        const long long nv = n / V;
        const P* px = reinterpret_cast<const P*>(x);
        long long i = tid;
        for (; i + 3 * nt < nv; i += 4 * nt) {
            P p[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) p[u] = px[i + u * nt];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                A s = identity<A, OP>();
#pragma unroll
                for (int k = 0; k < V; ++k) s = combine<A, OP>(s, acc_of<T, OP>(p[u].v[k]));
                acc[u] = combine<A, OP>(acc[u], s);
            }
        }
        for (; i < nv; i += nt) {
            P p = px[i];
            A s = identity<A, OP>();
#pragma unroll
            for (int k = 0; k < V; ++k) s = combine<A, OP>(s, acc_of<T, OP>(p.v[k]));
            acc[0] = combine<A, OP>(acc[0], s);
        }
        tail = nv * V;
    }
    for (long long j = tail + tid; j < n; j += nt) acc[1] = combine<A, OP>(acc[1], acc_of<T, OP>(x[j]));
    A v = combine<A, OP>(combine<A, OP>(acc[0], acc[1]), combine<A, OP>(acc[2], acc[3]));
    v = block_reduce<A, OP>(v);
    if (threadIdx.x == 0) reinterpret_cast<A*>(partial)[blockIdx.x] = v;
}

// Pass 2 (one block): combines m partials into out[0]; MEAN divides by count.
template <typename T, int OP>
__global__ void reduce_finish(const void* partial, int m, T* __restrict__ out, long long count) {
    typedef typename Acc<T, OP>::type A;
    const A* p = reinterpret_cast<const A*>(partial);
    A v = identity<A, OP>();
    for (int i = threadIdx.x; i < m; i += blockDim.x) v = combine<A, OP>(v, p[i]);
    v = block_reduce<A, OP>(v);
    if (threadIdx.x == 0) {
        if constexpr (OP == R_MEAN) v = (A)(v / (A)count);
        out[0] = Cv<T>::down((typename Cv<T>::C)v);
    }
}

// [outer, R] rows (inner == 1): one block per row (grid-stride over rows).
template <typename T, int OP>
__global__ void reduce_rows(const T* __restrict__ x, long long rows, long long R, T* __restrict__ out) {
    typedef typename Acc<T, OP>::type A;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* row = x + r * R;
        A v = identity<A, OP>();
        for (long long j = threadIdx.x; j < R; j += blockDim.x) v = combine<A, OP>(v, acc_of<T, OP>(row[j]));
        v = block_reduce<A, OP>(v);
        if (threadIdx.x == 0) {
            if constexpr (OP == R_MEAN) v = (A)(v / (A)R);
            out[r] = Cv<T>::down((typename Cv<T>::C)v);
        }
    }
}

// [outer, R, inner] with inner > 1: one thread per output column, chunks of 256 rows.
template <typename T, int OP>
__global__ void reduce_cols(const T* __restrict__ x, long long outer, long long R, long long inner, T* __restrict__ out) {
    typedef typename Acc<T, OP>::type A;
    const long long total = outer * inner;
    for (long long c = global_tid(); c < total; c += grid_threads()) {
        const long long o = c / inner, i = c % inner;
        const T* col = x + o * R * inner + i;
        A v = identity<A, OP>();
        for (long long r0 = 0; r0 < R; r0 += 256) {
            const long long r1 = r0 + 256 < R ? r0 + 256 : R;
            A s = identity<A, OP>();
            for (long long r = r0; r < r1; ++r) s = combine<A, OP>(s, acc_of<T, OP>(col[r * inner]));
            v = combine<A, OP>(v, s);
        }
        if constexpr (OP == R_MEAN) v = (A)(v / (A)R);
        out[c] = Cv<T>::down((typename Cv<T>::C)v);
    }
}

// ---- argmax / argmin: (value, index) pairs; ties and NaN resolve like NumPy (first index,
// NaN wins).
template <typename A> struct ArgPair { A v; long long i; };

template <typename A, int OP> __device__ __forceinline__ ArgPair<A> arg_combine(ArgPair<A> a, ArgPair<A> b) {
    const bool an = a.v != a.v, bn = b.v != b.v;
    if (an || bn) {
        if (an && bn) return a.i <= b.i ? a : b;
        return an ? a : b;
    }
    if constexpr (OP == A_MAX) {
        if (a.v > b.v) return a;
        if (b.v > a.v) return b;
    } else {
        if (a.v < b.v) return a;
        if (b.v < a.v) return b;
    }
    return a.i <= b.i ? a : b;
}

template <typename A, int OP> __device__ __forceinline__ ArgPair<A> arg_identity() {
    ArgPair<A> p;
    p.v = OP == A_MAX ? lowest<A>() : highest<A>();
    p.i = 0x7fffffffffffffffll;
    return p;
}

template <typename A, int OP> __device__ ArgPair<A> block_arg_reduce(ArgPair<A> v) {
    __shared__ A shv[32];
    __shared__ long long shi[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        ArgPair<A> w;
        w.v = __shfl_down_sync(0xffffffffu, v.v, o);
        w.i = __shfl_down_sync(0xffffffffu, v.i, o);
        v = arg_combine<A, OP>(v, w);
    }
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if (lane == 0) { shv[wp] = v.v; shi[wp] = v.i; }
    __syncthreads();
    if (wp == 0) {
        if (lane < nw) { v.v = shv[lane]; v.i = shi[lane]; } else v = arg_identity<A, OP>();
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            ArgPair<A> w;
            w.v = __shfl_down_sync(0xffffffffu, v.v, o);
            w.i = __shfl_down_sync(0xffffffffu, v.i, o);
            v = arg_combine<A, OP>(v, w);
        }
    }
    __syncthreads();
    return v;
}

// The comparison type of arg reductions: float for 16-bit floats, 32/64-bit for integers.
template <typename T> struct ArgT { typedef typename Cv<T>::C type; };
template <> struct ArgT<unsigned char> { typedef unsigned int type; };

template <typename T, int OP>
__global__ void arg_partial(const T* __restrict__ x, long long n, void* partial) {
    typedef typename ArgT<T>::type A;
    ArgPair<A> v = arg_identity<A, OP>();
    for (long long j = global_tid(); j < n; j += grid_threads()) {
        ArgPair<A> e;
        e.v = (A)Cv<T>::up(x[j]);
        e.i = j;
        v = arg_combine<A, OP>(v, e);
    }
    v = block_arg_reduce<A, OP>(v);
    if (threadIdx.x == 0) reinterpret_cast<ArgPair<A>*>(partial)[blockIdx.x] = v;
}

template <typename T, int OP>
__global__ void arg_finish(const void* partial, int m, long long* __restrict__ out) {
    typedef typename ArgT<T>::type A;
    const ArgPair<A>* p = reinterpret_cast<const ArgPair<A>*>(partial);
    ArgPair<A> v = arg_identity<A, OP>();
    for (int i = threadIdx.x; i < m; i += blockDim.x) v = arg_combine<A, OP>(v, p[i]);
    v = block_arg_reduce<A, OP>(v);
    if (threadIdx.x == 0) out[0] = v.i;
}

template <typename T, int OP>
__global__ void arg_rows(const T* __restrict__ x, long long rows, long long R, long long* __restrict__ out) {
    typedef typename ArgT<T>::type A;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* row = x + r * R;
        ArgPair<A> v = arg_identity<A, OP>();
        for (long long j = threadIdx.x; j < R; j += blockDim.x) {
            ArgPair<A> e;
            e.v = (A)Cv<T>::up(row[j]);
            e.i = j;
            v = arg_combine<A, OP>(v, e);
        }
        v = block_arg_reduce<A, OP>(v);
        if (threadIdx.x == 0) out[r] = v.i;
    }
}

template <typename T, int OP>
__global__ void arg_cols(const T* __restrict__ x, long long outer, long long R, long long inner, long long* __restrict__ out) {
    typedef typename ArgT<T>::type A;
    const long long total = outer * inner;
    for (long long c = global_tid(); c < total; c += grid_threads()) {
        const long long o = c / inner, i = c % inner;
        const T* col = x + o * R * inner + i;
        ArgPair<A> v = arg_identity<A, OP>();
        for (long long r = 0; r < R; ++r) {
            ArgPair<A> e;
            e.v = (A)Cv<T>::up(col[r * inner]);
            e.i = r;
            v = arg_combine<A, OP>(v, e);
        }
        out[c] = v.i;
    }
}
