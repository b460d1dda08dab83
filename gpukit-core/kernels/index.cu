// Integer and boolean indexing of gpukit-core: gather (take) and scatter (put) along one axis of
// a contiguous array viewed as [outer, A, inner], and the flat positions of a mask's nonzero
// elements. Indices are i64 and may be negative (counted from the end, as in NumPy); an index
// out of [-A, A) is never dereferenced: the element is skipped and `bad` is set to 1 so the
// caller can report it.
#include "common.cuh"

__device__ __forceinline__ bool wrap_index(long long& k, long long A) {
    if (k < 0) k += A;
    return k >= 0 && k < A;
}

// out[o, j, i] = in[o, idx[j], i] for j < J (out contiguous [outer, J, inner]).
template <typename T>
__global__ void take_axis(T* __restrict__ out, const T* __restrict__ in, const long long* __restrict__ idx, long long outer, long long A, long long inner, long long J, int* __restrict__ bad) {
    const long long n = outer * J * inner;
    for (long long e = global_tid(); e < n; e += grid_threads()) {
        const long long i = e % inner, rest = e / inner;
        const long long j = rest % J, o = rest / J;
        long long k = idx[j];
        if (wrap_index(k, A)) out[e] = in[(o * A + k) * inner + i];
        else { out[e] = Cv<T>::down((typename Cv<T>::C)0); *bad = 1; }
    }
}

// arr[o, idx[j], i] = vals[o, j, i] (vals contiguous [outer, J, inner]); with repeated indices
// one of the writes wins (which one is unspecified, as on every GPU array library).
template <typename T>
__global__ void put_axis(T* __restrict__ arr, const T* __restrict__ vals, const long long* __restrict__ idx, long long outer, long long A, long long inner, long long J, int* __restrict__ bad) {
    const long long n = outer * J * inner;
    for (long long e = global_tid(); e < n; e += grid_threads()) {
        const long long i = e % inner, rest = e / inner;
        const long long j = rest % J, o = rest / J;
        long long k = idx[j];
        if (wrap_index(k, A)) arr[(o * A + k) * inner + i] = vals[e];
        else *bad = 1;
    }
}

// For a mask of n elements and its inclusive cumsum `incl`: out[incl[i] - 1] = i where mask[i].
template <typename T>
__global__ void nonzero_flat(long long* __restrict__ out, const T* __restrict__ mask, const unsigned long long* __restrict__ incl, long long n) {
    for (long long i = global_tid(); i < n; i += grid_threads()) {
        if (truthy<T>(mask[i])) out[incl[i] - 1] = i;
    }
}
