// Reduction kernels of gpukit-core, over all elements or along axes of a contiguous array
// viewed as [outer, R, inner] (R reduced):
//
//   reduce_partial / reduce_finish   all elements: per-block partials (16-byte loads), then one
//                                    block combines them;
//   reduce_rows                      inner == 1 and short rows: a group of 1..32 lanes per row;
//   reduce_rows_vec                  inner == 1, aligned rows of >= 32 vectors: a warp per row,
//                                    16-byte loads;
//   reduce_cols_small                axis 0 of [R, inner] with inner dividing the vector width:
//                                    the flat array in 16-byte loads, an accumulator per vector
//                                    position, then reduce_cols_finish;
//   reduce_cols / reduce_cols_finish any [outer, R, inner]: a block covers TX columns (TX up to 32,
//                                    so a warp reads contiguous memory even for inner == 2) and a
//                                    slice of R; the R axis is split over grid.y when there are
//                                    too few columns to fill the GPU, and the finish kernel
//                                    combines the slices (a warp per column). Axis 0 of a
//                                    [1e7, 2] array runs on ~1000 blocks, not 2 threads.
//
// Every operation is a policy Red<T, OP>: accumulator type, identity, lift (element -> acc),
// combine, warp shuffle and finish (acc -> output). Order and accuracy: each thread combines a
// short strided run in chunks of 32, then warps and blocks combine in a tree, so rounding error
// grows like O(run + log n), not O(n). Accumulators: double for f64, float for f32 / f16 / bf16,
// 64-bit integers for integer sums and products (NumPy's widening: int32 sums to int64, uint8
// and uint32 to uint64), double for integer means and variances; variances use Welford /
// Chan's parallel combination (one pass, no cancellation).
#include "common.cuh"

// Operation codes (keep in sync with reduce::ReduceOp).
#define R_SUM 0
#define R_MEAN 1
#define R_MAX 2
#define R_MIN 3
#define R_PROD 4
#define R_ANY 5
#define R_ALL 6
#define R_VAR 7
#define R_STD 8
#define R_ARGMAX 9
#define R_ARGMIN 10

// Sum / product accumulator and output of an element type.
template <typename T> struct SumT { typedef float A; typedef T O; };
template <> struct SumT<double> { typedef double A; typedef double O; };
template <> struct SumT<int> { typedef long long A; typedef long long O; };
template <> struct SumT<long long> { typedef long long A; typedef long long O; };
template <> struct SumT<unsigned char> { typedef unsigned long long A; typedef unsigned long long O; };
template <> struct SumT<unsigned int> { typedef unsigned long long A; typedef unsigned long long O; };
template <> struct SumT<unsigned long long> { typedef unsigned long long A; typedef unsigned long long O; };
// Mean / variance accumulator and output: the type itself for floats (computed in float or
// double), double for integers.
template <typename T> struct FloatT { typedef float A; typedef T O; };
template <> struct FloatT<double> { typedef double A; typedef double O; };
template <> struct FloatT<int> { typedef double A; typedef double O; };
template <> struct FloatT<long long> { typedef double A; typedef double O; };
template <> struct FloatT<unsigned char> { typedef double A; typedef double O; };
template <> struct FloatT<unsigned int> { typedef double A; typedef double O; };
template <> struct FloatT<unsigned long long> { typedef double A; typedef double O; };
// Comparison type of max / min / arg reductions (shuffle-able: no 8-bit types).
template <typename T> struct CmpT { typedef typename Cv<T>::C C; };
template <> struct CmpT<unsigned char> { typedef unsigned int C; };

template <typename C> __device__ __forceinline__ C lowest_of() {
    if constexpr (sizeof(C) == 4 && !Cv<C>::is_int) return __int_as_float(0xff800000);
    else if constexpr (sizeof(C) == 8 && !Cv<C>::is_int) return __longlong_as_double(0xfff0000000000000ll);
    else if constexpr (Cv<C>::is_unsigned) return (C)0;
    else if constexpr (sizeof(C) == 4) return (C)(-0x7fffffff - 1);
    else return (C)(-0x7fffffffffffffffll - 1);
}
template <typename C> __device__ __forceinline__ C highest_of() {
    if constexpr (sizeof(C) == 4 && !Cv<C>::is_int) return __int_as_float(0x7f800000);
    else if constexpr (sizeof(C) == 8 && !Cv<C>::is_int) return __longlong_as_double(0x7ff0000000000000ll);
    else if constexpr (Cv<C>::is_unsigned) return (C)0xffffffffffffffffull;
    else if constexpr (sizeof(C) == 4) return (C)0x7fffffff;
    else return (C)0x7fffffffffffffffll;
}

template <typename A> __device__ __forceinline__ A shfl_down(A v, int o, int width) {
    return __shfl_down_sync(0xffffffffu, v, o, width);
}

template <typename O, typename A> __device__ __forceinline__ O out_of(A v) {
    return Cv<O>::down((typename Cv<O>::C)v);
}

template <typename T, int OP> struct Red;

// Sum and product.
template <typename T, int OP> struct SumProd {
    typedef typename SumT<T>::A A;
    typedef typename SumT<T>::O O;
    static __device__ __forceinline__ A id() { return OP == R_PROD ? (A)1 : (A)0; }
    static __device__ __forceinline__ A lift(T x, long long) { return (A)Cv<T>::up(x); }
    static __device__ __forceinline__ A comb(A a, A b) {
        if constexpr (OP == R_PROD) return wrap_mul(a, b);
        else return wrap_add(a, b);
    }
    static __device__ __forceinline__ A shfl(A a, int o, int w) { return shfl_down(a, o, w); }
    static __device__ __forceinline__ O fin(A a, long long, long long) { return out_of<O, A>(a); }
};
template <typename T> struct Red<T, R_SUM> : SumProd<T, R_SUM> {};
template <typename T> struct Red<T, R_PROD> : SumProd<T, R_PROD> {};

template <typename T> struct Red<T, R_MEAN> {
    typedef typename FloatT<T>::A A;
    typedef typename FloatT<T>::O O;
    static __device__ __forceinline__ A id() { return (A)0; }
    static __device__ __forceinline__ A lift(T x, long long) { return (A)Cv<T>::up(x); }
    static __device__ __forceinline__ A comb(A a, A b) { return a + b; }
    static __device__ __forceinline__ A shfl(A a, int o, int w) { return shfl_down(a, o, w); }
    // An empty mean is 0 / 0 = NaN, as in NumPy.
    static __device__ __forceinline__ O fin(A a, long long count, long long) { return out_of<O, A>(a / (A)count); }
};

// Maximum and minimum (NaN propagates).
template <typename T, int OP> struct MaxMin {
    typedef typename CmpT<T>::C A;
    typedef T O;
    static __device__ __forceinline__ A id() { return OP == R_MAX ? lowest_of<A>() : highest_of<A>(); }
    static __device__ __forceinline__ A lift(T x, long long) { return (A)Cv<T>::up(x); }
    static __device__ __forceinline__ A comb(A a, A b) {
        if constexpr (sizeof(A) == 4 && !Cv<A>::is_int) {
            // f32 (and f16 / bf16, compared in f32): PTX's NaN-propagating max / min (sm_80+),
            // one instruction instead of two NaN tests, a compare and a select: the 1 GiB
            // reduction was 0.95x torch's with them
            A r;
            if constexpr (OP == R_MAX) asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
            else asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
            return r;
        } else {
            if (is_nan_c(a)) return a;
            if (is_nan_c(b)) return b;
            if constexpr (OP == R_MAX) return a > b ? a : b;
            else return a < b ? a : b;
        }
    }
    static __device__ __forceinline__ A shfl(A a, int o, int w) { return shfl_down(a, o, w); }
    static __device__ __forceinline__ O fin(A a, long long, long long) { return Cv<T>::down((typename Cv<T>::C)a); }
};
template <typename T> struct Red<T, R_MAX> : MaxMin<T, R_MAX> {};
template <typename T> struct Red<T, R_MIN> : MaxMin<T, R_MIN> {};

// any / all: NaN counts as true.
template <typename T, int OP> struct AnyAll {
    typedef int A;
    typedef unsigned char O;
    static __device__ __forceinline__ A id() { return OP == R_ALL ? 1 : 0; }
    static __device__ __forceinline__ A lift(T x, long long) { return truthy<T>(x) ? 1 : 0; }
    static __device__ __forceinline__ A comb(A a, A b) {
        if constexpr (OP == R_ALL) return a & b;
        else return a | b;
    }
    static __device__ __forceinline__ A shfl(A a, int o, int w) { return shfl_down(a, o, w); }
    static __device__ __forceinline__ O fin(A a, long long, long long) { return (O)a; }
};
template <typename T> struct Red<T, R_ANY> : AnyAll<T, R_ANY> {};
template <typename T> struct Red<T, R_ALL> : AnyAll<T, R_ALL> {};

// Variance and standard deviation: (count, mean, M2) combined with Chan's formula.
template <typename F> struct Welford { F n, mean, m2; };

template <typename T, int OP> struct VarStd {
    typedef typename FloatT<T>::A F;
    typedef Welford<F> A;
    typedef typename FloatT<T>::O O;
    static __device__ __forceinline__ A id() { A a; a.n = 0; a.mean = 0; a.m2 = 0; return a; }
    static __device__ __forceinline__ A lift(T x, long long) {
        // M2 starts as v - v: 0 for a finite value, NaN for +-Inf and NaN, so that any
        // non-finite element makes the variance NaN, as in NumPy.
        const F v = (F)Cv<T>::up(x);
        A a; a.n = 1; a.mean = v; a.m2 = v - v; return a;
    }
    static __device__ __forceinline__ A comb(A a, A b) {
        if (b.n == (F)0) return a;
        if (a.n == (F)0) return b;
        A r;
        r.n = a.n + b.n;
        const F d = b.mean - a.mean;
        const F wb = b.n / r.n;
        r.mean = a.mean + d * wb;
        r.m2 = a.m2 + b.m2 + d * d * a.n * wb;
        return r;
    }
    static __device__ __forceinline__ A shfl(A a, int o, int w) {
        A r;
        r.n = shfl_down(a.n, o, w);
        r.mean = shfl_down(a.mean, o, w);
        r.m2 = shfl_down(a.m2, o, w);
        return r;
    }
    static __device__ __forceinline__ O fin(A a, long long, long long ddof) {
        F dof = a.n - (F)ddof;
        if (dof < (F)0) dof = (F)0;
        F v = a.m2 / dof;
        if constexpr (OP == R_STD) {
            if constexpr (sizeof(F) == 4) v = sqrtf(v);
            else v = sqrt(v);
        }
        return out_of<O, F>(v);
    }
};
template <typename T> struct Red<T, R_VAR> : VarStd<T, R_VAR> {};
template <typename T> struct Red<T, R_STD> : VarStd<T, R_STD> {};

// argmax / argmin: (value, index); ties resolve to the first index, NaN wins (NumPy).
template <typename V> struct ArgPair { V v; long long i; };

template <typename T, int OP> struct ArgRed {
    typedef typename CmpT<T>::C V;
    typedef ArgPair<V> A;
    typedef long long O;
    static __device__ __forceinline__ A id() {
        A a; a.v = OP == R_ARGMAX ? lowest_of<V>() : highest_of<V>(); a.i = 0x7fffffffffffffffll; return a;
    }
    static __device__ __forceinline__ A lift(T x, long long i) { A a; a.v = (V)Cv<T>::up(x); a.i = i; return a; }
    static __device__ __forceinline__ A comb(A a, A b) {
        const bool an = is_nan_c(a.v), bn = is_nan_c(b.v);
        if (an || bn) {
            if (an && bn) return a.i <= b.i ? a : b;
            return an ? a : b;
        }
        if constexpr (OP == R_ARGMAX) {
            if (a.v > b.v) return a;
            if (b.v > a.v) return b;
        } else {
            if (a.v < b.v) return a;
            if (b.v < a.v) return b;
        }
        return a.i <= b.i ? a : b;
    }
    static __device__ __forceinline__ A shfl(A a, int o, int w) {
        A r; r.v = shfl_down(a.v, o, w); r.i = shfl_down(a.i, o, w); return r;
    }
    static __device__ __forceinline__ O fin(A a, long long, long long) { return a.i; }
};
template <typename T> struct Red<T, R_ARGMAX> : ArgRed<T, R_ARGMAX> {};
template <typename T> struct Red<T, R_ARGMIN> : ArgRed<T, R_ARGMIN> {};

// Reduces over the whole block; the result is valid in thread 0. Ends with a barrier so it can
// be called again.
template <typename R> __device__ typename R::A block_reduce(typename R::A v) {
    typedef typename R::A A;
    __shared__ A sh[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = R::comb(v, R::shfl(v, o, 32));
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < nw ? sh[lane] : R::id();
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = R::comb(v, R::shfl(v, o, 32));
    }
    __syncthreads();
    return v;
}

// The V elements of a 16-byte vector whose first element has index `base`, combined pairwise
// (a chain of log2 V combines, not V: the chain is latency the loads of the next vectors wait
// behind; the earlier elements stay on the left, so ties keep resolving to the first index).
template <typename R, typename T, int V>
__device__ __forceinline__ typename R::A vec_comb(const Pack<T, V>& p, long long base) {
    typename R::A a[V];
#pragma unroll
    for (int k = 0; k < V; ++k) a[k] = R::lift(p.v[k], base + k);
#pragma unroll
    for (int w = 1; w < V; w <<= 1)
#pragma unroll
        for (int k = 0; k + w < V; k += 2 * w) a[k] = R::comb(a[k], a[k + w]);
    return a[0];
}

// Pass 1 of a full reduction: each block writes one accumulator to partial[blockIdx.x].
template <typename T, int OP>
__global__ void reduce_partial(const T* __restrict__ x, long long n, void* partial) {
    typedef Red<T, OP> R;
    typedef typename R::A A;
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
    const long long tid = global_tid(), nt = grid_threads();
    A acc[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) acc[u] = R::id();
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
            for (int u = 0; u < 4; ++u) acc[u] = R::comb(acc[u], vec_comb<R, T, V>(p[u], (i + u * nt) * V));
        }
        for (; i < nv; i += nt) {
            acc[0] = R::comb(acc[0], vec_comb<R, T, V>(px[i], i * V));
        }
        tail = nv * V;
    }
    for (long long j = tail + tid; j < n; j += nt) acc[1] = R::comb(acc[1], R::lift(x[j], j));
    A v = R::comb(R::comb(acc[0], acc[1]), R::comb(acc[2], acc[3]));
    v = block_reduce<R>(v);
    if (threadIdx.x == 0) reinterpret_cast<A*>(partial)[blockIdx.x] = v;
}

// Pass 2 (one block): combines m partials into out[0].
template <typename T, int OP>
__global__ void reduce_finish(const void* partial, int m, typename Red<T, OP>::O* __restrict__ out, long long count, long long ddof) {
    typedef Red<T, OP> R;
    typedef typename R::A A;
    const A* p = reinterpret_cast<const A*>(partial);
    A v = R::id();
    for (int i = threadIdx.x; i < m; i += blockDim.x) v = R::comb(v, p[i]);
    v = block_reduce<R>(v);
    if (threadIdx.x == 0) out[0] = R::fin(v, count, ddof);
}

// [rows, R] (inner == 1), short rows: groups of 2^lanes_log2 (<= 32) lanes per row, grid-stride
// over rows; lane 0 of a group writes the row's result. The loop runs over warps (every lane of
// a warp makes the same trips, since the shuffles need the whole warp), rows past the end idle.
template <typename T, int OP>
__global__ void reduce_rows(const T* __restrict__ x, long long rows, long long R_, typename Red<T, OP>::O* __restrict__ out, long long ddof, int lanes_log2) {
    typedef Red<T, OP> R;
    typedef typename R::A A;
    const int lanes = 1 << lanes_log2;
    const int lane = threadIdx.x & (lanes - 1);
    const long long per_warp = 32 >> lanes_log2;
    const long long warp = global_tid() >> 5, warps = grid_threads() >> 5;
    const long long in_warp = (threadIdx.x & 31) >> lanes_log2;
    for (long long base = warp * per_warp; base < rows; base += warps * per_warp) {
        const long long r = base + in_warp;
        const bool valid = r < rows;
        A v = R::id();
        if (valid) {
            const T* row = x + r * R_;
#pragma unroll 8
            for (long long j = lane; j < R_; j += lanes) v = R::comb(v, R::lift(row[j], j));
        }
        for (int o = lanes >> 1; o > 0; o >>= 1) v = R::comb(v, R::shfl(v, o, lanes));
        if (valid && lane == 0) out[r] = R::fin(v, R_, ddof);
    }
}

// [outer, R, inner]: a block of TX x TY threads (TX = 2^tx_log2 columns, TY = blockDim / TX)
// covers TX consecutive columns of one outer index and rows [y * rows_per_split, ...) of R.
// With gridDim.y == 1 it writes the result, else accumulators to partial[y][column].
template <typename T, int OP>
__global__ void reduce_cols(const T* __restrict__ x, long long outer, long long R_, long long inner, int tx_log2, long long rows_per_split, void* partial, typename Red<T, OP>::O* __restrict__ out, long long ddof) {
    typedef Red<T, OP> R;
    typedef typename R::A A;
    __shared__ A sh[256];
    const int TX = 1 << tx_log2;
    const int TY = blockDim.x >> tx_log2;
    const int tx = threadIdx.x & (TX - 1), ty = threadIdx.x >> tx_log2;
    const long long tiles = (inner + TX - 1) / TX;
    const long long o = blockIdx.x / tiles;
    const long long col = (blockIdx.x % tiles) * TX + tx;
    const long long r0 = (long long)blockIdx.y * rows_per_split;
    const long long r1 = r0 + rows_per_split < R_ ? r0 + rows_per_split : R_;
    A v = R::id();
    if (col < inner) {
        const T* base = x + o * R_ * inner + col;
        long long r = r0 + ty;
        while (r < r1) {
            A s = R::id();
#pragma unroll 8
            for (int k = 0; k < 32 && r < r1; ++k, r += TY) s = R::comb(s, R::lift(base[r * inner], r));
            v = R::comb(v, s);
        }
    }
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int stride = TY >> 1; stride > 0; stride >>= 1) {
        if (ty < stride) sh[threadIdx.x] = R::comb(sh[threadIdx.x], sh[threadIdx.x + stride * TX]);
        __syncthreads();
    }
    if (ty == 0 && col < inner) {
        const long long c = o * inner + col;
        if (gridDim.y == 1) out[c] = R::fin(sh[tx], R_, ddof);
        else reinterpret_cast<A*>(partial)[(long long)blockIdx.y * outer * inner + c] = sh[tx];
    }
}

// Combines the `splits` partial accumulators of each of `ncols` columns: a warp per column.
template <typename T, int OP>
__global__ void reduce_cols_finish(const void* partial, int splits, long long ncols, typename Red<T, OP>::O* __restrict__ out, long long count, long long ddof) {
    typedef Red<T, OP> R;
    typedef typename R::A A;
    const A* p = reinterpret_cast<const A*>(partial);
    const int lane = threadIdx.x & 31;
    const long long warps = grid_threads() >> 5;
    for (long long c = global_tid() >> 5; c < ncols; c += warps) {
        A v = R::id();
        for (int s = lane; s < splits; s += 32) v = R::comb(v, p[(long long)s * ncols + c]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = R::comb(v, R::shfl(v, o, 32));
        if (lane == 0) out[c] = R::fin(v, count, ddof);
    }
}

// [rows, R] (inner == 1) with 16-byte aligned rows of at least 32 vectors (R % V == 0): a warp
// per row, each lane combining vectors lane, lane + 32, ... (8 loads in flight per lane);
// grid-stride over rows by warps; lane 0 writes the row's result.
template <typename T, int OP>
__global__ void reduce_rows_vec(const T* __restrict__ x, long long rows, long long R_, typename Red<T, OP>::O* __restrict__ out, long long ddof) {
    typedef Red<T, OP> R;
    typedef typename R::A A;
    constexpr int V = 16 / sizeof(T);
    constexpr int U = 8;
    typedef Pack<T, V> P;
    const int lane = threadIdx.x & 31;
    const long long warps = grid_threads() >> 5;
    const long long nv = R_ / V;
    for (long long r = global_tid() >> 5; r < rows; r += warps) {
        const P* row = reinterpret_cast<const P*>(x + r * R_);
        A acc[U];
#pragma unroll
        for (int u = 0; u < U; ++u) acc[u] = R::id();
        long long j = lane;
        for (; j + 32 * (U - 1) < nv; j += 32 * U) {
            P p[U];
#pragma unroll
            for (int u = 0; u < U; ++u) p[u] = row[j + 32 * u];
#pragma unroll
            for (int u = 0; u < U; ++u) {
#pragma unroll
                for (int e = 0; e < V; ++e) acc[u] = R::comb(acc[u], R::lift(p[u].v[e], (j + 32 * u) * V + e));
            }
        }
        for (; j < nv; j += 32) {
            const P p = row[j];
#pragma unroll
            for (int e = 0; e < V; ++e) acc[0] = R::comb(acc[0], R::lift(p.v[e], j * V + e));
        }
        A v = acc[0];
#pragma unroll
        for (int u = 1; u < U; ++u) v = R::comb(v, acc[u]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = R::comb(v, R::shfl(v, o, 32));
        if (lane == 0) out[r] = R::fin(v, R_, ddof);
    }
}

// Axis 0 of a contiguous [R, inner] array with V % inner == 0 (inner < V, e.g. [N, 2] f32),
// read as the flat array: 16-byte vectors, each holding V / inner whole rows, so element k of
// a vector belongs to column k % inner. Per thread one accumulator per vector position, folded
// into the columns at the end; each block writes partial[block * inner + c], combined by
// reduce_cols_finish (splits = gridDim.x, ncols = inner). x must be 16-byte aligned.
template <typename T, int OP>
__global__ void reduce_cols_small(const T* __restrict__ x, long long n, int inner, void* partial) {
    typedef Red<T, OP> R;
    typedef typename R::A A;
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
    const long long tid = global_tid(), nt = grid_threads();
    A acc[V];
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = R::id();
    const long long nv = n / V;
    const P* px = reinterpret_cast<const P*>(x);
    long long i = tid;
    for (; i + 3 * nt < nv; i += 4 * nt) {
        P p[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) p[u] = px[i + u * nt];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
#pragma unroll
            for (int e = 0; e < V; ++e) acc[e] = R::comb(acc[e], R::lift(p[u].v[e], ((i + u * nt) * V + e) / inner));
        }
    }
    for (; i < nv; i += nt) {
        const P p = px[i];
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = R::comb(acc[e], R::lift(p.v[e], (i * V + e) / inner));
    }
    // The scalar tail (fewer than V elements): element j sits at vector position j % V.
    for (long long j = nv * V + tid; j < n; j += nt) {
        const A v = R::lift(x[j], j / inner);
#pragma unroll
        for (int e = 0; e < V; ++e)
            if (e == (int)(j % V)) acc[e] = R::comb(acc[e], v);
    }
    A* part = reinterpret_cast<A*>(partial);
#pragma unroll
    for (int c = 0; c < V; ++c) {
        if (c >= inner) break;
        A v = R::id();
#pragma unroll
        for (int e = 0; e < V; ++e)
            if (e % inner == c) v = R::comb(v, acc[e]);
        v = block_reduce<R>(v);
        if (threadIdx.x == 0) part[(long long)blockIdx.x * inner + c] = v;
    }
}
