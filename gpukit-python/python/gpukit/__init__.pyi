"""Type stubs of the ``gpukit`` package."""

from ._errors import (
    AxisError as AxisError,
    CompileError as CompileError,
    CudaError as CudaError,
    CudaUnavailable as CudaUnavailable,
    OutOfMemoryError as OutOfMemoryError,
    SchedulerError as SchedulerError,
    TaskCancelled as TaskCancelled,
    TaskPreempted as TaskPreempted,
    TaskRejected as TaskRejected,
    TaskTimedOut as TaskTimedOut,
)
from ._functions import *  # noqa: F403
from ._native import (
    Array as Array,
    DType as DType,
    ElementwiseKernel as ElementwiseKernel,
    Kernel as Kernel,
    ReductionKernel as ReductionKernel,
    add as add,
    arange as arange,
    asarray as asarray,
    bfloat16 as bfloat16,
    bitwise_and as bitwise_and,
    bitwise_or as bitwise_or,
    bitwise_xor as bitwise_xor,
    bool as bool,
    current_task as current_task,
    device_count as device_count,
    devices as devices,
    divide as divide,
    empty as empty,
    float16 as float16,
    float32 as float32,
    float64 as float64,
    floor_divide as floor_divide,
    from_dlpack as from_dlpack,
    from_numpy as from_numpy,
    full as full,
    int32 as int32,
    int64 as int64,
    is_available as is_available,
    jit as jit,
    matmul as matmul,
    maximum as maximum,
    minimum as minimum,
    multiply as multiply,
    ones as ones,
    power as power,
    remainder as remainder,
    set_device as set_device,
    subtract as subtract,
    synchronize as synchronize,
    uint8 as uint8,
    uint32 as uint32,
    uint64 as uint64,
    zeros as zeros,
)
from .scheduler import Scheduler as Scheduler, TaskFuture as TaskFuture

__version__: str
GPUArray = Array
mul = multiply
true_divide = divide
mod = remainder
pow = power
bool_ = bool
