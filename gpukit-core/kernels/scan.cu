// Inclusive scans (cumsum, cumprod) along the middle axis of a contiguous array viewed as
// [outer, L, inner], in one pass with decoupled look-back (Merrill & Garland, "Single-pass
// parallel prefix scan with decoupled look-back", 2016): the input is read once and the output
// written once.
//
// A block scans one tile: TX = 2^tx_log2 adjacent columns (up to 32) by TY * ITEMS rows of L
// (TY = blockDim / TX; a thread scans ITEMS consecutive rows of one column serially, the TY
// threads of a column then combine in shared memory). Tiles take tickets from a counter in
// launch order, so every tile's predecessors are running or done. A tile publishes its total
// (status 1), then walks back over its predecessors, adding their totals until it meets one
// whose inclusive prefix is published (status 2), publishes its own inclusive prefix (status 2)
// and writes its rows with the prefix added. Totals and prefixes go through volatile (L1-
// bypassing) accesses ordered by __threadfence.
//
// Accumulator and output types follow NumPy's widening: int32 scans to int64, uint8 / uint32 to
// uint64; f16 / bf16 accumulate in float, f64 in double.
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

// The scratch of a launch (laid out by the Rust side, zeroed before the launch): a ticket
// counter, one status word per tile, and per tile and column a total and an inclusive prefix.
template <typename T, int OP>
__global__ void scan_onepass(const T* __restrict__ x, typename ScanT<T>::O* __restrict__ out, long long outer, long long L, long long inner, int tx_log2, long long ntiles, int* ticket, int* status_, typename ScanT<T>::A* total_, typename ScanT<T>::A* prefix_) {
    typedef typename ScanT<T>::A A;
    typedef typename ScanT<T>::O O;
    __shared__ A sh[256];
    __shared__ A s_prefix[32];
    __shared__ long long s_ticket;
    volatile int* status = status_;
    volatile A* total = total_;
    volatile A* prefix = prefix_;
    if (threadIdx.x == 0) s_ticket = atomicAdd(ticket, 1);
    __syncthreads();
    const long long k = s_ticket;
    const int TX = 1 << tx_log2;
    const int TY = blockDim.x >> tx_log2;
    const int tx = threadIdx.x & (TX - 1), ty = threadIdx.x >> tx_log2;
    const long long tile = k % ntiles, seg = k / ntiles;
    const long long ctiles = (inner + TX - 1) / TX;
    const long long o = seg / ctiles;
    const long long col = (seg % ctiles) * TX + tx;
    const long long rows = (long long)TY * SCAN_ITEMS;
    const long long r0 = tile * rows + (long long)ty * SCAN_ITEMS;
    const bool live = col < inner;
    const T* base = x + o * L * inner + (live ? col : 0);
    // Thread-serial inclusive scan of ITEMS rows.
    A vals[SCAN_ITEMS];
    A run = scan_id<A, OP>();
    typedef Pack<T, SCAN_ITEMS> PT;
    const bool vec = inner == 1 && r0 + SCAN_ITEMS <= L && (((unsigned long long)(base + r0)) % sizeof(PT)) == 0;
    if (vec) {
        const PT p = *reinterpret_cast<const PT*>(base + r0);
#pragma unroll
        for (int i = 0; i < SCAN_ITEMS; ++i) {
            run = scan_op<A, OP>(run, (A)Cv<T>::up(p.v[i]));
            vals[i] = run;
        }
    } else {
#pragma unroll
        for (int i = 0; i < SCAN_ITEMS; ++i) {
            const long long r = r0 + i;
            if (live && r < L) run = scan_op<A, OP>(run, (A)Cv<T>::up(base[r * inner]));
            vals[i] = run;
        }
    }
    // Inclusive scan of the thread totals over ty (Hillis-Steele in shared memory).
    sh[threadIdx.x] = run;
    __syncthreads();
    for (int d = 1; d < TY; d <<= 1) {
        A add = ty >= d ? sh[threadIdx.x - d * TX] : scan_id<A, OP>();
        __syncthreads();
        sh[threadIdx.x] = scan_op<A, OP>(add, sh[threadIdx.x]);
        __syncthreads();
    }
    // Publish the tile total, look back, publish the inclusive prefix (warp 0, one lane per
    // column).
    if (ty == 0) {
        const unsigned mask = TX == 32 ? 0xffffffffu : ((1u << TX) - 1u);
        const A agg = sh[(TY - 1) * TX + tx];
        const long long slot = (seg * ntiles + tile) * TX + tx;
        A excl = scan_id<A, OP>();
        if (tile == 0) {
            prefix[slot] = agg;
            __threadfence();
            __syncwarp(mask);
            if (tx == 0) status[seg * ntiles + tile] = 2;
        } else {
            total[slot] = agg;
            __threadfence();
            __syncwarp(mask);
            if (tx == 0) status[seg * ntiles + tile] = 1;
            long long p = tile - 1;
            while (true) {
                int s = 0;
                if (tx == 0) {
                    do {
                        s = status[seg * ntiles + p];
                    } while (s == 0);
                }
                s = __shfl_sync(mask, s, 0);
                __threadfence();
                const long long ps = (seg * ntiles + p) * TX + tx;
                if (s == 2) {
                    excl = scan_op<A, OP>(prefix[ps], excl);
                    break;
                }
                excl = scan_op<A, OP>(total[ps], excl);
                --p;
            }
            prefix[slot] = scan_op<A, OP>(excl, agg);
            __threadfence();
            __syncwarp(mask);
            if (tx == 0) status[seg * ntiles + tile] = 2;
        }
        s_prefix[tx] = excl;
    }
    __syncthreads();
    // This thread's rows: tile prefix, then the thread totals of the lower ty, then its own.
    A pre = s_prefix[tx];
    if (ty > 0) pre = scan_op<A, OP>(pre, sh[threadIdx.x - TX]);
    O* obase = out + o * L * inner + (live ? col : 0);
    typedef Pack<O, SCAN_ITEMS> PO;
    if (vec && (((unsigned long long)(obase + r0)) % sizeof(PO)) == 0) {
        PO q;
#pragma unroll
        for (int i = 0; i < SCAN_ITEMS; ++i) q.v[i] = Cv<O>::down((typename Cv<O>::C)scan_op<A, OP>(pre, vals[i]));
        *reinterpret_cast<PO*>(obase + r0) = q;
    } else if (live) {
#pragma unroll
        for (int i = 0; i < SCAN_ITEMS; ++i) {
            const long long r = r0 + i;
            if (r < L) obase[r * inner] = Cv<O>::down((typename Cv<O>::C)scan_op<A, OP>(pre, vals[i]));
        }
    }
}
