"""gpukit: GPU arrays and NVRTC kernels, a QoS scheduler, fair device locks and calibrated
BLAS/LAPACK offload, from one Rust toolkit.

Arrays (the calls ``pygpukit`` users write)::

    import gpukit as gp
    x = gp.zeros((1024, 1024), dtype="float32")
    y = gp.ones((1024, 1024), dtype=gp.float32)
    z = gp.add(x, y)                 # or x + y; NumPy's broadcasting and result types
    w = gp.matmul(x, y)              # or x @ y
    host = z.to_numpy()
    g = gp.from_numpy(host)

Kernels::

    kernel = gp.jit(src, func="scale")
    kernel(x, factor=0.5, n=x.size)

Interop without copies: ``torch.from_dlpack(x)``, ``gp.from_dlpack(t)``, ``cupy.asarray(x)``
(``__cuda_array_interface__``), ``gp.asarray(cupy_array)``.

Scheduler: :class:`Scheduler` (``submit(fn, policy="guaranteed", memory="1GB",
bandwidth=0.1)``). Device locks: :mod:`gpukit.mutex`. Offload: :mod:`gpukit.offload` and the
``gpukit-offload`` command.
"""

from __future__ import annotations

from . import _native
from ._errors import (
    AxisError,
    CompileError,
    CudaError,
    CudaUnavailable,
    OutOfMemoryError,
    SchedulerError,
    TaskCancelled,
    TaskPreempted,
    TaskRejected,
    TaskTimedOut,
)
from ._native import (
    Array,
    DType,
    ElementwiseKernel,
    Kernel,
    ReductionKernel,
    add,
    arange,
    asarray,
    bitwise_and,
    bitwise_or,
    bitwise_xor,
    current_task,
    device_count,
    devices,
    divide,
    empty,
    floor_divide,
    from_dlpack,
    from_numpy,
    full,
    is_available,
    jit,
    matmul,
    maximum,
    minimum,
    multiply,
    ones,
    power,
    remainder,
    set_device,
    subtract,
    synchronize,
    zeros,
)
from ._native import (
    bfloat16,
    float16,
    float32,
    float64,
    int32,
    int64,
    uint8,
    uint32,
    uint64,
)
from ._functions import *  # noqa: F401,F403
from ._functions import __all__ as _functions_all
from .scheduler import Scheduler, TaskFuture

__version__ = _native.__version__

#: ``pygpukit``'s name for the array type.
GPUArray = Array
mul = multiply
true_divide = divide
mod = remainder
pow = power  # noqa: A001

#: NumPy's ``bool`` (``gpukit.bool``; ``bool_`` as NumPy's other spelling).
bool_ = _native.bool
bool = _native.bool  # noqa: A001

__all__ = [
    "Array",
    "GPUArray",
    "DType",
    "Kernel",
    "ElementwiseKernel",
    "ReductionKernel",
    "Scheduler",
    "TaskFuture",
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
    "add",
    "subtract",
    "multiply",
    "mul",
    "divide",
    "true_divide",
    "floor_divide",
    "remainder",
    "mod",
    "power",
    "pow",
    "maximum",
    "minimum",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "matmul",
    "zeros",
    "ones",
    "empty",
    "full",
    "arange",
    "asarray",
    "from_numpy",
    "from_dlpack",
    "jit",
    "current_task",
    "set_device",
    "device_count",
    "devices",
    "is_available",
    "synchronize",
    "bool",
    "bool_",
    "uint8",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    *_functions_all,
]
