"""The wheel's build backend: maturin, after building the two LD_PRELOAD libraries.

``pip install ./gpukit-python`` (or ``pip wheel``) calls this backend (PEP 517, in-tree through
``backend-path``). Before maturin builds the extension module it builds the offload shim and the
device-lock preload (the workspace's ``offload_preload`` and ``gpumutex_preload`` cdylib
examples, release profile, the same target directory) and copies them into
``python/gpukit/_lib`` so that they ship inside the wheel: ``gpukit-offload run`` and
``gpukit.offload.preload_library()`` find them there, and no Rust toolchain is needed where the
wheel is installed. Every other hook is maturin's own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import maturin
from maturin import *  # noqa: F401,F403  (get_requires_for_build_wheel, prepare_metadata..., sdist hooks)

_HERE = Path(__file__).resolve().parent.parent  # gpukit-python/
_ROOT = _HERE.parent  # the workspace
_LIBS = {"offload_preload": "liboffload_preload.so", "gpumutex_preload": "libgpumutex_preload.so"}


def _build_preloads() -> None:
    cargo = os.environ.get("CARGO", "cargo")
    cmd = [cargo, "build", "--release", "--message-format=json-render-diagnostics"]
    for name in _LIBS:
        cmd += ["--example", name]
    print("gpukit: building the preload libraries:", " ".join(cmd), file=sys.stderr)
    proc = subprocess.run(cmd, cwd=_ROOT, stdout=subprocess.PIPE, check=True)
    found = {}
    for line in proc.stdout.decode().splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") != "compiler-artifact" or msg["target"]["name"] not in _LIBS:
            continue
        for f in msg.get("filenames", []):
            if f.endswith(".so"):
                found[msg["target"]["name"]] = f
    dest = _HERE / "python" / "gpukit" / "_lib"
    dest.mkdir(parents=True, exist_ok=True)
    for name, file in _LIBS.items():
        if name not in found:
            raise RuntimeError(f"gpukit: cargo built no {file}")
        shutil.copy2(found[name], dest / file)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 517: the preloads, then maturin's wheel."""
    _build_preloads()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: the preloads, then maturin's editable wheel."""
    _build_preloads()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)
