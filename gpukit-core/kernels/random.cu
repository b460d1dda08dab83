// Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", SC'11; the generator of cuRAND's and PyTorch's Philox), so element e of a
// call depends only on (seed, offset, e): reproducible for any grid, stream or device.
//
// One Philox block (counter = (offset + b) as two 32-bit words, 0, 0; key = seed) gives four
// 32-bit words: four f32 / f16 / bf16 values or two f64 values per block. The Rust generator
// advances `offset` by the blocks a call used, so consecutive calls never reuse a counter.
//
// Uniform f32 in [0, 1): (w >> 8) * 2^-24, scaled as fma(high - low, u, low). f64: 53 bits from
// two words. Normal: Box-Muller with u1 in (0, 1] (no log(0)) and sincospi(2 u2).
#include "common.cuh"

struct Philox4 { unsigned int w[4]; };

__device__ __forceinline__ Philox4 philox4x32_10(unsigned long long counter, unsigned long long seed) {
    unsigned int c0 = (unsigned int)counter, c1 = (unsigned int)(counter >> 32), c2 = 0, c3 = 0;
    unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        const unsigned int lo0 = 0xD2511F53u * c0, hi0 = __umulhi(0xD2511F53u, c0);
        const unsigned int lo1 = 0xCD9E8D57u * c2, hi1 = __umulhi(0xCD9E8D57u, c2);
        const unsigned int n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    }
    Philox4 p;
    p.w[0] = c0; p.w[1] = c1; p.w[2] = c2; p.w[3] = c3;
    return p;
}

__device__ __forceinline__ float u01f(unsigned int w) { return (float)(w >> 8) * 5.9604644775390625e-8f; }
__device__ __forceinline__ float u01f_open(unsigned int w) { return (float)((w >> 8) + 1u) * 5.9604644775390625e-8f; }
__device__ __forceinline__ double u01d(unsigned int a, unsigned int b) {
    return (double)((((unsigned long long)a) << 21) ^ (b >> 11)) * 1.1102230246251565e-16;
}
__device__ __forceinline__ double u01d_open(unsigned int a, unsigned int b) {
    return (double)(((((unsigned long long)a) << 21) ^ (b >> 11)) + 1ull) * 1.1102230246251565e-16;
}

// Values per Philox block for an element type.
template <typename T> struct PerBlock { static constexpr int N = sizeof(T) == 8 ? 2 : 4; };

// Stores the N values of one block at out[e0..]: one vector store when they all exist and the
// address is aligned for it, else element by element.
template <typename T, int N>
__device__ __forceinline__ void store_block(T* out, long long e0, long long n, const T (&v)[N]) {
    typedef Pack<T, N> P;
    T* dst = out + e0;
    if (e0 + N <= n && (((unsigned long long)dst) % sizeof(P)) == 0) {
        P p;
#pragma unroll
        for (int k = 0; k < N; ++k) p.v[k] = v[k];
        *reinterpret_cast<P*>(dst) = p;
    } else {
#pragma unroll
        for (int k = 0; k < N; ++k)
            if (e0 + k < n) dst[k] = v[k];
    }
}

// out[e] ~ U[low, high) for e < n.
template <typename T>
__global__ void uniform(T* __restrict__ out, long long n, unsigned long long seed, unsigned long long offset, double low, double high) {
    constexpr int N = PerBlock<T>::N;
    const long long blocks = (n + N - 1) / N;
    for (long long b = global_tid(); b < blocks; b += grid_threads()) {
        const Philox4 p = philox4x32_10(offset + (unsigned long long)b, seed);
        const long long e0 = b * N;
        T v[N];
        if constexpr (N == 4) {
            const float lo = (float)low, span = (float)(high - low);
#pragma unroll
            for (int k = 0; k < 4; ++k) v[k] = Cv<T>::down(fmaf(span, u01f(p.w[k]), lo));
        } else {
            const double span = high - low;
#pragma unroll
            for (int k = 0; k < 2; ++k) v[k] = Cv<T>::down(fma(span, u01d(p.w[2 * k], p.w[2 * k + 1]), low));
        }
        store_block<T, N>(out, e0, n, v);
    }
}

// out[e] ~ N(mean, std^2) for e < n.
template <typename T>
__global__ void normal(T* __restrict__ out, long long n, unsigned long long seed, unsigned long long offset, double mean, double stdev) {
    constexpr int N = PerBlock<T>::N;
    const long long blocks = (n + N - 1) / N;
    for (long long b = global_tid(); b < blocks; b += grid_threads()) {
        const Philox4 p = philox4x32_10(offset + (unsigned long long)b, seed);
        const long long e0 = b * N;
        T v[N];
        if constexpr (N == 4) {
            const float m = (float)mean, sd = (float)stdev;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float r = sqrtf(-2.0f * logf(u01f_open(p.w[2 * h])));
                float s, c;
                sincospif(2.0f * u01f(p.w[2 * h + 1]), &s, &c);
                v[2 * h] = Cv<T>::down(fmaf(sd, r * c, m));
                v[2 * h + 1] = Cv<T>::down(fmaf(sd, r * s, m));
            }
        } else {
            const double r = sqrt(-2.0 * log(u01d_open(p.w[0], p.w[1])));
            double s, c;
            sincospi(2.0 * u01d(p.w[2], p.w[3]), &s, &c);
            v[0] = Cv<T>::down(fma(stdev, r * c, mean));
            v[1] = Cv<T>::down(fma(stdev, r * s, mean));
        }
        store_block<T, N>(out, e0, n, v);
    }
}
