"""Zero-copy exchange with PyTorch and CuPy, both ways: DLPack (with its stream argument) and
the CUDA array interface (version 3). Each test checks the device pointer is the same (no copy)
and that writes on one side are seen on the other."""

from __future__ import annotations

import numpy as np
import pytest

import gpukit as gp


def ptr(a: gp.Array) -> int:
    return a.__cuda_array_interface__["data"][0]


def test_dlpack_protocol_of_our_arrays(gpu):
    a = gp.arange(12, dtype="float32").reshape(3, 4)
    assert a.__dlpack_device__() == (2, 0)
    b = gp.from_dlpack(a)
    assert ptr(b) == ptr(a)
    b[0, 0] = 42.0
    assert a[0, 0].item() == 42.0
    cap = a.__dlpack__(max_version=(1, 0))
    c = gp.from_dlpack(cap)
    assert ptr(c) == ptr(a) and c.shape == (3, 4)
    # a strided view keeps its strides through DLPack
    v = a[:, ::2]
    w = gp.from_dlpack(v)
    assert w.strides == v.strides and ptr(w) == ptr(v)
    np.testing.assert_array_equal(w.to_numpy(), v.to_numpy())
    # copy=True gives new memory
    d = gp.from_dlpack(a, copy=True)
    assert ptr(d) != ptr(a)
    # to the host through DLPack: NumPy consumes CPU memory only, so it asks for the CPU
    # (dl_device) and gpukit hands over a host copy; without device="cpu" NumPy refuses a CUDA
    # tensor (BufferError), as it does for PyTorch's
    h = np.from_dlpack(a, device="cpu")
    np.testing.assert_array_equal(h, a.to_numpy())


def test_cuda_array_interface_v3(gpu):
    a = gp.arange(6, dtype="int32").reshape(2, 3)
    cai = a.__cuda_array_interface__
    assert cai["version"] == 3 and cai["typestr"] == "<i4" and cai["shape"] == (2, 3)
    assert cai["strides"] is None and cai["data"][1] is False and cai["stream"] not in (0, None)
    t = a.T.__cuda_array_interface__
    assert t["strides"] == (4, 12)

    class Foreign:
        def __init__(self, d):
            self.__cuda_array_interface__ = d

    b = gp.asarray(Foreign(a.__cuda_array_interface__))
    assert ptr(b) == ptr(a)
    b[1, 1] = -5
    assert a[1, 1].item() == -5
    with pytest.raises(TypeError):
        gp.ones(2, dtype="bfloat16").__cuda_array_interface__


def test_torch_round_trip_without_copies(gpu):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    t = torch.arange(1000, dtype=torch.float32, device="cuda")
    g = gp.from_dlpack(t)
    assert ptr(g) == t.data_ptr() and g.dtype == gp.float32 and g.shape == (1000,)
    # gpukit writes, torch reads (the stream handshake orders them)
    g *= 2.0
    t2 = torch.from_dlpack(g)
    assert t2.data_ptr() == t.data_ptr()
    assert torch.equal(t2, torch.arange(1000, dtype=torch.float32, device="cuda") * 2)
    # torch writes on its stream, gpukit reads after the handshake
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        t.add_(1)
        g2 = gp.from_dlpack(t)
        np.testing.assert_array_equal(g2.to_numpy(), np.arange(1000, dtype=np.float32) * 2 + 1)
    # the CUDA array interface: torch consumes ours
    h = gp.arange(10, dtype="float64")
    th = torch.as_tensor(h, device="cuda")
    assert th.data_ptr() == ptr(h)
    th[3] = 99.0
    torch.cuda.synchronize()
    assert h[3].item() == 99.0
    # and offers its own
    g3 = gp.asarray(t)
    assert ptr(g3) == t.data_ptr()
    # bool and half types
    tb = torch.tensor([True, False, True], device="cuda")
    gb = gp.from_dlpack(tb)
    assert gb.dtype == gp.bool and gb.to_numpy().tolist() == [True, False, True]
    th16 = torch.ones(4, dtype=torch.bfloat16, device="cuda")
    assert gp.from_dlpack(th16).dtype == gp.bfloat16
    assert torch.from_dlpack(gp.ones(3, dtype="float16")).dtype == torch.float16


def test_cupy_round_trip_without_copies(gpu):
    cp = pytest.importorskip("cupy")
    x = cp.arange(24, dtype=cp.float32).reshape(4, 6)
    g = gp.asarray(x)
    assert ptr(g) == x.data.ptr and g.shape == (4, 6)
    g[0] = 7.0
    assert float(x[0, 0]) == 7.0
    y = cp.asarray(g)  # through __cuda_array_interface__
    assert y.data.ptr == ptr(g)
    y[1] = -1.0
    cp.cuda.runtime.deviceSynchronize()
    assert g[1, 0].item() == -1.0
    z = cp.from_dlpack(g)
    assert z.data.ptr == ptr(g)
    back = gp.from_dlpack(z[:, ::2])
    np.testing.assert_array_equal(back.to_numpy(), cp.asnumpy(x[:, ::2]))
    # mixing in operators: a CuPy array is an operand without a copy
    s = g + x
    np.testing.assert_array_equal(s.to_numpy(), 2 * cp.asnumpy(x))
