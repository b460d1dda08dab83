#!/usr/bin/env bash
# numpy's linalg test suite and scipy.linalg's decomposition and basic tests, under the shim with
# every supported call forced onto the GPU (GPUKIT_OFFLOAD_GPU=always), printing pytest's summary
# lines (and the failed tests). Run from the repository root on the GPU host:
#
#   BUNDLE=.gpu-bundle bash gpukit-offload/bench/oneshot/suites.sh
#
# BUNDLE: a folder made by /work/shared/gpu/pack with examples/offload and
#   examples/liboffload_preload.so (default .gpu-bundle). PYTHON (default python3).
# SUITE_TIMEOUT: seconds per suite (default 900). OUT: logs (default /tmp/oneshot-out).
# BASELINE=1: also run each suite plainly first (tells failures of the shim from failures the
#   installed numpy/scipy have anyway).
# SMOKE=1: a few numpy tests only (-k "svd or eigh"), plainly when there is no bundle: tests this
#   script.
# The reference on the H200 host: numpy 486 passed; scipy 5744 passed, 9 failed before
# the fixes. Expected 3-6 minutes with the GPU forced (an estimate; scipy's suite dominates).
# Exit status: 0 when every suite passed.
set -u
B=${BUNDLE:-.gpu-bundle}
OFFLOAD=$B/examples/offload
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/oneshot-out}
T=${SUITE_TIMEOUT:-900}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0
shim=1
if [ ! -x "$OFFLOAD" ] || [ ! -f "$B/examples/liboffload_preload.so" ]; then
  if [ "${SMOKE:-0}" = 1 ]; then
    echo "suites: no shim in $B (smoke mode): plain runs only"
    shim=0
  else
    echo "suites: $OFFLOAD or $B/examples/liboffload_preload.so missing (set BUNDLE)" >&2
    exit 1
  fi
fi
select=()
[ "${SMOKE:-0}" = 1 ] && select=(-k "svd or eigh")

# suite NAME MODE ARGS...: MODE plain | always
suite() {
  local name=$1 mode=$2; shift 2
  local log="$OUT/suite.$name.$mode.log" rc
  if [ "$mode" = plain ]; then
    timeout "$T" "$PY" -m pytest -q -p no:cacheprovider "${select[@]}" "$@" > "$log" 2>&1
  else
    GPUKIT_OFFLOAD_GPU=always timeout "$T" "$OFFLOAD" run "$PY" -m pytest -q -p no:cacheprovider "${select[@]}" "$@" > "$log" 2>&1
  fi
  rc=$?
  echo "== $name ($mode): rc=$rc"
  grep -E "^(FAILED|ERROR) " "$log" | head -40
  grep -E "^=*.*[0-9]+ (passed|failed|error|errors)( |,|$)" "$log" | tail -1
  [ $rc = 124 ] && echo "   (timed out after ${T}s)"
  [ $rc = 0 ] || status=1
}

status=0
numpy_args=(--pyargs numpy.linalg)
scipy_args=(--pyargs scipy.linalg.tests.test_decomp scipy.linalg.tests.test_basic)
if [ "${SMOKE:-0}" = 1 ]; then
  scipy_args=()
fi
for s in numpy scipy; do
  if [ "$s" = numpy ]; then args=("${numpy_args[@]}"); else args=("${scipy_args[@]}"); fi
  [ ${#args[@]} -eq 0 ] && continue
  if [ "${BASELINE:-0}" = 1 ] || [ $shim = 0 ]; then suite "$s" plain "${args[@]}"; fi
  [ $shim = 1 ] && suite "$s" always "${args[@]}"
done
echo "suites: logs in $OUT; status $status"
exit $status
