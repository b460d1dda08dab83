#!/usr/bin/env bash
# Installs what the gpukit-offload tests need on a fresh CI machine (idempotent):
#  * OpenBLAS + LAPACK: the CPU backend of the typed API (dlopen'ed at run time);
#  * a Python venv at /opt/gpukit-offload-venv with numpy, scipy, pytest and hypothesis, for the shim
#    tests (bit-identical numpy results, numpy.linalg's own suite under the shim). When this venv
#    exists, tests/offload_shim.rs uses it and *requires* numpy (as GPUKIT_REQUIRE_NUMPY=1 does).
set -euo pipefail
VENV=${GPUKIT_OFFLOAD_VENV:-/opt/gpukit-offload-venv}
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
if ! ldconfig -p | grep -q 'libopenblas.so.0'; then
  echo "offload-deps: installing libopenblas-dev (OpenBLAS + LAPACK)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libopenblas-dev python3-venv
else
  echo "offload-deps: OpenBLAS already installed"
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "offload-deps: creating $VENV"
  $SUDO python3 -m venv "$VENV"
fi
if "$VENV/bin/python" -c 'import numpy, scipy, pytest, hypothesis' 2>/dev/null; then
  echo "offload-deps: numpy, scipy, pytest, hypothesis already in $VENV"
else
  echo "offload-deps: pip install numpy scipy pytest hypothesis into $VENV"
  $SUDO "$VENV/bin/pip" install -q --upgrade pip
  $SUDO "$VENV/bin/pip" install -q numpy scipy pytest hypothesis
fi
"$VENV/bin/python" -c 'import numpy; print("offload-deps: numpy", numpy.__version__)'
echo "offload-deps: done (export GPUKIT_REQUIRE_NUMPY=1 GPUKIT_PYTHON=$VENV/bin/python to make the shim tests mandatory)"
