"""The exception types of gpukit (raised by the native module and the Python layer)."""

from __future__ import annotations

__all__ = [
    "CudaUnavailable",
    "CudaError",
    "CompileError",
    "OutOfMemoryError",
    "AxisError",
    "SchedulerError",
    "TaskCancelled",
    "TaskTimedOut",
    "TaskRejected",
    "TaskPreempted",
]


class CudaUnavailable(RuntimeError):
    """No usable CUDA driver, GPU or NVRTC on this machine; the message says what to install."""


class CudaError(RuntimeError):
    """A CUDA driver, cuBLAS or cuSOLVER call failed."""


class CompileError(RuntimeError):
    """NVRTC could not compile a kernel; the message carries the compiler's log."""


class OutOfMemoryError(MemoryError):
    """Device memory is exhausted, or a quota or the scheduler refused an allocation."""


class AxisError(ValueError, IndexError):
    """An axis is out of range for the array's number of dimensions (as NumPy's AxisError)."""


class SchedulerError(RuntimeError):
    """A scheduler task ended without running its function to completion."""


class TaskCancelled(SchedulerError):
    """The task was cancelled (through its future, or by shutdown)."""


class TaskTimedOut(SchedulerError, TimeoutError):
    """The task ran past its own ``timeout=``."""


class TaskRejected(SchedulerError):
    """Admission rejected the task, or its start-by deadline passed while it was queued."""


class TaskPreempted(SchedulerError):
    """The task was evicted under memory pressure."""
