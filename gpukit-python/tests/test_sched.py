"""The scheduler from Python: futures, exceptions, cancellation, callbacks, admission, stats,
and gpukit work inside a task running on the task's stream."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import numpy as np
import pytest

import gpukit as gp


@pytest.fixture()
def sched(gpu):
    s = gp.Scheduler(workers=2)
    yield s
    s.shutdown(30)


def test_submit_returns_a_real_future(sched):
    f = sched.submit(lambda x, y: x + y, 2, 3, policy="guaranteed", memory="64MB", bandwidth=0.25)
    assert isinstance(f, concurrent.futures.Future)
    assert f.result(timeout=30) == 5
    assert f.done() and not f.cancelled() and f.exception() is None
    assert isinstance(f.id, int)
    assert f.admission["status"] in ("admitted", "queued")
    st = sched.stats(f.id)
    for key in ("state", "memory", "bandwidth", "sms", "queue_time", "run_time", "policy"):
        assert key in st, key
    assert st["state"] == "succeeded" and st["policy"] == "guaranteed"
    assert st["bandwidth"] > 0 and st["sms"] > 0
    g = sched.global_stats()
    assert g["submitted"] >= 1 and "mechanism" in g and isinstance(g["tasks"], list)
    assert "gpukit_sched" in sched.metrics()


def test_an_exception_in_the_task_arrives_at_the_future(sched):
    class Boom(Exception):
        pass

    err = Boom("inside the task")

    def fails():
        raise err

    f = sched.submit(fails, policy="best_effort")
    with pytest.raises(Boom) as e:
        f.result(timeout=30)
    assert e.value is err
    assert f.exception() is err
    assert sched.stats(f.id)["state"] == "failed"


def test_gpu_work_inside_a_task_runs_on_its_partition(sched):
    def work(n):
        t = gp.current_task()
        a = gp.arange(n, dtype="float32")
        b = (a * 2.0 + 1.0).sum()
        return float(b), t.sms, t.id

    f = sched.submit(work, 100_000, policy="guaranteed", memory="256MB", bandwidth=0.25)
    total, sms, tid = f.result(timeout=60)
    n = 100_000
    assert total == pytest.approx(float(np.arange(n, dtype=np.float64).sum() * 2 + n), rel=1e-5)
    assert tid == f.id and sms > 0
    st = sched.stats(f.id)
    assert st["kernels_launched"] >= 1 or st["gpu_time"] is not None
    with pytest.raises(RuntimeError, match="not inside a scheduler task"):
        gp.current_task()


def test_callbacks_and_as_completed(sched):
    seen = []
    done = threading.Event()

    def cb(fut):
        seen.append(fut.result())
        done.set()

    fs = [sched.submit(lambda i=i: i * i, policy="best_effort") for i in range(6)]
    fs[0].add_done_callback(cb)
    got = sorted(f.result() for f in concurrent.futures.as_completed(fs, timeout=60))
    assert got == [0, 1, 4, 9, 16, 25]
    assert done.wait(10) and seen == [0]
    # a callback added after completion runs at once
    fs[1].add_done_callback(cb)
    assert seen == [0, 1]


def test_cancel_a_queued_task(sched):
    gate = threading.Event()
    # fill both workers, then queue one more behind them
    blockers = [sched.submit(gate.wait, 30, policy="best_effort") for _ in range(2)]
    time.sleep(0.2)
    queued = sched.submit(lambda: "never", policy="best_effort")
    assert queued.cancel()
    assert queued.cancelled()
    with pytest.raises(concurrent.futures.CancelledError):
        queued.result(timeout=10)
    gate.set()
    for b in blockers:
        assert b.result(timeout=30) is True


def test_admission_rejects_with_the_reason(sched):
    f = sched.submit(lambda: 1, policy="guaranteed", memory="100TB", bandwidth=0.5)
    assert f.admission["status"] == "rejected"
    assert f.admission["resource"] == "memory"
    assert f.admission["requested"] > f.admission["available"]
    with pytest.raises(gp.TaskRejected, match="memory"):
        f.result(timeout=10)


def test_bad_requests_are_value_errors_and_leave_nothing(sched):
    before = sched.global_stats()["submitted"]
    with pytest.raises(ValueError):
        sched.submit(lambda: 1, policy="platinum")
    with pytest.raises(ValueError):
        sched.submit(lambda: 1, policy="guaranteed", memory="1GB")  # no bandwidth
    with pytest.raises(ValueError):
        sched.submit(lambda: 1, policy="best_effort", memory="1GB")
    with pytest.raises(ValueError):
        sched.submit(lambda: 1, memory="lots")
    assert sched.global_stats()["submitted"] == before


def test_a_task_timeout_ends_the_task(sched):
    def spins():
        t = gp.current_task()
        while True:
            time.sleep(0.01)
            t.check()

    f = sched.submit(spins, policy="best_effort", timeout=0.3)
    with pytest.raises(gp.TaskTimedOut):
        f.result(timeout=30)


def test_shutdown_is_idempotent(gpu):
    s = gp.Scheduler()
    assert s.submit(lambda: 3).result(timeout=30) == 3
    s.shutdown()
    s.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        s.submit(lambda: 1)
