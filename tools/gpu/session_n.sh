#!/usr/bin/env bash
# 2026-12-06, sixth session, call 3 (never ran: no machine came; output kept short, only the last
# 12 000 characters come back), tests first:
#   1. the one-shot numpy and statsmodels programs plain / wave 2's `offload run` (BASE,
#      32b903b) / now (the eager start at load again outside launchers);
#   2. issue 22's thread pool with the CUDA libraries dropped from the page cache before each
#      run, `offload run` / forced, two rounds, then one warm round;
#   3. the small-gelsd crash by precision order (GELSD_PREC), crash frames counted only;
#   4. gpukit-core's gpu_reduce and gpu_ops (the max / min kernel change), gpukit-offload's GPU
#      tests, the offload shim tests;
#   5. numpy.linalg's suite forced under 8 workers with what is left of the call (LIMIT, default
#      560 s of the call; none under 60 s left).
# Run in the order 4, 2, 1, 3, 5.
#   tar xJf .gpu-bundle.tar.xz && tar xJf .gpu-base.tar.xz && B=.gpu-bundle OUT=$OUT bash tools/gpu/session_n.sh
set -u
OUT=${OUT:-/tmp/session-n}
. "$(dirname "$0")/session_common.sh"
echo "== 4. tests (t=$((SECONDS - T0)))"
for t in gpukit-core.gpu_reduce.test gpukit-core.gpu_ops.test gpukit-offload.gpu.test main.offload_shim.test; do
  GPUKIT_REQUIRE_GPU=1 timeout 150 "$B/tests/$t" --test-threads=1 > "$OUT/$t.log" 2>&1
  echo "  $t rc=$? $(grep -E '^test result' "$OUT/$t.log" | tail -1)"
  grep -E "^test .* FAILED" "$OUT/$t.log" | head -4
done
echo "== 2. pool (t=$((SECONDS - T0)))"
for r in 1 2; do one pool now-cold$r 1 python3 $I22/service_pool.py; one pool forced-cold$r 1 python3 $I22/service_pool.py; done
one pool now-warm 0 python3 $I22/service_pool.py; one pool forced-warm 0 python3 $I22/service_pool.py
echo "== 1. one-shot programs (plain / wave 2 / now)"
for p in numpy_oneshot statsmodels_fits; do for m in plain base now; do one $p $m 0 python3 $ONE/$p.py; done; done
echo "== 3. small gelsd by precision order (t=$((SECONDS - T0)))"
for prec in z cz sz dz scz; do
  GELSD_PREC=$prec GELSD_ROUNDS=1 GPUKIT_REQUIRE_GPU=1 timeout 60 "$B/tests/gpukit-offload.gpu.test" --exact small_gelsd_on_the_backend_past_the_gate --test-threads=1 > "$OUT/gelsd.$prec.log" 2>&1
  echo "  GELSD_PREC=$prec rc=$? $(grep -cE '^case ' "$OUT/gelsd.$prec.log") cases; $(grep -m1 -B1 'fatal signal' "$OUT/gelsd.$prec.log" | head -1 | cut -c1-80) $(grep -m1 -oE 'lib[a-zA-Z]*\.so[.0-9]*\([A-Za-z_]*Matmul' "$OUT/gelsd.$prec.log")"
done
left=$(( ${LIMIT:-560} - (SECONDS - T0) ))
echo "== 5. numpy.linalg forced under 8 workers, budget $left s (t=$((SECONDS - T0)))"
[ $left -gt 60 ] && B=$B OUT=$OUT/numpy BUDGET=$left bash "$here/numpy_diag.sh" 2>&1 | tail -28
echo "total $((SECONDS - T0)) s"
