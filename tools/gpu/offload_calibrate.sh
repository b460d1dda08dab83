#!/usr/bin/env bash
# The offload calibration on the GPU host, in one call (about 240 s): `offload calibrate --quick`
# measuring the GPU and every CPU library found (the system OpenBLAS and the OpenBLAS builds that
# python3's numpy and scipy load), the GPU start-up in a Python process (a script without
# BLAS calls, plain and under `offload run`, one run logging the start-up steps), and the
# one-shot numpy and scikit-learn programs with the new profile (plain / shim gpu=off / shim).
#
# Needs, in $B (default .gpu-bundle-offload): examples/offload, examples/liboffload_preload.so,
# oneshot/ (gpukit-offload/bench/oneshot). Writes under $OUT: summary.txt, h200-profile.json,
# logs.tgz. Every step has a timeout; the summary table comes last.
set -u
B=${B:-.gpu-bundle-offload}
OUT=${OUT:-/tmp/offload-cal}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0
OFF=$B/examples/offload
: > "$OUT/summary.txt"
sum() { echo "$*" | tee -a "$OUT/summary.txt"; }
t_all=$(date +%s)
sum "host: $(nproc) CPUs; $(python3 -c 'import numpy, scipy, sklearn; print("numpy", numpy.__version__, "scipy", scipy.__version__, "sklearn", sklearn.__version__)' 2>&1)"

# 1. calibration: the GPU and every CPU library, within the budget (larger CPU points extrapolated)
t=$(date +%s.%N)
timeout "${CAL_TIMEOUT:-150}" "$OFF" calibrate --quick --budget "${CAL_BUDGET:-95}" --output "$OUT/h200-profile.json" > "$OUT/calibrate.log" 2>&1
rc=$?
sum "calibrate: rc=$rc wall=$(python3 -c "import time; print(round(time.time() - $t, 1))")s :: $(tail -1 "$OUT/calibrate.log")"
grep -E "^offload: |GPU points|GPU share|budget|extrapolated" "$OUT/calibrate.log" | tee -a "$OUT/summary.txt"
P=""
[ -f "$OUT/h200-profile.json" ] && P=$OUT/h200-profile.json

# 2. start-up cost in a Python process: a ~5 s script that makes no BLAS call, plain and under the
#    shim (CUDA starts at once in the background), alternated; one shim run logs the steps
cat > "$OUT/noblas.py" <<'PY'
import time
t0 = time.perf_counter()
import numpy as np
x = np.random.default_rng(1).random((3000, 3000))
for _ in range(90):
    x = np.sqrt(x + 1.0) - 0.5
print(f"noblas work {time.perf_counter() - t0:.3f}s")
PY
for i in 1 2; do
  t=$(date +%s.%N); timeout 30 python3 "$OUT/noblas.py" > /dev/null 2>&1
  sum "start-up probe plain #$i: $(python3 -c "import time; print(round(time.time() - $t, 3))")s"
  t=$(date +%s.%N); GPUKIT_OFFLOAD_PROFILE=$P GPUKIT_OFFLOAD_LOG=calls timeout 30 "$OFF" run python3 "$OUT/noblas.py" > "$OUT/noblas_shim$i.log" 2>&1
  sum "start-up probe shim  #$i: $(python3 -c "import time; print(round(time.time() - $t, 3))")s :: $(grep -E 'GPU start' "$OUT/noblas_shim$i.log" | head -1)"
done
# the first LAPACK call after start-up: cuSOLVER's load
cat > "$OUT/firstlapack.py" <<'PY'
import time, numpy as np
a = np.random.default_rng(2).standard_normal((4000, 4000)); s = a @ a.T + 4000 * np.eye(4000)
time.sleep(1.5)
t = time.perf_counter(); np.linalg.cholesky(s); print(f"first cholesky {time.perf_counter() - t:.3f}s")
t = time.perf_counter(); np.linalg.cholesky(s); print(f"second cholesky {time.perf_counter() - t:.3f}s")
PY
GPUKIT_OFFLOAD_PROFILE=$P GPUKIT_OFFLOAD_LOG=calls timeout 40 "$OFF" run python3 "$OUT/firstlapack.py" > "$OUT/firstlapack.log" 2>&1
grep -E "cholesky|GPU start|cuSOLVER|dpotrf" "$OUT/firstlapack.log" | head -8 | tee -a "$OUT/summary.txt"

# 3. the one-shot programs with the new profile (first run of a fresh process each)
GPUKIT_OFFLOAD_PROFILE=$P BUNDLE=$B STEP_TIMEOUT=${STEP_TIMEOUT:-40} OUT=$OUT/oneshot \
  timeout "${ONESHOT_TIMEOUT:-85}" bash "$B/oneshot/run.sh" numpy sklearn > "$OUT/oneshot.txt" 2>&1
cat "$OUT/oneshot.txt" >> "$OUT/summary.txt"

# logs: at most 8 files come back
tar czf "$OUT/logs.tgz" -C "$OUT" calibrate.log noblas_shim1.log noblas_shim2.log firstlapack.log oneshot 2>/dev/null
rm -rf "$OUT/oneshot" "$OUT"/*.log "$OUT"/*.py "$OUT/oneshot.txt"
echo "==== summary (total $(( $(date +%s) - t_all )) s)"
cat "$OUT/summary.txt"
