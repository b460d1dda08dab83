"""Shared fixtures: the GPU and NVRTC gates of the workspace's tests.

A test that needs a GPU uses the ``gpu`` fixture: without a usable CUDA device it is skipped
with the reason, or fails when ``GPUKIT_REQUIRE_GPU=1`` (as the Rust GPU tests do). Tests that
compile kernels without a GPU use ``nvrtc`` (``GPUKIT_REQUIRE_NVRTC=1`` makes a missing NVRTC a
failure).
"""

from __future__ import annotations

import os

import pytest

import gpukit as gp


def _require(var: str) -> bool:
    return os.environ.get(var, "") not in ("", "0")


@pytest.fixture(scope="session")
def gpu():
    """Device 0, or skip (fail under GPUKIT_REQUIRE_GPU=1) without one."""
    if not gp.is_available():
        reason = "no CUDA driver with a GPU (set GPUKIT_REQUIRE_GPU=1 to fail instead)"
        if _require("GPUKIT_REQUIRE_GPU"):
            pytest.fail("GPUKIT_REQUIRE_GPU=1 but " + reason)
        pytest.skip(reason)
    return 0


@pytest.fixture(scope="session")
def nvrtc():
    """NVRTC available (for compiling without a GPU), or skip / fail."""
    k = gp.jit('extern "C" __global__ void probe(float* x) { x[0] = 1.0f; }', func="probe")
    try:
        k.ptx("sm_80")
    except gp.CudaUnavailable as e:
        if _require("GPUKIT_REQUIRE_NVRTC"):
            pytest.fail(f"GPUKIT_REQUIRE_NVRTC=1 but NVRTC is missing: {e}")
        pytest.skip(f"NVRTC is not available: {e}")
    return True


def pytest_report_header(config):
    return f"gpukit {gp.__version__}: GPU available: {gp.is_available()} ({gp.device_count()} device(s))"


@pytest.fixture(autouse=True)
def _device_locks_name_devices_by_index(request, monkeypatch):
    """The lock tests use device indices as lock names: they must not depend on the GPUs of the
    machine they run on (a GPU container sets NVIDIA_VISIBLE_DEVICES, and the driver lists its
    GPUs), so device discovery is off and no view is inherited."""
    if request.module.__name__.split(".")[-1] not in ("test_mutex", "test_cli"):
        return
    for var in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                "GPUMUTEX_VISIBLE_DEVICES", "GPUMUTEX_NUM_DEVICES", "GPUMUTEX_LOCK_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GPUMUTEX_DEVICE_SOURCE", "none")
