#!/usr/bin/env bash
# numpy.linalg's test suite with every supported call forced onto the GPU under 8 pytest-xdist
# workers (issue 22: every test under 60 s). The shim is preloaded directly (not through
# `offload run`) so that SIGINT at the budget reaches pytest, which then still prints the
# slowest durations of the tests that finished; the log's tail is printed whatever happens.
# RUNNER=offload runs it as users do, `offload run` (then the program's processes share the GPU
# through an MPS daemon of its own where the host has nvidia-cuda-mps-control; `offload run`
# lets SIGINT reach pytest).
#   B=.gpu-bundle OUT=$OUT BUDGET=150 [RUNNER=offload] bash tools/gpu/numpy_diag.sh
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/numpy-diag}; mkdir -p "$OUT"; BUDGET=${BUDGET:-150}
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0
t=$SECONDS
if [ "${RUNNER:-preload}" = offload ]; then pre=("$B/examples/offload" run); else pre=(env LD_PRELOAD="$(realpath "$B/examples/liboffload_preload.so")"); fi
GPUKIT_OFFLOAD_GPU=always GPUKIT_OFFLOAD_LOG=summary \
  timeout -k 15 -s INT "$BUDGET" "${pre[@]}" python3 -m pytest --pyargs numpy.linalg -n 8 -q -p no:cacheprovider \
  --durations=30 --durations-min=2 --junitxml="$OUT/junit.xml" > "$OUT/forced.log" 2>&1
echo "forced: rc $? $((SECONDS - t)) s"
grep -vE "^gpukit-offload: " "$OUT/forced.log" | grep -vE "^\s*$" | tail -45 | cut -c1-200
python3 - "$OUT/junit.xml" <<'PY' 2>/dev/null
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
cases = sorted(r.iter("testcase"), key=lambda c: -float(c.get("time", 0)))
print("junit: %d test cases; slowest:" % len(cases))
for c in cases[:15]:
    print("  %7.1f s %s::%s" % (float(c.get("time", 0)), c.get("classname"), c.get("name")))
PY
