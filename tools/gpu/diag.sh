#!/usr/bin/env bash
# Diagnostic call (session of 2026-12-04): the GPU tests that failed on the H200 last session,
# with full output, so their causes can be read: gpukit-sched's fault tests (hung kernels,
# sticky errors), the GEMM autotuner test, gpukit-offload's GPU tests; plus fixed_cost.
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/diag.sh
set -u
B=${BUNDLE:-.gpu-bundle}; T=$B/tests
export GPUKIT_REQUIRE_GPU=1 RUST_BACKTRACE=1
export GPUKIT_CACHE_DIR=$(mktemp -d); cp -r "$B/kcache"/. "$GPUKIT_CACHE_DIR"/ 2>/dev/null; chmod -R go-rwx "$GPUKIT_CACHE_DIR"
T0=$SECONDS
run() { local f=$1 l=$2; shift 2; local t=$SECONDS; { timeout "$l" "$@" 2>&1; echo "rc=$? after $((SECONDS - t)) s"; } | tail -c 4000000 >> "$OUT/$f"; }
sum() { echo "$1: $(grep '^test result' "$OUT/$1" | tr '\n' ' ') $(grep -c '\.\.\. FAILED' "$OUT/$1") FAILED-lines; $(tail -1 "$OUT/$1")"; }
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
( run offload_gpu.log 200 "$T/gpukit-offload.gpu.test" --test-threads=1 --nocapture ) &
# the fixed-cost branch (main with 1ae66fb reverted), built into .diagc/
[ -x .diagc/offload_fc_gpu.test ] && ( run offload_fc_gpu.log 200 .diagc/offload_fc_gpu.test --test-threads=1 --nocapture ) &
run faults.log 150 "$T/gpukit-sched.gpu_faults.test" --test-threads=1 --nocapture
run tune.log 60 "$T/gpukit-core.gemm_gpu.test" --exact autotuner_measures_a_class_once_and_its_choice_runs_correctly --nocapture
wait
[ -x "$B/examples/fixed_cost" ] && run fixed_cost.log 40 "$B/examples/fixed_cost" 300
[ -x .diagc/fixed_cost_fc ] && run fixed_cost_fc.log 40 .diagc/fixed_cost_fc 300
# issue 22 programs under `offload run` (main), the shim's per-process summaries kept
D=gpukit-offload/bench/issue22; X=.diagc/offload
if [ -x "$X" ]; then
  export GPUKIT_OFFLOAD_PERSIST=0 PYTHONUNBUFFERED=1
  for m in plain offload; do
    if [ $m = plain ]; then pre=""; else pre="$X run"; fi
    ( t=$SECONDS; GPUKIT_OFFLOAD_LOG=summary timeout 60 $pre python3 $D/small_calls.py > "$OUT/i22_small_$m.log" 2>&1; echo "small $m rc=$? $((SECONDS-t)) s" ) | tee -a "$OUT/i22.log"
  done
  ( t=$SECONDS; GPUKIT_OFFLOAD_LOG=summary timeout 60 $X run python3 $D/sklearn_njobs.py > "$OUT/i22_njobs_offload.log" 2>&1; echo "njobs offload rc=$? $((SECONDS-t)) s" ) | tee -a "$OUT/i22.log"
  ( t=$SECONDS; GPUKIT_OFFLOAD_LOG=summary timeout 60 $X run bash $D/short_processes.sh > "$OUT/i22_short_offload.log" 2>&1; echo "short offload rc=$? $((SECONDS-t)) s" ) | tee -a "$OUT/i22.log"
  cat "$OUT"/i22_*.log | grep -v '^ *$' | cut -c1-200 | tail -c 20000 > "$OUT/i22_all.txt"; rm -f "$OUT"/i22_*.log
fi
for f in faults.log tune.log offload_gpu.log offload_fc_gpu.log; do sum $f; done
grep -E '\.\.\. FAILED|panicked at' "$OUT"/*.log | cut -c1-250 | head -40
tail -30 "$OUT/fixed_cost.log" 2>/dev/null; tail -30 "$OUT/fixed_cost_fc.log" 2>/dev/null
echo "total $((SECONDS - T0)) s"
