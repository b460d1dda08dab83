"""Fair, crash-safe device locks for shared GPU machines (what ``gpumutex`` users write).

::

    import gpukit.mutex as gm
    gm.run(["python", "train.py"], visible_devices="0,1,2,3", check=True)
    gm.system("python train.py", visible_devices=[0, 1, 2, 3])
    with gm.acquire(2, visible_devices="0,1,2,3") as lease:
        print(lease.cuda_visible_devices)      # e.g. "1,3"
        subprocess.run(["python", "train.py"])  # the child sees the granted devices

Configuration as the seed's: ``GPUMUTEX_VISIBLE_DEVICES`` (``visible_devices=``, required;
indices, ``GPU-``/``MIG-`` UUIDs or ``all``, always inside an inherited ``CUDA_VISIBLE_DEVICES``),
``GPUMUTEX_NUM_DEVICES`` (``num_devices=``, default 1), ``GPUMUTEX_LOCK_DIR`` (``lock_dir=``,
default ``/tmp/libgpumutex``); keyword arguments win over the environment and change only the
child's environment, never this process's. Waiting is FIFO; Ctrl-C while waiting raises
``KeyboardInterrupt`` within half a second and leaves nothing behind; a holder that dies, however
it dies, releases its devices.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .. import _native

__all__ = ["acquire", "run", "system", "Lease", "main"]

Devices = Optional[Union[str, int, Iterable[Union[int, str]]]]


def _device_list(devices: Devices) -> Optional[str]:
    if devices is None:
        return None
    if isinstance(devices, str):
        return devices
    if isinstance(devices, int):
        return str(devices)
    return ",".join(str(d) for d in devices)


class Lease:
    """Devices held by this process and shared with the processes it starts.

    While the ``with`` block runs, ``CUDA_VISIBLE_DEVICES`` and the ``GPUMUTEX_*`` variables in
    ``os.environ`` name the granted devices (``set_env=False`` leaves ``os.environ`` alone), so
    children started with the inherited environment use them; they are restored on exit.
    """

    def __init__(self, native: "_native.DeviceLease", set_env: bool) -> None:
        self._native = native
        self._set_env = set_env
        self._saved: Dict[str, Optional[str]] = {}

    @property
    def devices(self) -> List[int]:
        """The granted device indices."""
        return self._native.devices

    @property
    def granted(self) -> List[Tuple[int, str, Optional[str]]]:
        """``(index, key, uuid)`` of each granted device: the key is what the lock names (the
        GPU's UUID where the driver tells it, else its physical index)."""
        return self._native.granted

    @property
    def cuda_visible_devices(self) -> str:
        """``CUDA_VISIBLE_DEVICES`` for programs using the granted devices."""
        return self._native.cuda_visible_devices

    @property
    def env(self) -> Dict[str, str]:
        """The variables a child needs (``CUDA_VISIBLE_DEVICES`` and ``GPUMUTEX_*``)."""
        return self._native.env

    @property
    def fds(self) -> List[int]:
        """Descriptors that keep the claim alive in a child after this process ends (pass them
        as ``subprocess.Popen(..., pass_fds=lease.fds)``)."""
        return self._native.fds

    @property
    def held(self) -> bool:
        """Whether the devices are still held."""
        return self._native.held

    def release(self) -> None:
        """Releases the devices (the next waiter starts at once); later calls do nothing."""
        self._restore()
        self._native.release()

    def _restore(self) -> None:
        for k, v in self._saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._saved = {}

    def __enter__(self) -> "Lease":
        if self._set_env:
            for k, v in self.env.items():
                self._saved.setdefault(k, os.environ.get(k))
                os.environ[k] = v
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        state = f"devices={self.cuda_visible_devices!r}" if self.held else "released"
        return f"<gpukit.mutex.Lease {state}>"


def acquire(
    num_devices: Optional[int] = None,
    *,
    visible_devices: Devices = None,
    lock_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
    timeout: Optional[float] = None,
    backfill: Optional[bool] = None,
    set_env: bool = True,
) -> Lease:
    """Waits (FIFO) for ``num_devices`` of ``visible_devices`` and returns a :class:`Lease`
    (a context manager). ``timeout`` (seconds) raises ``TimeoutError`` when it passes; Ctrl-C
    raises ``KeyboardInterrupt`` within half a second, leaving nothing behind."""
    native = _native.acquire(
        num_devices,
        _device_list(visible_devices),
        None if lock_dir is None else os.fspath(lock_dir),
        timeout,
        backfill,
    )
    return Lease(native, set_env)


def _child_env(env: Optional[Dict[str, str]], lease: Lease) -> Dict[str, str]:
    base = dict(os.environ if env is None else env)
    base.update(lease.env)
    return base


def run(
    args: Union[str, Sequence[Any]],
    *,
    visible_devices: Devices = None,
    num_devices: Optional[int] = None,
    lock_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
    check: bool = False,
    timeout: Optional[float] = None,
    lock_timeout: Optional[float] = None,
    **subprocess_kwargs: Any,
) -> "subprocess.CompletedProcess[Any]":
    """``subprocess.run(args, ...)`` holding ``num_devices`` devices for the child and
    everything it starts; returns the ``CompletedProcess`` (``check=True`` raises
    ``CalledProcessError``). ``timeout`` is subprocess.run's (the child's run time); waiting
    for the devices is bounded by ``lock_timeout`` (None: no bound)."""
    env = subprocess_kwargs.pop("env", None)
    pass_fds = tuple(subprocess_kwargs.pop("pass_fds", ()))
    with acquire(num_devices, visible_devices=visible_devices, lock_dir=lock_dir,
                 timeout=lock_timeout, set_env=False) as lease:
        return subprocess.run(
            args,
            env=_child_env(env, lease),
            pass_fds=pass_fds + tuple(lease.fds),
            check=check,
            timeout=timeout,
            **subprocess_kwargs,
        )


def system(
    command: str,
    *,
    visible_devices: Devices = None,
    num_devices: Optional[int] = None,
    lock_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
    lock_timeout: Optional[float] = None,
) -> int:
    """``os.system(command)`` holding the devices: returns the wait status as ``os.system``
    does (decode with ``os.waitstatus_to_exitcode``)."""
    with acquire(num_devices, visible_devices=visible_devices, lock_dir=lock_dir,
                 timeout=lock_timeout, set_env=False) as lease:
        p = subprocess.Popen(command, shell=True, env=_child_env(None, lease), pass_fds=tuple(lease.fds))
        _, status = os.waitpid(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        return status


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The ``gpumutex-run`` command (``python -m gpukit.mutex``)."""
    import sys

    args = list(sys.argv if argv is None else ["gpumutex-run", *argv])
    args[0] = "gpumutex-run"
    return _native.gpumutex_main(args)


