#!/usr/bin/env bash
# Every GPU-facing test of the workspace on the GPU host in one call (target: under 9 minutes),
# GPUKIT_REQUIRE_GPU=1 (a GPU test may not skip itself), from a bundle made by
# `../shared/gpu/pack --prewarm --wheel` (or with the wheel copied into BUNDLE/wheels):
#   1. in parallel, one process per binary: gpukit-core's and gpukit-jit's GPU test binaries
#      (the NVRTC-only compile tests are CI's), each gemm_gpu test in a process of its own;
#      then gpu_alloc alone (it fills the GPU's memory);
#   2. one after another: gpukit-sched's gpu, gpu_faults, gpu_multi;
#   3. gpukit-offload's GPU tests, the offload shim tests (numpy under the shim), the
#      gpumutex run/preload tests, gpukit-mutex's driver-discovery test;
#   4. the Python wheel's pytest suite (torch and CuPy present).
# Prints one line per binary and the total "N passed, N failed" last. Logs under $OUT.
#   BUNDLE=.gpu-bundle bash tools/gpu/final_tests.sh
set -u
B=${BUNDLE:-.gpu-bundle}
OUT=${OUT:-/tmp/final-tests}; mkdir -p "$OUT/logs"
export GPUKIT_REQUIRE_GPU=1 RUST_BACKTRACE=1 PYTHONUNBUFFERED=1
. "$(dirname "$0")/kcache.sh"
T0=$SECONDS
SUM=$OUT/summary.txt; : > "$SUM"
line() { echo "$*" | tee -a "$SUM"; }
result() { # log -> "p f"
  sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$1" | awk '{p+=$1; f+=$2} END {print p+0, f+0}'
}
one() { # name limit cmd...
  local name=$1 limit=$2; shift 2
  local log="$OUT/logs/$name.log" t=$SECONDS
  timeout "$limit" "$@" > "$log" 2>&1; local rc=$?
  read -r p f < <(result "$log")
  [ $rc -eq 124 ] && echo "TIMEOUT after $limit s" >> "$log"
  local skips; skips=$(grep -c "SKIPPED" "$log")
  line "$(printf '%-44s rc=%-3s %4s passed %3s failed %3s skipped-lines %4ss' "$name" "$rc" "$p" "$f" "$skips" "$((SECONDS - t))")"
}
# 1. core and jit, one process per binary, in parallel; gemm_gpu one process per test
for bin in "$B"/tests/gpukit-core.* "$B"/tests/gpukit-jit.*; do
  [ -x "$bin" ] || continue
  case "$bin" in *kernels_nvrtc*|*gemm_nvrtc*|*compile.test|*signatures*|*cache*|*gemm_gpu*|*gpu_alloc*|*.lib) continue ;; esac
  n=$(basename "$bin"); one "$n" 240 "$bin" &
done
GG=$B/tests/gpukit-core.gemm_gpu.test
if [ -x "$GG" ]; then
  for t in $("$GG" --list 2>/dev/null | sed -n 's/: test$//p'); do
    one "gemm_gpu::$t" 200 "$GG" --exact "$t" &
  done
fi
wait
# gpu_alloc fills the GPU's memory on purpose (its out-of-memory test takes nearly all of it):
# alone, after the others, so that no other binary fails for memory it holds
A=$(ls "$B"/tests/gpukit-core.gpu_alloc* 2>/dev/null | grep -v '\.d$' | head -1)
[ -n "$A" ] && [ -x "$A" ] && one "$(basename "$A")" 120 "$A"
line "-- core/jit/gemm done at $((SECONDS - T0)) s"
# 2. sched, one at a time
for t in gpu gpu_faults gpu_multi; do
  bin=$B/tests/gpukit-sched.$t.test
  [ -x "$bin" ] && one "gpukit-sched.$t" 120 "$bin" --test-threads=1
done
line "-- sched done at $((SECONDS - T0)) s"
# 3. offload, the shims, mutex discovery
for pat in "gpukit-offload.gpu.test" "*.offload_shim.test" "*.gpumutex_run.test" "*.gpumutex_preload.test" "gpukit-mutex.devices.test"; do
  for bin in $B/tests/$pat; do
    # one test at a time: the harness names each test before it runs, so a crash (the H100
    # run of 2026-12-06 died by SIGSEGV in parallel, its failures' messages lost) names its test
    [ -x "$bin" ] && one "$(basename "$bin")" 200 "$bin" --test-threads=1
  done
done
line "-- offload/mutex done at $((SECONDS - T0)) s"
# 4. Python
if ls "$B"/wheels/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpukit-site "$B"/wheels/*.whl
  export PYTHONPATH=/tmp/gpukit-site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/gpukit-site/bin:$PATH
  t=$SECONDS
  (cd gpukit-python/tests && timeout 240 python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 --hypothesis-seed=0 . > "$OUT/logs/pytest.log" 2>&1)
  line "$(printf '%-44s rc=%-3s %s %4ss' pytest "$?" "$(tail -1 "$OUT/logs/pytest.log")" "$((SECONDS - t))")"
fi
read -r P F < <(cat "$OUT"/logs/*.log | sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' | awk '{p+=$1; f+=$2} END {print p+0, f+0}')
echo
grep -h -B2 -A12 "panicked at\|^test .* FAILED\|^FAILED\|TIMEOUT" "$OUT"/logs/*.log | cut -c1-300 | head -120
echo
cat "$SUM"
echo "Rust test binaries: $P passed, $F failed; total $((SECONDS - T0)) s"
