"""The QoS scheduler: ``Scheduler(...)``, ``submit(fn, policy=..., memory=..., bandwidth=...)``.

A task's function runs on one of the scheduler's worker threads, with the task's stream and SM
partition current: gpukit arrays and kernels used inside it run there. ``submit`` answers at
once with a :class:`TaskFuture`, a real :class:`concurrent.futures.Future` (``result``,
``exception``, ``cancel``, ``done``, ``add_done_callback``, and ``concurrent.futures.wait`` /
``as_completed`` work on it), plus the task's ``id``, ``admission`` and ``stats()``.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Callable, Dict, Optional, Union

from . import _native

__all__ = ["Scheduler", "TaskFuture"]

Bytes = Union[int, str]


class TaskFuture(concurrent.futures.Future):
    """The future of a scheduler task.

    ``result(timeout)`` returns the function's return value or raises its exception (the very
    exception object it raised), or a :class:`gpukit.SchedulerError` subclass when the task was
    rejected, preempted or timed out; a cancelled task raises
    :class:`concurrent.futures.CancelledError`.
    """

    def __init__(self, handle: "_native.TaskHandle") -> None:
        super().__init__()
        self._handle = handle
        handle.on_done(self._finish)

    def _finish(self, state: str, value: Any, exc: Optional[BaseException]) -> None:
        if state == "cancelled":
            super().cancel()
            self.set_running_or_notify_cancel()
        elif exc is not None:
            self.set_exception(exc)
        else:
            self.set_result(value)

    @property
    def id(self) -> int:
        """The task id (for :meth:`Scheduler.stats`)."""
        return self._handle.id

    @property
    def admission(self) -> Dict[str, Any]:
        """The admission decision: ``{"status": "admitted" | "queued" | "rejected", ...}`` with
        the grant, the queue position, or the resource, amount requested and amount available."""
        return self._handle.admission

    @property
    def state(self) -> str:
        """The task's state: ``queued``, ``starting``, ``running``, ``succeeded``, ``failed``,
        ``cancelled``, ``timed_out``, ``rejected``, ``expired`` or ``preempted``."""
        return self._handle.state

    def stats(self) -> Dict[str, Any]:
        """The task's statistics (see :meth:`Scheduler.stats`)."""
        return self._handle.stats()

    def cancel(self) -> bool:
        """Stops the task: a queued one at once, a running one at its next safe point (a gpukit
        operation, ``current_task().check()``). Returns False when it had already ended."""
        if self.done():
            return self.cancelled()
        if not self._handle.cancel():
            return self.cancelled()
        # the scheduler reports the final state through the callback; wait briefly for it so
        # that cancelled() is true on return for a queued task
        self._handle.wait(1.0)
        return True

    def running(self) -> bool:
        """Whether the task's function is running now."""
        return self._handle.state in ("starting", "running")


class Scheduler:
    """A QoS scheduler over one GPU (Kubernetes' Guaranteed / Burstable / BestEffort).

    ``Scheduler(device=None, workers=None, green_contexts=True, memory_capacity=None,
    memory_headroom=None, stop_grace=None, max_queue=None)``; use it as a context manager (or
    call :meth:`shutdown`). Compute shares are enforced with CUDA green contexts where the
    driver has them (``mechanism`` says what is in force), memory with a ledger in gpukit's
    allocator.
    """

    def __init__(
        self,
        device: Optional[int] = None,
        workers: Optional[int] = None,
        green_contexts: bool = True,
        memory_capacity: Optional[Bytes] = None,
        memory_headroom: Optional[Bytes] = None,
        stop_grace: Optional[float] = None,
        max_queue: Optional[int] = None,
    ) -> None:
        self._native = _native.Scheduler(
            device, workers, green_contexts, memory_capacity, memory_headroom, stop_grace, max_queue
        )

    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        policy: Optional[str] = None,
        memory: Optional[Bytes] = None,
        memory_limit: Optional[Bytes] = None,
        bandwidth: Optional[float] = None,
        bandwidth_limit: Optional[float] = None,
        priority: int = 0,
        name: Optional[str] = None,
        deadline: Optional[float] = None,
        timeout: Optional[float] = None,
        partition: Optional[str] = None,
    ) -> TaskFuture:
        """Runs ``fn(*args)`` as a task and returns its :class:`TaskFuture` at once.

        ``policy``: ``"guaranteed"`` (``memory`` and ``bandwidth`` are request and limit),
        ``"burstable"`` (requests, with optional ``memory_limit`` / ``bandwidth_limit``),
        ``"best_effort"`` (no requests; limits allowed); None derives it from the numbers as
        Kubernetes does. ``memory``: bytes or ``"512MB"`` / ``"1GiB"``; ``bandwidth``: the
        fraction of the GPU's SMs (0 < x <= 1). ``deadline``: seconds to start by;
        ``timeout``: seconds it may run. A malformed request raises ``ValueError`` at once;
        admission's answer (admitted, queued or rejected with the reason) is
        ``future.admission``.
        """
        h = self._native.submit(
            fn,
            args,
            policy,
            memory,
            memory_limit,
            bandwidth,
            bandwidth_limit,
            priority,
            name,
            deadline,
            timeout,
            partition,
        )
        return TaskFuture(h)

    def stats(self, task_id: Union[int, TaskFuture]) -> Optional[Dict[str, Any]]:
        """Statistics of a task (live or recently ended) as a dict: ``state``, ``policy``,
        ``memory`` (bytes in use), ``memory_peak``, ``memory_committed``, ``memory_limit``,
        ``bandwidth`` (granted share), ``sms``, ``queue_time`` and ``run_time`` (seconds),
        ``gpu_time``, ``kernels_launched``, ``throttles``, ``preempted``, ``error``; None for an
        unknown id."""
        tid = task_id.id if isinstance(task_id, TaskFuture) else task_id
        return self._native.stats(tid)

    def global_stats(self) -> Dict[str, Any]:
        """Scheduler-wide statistics: ``mechanism``, ``memory_capacity``, ``submitted``,
        ``ended`` (count per final state), ``evictions``, ``tasks`` (each as :meth:`stats`)."""
        return self._native.global_stats()

    def metrics(self) -> str:
        """The metrics in the Prometheus text format."""
        return self._native.metrics()

    @property
    def mechanism(self) -> str:
        """How compute shares are enforced here (green contexts, or paced shares and why)."""
        return self._native.mechanism

    def shutdown(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Cancels queued tasks and waits up to ``timeout`` seconds (default 30) for running
        ones."""
        return self._native.shutdown(timeout)

    def __enter__(self) -> "Scheduler":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
