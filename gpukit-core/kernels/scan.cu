// Inclusive scans (cumsum, cumprod) along the middle axis of a contiguous array viewed as
// [outer, L, inner], in three phases over tiles of the scanned axis:
//
//   scan_tiles  every tile (TX columns x TY * ITEMS rows; one block each, the tile index fastest
//               in blockIdx.x) writes its per-column total to totals[outer][tile][inner];
//   (the totals are scanned the same way, recursively, by the Rust side)
//   scan_apply  every tile scans its rows and adds the scanned total of the tiles before it.
//
// A thread scans ITEMS consecutive rows of one column serially; the TY threads of a column
// then combine in shared memory. Accumulator and output types follow NumPy's widening: int32
// scans to int64, uint8 / uint32 to uint64; f16 / bf16 accumulate in float (the totals are
// kept in float and scanned as float), f64 in double.
#include "common.cuh"

#define S_SUM 0
#define S_PROD 1
#define SCAN_ITEMS 8

template <typename T> struct ScanT { typedef float A; typedef T O; };
template <> struct ScanT<double> { typedef double A; typedef double O; };
template <> struct ScanT<int> { typedef long long A; typedef long long O; };
template <> struct ScanT<long long> { typedef long long A; typedef long long O; };
template <> struct ScanT<unsigned char> { typedef unsigned long long A; typedef unsigned long long O; };
template <> struct ScanT<unsigned int> { typedef unsigned long long A; typedef unsigned long long O; };
template <> struct ScanT<unsigned long long> { typedef unsigned long long A; typedef unsigned long long O; };

template <typename A, int OP> __device__ __forceinline__ A scan_id() { return OP == S_PROD ? (A)1 : (A)0; }
template <typename A, int OP> __device__ __forceinline__ A scan_op(A a, A b) {
    if constexpr (OP == S_PROD) return wrap_mul(a, b);
    else return wrap_add(a, b);
}

// The block's thread layout for a tile: TX = 2^tx_log2 columns, TY = blockDim / TX row groups.
struct TileIdx {
    int tx, ty, TX, TY;
    long long o, col, tile;
};

// blockIdx.x = (o * ctiles + column tile) * ntiles + tile.
__device__ __forceinline__ TileIdx tile_idx(long long inner, int tx_log2, long long ntiles) {
    TileIdx t;
    t.TX = 1 << tx_log2;
    t.TY = blockDim.x >> tx_log2;
    t.tx = threadIdx.x & (t.TX - 1);
    t.ty = threadIdx.x >> tx_log2;
    const long long ctiles = (inner + t.TX - 1) / t.TX;
    const long long b = blockIdx.x;
    t.tile = b % ntiles;
    const long long rest = b / ntiles;
    t.o = rest / ctiles;
    t.col = (rest % ctiles) * t.TX + t.tx;
    return t;
}

// totals[o][tile][col] = OP over the tile's rows of column col.
template <typename T, int OP>
__global__ void scan_tiles(const T* __restrict__ x, long long outer, long long L, long long inner, int tx_log2, long long ntiles, typename ScanT<T>::A* __restrict__ totals) {
    typedef typename ScanT<T>::A A;
    __shared__ A sh[256];
    const TileIdx t = tile_idx(inner, tx_log2, ntiles);
    const long long rows = (long long)t.TY * SCAN_ITEMS;
    const long long r0 = t.tile * rows + (long long)t.ty * SCAN_ITEMS;
    A v = scan_id<A, OP>();
    if (t.col < inner) {
        const T* base = x + t.o * L * inner + t.col;
#pragma unroll
        for (int k = 0; k < SCAN_ITEMS; ++k) {
            const long long r = r0 + k;
            if (r < L) v = scan_op<A, OP>(v, (A)Cv<T>::up(base[r * inner]));
        }
    }
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int stride = t.TY >> 1; stride > 0; stride >>= 1) {
        if (t.ty < stride) sh[threadIdx.x] = scan_op<A, OP>(sh[threadIdx.x], sh[threadIdx.x + stride * t.TX]);
        __syncthreads();
    }
    if (t.ty == 0 && t.col < inner) totals[(t.o * ntiles + t.tile) * inner + t.col] = sh[t.tx];
}

// out = inclusive scan of x along L; `scanned` (may be null when there is one tile) holds the
// inclusive scan of the tile totals, laid out like `totals`.
template <typename T, int OP>
__global__ void scan_apply(const T* __restrict__ x, typename ScanT<T>::O* __restrict__ out, long long outer, long long L, long long inner, int tx_log2, long long ntiles, const typename ScanT<T>::A* __restrict__ scanned) {
    typedef typename ScanT<T>::A A;
    typedef typename ScanT<T>::O O;
    __shared__ A sh[256];
    const TileIdx t = tile_idx(inner, tx_log2, ntiles);
    const long long rows = (long long)t.TY * SCAN_ITEMS;
    const long long r0 = t.tile * rows + (long long)t.ty * SCAN_ITEMS;
    A vals[SCAN_ITEMS];
    A run = scan_id<A, OP>();
    const T* base = x + t.o * L * inner + t.col;
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        const long long r = r0 + k;
        if (t.col < inner && r < L) run = scan_op<A, OP>(run, (A)Cv<T>::up(base[r * inner]));
        vals[k] = run;
    }
    // Exclusive scan of the per-thread totals over ty (Hillis-Steele in shared memory).
    sh[threadIdx.x] = run;
    __syncthreads();
    for (int d = 1; d < t.TY; d <<= 1) {
        A add = t.ty >= d ? sh[threadIdx.x - d * t.TX] : scan_id<A, OP>();
        __syncthreads();
        sh[threadIdx.x] = scan_op<A, OP>(add, sh[threadIdx.x]);
        __syncthreads();
    }
    A prefix = t.ty > 0 ? sh[threadIdx.x - t.TX] : scan_id<A, OP>();
    if (scanned != nullptr && t.tile > 0 && t.col < inner) {
        prefix = scan_op<A, OP>(scanned[(t.o * ntiles + t.tile - 1) * inner + t.col], prefix);
    }
    if (t.col < inner) {
        O* obase = out + t.o * L * inner + t.col;
#pragma unroll
        for (int k = 0; k < SCAN_ITEMS; ++k) {
            const long long r = r0 + k;
            if (r < L) obase[r * inner] = Cv<O>::down((typename Cv<O>::C)scan_op<A, OP>(prefix, vals[k]));
        }
    }
}
