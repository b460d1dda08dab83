"""Element type objects and the behaviour without a GPU (no driver needed)."""

from __future__ import annotations

import numpy as np
import pytest

import gpukit as gp

NAMES = ["bool", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"]


@pytest.mark.parametrize("name", NAMES)
def test_dtype_objects_equal_their_names_and_numpy(name):
    d = getattr(gp, name)
    assert isinstance(d, gp.DType)
    assert d == name and name == d
    assert d == np.dtype(name) and d == np.dtype(name).type
    assert np.dtype(d) == np.dtype(name)
    assert d.itemsize == np.dtype(name).itemsize
    assert d.kind == np.dtype(name).kind
    assert d.name == name and str(d) == name
    assert hash(d) == hash(gp.DType(name))
    assert gp.DType(np.dtype(name)) == d
    assert {d: 1}[gp.DType(name)] == 1


def test_dtype_inequality_and_parsing():
    assert gp.float32 != gp.float64
    assert gp.float32 != "float64"
    assert gp.float32 != 3
    assert gp.DType("f4") == gp.float32
    assert gp.DType("<i8") == gp.int64
    assert gp.DType(float) == gp.float64
    assert gp.DType(int) == gp.int64
    assert gp.bfloat16.itemsize == 2 and gp.bfloat16.kind == "f"
    assert repr(gp.float32) == "gpukit.float32"


@pytest.mark.parametrize("bad", ["complex64", "int8", "float128", "object", "nonsense"])
def test_unsupported_types_are_type_errors(bad):
    with pytest.raises(TypeError, match="not supported|not a data type"):
        gp.DType(bad)


def test_without_a_driver_gpu_calls_raise_cuda_unavailable():
    if gp.is_available():
        pytest.skip("a GPU is present: this test is about machines without one")
    for call in (
        lambda: gp.zeros((2, 3), dtype="float32"),
        lambda: gp.from_numpy(np.ones(3)),
        lambda: gp.arange(5),
        lambda: gp.Scheduler(),
    ):
        with pytest.raises(gp.CudaUnavailable, match="driver") as e:
            call()
        assert isinstance(e.value, RuntimeError)
    assert gp.device_count() == 0


def test_exception_hierarchy():
    assert issubclass(gp.CudaUnavailable, RuntimeError)
    assert issubclass(gp.OutOfMemoryError, MemoryError)
    assert issubclass(gp.AxisError, ValueError) and issubclass(gp.AxisError, IndexError)
    assert issubclass(gp.TaskTimedOut, TimeoutError)
    assert issubclass(gp.TaskCancelled, gp.SchedulerError)


def test_kernel_objects_without_a_gpu():
    src = 'extern "C" __global__ void scale(float* x, float factor, int n) {}'
    k = gp.jit(src, func="scale", options=["--use_fast_math"], block_size=128)
    assert (k.name, k.source, k.options, k.block_size) == ("scale", src, ["--use_fast_math"], 128)
    assert k.is_compiled is False
    assert k.signature == [("x", "float*"), ("factor", "float"), ("n", "int")]
    with pytest.raises(ValueError, match="'nope'|\"nope\""):
        gp.jit(src, func="nope")
    with pytest.raises(ValueError, match="block_size"):
        gp.jit(src, func="scale", block_size=0)
    with pytest.raises(ValueError, match="more than once"):
        gp.jit(src + "\nnamespace a { " + src.replace('extern "C" ', "") + " }", func="scale")


def test_kernels_compile_with_nvrtc_alone(nvrtc):
    src = r'''
    extern "C" __global__ void scale(float* x, float factor, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] *= factor;
    }'''
    k = gp.jit(src, func="scale")
    for arch in ("sm_80", "sm_90a"):
        ptx = k.ptx(arch)
        assert ".entry scale" in ptx and arch.rstrip("a") in ptx
    bad = gp.jit('extern "C" __global__ void oops(float* x) { x[0] = undefined_name; }', func="oops")
    with pytest.raises(gp.CompileError, match="undefined_name"):
        bad.ptx("sm_80")


def test_package_metadata():
    assert gp.__version__
    assert gp.GPUArray is gp.Array
    import gpukit.offload as go

    assert go.preload_library().name == "liboffload_preload.so"
    assert go.gpumutex_preload_library().name == "libgpumutex_preload.so"
    # the stubs ship with the package
    import importlib.resources

    files = importlib.resources.files("gpukit")
    assert (files / "py.typed").is_file()
    assert (files / "__init__.pyi").is_file()
    assert (files / "_native.pyi").is_file()
