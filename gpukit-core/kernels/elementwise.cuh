// The elementwise operations of gpukit-core, shared by the built-in kernels (binary.cu,
// unary.cu) and the kernels generated for fused expressions (array/expr.rs), so that an
// operator computes exactly what the named method computes: `bin<C, OP>` and `una<C, OP>` on
// compute-type values (float for f16 / bf16), and `gk_bin<OP>` / `gk_una<OP>`, the same with
// the type deduced (the generated code's spelling).
#pragma once
#include "common.cuh"

// Operation codes (keep in sync with ops::BinaryOp).
#define B_ADD 0
#define B_SUB 1
#define B_MUL 2
#define B_DIV 3
#define B_MAX 4
#define B_MIN 5
#define B_POW 6
#define B_MOD 7
#define B_AND 8
#define B_OR 9
#define B_XOR 10

template <typename C, int OP> __device__ __forceinline__ C bin(C a, C b) {
    if constexpr (OP == B_ADD) return wrap_add(a, b);
    else if constexpr (OP == B_SUB) return wrap_sub(a, b);
    else if constexpr (OP == B_MUL) return wrap_mul(a, b);
    else if constexpr (OP == B_DIV) {
        // Integer division truncates toward zero; division by zero gives 0 (NumPy gives 0
        // with a warning); the one overflowing quotient (MIN / -1) wraps to MIN. Floats follow
        // IEEE.
        if constexpr (Cv<C>::is_int) {
            if (b == (C)0) return (C)0;
            if constexpr (!Cv<C>::is_unsigned) {
                if (b == (C)-1) return wrap_sub((C)0, a);
            }
            return (C)(a / b);
        } else return a / b;
    } else if constexpr (OP == B_MAX) {
        // NaN propagates, as in numpy.maximum.
        return (is_nan_c(a) || a > b) ? a : b;
    } else if constexpr (OP == B_MIN) {
        return (is_nan_c(a) || a < b) ? a : b;
    } else if constexpr (OP == B_MOD) {
        // numpy.remainder: the result has the sign of the divisor; x % 0 is 0 for integers and
        // NaN for floats.
        if constexpr (Cv<C>::is_int) {
            if (b == (C)0) return (C)0;
            if constexpr (!Cv<C>::is_unsigned) {
                if (b == (C)-1) return (C)0;
            }
            C r = (C)(a % b);
            if constexpr (!Cv<C>::is_unsigned) {
                if (r != (C)0 && ((r < (C)0) != (b < (C)0))) r = wrap_add(r, b);
            }
            return r;
        } else {
            C r;
            if constexpr (sizeof(C) == 4) r = fmodf(a, b);
            else r = fmod(a, b);
            if (r != (C)0 && ((r < (C)0) != (b < (C)0))) r += b;
            else if (r == (C)0) {
                if constexpr (sizeof(C) == 4) r = copysignf(r, b);
                else r = copysign(r, b);
            }
            return r;
        }
    } else if constexpr (OP == B_AND) {
        return (C)(a & b);
    } else if constexpr (OP == B_OR) {
        return (C)(a | b);
    } else if constexpr (OP == B_XOR) {
        return (C)(a ^ b);
    } else {
        if constexpr (Cv<C>::is_int) {
            // Integer power by squaring; a negative exponent gives 0 unless |a| == 1.
            if constexpr (!Cv<C>::is_unsigned) {
                if (b < 0) return a == (C)1 ? (C)1 : (a == (C)-1 ? ((b & 1) ? (C)-1 : (C)1) : (C)0);
            }
            C r = 1, base = a;
            unsigned long long e = (unsigned long long)b;
            while (e) {
                if (e & 1ull) r = wrap_mul(r, base);
                base = wrap_mul(base, base);
                e >>= 1;
            }
            return r;
        } else if constexpr (sizeof(C) == 4) {
            return powf(a, b);
        } else {
            return pow(a, b);
        }
    }
}

// Operation codes (keep in sync with ops::UnaryOp).
#define U_NEG 0
#define U_ABS 1
#define U_EXP 2
#define U_LOG 3
#define U_SQRT 4
#define U_TANH 5
#define U_RELU 6
#define U_SIGMOID 7
#define U_SIN 8
#define U_COS 9
#define U_FLOOR 10
#define U_CEIL 11
#define U_ROUND 12
#define U_TRUNC 13
#define U_NOT 14
#define U_SIGN 15

template <typename C, int OP> __device__ __forceinline__ C una(C a) {
    if constexpr (OP == U_NEG) {
        if constexpr (Cv<C>::is_int) return wrap_sub((C)0, a);
        else return -a;
    } else if constexpr (OP == U_ABS) {
        if constexpr (Cv<C>::is_unsigned) return a;
        else if constexpr (Cv<C>::is_int) return a < (C)0 ? wrap_sub((C)0, a) : a;
        else if constexpr (sizeof(C) == 4) return fabsf(a);
        else return fabs(a);
    } else if constexpr (OP == U_RELU) {
        return a > (C)0 ? a : (is_nan_c(a) ? a : (C)0);
    } else if constexpr (OP == U_SIGN) {
        if (is_nan_c(a)) return a;
        return a > (C)0 ? (C)1 : (a < (C)0 ? (C)-1 : (C)0);
    } else if constexpr (Cv<C>::is_int) {
        // Rounding an integer is the integer itself; bitwise not.
        if constexpr (OP == U_NOT) return (C)(~a);
        else return a;
    } else if constexpr (sizeof(C) == 4) {
        if constexpr (OP == U_EXP) return expf(a);
        else if constexpr (OP == U_LOG) return logf(a);
        else if constexpr (OP == U_SQRT) return sqrtf(a);
        else if constexpr (OP == U_TANH) return tanhf(a);
        else if constexpr (OP == U_SIGMOID) return 1.0f / (1.0f + expf(-a));
        else if constexpr (OP == U_SIN) return sinf(a);
        else if constexpr (OP == U_COS) return cosf(a);
        else if constexpr (OP == U_FLOOR) return floorf(a);
        else if constexpr (OP == U_CEIL) return ceilf(a);
        else if constexpr (OP == U_ROUND) return rintf(a);  // half to even, as numpy.round
        else return truncf(a);
    } else {
        if constexpr (OP == U_EXP) return exp(a);
        else if constexpr (OP == U_LOG) return log(a);
        else if constexpr (OP == U_SQRT) return sqrt(a);
        else if constexpr (OP == U_TANH) return tanh(a);
        else if constexpr (OP == U_SIGMOID) return 1.0 / (1.0 + exp(-a));
        else if constexpr (OP == U_SIN) return sin(a);
        else if constexpr (OP == U_COS) return cos(a);
        else if constexpr (OP == U_FLOOR) return floor(a);
        else if constexpr (OP == U_CEIL) return ceil(a);
        else if constexpr (OP == U_ROUND) return rint(a);
        else return trunc(a);
    }
}

template <int OP, typename C> __device__ __forceinline__ C gk_bin(C a, C b) { return bin<C, OP>(a, b); }
template <int OP, typename C> __device__ __forceinline__ C gk_una(C a) { return una<C, OP>(a); }
