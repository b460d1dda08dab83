#!/usr/bin/env bash
# The lead's verification on the GPU host, in one call: every packed test binary (GPU tests
# required), the PyTorch-under-preload check, the mutex hand-over summary, sched_bench and the
# offload whole-program benchmark. Each step has its own time limit; a summary is printed last.
#   bash tools/final_gpu_run.sh        (expects .gpu-bundle/ and .kcache/ carried along)
set -u
B=.gpu-bundle
OUT=${OUT:-/tmp/final-out}; mkdir -p "$OUT"
S="$OUT/summary.txt"; : > "$S"
export GPUKIT_CACHE_DIR="$PWD/.kcache" PYTHONUNBUFFERED=1
step() { echo "== $*" | tee -a "$S"; }

step "tests"
timeout "${T_TESTS:-160}" bash $B/run-tests.sh --skip numpy_linalg_suite_passes_under_the_shim > "$OUT/tests.log" 2>&1
echo "rc=$? :: $(tail -1 "$OUT/tests.log")" | tee -a "$S"
grep -E "^failing binaries|FAILED|panicked at" "$OUT/tests.log" | head -12 | tee -a "$S"

step "quickstart and the offload demo (the README's main command)"
timeout 15 $B/examples/quickstart 2>&1 | tail -4 | tee -a "$S"
timeout 25 $B/examples/offload > "$OUT/offload-demo.log" 2>&1; echo "offload demo rc=$?" | tee -a "$S"
tail -6 "$OUT/offload-demo.log" | tee -a "$S"

step "torch under gpumutex_preload"
timeout 30 bash tools/torch_mutex_check.sh $B/examples/libgpumutex_preload.so 2>&1 | tail -1 | tee -a "$S"

step "mutex hand-over and uncontended latency (summary)"
for b in $B/benches/mutex-*; do
  GPUKIT_MUTEX_BENCH_UNCONTENDED=1000 GPUKIT_MUTEX_BENCH_HANDOVERS=100 timeout 30 "$b" --bench no-such-bench 2>&1 | grep -E "p50" | tee -a "$S"
done

step "sched_bench"
timeout "${T_SCHED:-90}" $B/examples/sched_bench > "$OUT/sched.log" 2>&1; echo "rc=$?" | tee -a "$S"
grep -E "^\|" "$OUT/sched.log" | tee -a "$S"

step "offload whole program (REPS=${REPS:-2}, embedded profile)"
ln -sfn .gpu-bundle .gpu-bundle-offload
mkdir -p "$OUT/offload"
REPS=${REPS:-2} SKIP_TESTS=1 SKIP_CAL=1 SKIP_BENCH=1 OUT="$OUT/offload" timeout "${T_OFFLOAD:-120}" bash gpukit-offload/bench/run_gpu_host.sh > /dev/null 2>&1
echo "rc=$?" | tee -a "$S"
cat "$OUT/offload/summary.txt" >> "$S" 2>/dev/null

echo; echo "================ SUMMARY ================"; cat "$S"
