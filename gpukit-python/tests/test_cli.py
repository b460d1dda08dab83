"""The command lines installed with the wheel: gpumutex-run and gpukit-offload, as console
scripts and as ``python -m``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gpukit
import gpukit.offload as go

# The package runs from the source checkout (``maturin develop`` links gpukit-python/python into
# the environment) or from an installed wheel (site-packages). Only a wheel carries the preload
# libraries, which the build backend adds; a wheel without them is a broken wheel, not a skip.
FROM_CHECKOUT = (Path(gpukit.__file__).resolve().parents[2] / "pyproject.toml").exists()


def require_preloads():
    missing = [lib for lib in (go.preload_library(), go.gpumutex_preload_library()) if not lib.exists()]
    if missing and FROM_CHECKOUT:
        pytest.skip(f"{missing[0]} is missing: gpukit runs from the source checkout (maturin develop), "
                    "which does not build the preload libraries")
    assert not missing, f"the installed wheel lacks {', '.join(map(str, missing))}: build it through the " \
        "package's build backend (pip wheel ./gpukit-python), not with maturin directly"


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=120, **kw)


def test_console_scripts_are_installed():
    for name in ("gpumutex-run", "gpukit-offload"):
        exe = shutil.which(name) or os.path.join(os.path.dirname(sys.executable), name)
        assert os.path.exists(exe), name
        r = run([exe, "--help"])
        assert r.returncode == 0, r.stderr
        assert "usage" in (r.stdout + r.stderr).lower()


def test_gpumutex_run_as_a_module(tmp_path):
    d = tmp_path / "locks"
    d.mkdir(mode=0o700)
    r = run([sys.executable, "-m", "gpukit.mutex", "--visible-devices", "4,5", "--num-devices", "2",
             "--lock-dir", str(d), "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES; exit 4"])
    assert r.returncode == 4, r.stderr
    assert sorted(r.stdout.strip().split(",")) == ["4", "5"]
    bad = run([sys.executable, "-m", "gpukit.mutex", "--num-devices", "x", "--", "true"])
    assert bad.returncode == 2


def test_the_preload_libraries_ship_in_the_wheel():
    require_preloads()
    for lib in (go.preload_library(), go.gpumutex_preload_library()):
        assert lib.stat().st_size > 0


def test_offload_run_of_a_numpy_program(tmp_path):
    pytest.importorskip("numpy")
    require_preloads()
    script = tmp_path / "prog.py"
    script.write_text(
        "import numpy as np\n"
        "rng = np.random.default_rng(0)\n"
        "a = rng.standard_normal((400, 400))\n"
        "x = np.linalg.solve(a @ a.T + 400 * np.eye(400), np.ones(400))\n"
        "print('checksum', round(float(x.sum()), 6))\n"
    )
    plain = run([sys.executable, str(script)])
    assert plain.returncode == 0, plain.stderr
    for cmd in (["gpukit-offload", "run"], [sys.executable, "-m", "gpukit.offload", "run"]):
        exe = shutil.which(cmd[0]) or cmd[0]
        r = run([exe, *cmd[1:], sys.executable, str(script)])
        assert r.returncode == 0, r.stderr
        assert r.stdout == plain.stdout
        assert "offload" in r.stderr  # the per-routine summary at exit
    explain = run([sys.executable, "-m", "gpukit.offload", "explain"])
    assert explain.returncode == 0, explain.stderr
    assert "crossover" in explain.stdout
