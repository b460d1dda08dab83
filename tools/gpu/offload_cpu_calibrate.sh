#!/usr/bin/env bash
# The CPU side of the embedded H200 profile, and the one-shot programs with it, in one call
# (about 230 s): `offload calibrate --cpu-only` measures the OpenBLAS builds python3's numpy
# (scipy_openblas64, ILP64) and scipy (scipy_openblas32) call, one library after the other, on
# top of a profile holding this host's GPU curves ($BASE, made by
# gpukit-offload/tools/merge_h200_profile.py from the 2026-12-01 GPU calibration); then the
# one-shot numpy and scikit-learn programs (first run of a fresh process: plain, shim gpu=off for
# the intercepted share, shim) with the new profile.
#
# Needs in $B (default .gpu-bundle-offload): examples/offload, examples/liboffload_preload.so,
# oneshot/, h200-base.json. Writes under $OUT: summary.txt, h200-profile.json, logs.tgz.
set -u
B=${B:-.gpu-bundle-offload}
OUT=${OUT:-/tmp/offload-cpu-cal}
BASE=${BASE:-$B/h200-base.json}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0
OFF=$B/examples/offload
: > "$OUT/summary.txt"
sum() { echo "$*" | tee -a "$OUT/summary.txt"; }
t_all=$(date +%s)
NP=$(python3 -c "import numpy, glob, os; print(glob.glob(os.path.join(os.path.dirname(numpy.__file__), os.pardir, 'numpy.libs', 'libscipy_openblas64_*.so'))[0])")
SP=$(python3 -c "import scipy, glob, os; print(glob.glob(os.path.join(os.path.dirname(scipy.__file__), os.pardir, 'scipy.libs', 'libscipy_openblas*.so'))[0])")
sum "libraries: numpy $NP; scipy $SP"

# 1. the CPU curves of numpy's and scipy's OpenBLAS
t=$(date +%s.%N)
timeout "${CAL_TIMEOUT:-105}" "$OFF" calibrate --quick --budget "${CAL_BUDGET:-85}" --cpu-only "$BASE" \
  --library "$NP" --library "$SP" --output "$OUT/h200-profile.json" > "$OUT/calibrate.log" 2>&1
rc=$?
sum "calibrate --cpu-only: rc=$rc wall=$(python3 -c "import time; print(round(time.time() - $t, 1))")s :: $(tail -1 "$OUT/calibrate.log")"
grep -E "^offload: |budget used|extrapolated" "$OUT/calibrate.log" | tee -a "$OUT/summary.txt"
grep -E "^calibrate: scipy_openblas(64|32) (gemm|potrf|gesv|syevd\+v|gesdd\+a|gelsd|syevr\+v) d x1=(1024|2048|4096) " "$OUT/calibrate.log" | head -24 | tee -a "$OUT/summary.txt"
P=$BASE
[ -f "$OUT/h200-profile.json" ] && P=$OUT/h200-profile.json

# 2. the one-shot programs with it
GPUKIT_OFFLOAD_PROFILE=$P BUNDLE=$B STEP_TIMEOUT=${STEP_TIMEOUT:-50} OUT=$OUT/oneshot \
  timeout "${ONESHOT_TIMEOUT:-140}" bash "$B/oneshot/run.sh" numpy sklearn > "$OUT/oneshot.txt" 2>&1
cat "$OUT/oneshot.txt" >> "$OUT/summary.txt"

tar czf "$OUT/logs.tgz" -C "$OUT" calibrate.log oneshot 2>/dev/null
rm -rf "$OUT/oneshot" "$OUT"/*.log "$OUT/oneshot.txt"
echo "==== summary (total $(( $(date +%s) - t_all )) s)"
cat "$OUT/summary.txt"
