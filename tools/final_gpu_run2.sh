#!/usr/bin/env bash
# Second verification call (the lead's): the new sched GPU tests (partitions, cuBLAS in a task)
# and sched_bench after the lent-lane ordering fix, the offload library's GPU tests after the
# concurrency-test fix, core's GPU tests and transfer table after the huge-page change, and
# the unmeasured GEMM version 2 (tests + sweep), last.
set -u
B=.gpu-bundle
OUT=${OUT:-/tmp/final-out2}; mkdir -p "$OUT"
S="$OUT/summary.txt"; : > "$S"
export GPUKIT_REQUIRE_GPU=1 GPUKIT_CACHE_DIR="$PWD/.kcache" RUST_BACKTRACE=1
step() { echo "== $*" | tee -a "$S"; }
run_test() { # name timeout
  timeout "$2" "$B/tests/$1" > "$OUT/$1.log" 2>&1; local rc=$?
  echo "$1 rc=$rc :: $(grep -E '^test result' "$OUT/$1.log" | tail -1)" | tee -a "$S"
  grep -E "FAILED|panicked at" "$OUT/$1.log" | head -6 | tee -a "$S"
}
step "sched"; run_test gpukit-sched.gpu.test 80
timeout 70 $B/examples/sched_bench_core > "$OUT/sched_bench.log" 2>&1; echo "sched_bench rc=$?" | tee -a "$S"
grep -E "^\| (shares|isolation|work|overheads)" "$OUT/sched_bench.log" | cut -c1-230 | tee -a "$S"
step "offload"; run_test gpukit-offload.gpukit_offload.lib 45
step "core"
for t in gpukit-core.gpu_ops.test gpukit-core.gpu_alloc.test gpukit-core.gpu_device.test; do run_test $t 40; done
timeout 45 $B/examples/core_bench > "$OUT/core_bench.log" 2>&1; echo "core_bench rc=$?" | tee -a "$S"
grep -E "^\| " "$OUT/core_bench.log" | tee -a "$S"
step "gemm version 2 (unmeasured until now)"
export GPUKIT_CACHE_DIR="$PWD/$B/gemm2/kcache"
for t in gpukit-core.gemm_gpu.test gpukit-core.gemm_api.test; do
  timeout 70 "$B/gemm2/$t" > "$OUT/$t.log" 2>&1; echo "$t rc=$? :: $(grep -E '^test result' "$OUT/$t.log" | tail -1)" | tee -a "$S"
  grep -E "FAILED|panicked at" "$OUT/$t.log" | head -4 | tee -a "$S"
done
timeout 90 $B/gemm2/gemm_bench > "$OUT/gemm_bench.log" 2>&1; echo "gemm_bench rc=$?" | tee -a "$S"
grep -E "^\|" "$OUT/gemm_bench.log" | tee -a "$S"
tar czf "$OUT/logs.tgz" -C "$OUT" $(cd "$OUT" && ls | grep -v -e summary.txt -e logs.tgz) 2>/dev/null
(cd "$OUT" && ls | grep -v -e summary.txt -e logs.tgz | xargs rm -f)
echo; echo "================ SUMMARY ================"; cat "$S"
