"""Calibrated BLAS/LAPACK offload for unmodified programs (``gpukit-offload run ...``).

``run`` starts a program with the offload shim preloaded: its BLAS and LAPACK calls (NumPy's,
SciPy's, scikit-learn's) go to cuBLAS / cuSOLVER only when this machine's calibrated model says
the GPU is faster, copies included; everything else runs on the program's own CPU library.
``calibrate`` measures this machine; ``explain`` prints the crossovers.

::

    gpukit-offload calibrate --quick
    gpukit-offload run python3 my_script.py
    python -m gpukit.offload explain
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from .. import _native

__all__ = ["main", "preload_library", "gpumutex_preload_library", "run"]

_LIB = Path(__file__).resolve().parent.parent / "_lib"


def preload_library() -> Path:
    """The offload shim shipped in the wheel (``LD_PRELOAD`` it to offload a program)."""
    return _LIB / "liboffload_preload.so"


def gpumutex_preload_library() -> Path:
    """The device-lock preload shipped in the wheel (``LD_PRELOAD`` with
    ``GPUMUTEX_VISIBLE_DEVICES`` set: a CUDA program takes its devices from the lock)."""
    return _LIB / "libgpumutex_preload.so"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The ``gpukit-offload`` command (``python -m gpukit.offload``): ``run``, ``calibrate``,
    ``explain``."""
    args = list(sys.argv if argv is None else ["gpukit-offload", *argv])
    args[0] = "gpukit-offload"
    return _native.offload_main(args, os.fspath(preload_library()))


def run(command: Sequence[str]) -> int:
    """Runs ``command`` under the offload shim and returns its exit status."""
    return main(["run", *command])
