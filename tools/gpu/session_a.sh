#!/usr/bin/env bash
# One GPU call: the small-gelsd diagnostic, the tiny-call and tiny-GEMM-plan tests with every
# call named, the whole GPU test suite, and the exit-crash loop under `python -m gpukit.offload
# run`. Expects the bundle extracted in $B with the wheel in $B/wheels.
#   B=.gpu-bundle OUT=$OUT bash tools/gpu/session_a.sh
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/session-a}; mkdir -p "$OUT"
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== gelsd diagnostic"
BUNDLE=$B OUT=$OUT/gelsd timeout 150 bash tools/gpu/gelsd_diag.sh
echo "== tiny LAPACK calls, named ($((SECONDS - T0)) s)"
(. tools/gpu/kcache.sh; GPUKIT_REQUIRE_GPU=1 timeout 90 "$B/tests/gpukit-offload.gpu.test" --exact \
  tiny_calls_of_every_lapack_routine_match_cpu_repeatedly --nocapture > "$OUT/tiny.log" 2>&1; \
  echo "rc $?: $(grep '^test result' "$OUT/tiny.log"); last: $(grep -v '^$' "$OUT/tiny.log" | tail -3 | tr '\n' '|')")
echo "== tiny GEMM plans ($((SECONDS - T0)) s)"
(. tools/gpu/kcache.sh; GPUKIT_REQUIRE_GPU=1 timeout 120 "$B/tests/gpukit-core.gemm_gpu.test" --exact \
  every_candidate_plan_of_tiny_shapes_is_accurate --nocapture > "$OUT/tinygemm.log" 2>&1; \
  echo "rc $?: $(grep '^test result\|plans checked' "$OUT/tinygemm.log" | tr '\n' ' '); $(grep -m3 'panicked\|exceeds' "$OUT/tinygemm.log")")
echo "== final tests ($((SECONDS - T0)) s)"
OUT=$OUT/ft BUNDLE=$B timeout 330 bash tools/gpu/final_tests.sh 2>&1 | tail -40
echo "== exit loop ($((SECONDS - T0)) s)"
export PYTHONPATH=/tmp/gpukit-site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/gpukit-site/bin:$PATH
prog=$OUT/exitprog.py
printf 'import numpy as np\nrng = np.random.default_rng(0)\na = rng.standard_normal((400, 400))\nx = np.linalg.solve(a @ a.T + 400 * np.eye(400), np.ones(400))\nprint("checksum", round(float(x.sum()), 6))\n' > "$prog"
bad=0; n=${EXIT_RUNS:-20}
for i in $(seq "$n"); do
  PYTHONFAULTHANDLER=1 timeout 60 python3 -m gpukit.offload run python3 "$prog" > "$OUT/exit.out" 2> "$OUT/exit.err"; rc=$?
  if [ $rc -ne 0 ]; then bad=$((bad + 1)); echo "  run $i rc $rc: $(tail -c 300 "$OUT/exit.err" | tr '\n' '|')"; fi
done
echo "exit loop: $bad of $n runs ended badly; total $((SECONDS - T0)) s"
