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
#include "elementwise.cuh"  // bin<C, OP> and the operation codes

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
