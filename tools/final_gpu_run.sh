#!/usr/bin/env bash
# The lead's verification on the GPU host, in one call (under the 600 s limit of one call): every
# packed test binary (GPU tests required), gemm_bench, the offload whole-program benchmark, a
# short criterion GEMM run, the README's demos, and sched_bench with WITH_SCHED=1. Each step has
# its own time limit; a summary is printed last. The mutex/torch checks are in
# tools/torch_mutex_check.sh and the mutex bench.
#   bash tools/final_gpu_run.sh        (expects .gpu-bundle/ and .kcache/ in the root)
set -u
B=.gpu-bundle
OUT=${OUT:-/tmp/final-out}; mkdir -p "$OUT"
S="$OUT/summary.txt"; : > "$S"
export GPUKIT_CACHE_DIR="$PWD/.kcache" PYTHONUNBUFFERED=1
step() { echo "== $*" | tee -a "$S"; }

step "tests"
timeout "${T_TESTS:-200}" bash $B/run-tests.sh --skip numpy_linalg_suite_passes_under_the_shim > "$OUT/tests.log" 2>&1
echo "rc=$? :: $(tail -1 "$OUT/tests.log")" | tee -a "$S"
grep -E "^failing binaries|FAILED|panicked at" "$OUT/tests.log" | head -12 | tee -a "$S"

step "gemm_bench (cuBLAS in the same process)"
timeout "${T_GEMM:-100}" $B/examples/gemm_bench > "$OUT/gemm_bench.log" 2>&1; echo "rc=$?" | tee -a "$S"
grep -E "^\|" "$OUT/gemm_bench.log" | tee -a "$S"

step "offload whole program (REPS=${REPS:-6}, embedded profile)"
ln -sfn .gpu-bundle .gpu-bundle-offload
mkdir -p "$OUT/offload"
SMALL_PAIRS=${SMALL_PAIRS:-40} REPS=${REPS:-6} SKIP_TESTS=1 SKIP_CAL=1 OUT="$OUT/offload" timeout "${T_OFFLOAD:-230}" bash gpukit-offload/bench/run_gpu_host.sh > /dev/null 2>&1
echo "rc=$?" | tee -a "$S"
cat "$OUT/offload/summary.txt" >> "$S" 2>/dev/null

step "criterion gemm bench (short)"
for b in $B/benches/gemm-*; do
  timeout "${T_CRIT:-60}" "$b" --bench --warm-up-time 0.5 --measurement-time 1 --noplot 2>&1 | grep -E "^gemm|time:" | tee -a "$S"
done

step "quickstart and the offload demo (the README's main command)"
timeout 15 $B/examples/quickstart 2>&1 | tail -4 | tee -a "$S"
timeout 25 $B/examples/offload > "$OUT/offload-demo.log" 2>&1; echo "offload demo rc=$?" | tee -a "$S"
tail -6 "$OUT/offload-demo.log" | tee -a "$S"

if [ "${WITH_SCHED:-0}" = 1 ]; then
  step "sched_bench"
  timeout "${T_SCHED:-90}" $B/examples/sched_bench > "$OUT/sched.log" 2>&1; echo "rc=$?" | tee -a "$S"
  grep -E "^\|" "$OUT/sched.log" | tee -a "$S"
fi

echo; echo "================ SUMMARY ================"; cat "$S"
