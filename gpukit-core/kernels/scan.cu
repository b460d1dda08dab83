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

// ---------------------------------------------------------------------------------------------
// scan_flat: inner == 1 (the flattened array, or the last axis of [outer, L]); one pass with
// decoupled look-back at memory bandwidth. A block of SF_WARPS warps scans one tile of
// SF_WARPS * SF_ROWS * 32 * E elements (E = 16 / sizeof(T): a 16-byte vector per lane and row;
// 32 KB of input per tile): warp w owns SF_ROWS consecutive rows of 32 * E elements, every row
// read in one coalesced 16-byte load per lane, all rows in flight before any arithmetic. Each
// lane folds its E elements, a warp scan (shuffles) over the lane totals gives each lane's
// prefix within its warp, a scan of the warp totals the warps' prefixes within the tile; then
// warp 0 looks back over the preceding tiles 32 at a time. The tile descriptor packs status
// (0 none, 1 aggregate, 2 inclusive prefix) and value in one 8-byte word (4-byte accumulators) or
// one 16-byte vector access (8-byte accumulators, as CUB does), so a reader sees status and
// value together without fences. Tiles take tickets in launch order, so every tile waited for is
// running or done (no deadlock).
#define SF_WARPS 8
#define SF_ROWS 8

template <typename A> struct ScanDesc;
template <> struct ScanDesc<float> {
    static __device__ __forceinline__ void put(void* d, int st, float v) {
        const unsigned long long w = ((unsigned long long)(unsigned)st << 32) | (unsigned long long)__float_as_uint(v);
        *reinterpret_cast<volatile unsigned long long*>(d) = w;
    }
    static __device__ __forceinline__ int get(const void* d, float& v) {
        const unsigned long long w = *reinterpret_cast<const volatile unsigned long long*>(d);
        v = __uint_as_float((unsigned)(w & 0xffffffffull));
        return (int)(w >> 32);
    }
    static constexpr int bytes = 8;
};
template <typename A> struct ScanDesc8 {
    static __device__ __forceinline__ void put(void* d, int st, A v) {
        unsigned long long bits;
        if constexpr (sizeof(A) == 8 && !Cv<A>::is_int) bits = (unsigned long long)__double_as_longlong(v);
        else bits = (unsigned long long)v;
        asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(d), "l"((unsigned long long)st), "l"(bits) : "memory");
    }
    static __device__ __forceinline__ int get(const void* d, A& v) {
        unsigned long long st, bits;
        asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(st), "=l"(bits) : "l"(d) : "memory");
        if constexpr (sizeof(A) == 8 && !Cv<A>::is_int) v = __longlong_as_double((long long)bits);
        else v = (A)bits;
        return (int)st;
    }
    static constexpr int bytes = 16;
};
template <> struct ScanDesc<double> : ScanDesc8<double> {};
template <> struct ScanDesc<long long> : ScanDesc8<long long> {};
template <> struct ScanDesc<unsigned long long> : ScanDesc8<unsigned long long> {};

template <typename T, int OP>
__global__ void __launch_bounds__(SF_WARPS * 32) scan_flat(const T* __restrict__ x, typename ScanT<T>::O* __restrict__ out, long long L, long long ntiles, int vec, int* ticket, unsigned char* desc) {
    typedef typename ScanT<T>::A A;
    typedef typename ScanT<T>::O O;
    typedef ScanDesc<A> D;
    constexpr int E = 16 / sizeof(T);
    constexpr int EO = 16 / sizeof(O) < E ? 16 / sizeof(O) : E;
    typedef Pack<T, E> P;
    typedef Pack<O, EO> PO;
    constexpr long long TILE = (long long)SF_WARPS * SF_ROWS * 32 * E;
    __shared__ A s_wsum[SF_WARPS];
    __shared__ A s_wpre[SF_WARPS];
    __shared__ A s_tpre;
    __shared__ long long s_ticket;
    if (threadIdx.x == 0) s_ticket = atomicAdd(ticket, 1);
    __syncthreads();
    const long long k = s_ticket;
    const long long seg = k / ntiles, tile = k % ntiles;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const T* xs = x + seg * L;
    O* os = out + seg * L;
    const long long wbase = tile * TILE + (long long)w * SF_ROWS * 32 * E;
    const T tid_val = Cv<T>::down((typename Cv<T>::C)scan_id<A, OP>());
    // Load every row of this lane.
    P raw[SF_ROWS];
#pragma unroll
    for (int j = 0; j < SF_ROWS; ++j) {
        const long long c0 = wbase + ((long long)j * 32 + lane) * E;
        if (vec && c0 + E <= L) {
            raw[j] = *reinterpret_cast<const P*>(xs + c0);
        } else {
#pragma unroll
            for (int e = 0; e < E; ++e) raw[j].v[e] = c0 + e < L ? xs[c0 + e] : tid_val;
        }
    }
    // Lane prefixes within the warp, row by row.
    A lpre[SF_ROWS];
    A wrun = scan_id<A, OP>();
#pragma unroll
    for (int j = 0; j < SF_ROWS; ++j) {
        A s = scan_id<A, OP>();
#pragma unroll
        for (int e = 0; e < E; ++e) s = scan_op<A, OP>(s, (A)Cv<T>::up(raw[j].v[e]));
        A inc = s;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const A o = __shfl_up_sync(0xffffffffu, inc, d);
            if (lane >= d) inc = scan_op<A, OP>(o, inc);
        }
        A exc = __shfl_up_sync(0xffffffffu, inc, 1);
        if (lane == 0) exc = scan_id<A, OP>();
        const A rowtot = __shfl_sync(0xffffffffu, inc, 31);
        lpre[j] = scan_op<A, OP>(wrun, exc);
        wrun = scan_op<A, OP>(wrun, rowtot);
    }
    if (lane == 0) s_wsum[w] = wrun;
    __syncthreads();
    if (w == 0) {
        // Warp prefixes within the tile, the tile aggregate, then the look-back.
        A v = lane < SF_WARPS ? s_wsum[lane] : scan_id<A, OP>();
        A inc = v;
#pragma unroll
        for (int d = 1; d < SF_WARPS; d <<= 1) {
            const A o = __shfl_up_sync(0xffffffffu, inc, d);
            if (lane >= d) inc = scan_op<A, OP>(o, inc);
        }
        A exc = __shfl_up_sync(0xffffffffu, inc, 1);
        if (lane == 0) exc = scan_id<A, OP>();
        if (lane < SF_WARPS) s_wpre[lane] = exc;
        const A agg = __shfl_sync(0xffffffffu, inc, SF_WARPS - 1);
        unsigned char* mine = desc + k * D::bytes;
        A tpre = scan_id<A, OP>();
        if (tile == 0) {
            if (lane == 0) D::put(mine, 2, agg);
        } else {
            if (lane == 0) D::put(mine, 1, agg);
            long long p = tile - 1;
            while (true) {
                const long long q = p - lane;
                // Lanes past the segment's first tile read nothing (a prefix of the identity:
                // tile 0, which is nearer, always holds a prefix).
                int st = 2;
                A val = scan_id<A, OP>();
                const unsigned char* dq = desc + (seg * ntiles + (q >= 0 ? q : 0)) * D::bytes;
                if (q >= 0) st = D::get(dq, val);
                while (__any_sync(0xffffffffu, st == 0)) {
                    if (st == 0) st = D::get(dq, val);
                }
                const unsigned pm = __ballot_sync(0xffffffffu, st == 2);
                const int first = pm ? __ffs(pm) - 1 : 31;
                // Combine lanes 0..first (the nearest tiles) in order: lane l covers tile p - l,
                // so the window's sum is val[first] op ... op val[0].
                A c = lane <= first ? val : scan_id<A, OP>();
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) c = scan_op<A, OP>(c, __shfl_xor_sync(0xffffffffu, c, o));
                tpre = scan_op<A, OP>(c, tpre);
                if (pm) break;
                p -= 32;
            }
            if (lane == 0) D::put(mine, 2, scan_op<A, OP>(tpre, agg));
        }
        if (lane == 0) s_tpre = tpre;
    }
    __syncthreads();
    const A pre = scan_op<A, OP>(s_tpre, s_wpre[w]);
#pragma unroll
    for (int j = 0; j < SF_ROWS; ++j) {
        const long long c0 = wbase + ((long long)j * 32 + lane) * E;
        // (A guard, not a break: with a break ptxas spilled 8 bytes in scan_flat<unsigned int, 1>
        // for sm_80.)
        if (c0 < L) {
            A run = scan_op<A, OP>(pre, lpre[j]);
            O res[E];
#pragma unroll
            for (int e = 0; e < E; ++e) {
                run = scan_op<A, OP>(run, (A)Cv<T>::up(raw[j].v[e]));
                res[e] = Cv<O>::down((typename Cv<O>::C)run);
            }
            if (vec && c0 + E <= L) {
#pragma unroll
                for (int h = 0; h < E / EO; ++h) {
                    PO q;
#pragma unroll
                    for (int e = 0; e < EO; ++e) q.v[e] = res[h * EO + e];
                    *reinterpret_cast<PO*>(os + c0 + h * EO) = q;
                }
            } else {
#pragma unroll
                for (int e = 0; e < E; ++e)
                    if (c0 + e < L) os[c0 + e] = res[e];
            }
        }
    }
}
