#!/usr/bin/env bash
# gpukit-offload's verification on the GPU host, for the final run (about 230 s; every step has
# a timeout; the summary table comes last). From the project root, with a bundle holding
# examples/offload and examples/liboffload_preload.so (`/work/shared/gpu/pack` makes .gpu-bundle):
#
#   B=.gpu-bundle OUT=$OUT bash tools/gpu/offload.sh
#
# 1. the one-shot numpy program and the scikit-learn + scipy.linalg pipeline, first run of a fresh
#    process each: plain, under the shim with the GPU off (the intercepted share: the Amdahl
#    bound), under `offload run` (gpukit-offload/bench/oneshot/run.sh; checksums must match);
# 2. the repeated whole-program benchmark (bench/whole_program.py, REPS=3): plain, shim gpu=off,
#    shim;
# 3. the small-matrix bound (bench/small_matrices_alt.sh, 30 alternated pairs on one CPU);
# 4. numpy's linalg test suite under the shim with every call forced onto the GPU.
# scipy.linalg's decomposition and basic tests (several minutes with the GPU forced) are in
# gpukit-offload/bench/oneshot/suites.sh, the GPU backend's tests in tools/gpu/offload_gpu.sh.
# The embedded profile is used (the H200 calibration of 2026-12-01): nothing is calibrated here.
# Switches: SKIP_SKLEARN=1, SKIP_WP=1, SKIP_SMALL=1, SKIP_SUITE=1.
set -u
B=${B:-.gpu-bundle}
OUT=${OUT:-/tmp/offload-out}
mkdir -p "$OUT"
S=gpukit-offload/bench
OFF=$B/examples/offload
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0
: > "$OUT/summary.txt"
sum() { echo "$*" | tee -a "$OUT/summary.txt"; }
t_all=$(date +%s)
if [ ! -x "$OFF" ] || [ ! -f "$B/examples/liboffload_preload.so" ]; then
  echo "offload.sh: $OFF or $B/examples/liboffload_preload.so missing (set B)"; exit 1
fi

# 1. one-shot programs
progs=(numpy); [ "${SKIP_SKLEARN:-0}" = 1 ] || progs+=(sklearn)
BUNDLE=$B STEP_TIMEOUT=50 OUT=$OUT/oneshot timeout 150 bash $S/oneshot/run.sh "${progs[@]}" > "$OUT/oneshot.txt" 2>&1
echo "oneshot rc=$?" >> "$OUT/oneshot.txt"

# 2. the repeated benchmark
if [ "${SKIP_WP:-0}" != 1 ]; then
  export REPS=${REPS:-3}
  timeout 40 python3 $S/whole_program.py > "$OUT/wp_plain.log" 2>&1
  GPUKIT_OFFLOAD_GPU=off GPUKIT_OFFLOAD_LOG=calls timeout 40 "$OFF" run python3 $S/whole_program.py > "$OUT/wp_off.log" 2>&1
  timeout 40 "$OFF" run python3 $S/whole_program.py > "$OUT/wp_shim.log" 2>&1
  unset REPS
fi

# 3. the small-matrix bound
if [ "${SKIP_SMALL:-0}" != 1 ]; then
  PAIRS=${SMALL_PAIRS:-30} timeout 60 bash $S/small_matrices_alt.sh "$OFF" "$OUT" > "$OUT/small.txt" 2>&1
fi

# 4. numpy's linalg suite with the GPU forced
if [ "${SKIP_SUITE:-0}" != 1 ]; then
  (cd "$OUT" && GPUKIT_OFFLOAD_GPU=always timeout 90 "$OLDPWD/$OFF" run python3 -m pytest -q -p no:cacheprovider --pyargs numpy.linalg > "$OUT/suite_numpy.log" 2>&1)
  echo "rc=$?" >> "$OUT/suite_numpy.log"
fi

# summary table
{
  echo "==== gpukit-offload on the GPU host ($(( $(date +%s) - t_all )) s)"
  sed -n '/^== /,$p' "$OUT/oneshot.txt" | grep -vE "^  shim: gpukit-offload: [a-z]+ calls=" 
  echo "-- one-shot per-routine summaries (offload run):"
  grep -E "^  shim: gpukit-offload: [a-z]+ calls=" "$OUT/oneshot.txt"
  if [ -f "$OUT/wp_shim.log" ]; then
    python3 - "$OUT" <<'PY'
import re, sys
o = sys.argv[1]
def t(f):
    m = re.search(r"time=([0-9.]+)s", open(f"{o}/{f}").read()); return float(m.group(1)) if m else float("nan")
def timed(f): return sum(float(x) for x in re.findall(r"^gpukit-offload: \S+ calls=.* timed=([0-9.]+)s", open(f"{o}/{f}").read(), re.M))
def cs(f):
    m = re.search(r"checksum: (.*)", open(f"{o}/{f}").read()); return m.group(1) if m else "?"
plain, off, shim = t("wp_plain.log"), t("wp_off.log"), t("wp_shim.log")
share = timed("wp_off.log") / off if off == off and off > 0 else float("nan")
print(f"-- repeated benchmark (whole_program.py): plain {plain:.2f}s, shim gpu=off {off:.2f}s "
      f"(intercepted share {share*100:.1f}%, Amdahl bound {1/(1-share):.2f}x), offload run {shim:.2f}s = {plain/shim:.2f}x; "
      f"checksums {'match' if cs('wp_plain.log') == cs('wp_shim.log') else 'DIFFER'}")
PY
  fi
  [ -f "$OUT/small.txt" ] && grep -E "median plain|verdict" "$OUT/small.txt"
  [ -f "$OUT/suite_numpy.log" ] && echo "-- numpy.linalg suite, GPU forced: $(grep -E '[0-9]+ (passed|failed)' "$OUT/suite_numpy.log" | tail -1) ($(tail -1 "$OUT/suite_numpy.log"))"
} > "$OUT/table.txt"
cat "$OUT/table.txt" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" oneshot $(cd "$OUT" && ls *.log small.txt oneshot.txt 2>/dev/null) 2>/dev/null
(cd "$OUT" && rm -rf oneshot *.log small.txt oneshot.txt)
cat "$OUT/table.txt"
