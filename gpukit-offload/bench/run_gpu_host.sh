#!/usr/bin/env bash
# The offload measurements on the GPU host, in one call (see gpukit-offload/README.md).
# Needs .gpu-bundle-offload (tests + examples/offload + examples/liboffload_preload.so, and
# benches/dispatch-* for the fast-path figure). Writes logs (one archive), the summary and, when it
# calibrates, the profile under $OUT (at most 3 files); every step has a timeout.
# Default (about 360 s): tests, no calibration unless SKIP_CAL=0 (the embedded profile is the
# H200 one), whole program (REPS=6) plain / shim gpu=off / shim twice,
# per-call comparison, small matrices,
# fast-path bench. SVD_CHECK=1 adds the thin-SVD accuracy check (~10 s).
set -u
B=.gpu-bundle-offload
OUT=${OUT:-/tmp/offload-out}; mkdir -p "$OUT"
S=gpukit-offload/bench
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0 REPS=${REPS:-6}
sum() { echo "$*" | tee -a "$OUT/summary.txt"; }
: > "$OUT/summary.txt"
# 1. tests (GPU tests required)
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  t=$(date +%s.%N)
  timeout ${TEST_TIMEOUT:-120} bash $B/run-tests.sh > "$OUT/tests.log" 2>&1; rc=$?; t2=$(date +%s.%N)
  sum "tests: $(tail -1 "$OUT/tests.log") (rc=$rc, $(python3 -c "print(round($t2 - $t, 1))")s)"
  grep -E "FAILED|panicked|^failures|error" "$OUT/tests.log" | head -20
fi
# 2. quick calibration
if [ "${SKIP_CAL:-1}" != 1 ]; then
  t=$(date +%s.%N)
  timeout 200 $B/examples/offload calibrate --quick --budget ${CAL_BUDGET:-150} --output "$OUT/h200-profile.json" > "$OUT/calibrate.log" 2>&1
  rc=$?; t2=$(date +%s.%N)
  sum "calibrate --quick: rc=$rc wall=$(python3 -c "print(round($t2 - $t, 1))")s :: $(tail -1 "$OUT/calibrate.log")"
  grep "points extrapolated" "$OUT/calibrate.log" | tee -a "$OUT/summary.txt"
  grep -E "x1=(4096|6144)" "$OUT/calibrate.log" | grep -E "^calibrate: (gemm|potrf|gesv) [sd] " | tee -a "$OUT/summary.txt"
fi
[ -f "$OUT/h200-profile.json" ] && export GPUKIT_OFFLOAD_PROFILE="$OUT/h200-profile.json"
timeout 20 $B/examples/offload explain > "$OUT/explain.txt" 2>&1
# 3. whole-program benchmark: plain, under the shim with the GPU off (CPU-only share), with the GPU
timeout 60 python3 $S/whole_program.py > "$OUT/wp_plain.log" 2>&1
GPUKIT_OFFLOAD_LOG=calls GPUKIT_OFFLOAD_GPU=off timeout 60 $B/examples/offload run python3 $S/whole_program.py > "$OUT/wp_cpu_shim.log" 2>&1
GPUKIT_OFFLOAD_LOG=calls timeout 60 $B/examples/offload run python3 $S/whole_program.py > "$OUT/wp_gpu.log" 2>&1
# a second shim run: the run-to-run spread of the shim figure
GPUKIT_OFFLOAD_LOG=calls timeout 60 $B/examples/offload run python3 $S/whole_program.py > "$OUT/wp_gpu2.log" 2>&1
sum "plain:      $(grep whole_program "$OUT/wp_plain.log")"
sum "shim gpu=off: $(grep whole_program "$OUT/wp_cpu_shim.log")"
sum "shim gpu:   $(grep whole_program "$OUT/wp_gpu.log")"
grep -E "gpukit-offload: background start" "$OUT/wp_gpu.log" | tee -a "$OUT/summary.txt"
sum "shim gpu (2nd run): $(grep whole_program "$OUT/wp_gpu2.log")"
grep -E "gpukit-offload: background start" "$OUT/wp_gpu2.log" | tee -a "$OUT/summary.txt"
python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import re, sys
o = sys.argv[1]
def t(f): return float(re.search(r"time=([0-9.]+)s", open(f"{o}/{f}").read()).group(1))
def timed(f): return sum(float(x) for x in re.findall(r"timed=([0-9.]+)s", open(f"{o}/{f}").read()))
plain, cpu, gpu = t("wp_plain.log"), t("wp_cpu_shim.log"), t("wp_gpu.log")
reps = int(re.search(r"reps=(\d+)", open(f"{o}/wp_cpu_shim.log").read()).group(1))
setup = float(re.search(r"setup=([0-9.]+)s", open(f"{o}/wp_cpu_shim.log").read()).group(1))
gpu2 = t("wp_gpu2.log")
print(f"whole program, 2nd shim run: {gpu2:.2f}s, speedup {plain/gpu2:.2f}x")
print(f"whole program: CPU-only {plain:.2f}s, intercepted share {timed('wp_cpu_shim.log')/cpu*100:.1f}%, with GPU {gpu:.2f}s, speedup {plain/gpu:.2f}x")
print(f"whole program (shim gpu=off): per repetition {timed('wp_cpu_shim.log')/reps:.2f}s inside intercepted calls, "
      f"{(cpu - timed('wp_cpu_shim.log'))/reps:.2f}s outside (one-off kernel setup {setup:.2f}s included in the latter); "
      f"GPU run: {timed('wp_gpu.log'):.2f}s inside intercepted calls, {gpu - timed('wp_gpu.log'):.2f}s outside")
for f in ("wp_plain.log", "wp_gpu.log"):
    print(f, re.search(r"checksum: .*", open(f"{o}/{f}").read()).group(0))
PY
grep "^gpukit-offload: [a-z]* calls" "$OUT/wp_gpu.log" | tee -a "$OUT/summary.txt"
python3 $S/compare_calls.py "$OUT/wp_cpu_shim.log" "$OUT/wp_gpu.log" | tee -a "$OUT/summary.txt"
echo "per call, 2nd shim run:" | tee -a "$OUT/summary.txt"
python3 $S/compare_calls.py "$OUT/wp_cpu_shim.log" "$OUT/wp_gpu2.log" | tee -a "$OUT/summary.txt"
grep -E "gpukit-offload: dgesdd .* -> gpu" "$OUT/wp_gpu.log" | head -2 | tee -a "$OUT/summary.txt"
# 3b. thin-SVD accuracy at 6000x2000: CPU gesdd vs the GPU's polar SVD (measured before; optional)
if [ "${SVD_CHECK:-0}" = 1 ]; then
  timeout 60 python3 $S/svd_check.py 2>&1 | tee -a "$OUT/summary.txt"
  GPUKIT_OFFLOAD_GPU=always timeout 60 $B/examples/offload run python3 $S/svd_check.py 2>&1 | grep -E "svd_check|dgesdd|fallback" | tee -a "$OUT/summary.txt"
fi
# 4. small matrices: PAIRS alternating plain / shim runs, pinned to the same cores
PAIRS=${SMALL_PAIRS:-100} timeout 220 bash $S/small_matrices_alt.sh $B/examples/offload "$OUT" | tee -a "$OUT/summary.txt"
# 5. the fast-path overhead bench (baseline and shim entry in the same run)
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  for b in $B/benches/dispatch-*; do [ -x "$b" ] || continue; timeout 40 "$b" --bench --warm-up-time 1 --measurement-time 3 --noplot > "$OUT/bench.log" 2>&1; done
  grep -E "^dgemm|time:" "$OUT/bench.log" | tee -a "$OUT/summary.txt"
fi
# at most 8 files come back: everything but the profile and the summary goes into one archive
tar czf "$OUT/logs.tgz" -C "$OUT" $(cd "$OUT" && ls | grep -v -e '^logs.tgz$' -e '^h200-profile.json$' -e '^summary.txt$') 2>/dev/null
(cd "$OUT" && ls | grep -v -e '^logs.tgz$' -e '^h200-profile.json$' -e '^summary.txt$' | xargs rm -f)
