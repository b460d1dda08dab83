"""User kernels on the GPU: gp.jit with positional and keyword arguments checked against the
parsed signature, templates, launch options, and kernels from expressions (as CuPy's)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import gpukit as gp

SCALE = r'''
extern "C" __global__ void scale(float* x, float factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}
'''
SAXPY = r'''
extern "C" __global__ void saxpy(const float* x, float* y, float a, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
'''
FILL = r'''
template <typename T> __global__ void fill(T* x, T v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}
'''


def test_the_pygpukit_example(gpu):
    x = gp.arange(1000, dtype="float32")
    k = gp.jit(SCALE, func="scale")
    assert not k.is_compiled
    k(x, factor=0.5, n=x.size)
    assert k.is_compiled
    np.testing.assert_array_equal(x.to_numpy(), np.arange(1000, dtype=np.float32) * 0.5)
    k(x, 2.0, x.size)  # positional
    np.testing.assert_array_equal(x.to_numpy(), np.arange(1000, dtype=np.float32))
    k(x, n=10, factor=3)  # an int for a float parameter converts
    assert x[:10].to_numpy().tolist() == [3.0 * i for i in range(10)]


def test_arguments_are_checked_before_launch(gpu):
    k = gp.jit(SCALE, func="scale")
    x = gp.ones(8, dtype="float32")
    with pytest.raises(TypeError, match="float"):
        k(gp.ones(8, dtype="float64"), factor=0.5, n=8)  # wrong element type
    with pytest.raises(TypeError):
        k(x, factor=np.float64(0.5), n=8)  # wrong scalar width
    with pytest.raises(TypeError):
        k(x, factor=0.5, n=8.0)  # a float for an int
    with pytest.raises(TypeError):
        k(x, factor=0.5, n=np.int64(8))  # a 64-bit integer for int
    with pytest.raises(OverflowError):
        k(x, factor=0.5, n=2**40)
    with pytest.raises(TypeError, match="missing"):
        k(x, factor=0.5)
    with pytest.raises(TypeError, match="no parameter"):
        k(x, factor=0.5, n=8, m=3)
    with pytest.raises(TypeError, match="twice"):
        k(x, 0.5, 8, n=8)
    with pytest.raises(TypeError):
        k(0.5, x, 8)  # a scalar for the pointer
    # nothing was launched by the failed calls
    assert (x.to_numpy() == 1).all()


def test_const_pointers_and_64_bit_sizes(gpu):
    k = gp.jit(SAXPY, func="saxpy", block_size=128)
    x = gp.arange(300, dtype="float32")
    y = gp.ones(300, dtype="float32")
    k(x, y, 2.0, 300)
    np.testing.assert_array_equal(y.to_numpy(), 2 * np.arange(300, dtype=np.float32) + 1)
    # a const pointer may get the same array as a written one only if the kernel allows it:
    # gpukit refuses overlapping writes
    with pytest.raises(TypeError):
        k(y, y, 2.0, 300)


def test_templates_grids_and_blocks(gpu):
    k = gp.jit(FILL, func="fill<double>")
    z = gp.zeros(1000, dtype="float64")
    k(z, 1.25, 1000, grid=4, block=(256,))
    assert (z.to_numpy() == 1.25).all()
    ki = gp.jit(FILL, func="fill<int>")
    zi = gp.zeros(5, dtype="int32")
    ki(zi, 7, 5)
    assert zi.to_numpy().tolist() == [7] * 5
    with pytest.raises(TypeError):
        ki(zi, 7.5, 5)
    bad = gp.jit('extern "C" __global__ void k(float* x) { x[0] = nope; }', func="k")
    with pytest.raises(gp.CompileError, match="nope"):
        bad(gp.ones(1, dtype="float32"))


def test_kernels_from_several_threads(gpu):
    k = gp.jit(SCALE, func="scale")
    errors = []

    def work(i):
        try:
            x = gp.full(4096, float(i), dtype="float32")
            for _ in range(20):
                k(x, factor=1.0, n=4096)
            assert (x.to_numpy() == i).all()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors, errors


def test_elementwise_and_reduction_kernels(gpu):
    axpy = gp.ElementwiseKernel("T x, T y, T a", "T z", "z = a * x + y;", "axpy")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    y = rng.standard_normal((5,)).astype(np.float32)
    z = axpy(gp.from_numpy(x), gp.from_numpy(y), 2.0)
    assert z.dtype == gp.float32 and z.shape == (4, 5)
    np.testing.assert_allclose(z.to_numpy(), 2.0 * x + y, rtol=1e-6)
    two = gp.ElementwiseKernel("T x", "T s, T d", "s = x + x; d = x * x;", "two")
    s, d = two(gp.from_numpy(x))
    np.testing.assert_allclose(s.to_numpy(), 2 * x, rtol=1e-6)
    np.testing.assert_allclose(d.to_numpy(), x * x, rtol=1e-6)
    l2 = gp.ReductionKernel("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "float", "l2")
    r = l2(gp.from_numpy(x), axis=1)
    np.testing.assert_allclose(r.to_numpy(), np.sqrt((x * x).sum(axis=1)), rtol=1e-5)
    with pytest.raises(ValueError):
        gp.ElementwiseKernel("T x", "T x", "x = x;", "bad")
