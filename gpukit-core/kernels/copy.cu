// Copy, cast, fill and arange kernels of gpukit-core.
#include "common.cuh"

// out (through stride row 0) = convert(in (through stride row 1)); used for contiguous(),
// astype(), copy_from() into views, setitem and transposes. The caller never passes
// overlapping views (copy_from copies an overlapping source to fresh memory first).
template <typename Ti, typename To>
__global__ void copy_strided(To* __restrict__ out, const Ti* __restrict__ in, Layout<2> l, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long off[2];
        layout_offsets<2>(l, i, off);
        out[off[0]] = convert<To, Ti>(in[off[1]]);
    }
}

// Contiguous conversion of n elements, 16 bytes of the wider type per step (ew_loop) when both
// pointers are aligned for it.
template <typename Ti, typename To>
__global__ void cast_contig(To* __restrict__ out, const Ti* __restrict__ in, long long n) {
    constexpr int G = 16 / (sizeof(Ti) > sizeof(To) ? sizeof(Ti) : sizeof(To));
    typedef Pack<Ti, G> PI;
    typedef Pack<To, G> PO;
    long long tail = 0;
    if ((((unsigned long long)in) % sizeof(PI)) == 0 && (((unsigned long long)out) % sizeof(PO)) == 0) {
        const long long ng = n / G;
        const PI* pi = reinterpret_cast<const PI*>(in);
        PO* po = reinterpret_cast<PO*>(out);
        ew_loop(
            ng, [&](long long q) { return pi[q]; },
            [&](long long q, PI x) {
                PO y;
#pragma unroll
                for (int k = 0; k < G; ++k) y.v[k] = convert<To, Ti>(x.v[k]);
                po[q] = y;
            });
        tail = ng * G;
    }
    for (long long i = tail + global_tid(); i < n; i += grid_threads()) out[i] = convert<To, Ti>(in[i]);
}

// out[i] = value for i < n (value as double for floats, i64 for integers).
template <typename T>
__global__ void fill(T* __restrict__ out, double sf, long long si, long long n) {
    const T v = Cv<T>::down(scalar_arg<T>(sf, si));
    constexpr int V = 16 / sizeof(T);
    typedef Pack<T, V> P;
    const long long tid = global_tid(), nt = grid_threads();
    long long tail = 0;
    if (aligned16(out)) {
        P p;
#pragma unroll
        for (int k = 0; k < V; ++k) p.v[k] = v;
        const long long nv = n / V;
        P* po = reinterpret_cast<P*>(out);
        for (long long i = tid; i < nv; i += nt) po[i] = p;
        tail = nv * V;
    }
    for (long long j = tail + tid; j < n; j += nt) out[j] = v;
}

// out (through stride row 0) = value: setitem of a scalar into a view.
template <typename T>
__global__ void fill_strided(T* __restrict__ out, double sf, long long si, Layout<1> l, long long n) {
    const T v = Cv<T>::down(scalar_arg<T>(sf, si));
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        long long off[1];
        layout_offsets<1>(l, i, off);
        out[off[0]] = v;
    }
}

// out[i] = start + i * step (integers exactly in 64 bits, floats in double).
template <typename T>
__global__ void arange(T* __restrict__ out, double start, double step, long long istart, long long istep, long long n) {
    typedef typename Cv<T>::C C;
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        if constexpr (Cv<T>::is_int) out[i] = Cv<T>::down((C)wrap_add(istart, wrap_mul(i, istep)));
        else out[i] = Cv<T>::down((C)(start + (double)i * step));
    }
}
