"""Device locks from Python with real processes (no GPU needed): the lock directory is private
to each test; device indices are lock names here."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import gpukit.mutex as gm


@pytest.fixture()
def lockdir(tmp_path):
    d = tmp_path / "locks"
    d.mkdir(mode=0o700)
    return str(d)


def py(code: str, **env) -> subprocess.Popen:
    e = dict(os.environ)
    e.update({k: str(v) for k, v in env.items()})
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=e,
    )


def tickets(lockdir):
    return [n for n in os.listdir(lockdir) if "ticket" in n]


def test_acquire_is_a_context_manager_that_sets_and_restores_the_environment(lockdir):
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    with gm.acquire(2, visible_devices="0,1,2", lock_dir=lockdir) as lease:
        assert len(lease.devices) == 2 and lease.held
        assert os.environ["CUDA_VISIBLE_DEVICES"] == lease.cuda_visible_devices
        assert lease.env["GPUMUTEX_LOCK_DIR"] == lockdir
        out = subprocess.run(["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"], capture_output=True, text=True)
        assert out.stdout.strip() == lease.cuda_visible_devices
    assert not lease.held
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == before


def test_run_follows_subprocess_run(lockdir):
    r = gm.run(["sh", "-c", "echo $CUDA_VISIBLE_DEVICES; exit 3"], visible_devices="0,1",
               lock_dir=lockdir, capture_output=True, text=True)
    assert isinstance(r, subprocess.CompletedProcess)
    assert r.returncode == 3 and r.stdout.strip() in ("0", "1")
    with pytest.raises(subprocess.CalledProcessError):
        gm.run(["false"], visible_devices=[0], lock_dir=lockdir, check=True)
    with pytest.raises(subprocess.TimeoutExpired):
        gm.run(["sleep", "5"], visible_devices="0", lock_dir=lockdir, timeout=0.2)
    assert tickets(lockdir) == []


def test_system_returns_the_wait_status(lockdir):
    st = gm.system("exit 7", visible_devices=[0, 1], lock_dir=lockdir)
    assert os.waitstatus_to_exitcode(st) == 7
    assert st == os.system("exit 7")


def test_the_environment_configures_defaults(lockdir, monkeypatch):
    monkeypatch.setenv("GPUMUTEX_VISIBLE_DEVICES", "3,4")
    monkeypatch.setenv("GPUMUTEX_LOCK_DIR", lockdir)
    with gm.acquire() as lease:
        assert lease.devices[0] in (3, 4)


def holder(lockdir, seconds=30.0):
    """Another process (not an ancestor of the waiters, which would share its claim) holding
    device 0 until it is killed or `seconds` pass."""
    p = py(
        """
        import time, gpukit.mutex as gm
        with gm.acquire(1, visible_devices="0", lock_dir=%r):
            print("held", flush=True)
            time.sleep(%r)
        """ % (lockdir, seconds)
    )
    assert p.stdout.readline().strip() == "held", p.stderr.read()
    return p


def test_processes_of_this_one_share_its_devices(lockdir):
    with gm.acquire(1, visible_devices="0", lock_dir=lockdir) as lease:
        p = py(
            """
            import gpukit.mutex as gm
            with gm.acquire(1, visible_devices="0", lock_dir=%r, timeout=5) as l:
                print(l.cuda_visible_devices, l.is_shared if hasattr(l, "is_shared") else "")
            """ % lockdir
        )
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        assert out.split()[0] == lease.cuda_visible_devices


def test_another_process_waits_its_turn(lockdir):
    h = holder(lockdir, seconds=1.5)
    p = py(
        """
        import time, gpukit.mutex as gm
        t = time.monotonic()
        with gm.acquire(1, visible_devices="0", lock_dir=%r):
            print("got", round(time.monotonic() - t, 2))
        """ % lockdir
    )
    time.sleep(0.7)
    assert p.poll() is None  # still waiting
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert float(out.split()[1]) >= 0.6
    h.wait(timeout=30)


def test_waiters_are_served_in_order(lockdir):
    h = holder(lockdir, seconds=1.0)
    order_file = os.path.join(lockdir, "..", "order")
    waiters = []
    for i in range(3):
        waiters.append(py(
            """
            import gpukit.mutex as gm
            with gm.acquire(1, visible_devices="0", lock_dir=%r):
                open(%r, "a").write("%d\\n")
            """ % (lockdir, order_file, i)
        ))
        time.sleep(0.3)  # queue one after another
    for w in waiters:
        _, err = w.communicate(timeout=60)
        assert w.returncode == 0, err
    h.wait(timeout=30)
    assert open(order_file).read().split() == ["0", "1", "2"]


def test_lock_timeout_raises_timeout_error(lockdir):
    h = holder(lockdir)
    p = py(
        """
        import gpukit.mutex as gm
        try:
            gm.acquire(1, visible_devices="0", lock_dir=%r, timeout=0.3)
        except TimeoutError as e:
            print("timeout", e)
        """ % lockdir
    )
    out, err = p.communicate(timeout=30)
    h.kill()
    h.wait()
    assert "timeout" in out, err
    assert tickets(lockdir) == []


def test_ctrl_c_while_waiting_raises_keyboard_interrupt_quickly(lockdir):
    h = holder(lockdir)
    p = py(
        """
        import signal, sys, time, gpukit.mutex as gm
        # as from a terminal: a test run started in the background (`&` in a script) hands
        # its children SIGINT ignored, and Python then installs no KeyboardInterrupt
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print("waiting", flush=True)
        try:
            gm.acquire(1, visible_devices="0", lock_dir=%r)
        except KeyboardInterrupt:
            print("interrupted", time.monotonic(), flush=True)
            sys.exit(0)
        """ % lockdir
    )
    try:
        assert p.stdout.readline().strip() == "waiting"
        deadline = time.monotonic() + 10
        while not tickets(lockdir) and time.monotonic() < deadline:
            time.sleep(0.05)  # let it queue
        assert len(tickets(lockdir)) == 1
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        assert float(out.split()[1]) - sent < 0.5
        assert tickets(lockdir) == []
    finally:
        h.kill()
        h.wait()


def test_bad_arguments_are_value_errors(lockdir):
    with pytest.raises(ValueError):
        gm.acquire(0, visible_devices="0", lock_dir=lockdir)
    with pytest.raises(ValueError):
        gm.acquire(3, visible_devices="0,1", lock_dir=lockdir)
    with pytest.raises(ValueError):
        gm.acquire(1, visible_devices="zero", lock_dir=lockdir)
    with pytest.raises(ValueError):
        gm.acquire(1, visible_devices="0", lock_dir=lockdir, timeout=-1)
    assert os.listdir(lockdir) == [] or tickets(lockdir) == []


def test_an_untrusted_lock_directory_is_refused(tmp_path):
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)  # writable by others, no sticky bit
    with pytest.raises(OSError, match="trust|writable|others"):
        gm.acquire(1, visible_devices="0", lock_dir=str(d))
