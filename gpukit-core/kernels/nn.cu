// Row kernels of gpukit-core: softmax / log-softmax and layer normalisation over the last axis
// of a contiguous [rows, R] array.
//
// `*_rows<T, VPT>`: one block per row (grid-stride over rows) holds the whole row in registers,
// VPT vectors of V = 16 / sizeof(T) elements per thread (16-byte loads when the row is aligned),
// so the row is read once and written once. The Rust side picks VPT and the block size so that
// blockDim * VPT * V >= R (rows up to 32768 f32 elements); longer rows use `*_rows_large<T>`,
// which reads the row twice. Arithmetic in float (double for f64).
#include "common.cuh"

template <typename T> struct NnAcc { typedef float A; };
template <> struct NnAcc<double> { typedef double A; };

template <typename A> __device__ __forceinline__ A neg_inf() {
    if constexpr (sizeof(A) == 4) return __int_as_float(0xff800000);
    else return __longlong_as_double(0xfff0000000000000ll);
}
template <typename A> __device__ __forceinline__ A exp_a(A x) {
    if constexpr (sizeof(A) == 4) return expf(x);
    else return exp(x);
}
template <typename A> __device__ __forceinline__ A log_a(A x) {
    if constexpr (sizeof(A) == 4) return logf(x);
    else return log(x);
}
template <typename A> __device__ __forceinline__ A rsqrt_a(A x) {
    if constexpr (sizeof(A) == 4) return rsqrtf(x);
    else return rsqrt(x);
}

// Sum (MAX false) or maximum (MAX true) over the block, returned to every thread. Ends with a
// barrier, so it can be called again at once.
template <typename A, bool MAX> __device__ __forceinline__ A block_all(A v) {
    __shared__ A sh[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const A w = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? (w > v ? w : v) : v + w;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (MAX ? neg_inf<A>() : (A)0);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const A w = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? (w > v ? w : v) : v + w;
    }
    __syncthreads();
    return v;
}

// Loads this thread's part of a row into registers (`fill` where the row has ended).
template <typename T, int VPT>
__device__ __forceinline__ void load_row(const T* row, long long R, bool vec, typename NnAcc<T>::A fill, typename NnAcc<T>::A (&v)[VPT * (16 / sizeof(T))]) {
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const long long base = ((long long)k * blockDim.x + threadIdx.x) * V;
        if (vec && base + V <= R) {
            const P p = *reinterpret_cast<const P*>(row + base);
#pragma unroll
            for (int j = 0; j < V; ++j) v[k * V + j] = Cv<T>::up(p.v[j]);
        } else {
#pragma unroll
            for (int j = 0; j < V; ++j) v[k * V + j] = base + j < R ? (typename NnAcc<T>::A)Cv<T>::up(row[base + j]) : fill;
        }
    }
}

template <typename T, int VPT>
__device__ __forceinline__ void store_row(T* row, long long R, bool vec, const typename NnAcc<T>::A (&v)[VPT * (16 / sizeof(T))]) {
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const long long base = ((long long)k * blockDim.x + threadIdx.x) * V;
        if (vec && base + V <= R) {
            P p;
#pragma unroll
            for (int j = 0; j < V; ++j) p.v[j] = Cv<T>::down((typename Cv<T>::C)v[k * V + j]);
            *reinterpret_cast<P*>(row + base) = p;
        } else {
#pragma unroll
            for (int j = 0; j < V; ++j)
                if (base + j < R) row[base + j] = Cv<T>::down((typename Cv<T>::C)v[k * V + j]);
        }
    }
}

// Block sizes (keep in sync with row_config in src/array/nn.rs): the register-row kernels run
// with up to NnMaxThreads<T> threads, held to it by __launch_bounds__ (without a bound
// layernorm_rows<float, 8> needed more registers than a 1024-thread block may have and failed to
// launch on the H200; with a bound of 1024, i.e. 64 registers, it spills). 32-bit and 64-bit
// rows get 512 threads (128 registers) and 16-bit rows, which keep 64 float values per thread
// at 8 vectors, 256 (255 registers): the NVRTC test holds every one of them to zero spills for
// sm_80 and sm_90a. Longer rows take the *_large kernels (a few values per thread, 1024 threads).
template <typename T> struct NnMaxThreads { static constexpr int value = 512; };
template <> struct NnMaxThreads<__half> { static constexpr int value = 256; };
template <> struct NnMaxThreads<__nv_bfloat16> { static constexpr int value = 256; };

// out = softmax(x) (or log_softmax) along each row.
template <typename T, int VPT>
__global__ void __launch_bounds__(NnMaxThreads<T>::value) softmax_rows(T* __restrict__ out, const T* __restrict__ x, long long rows, long long R, int log_softmax) {
    typedef typename NnAcc<T>::A A;
    constexpr int E = VPT * (16 / sizeof(T));
    const bool vec = (R * (long long)sizeof(T)) % 16 == 0 && aligned16(x) && aligned16(out);
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        A v[E];
        load_row<T, VPT>(x + r * R, R, vec, neg_inf<A>(), v);
        A m = neg_inf<A>();
#pragma unroll
        for (int k = 0; k < E; ++k) m = v[k] > m ? v[k] : m;
        m = block_all<A, true>(m);
        A s = 0;
#pragma unroll
        for (int k = 0; k < E; ++k) {
            const A d = v[k] - m;
            const A e = exp_a(d);
            s += e;
            v[k] = log_softmax ? d : e;
        }
        s = block_all<A, false>(s);
        if (log_softmax) {
            const A ls = log_a(s);
#pragma unroll
            for (int k = 0; k < E; ++k) v[k] -= ls;
        } else {
            const A inv = (A)1 / s;
#pragma unroll
            for (int k = 0; k < E; ++k) v[k] *= inv;
        }
        store_row<T, VPT>(out + r * R, R, vec, v);
    }
}

// Rows too long for registers: an online (max, sum) pass, then the output pass.
template <typename T>
__global__ void __launch_bounds__(1024) softmax_rows_large(T* __restrict__ out, const T* __restrict__ x, long long rows, long long R, int log_softmax) {
    typedef typename NnAcc<T>::A A;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* xr = x + r * R;
        A m = neg_inf<A>(), s = 0;
        for (long long j = threadIdx.x; j < R; j += blockDim.x) {
            const A v = Cv<T>::up(xr[j]);
            if (v != v) s = v;  // NaN poisons the row
            else if (v > m) { s = s * exp_a(m - v) + (A)1; m = v; }
            else if (v != neg_inf<A>()) s += exp_a(v - m);
        }
        const A bm = block_all<A, true>(m);
        s = m == neg_inf<A>() ? (A)0 : s * exp_a(m - bm);
        s = block_all<A, false>(s);
        const A ls = log_a(s), inv = (A)1 / s;
        T* orow = out + r * R;
        for (long long j = threadIdx.x; j < R; j += blockDim.x) {
            const A d = (A)Cv<T>::up(xr[j]) - bm;
            orow[j] = Cv<T>::down((typename Cv<T>::C)(log_softmax ? d - ls : exp_a(d) * inv));
        }
    }
}

// Launch bound of layernorm_rows: up to 4 vectors per thread (rows up to 4096 f32 in 256
// threads) at least two blocks of NnMaxThreads per multiprocessor, i.e. at most 64 registers for
// 32- and 64-bit types, as under the former bound of 1024 (with one, layernorm_rows<float, 4>
// took 94 registers: fewer resident rows, 0.21 ms against 0.16 for 4096-float rows on the H200).
template <typename T, int VPT> struct NnLnMinBlocks {
    static constexpr int value = (VPT <= 4 && sizeof(T) >= 4) ? 2 : 1;
};

// out = (x - mean) / sqrt(var + eps) * gamma + beta along each row (population variance, as
// torch.nn.functional.layer_norm); gamma / beta may be null (1 / 0).
template <typename T, int VPT>
__global__ void __launch_bounds__(NnMaxThreads<T>::value, NnLnMinBlocks<T, VPT>::value) layernorm_rows(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta, long long rows, long long R, double eps) {
    typedef typename NnAcc<T>::A A;
    constexpr int V = 16 / sizeof(T);
    constexpr int E = VPT * V;
    const bool vec = (R * (long long)sizeof(T)) % 16 == 0 && aligned16(x) && aligned16(out) &&
                     (gamma == nullptr || aligned16(gamma)) && (beta == nullptr || aligned16(beta));
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        A v[E];
        load_row<T, VPT>(x + r * R, R, vec, (A)0, v);
        A s = 0;
#pragma unroll
        for (int k = 0; k < E; ++k) s += v[k];
        const A mean = block_all<A, false>(s) / (A)R;
        A q = 0;
#pragma unroll
        for (int k = 0; k < E; ++k) {
            const long long idx = ((long long)(k / V) * blockDim.x + threadIdx.x) * V + (k % V);
            const A d = idx < R ? v[k] - mean : (A)0;
            q += d * d;
        }
        const A rstd = rsqrt_a(block_all<A, false>(q) / (A)R + (A)eps);
#pragma unroll
        for (int k = 0; k < E; ++k) {
            const long long idx = ((long long)(k / V) * blockDim.x + threadIdx.x) * V + (k % V);
            A y = (v[k] - mean) * rstd;
            if (idx < R) {
                if (gamma != nullptr) y *= (A)Cv<T>::up(gamma[idx]);
                if (beta != nullptr) y += (A)Cv<T>::up(beta[idx]);
            }
            v[k] = y;
        }
        store_row<T, VPT>(out + r * R, R, vec, v);
    }
}

// Rows too long for registers: a Welford pass, then the output pass.
template <typename T>
__global__ void __launch_bounds__(1024) layernorm_rows_large(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta, long long rows, long long R, double eps) {
    typedef typename NnAcc<T>::A A;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* xr = x + r * R;
        A s = 0;
        for (long long j = threadIdx.x; j < R; j += blockDim.x) s += Cv<T>::up(xr[j]);
        const A mean = block_all<A, false>(s) / (A)R;
        A q = 0;
        for (long long j = threadIdx.x; j < R; j += blockDim.x) {
            const A d = (A)Cv<T>::up(xr[j]) - mean;
            q += d * d;
        }
        const A rstd = rsqrt_a(block_all<A, false>(q) / (A)R + (A)eps);
        T* orow = out + r * R;
        for (long long j = threadIdx.x; j < R; j += blockDim.x) {
            A y = ((A)Cv<T>::up(xr[j]) - mean) * rstd;
            if (gamma != nullptr) y *= (A)Cv<T>::up(gamma[j]);
            if (beta != nullptr) y += (A)Cv<T>::up(beta[j]);
            orow[j] = Cv<T>::down((typename Cv<T>::C)y);
        }
    }
}

// Rows longer than the register rows and at most NN_SMEM_MAX_BYTES (src/array/nn.rs; 32768 f32,
// 16384 f64, 65536 f16): the row is staged in dynamic shared memory (R elements of T) as it is
// read once from global memory in 16-byte vectors (four in flight per thread), the statistics
// come from shared memory, and the output is written once, so global memory sees one read and
// one write, as with the register rows. One block per row (grid-stride over rows).
extern __shared__ __align__(16) unsigned char nn_smem[];

// Copies row `xr` (R elements) into shared memory; returns this thread's maximum (MAX) or sum
// of the values it copied (in the compute type).
template <typename T, bool MAX>
__device__ __forceinline__ typename NnAcc<T>::A stage_row(const T* xr, T* rs, int R, bool vec) {
    typedef typename NnAcc<T>::A A;
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
    A acc = MAX ? neg_inf<A>() : (A)0;
    if (vec) {
        const int nv = R / V;
        const P* px = reinterpret_cast<const P*>(xr);
        P* ps = reinterpret_cast<P*>(rs);
        const int bd = blockDim.x;
        int i = threadIdx.x;
        for (; i + 3 * bd < nv; i += 4 * bd) {
            P p[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) p[u] = px[i + u * bd];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                ps[i + u * bd] = p[u];
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    const A v = Cv<T>::up(p[u].v[j]);
                    acc = MAX ? (v > acc ? v : acc) : acc + v;
                }
            }
        }
        for (; i < nv; i += bd) {
            const P p = px[i];
            ps[i] = p;
#pragma unroll
            for (int j = 0; j < V; ++j) {
                const A v = Cv<T>::up(p.v[j]);
                acc = MAX ? (v > acc ? v : acc) : acc + v;
            }
        }
    } else {
        for (int i = threadIdx.x; i < R; i += blockDim.x) {
            const T t = xr[i];
            rs[i] = t;
            const A v = Cv<T>::up(t);
            acc = MAX ? (v > acc ? v : acc) : acc + v;
        }
    }
    return acc;
}

// Writes g(value, index) for every element of the staged row to `orow`.
template <typename T, typename G>
__device__ __forceinline__ void emit_row(const T* rs, T* orow, int R, bool vec, G g) {
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
    if (vec) {
        const int nv = R / V;
        const P* ps = reinterpret_cast<const P*>(rs);
        P* po = reinterpret_cast<P*>(orow);
        for (int i = threadIdx.x; i < nv; i += blockDim.x) {
            P p = ps[i];
#pragma unroll
            for (int j = 0; j < V; ++j) p.v[j] = Cv<T>::down((typename Cv<T>::C)g(Cv<T>::up(p.v[j]), i * V + j));
            po[i] = p;
        }
    } else {
        for (int i = threadIdx.x; i < R; i += blockDim.x) orow[i] = Cv<T>::down((typename Cv<T>::C)g(Cv<T>::up(rs[i]), i));
    }
}

// Softmax / log-softmax of rows staged in shared memory (same arithmetic as softmax_rows).
template <typename T>
__global__ void __launch_bounds__(1024, 1) softmax_rows_smem(T* __restrict__ out, const T* __restrict__ x, long long rows, long long R_, int log_softmax) {
    typedef typename NnAcc<T>::A A;
    T* rs = reinterpret_cast<T*>(nn_smem);
    const int R = (int)R_;
    const bool vec = (R_ * (long long)sizeof(T)) % 16 == 0 && aligned16(x) && aligned16(out);
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const A m = block_all<A, true>(stage_row<T, true>(x + r * R_, rs, R, vec));  // its barrier also publishes the staged row
        A s = 0;
        for (int i = threadIdx.x; i < R; i += blockDim.x) s += exp_a((A)Cv<T>::up(rs[i]) - m);
        s = block_all<A, false>(s);
        const A ls = log_a(s), inv = (A)1 / s;
        emit_row<T>(rs, out + r * R_, R, vec, [=](A v, int) {
            const A d = v - m;
            return log_softmax ? d - ls : exp_a(d) * inv;
        });
        __syncthreads();  // the next row overwrites the staged one
    }
}

// Layer norm of rows staged in shared memory (same arithmetic as layernorm_rows); gamma and
// beta are read with the output, in vectors when aligned.
template <typename T>
__global__ void __launch_bounds__(1024, 1) layernorm_rows_smem(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta, long long rows, long long R_, double eps) {
    typedef typename NnAcc<T>::A A;
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
    T* rs = reinterpret_cast<T*>(nn_smem);
    const int R = (int)R_;
    const bool vec = (R_ * (long long)sizeof(T)) % 16 == 0 && aligned16(x) && aligned16(out) &&
                     (gamma == nullptr || aligned16(gamma)) && (beta == nullptr || aligned16(beta));
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const A mean = block_all<A, false>(stage_row<T, false>(x + r * R_, rs, R, vec)) / (A)R;
        A q = 0;
        for (int i = threadIdx.x; i < R; i += blockDim.x) {
            const A d = (A)Cv<T>::up(rs[i]) - mean;
            q += d * d;
        }
        const A rstd = rsqrt_a(block_all<A, false>(q) / (A)R + (A)eps);
        T* orow = out + r * R_;
        if (vec) {
            const int nv = R / V;
            const P* ps = reinterpret_cast<const P*>(rs);
            P* po = reinterpret_cast<P*>(orow);
            for (int i = threadIdx.x; i < nv; i += blockDim.x) {
                P p = ps[i], g, b;
                if (gamma != nullptr) g = reinterpret_cast<const P*>(gamma)[i];
                if (beta != nullptr) b = reinterpret_cast<const P*>(beta)[i];
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    A y = ((A)Cv<T>::up(p.v[j]) - mean) * rstd;
                    if (gamma != nullptr) y *= (A)Cv<T>::up(g.v[j]);
                    if (beta != nullptr) y += (A)Cv<T>::up(b.v[j]);
                    p.v[j] = Cv<T>::down((typename Cv<T>::C)y);
                }
                po[i] = p;
            }
        } else {
            for (int i = threadIdx.x; i < R; i += blockDim.x) {
                A y = ((A)Cv<T>::up(rs[i]) - mean) * rstd;
                if (gamma != nullptr) y *= (A)Cv<T>::up(gamma[i]);
                if (beta != nullptr) y += (A)Cv<T>::up(beta[i]);
                orow[i] = Cv<T>::down((typename Cv<T>::C)y);
            }
        }
        __syncthreads();  // the next row overwrites the staged one
    }
}
