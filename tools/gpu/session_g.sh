#!/usr/bin/env bash
# GPU calls of 2026-12-06's fourth session after the first (session_f.sh), in parts (PARTS):
#   probe:    tools/gpu/driver_sync_probe.py (which CUDA calls wait for another stream's kernel)
#   alloc:    gpu_alloc's retired-stream test alone twice, then the binary serially
#   hostwait: gpu_device's host-wait test
#   i22:      bench/issue22/run.sh (plain | offload run | forced; fixed cost; numpy forced)
#   ab:       issue 22's pool under `offload run` and examples/fixed_cost with each
#             GPUKIT_OFFLOAD_HOST_WAIT (spin, yield, block), interleaved, two rounds
#   gemm:     the gemm_gpu tests that run every candidate (the new wgmma_128x128_2 among them)
#             and gemm_bench --configs on the short-K shapes, cuBLAS beside
# Expects the bundle extracted in $B (kcache inside).
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/session-g}; mkdir -p "$OUT"
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
. tools/gpu/kcache.sh
for part in ${PARTS:-probe alloc hostwait}; do
case $part in
probe)
  echo "== driver sync probe ($((SECONDS - T0)) s)"
  timeout 120 python3 tools/gpu/driver_sync_probe.py 2>&1 | tail -24 ;;
alloc)
  echo "== gpu_alloc ($((SECONDS - T0)) s)"
  A=$B/tests/gpukit-core.gpu_alloc.test
  for i in 1 2; do
    GPUKIT_REQUIRE_GPU=1 timeout 40 "$A" --exact retired_streams_are_never_waited_for > "$OUT/alloc.alone.$i" 2>&1
    echo "  alone $i: rc $? $(grep -h '^test result' "$OUT/alloc.alone.$i") $(grep -h 'waited' "$OUT/alloc.alone.$i" | head -1 | cut -c1-200)"
  done
  GPUKIT_REQUIRE_GPU=1 timeout 120 "$A" --test-threads=1 > "$OUT/alloc.serial" 2>&1
  echo "  serial: rc $? $(grep '^test result' "$OUT/alloc.serial") $(grep -h 'waited\|panicked' "$OUT/alloc.serial" | head -3 | cut -c1-200)" ;;
hostwait)
  echo "== host wait ($((SECONDS - T0)) s)"
  GPUKIT_REQUIRE_GPU=1 timeout 60 "$B/tests/gpukit-core.gpu_device.test" --exact host_wait_sets_the_scheduling_flags_and_frees_the_core --nocapture 2>&1 | grep -E "waited|test result|panicked" -A1 | head -12 ;;
i22)
  echo "== issue 22's programs ($((SECONDS - T0)) s)"
  PROGRAMS="${I22_PROGRAMS:-small pool njobs short}" BUNDLE=$B OUT=$OUT/i22 RUN_BUDGET=${I22_BUDGET:-430} \
    NUMPY_BUDGET=${NUMPY_BUDGET:-200} timeout 470 bash gpukit-offload/bench/issue22/run.sh 2>&1 | grep -vE "^\s*$" | tail -50 ;;
ab)
  echo "== host wait A/B: pool under offload run, fixed cost ($((SECONDS - T0)) s)"
  export GPUKIT_OFFLOAD_PERSIST=0 PYTHONUNBUFFERED=1
  for r in 1 2; do
    for w in spin yield block; do
      t=$SECONDS
      GPUKIT_OFFLOAD_HOST_WAIT=$w GPUKIT_OFFLOAD_LOG=summary timeout 60 "$B/examples/offload" run python3 gpukit-offload/bench/issue22/service_pool.py > "$OUT/ab.pool.$w.$r" 2>&1
      echo "  pool $w round $r: rc $? $(grep -E '^wall' "$OUT/ab.pool.$w.$r") $(grep -E '^section' "$OUT/ab.pool.$w.$r" | tr '\n' ' ') start: $(grep -o 'GPU start ready in [0-9.]*s' "$OUT/ab.pool.$w.$r" | head -1)"
    done
  done
  for w in spin yield block; do
    GPUKIT_OFFLOAD_HOST_WAIT=$w timeout 60 "$B/examples/fixed_cost" 300 > "$OUT/ab.fixed.$w" 2>&1
    echo "  fixed cost, $w:"; grep -E "dgemm|dpotrf|dgetrf|dgesv|dsyevd|dgesdd" "$OUT/ab.fixed.$w" | head -8 | sed 's/^/    /'
  done ;;
gemm)
  echo "== gemm: candidates' correctness, the two-blocks tile ($((SECONDS - T0)) s)"
  export GPUKIT_REQUIRE_GPU=1
  T=$B/tests/gpukit-core.gemm_gpu.test
  for t in every_candidate_plan_of_tiny_shapes_is_accurate wgmma_paths_on_awkward_shapes tf32_inputs_are_rounded_to_nearest_not_truncated autotuner_measures_a_class_once_and_its_choice_runs_correctly; do
    GPUKIT_GEMM_TUNE=fresh timeout 170 "$T" --exact "$t" --nocapture > "$OUT/gemm.$t.log" 2>&1
    echo "  $t: rc $? $(grep -h '^test result' "$OUT/gemm.$t.log") $(grep -h panicked -A2 "$OUT/gemm.$t.log" | head -3 | cut -c1-250)"
    grep -E '^tuned ' "$OUT/gemm.$t.log" | head -8 | cut -c1-200
  done
  echo "== gemm_bench --configs, short K ($((SECONDS - T0)) s)"
  timeout 200 "$B/examples/gemm_bench" --shapes "4096,4096,256;8192,2048,256;2500,2500,500;4096,4096,4096" --configs > "$OUT/gemm_bench.configs.log" 2>&1
  echo "  rc $?"; grep -E "wgmma_128x128_2|wgmma_128x256 |wgmma_128x128 |cuBLAS|planner|shape" "$OUT/gemm_bench.configs.log" | head -60 | cut -c1-220 ;;
esac
done
echo "total $((SECONDS - T0)) s"
