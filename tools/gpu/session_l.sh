#!/usr/bin/env bash
# 2026-12-06, sixth session, call 2: every GPU test of the workspace (tools/gpu/final_tests.sh,
# GPUKIT_REQUIRE_GPU=1), then numpy.linalg's suite with every supported call forced onto the GPU
# under 8 pytest workers with what is left of the call (issue 22: every test under 60 s).
#   tar xJf .gpu-bundle.tar.xz && B=.gpu-bundle OUT=$OUT bash tools/gpu/session_l.sh
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/session-l}; mkdir -p "$OUT"
T0=$SECONDS
here=$(dirname "$0")
echo "host $(hostname) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
OUT=$OUT/ft BUNDLE=$B bash "$here/final_tests.sh" 2>&1 | tail -45
left=$(( ${LIMIT:-570} - (SECONDS - T0) ))
[ $left -gt 300 ] && left=300
echo "== numpy.linalg forced under 8 workers, budget $left s (t=$((SECONDS - T0)))"
[ $left -gt 60 ] && B=$B OUT=$OUT/numpy BUDGET=$left bash "$here/numpy_diag.sh"
echo "total $((SECONDS - T0)) s"
