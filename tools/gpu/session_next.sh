#!/usr/bin/env bash
# The next session's first GPU call (the closing note of 2026-12-06's third session, "first
# things"): gpu_alloc's retired-stream test in several orders, the small-gelsd test, issue 22's
# programs with a 300 s numpy budget on this bundle, and (SCHED=1; it does not fit the same
# call) sched_bench base / now twice each, alternating. Expects the bundle extracted in $B (with
# kcache) and, for the sched rows, $FIX/sched_bench_core.base (a build of 32b903b).
#   B=.gpu-bundle FIX=.gpu-fix OUT=$OUT bash tools/gpu/session_next.sh
set -u
B=${B:-.gpu-bundle}; FIX=${FIX:-.gpu-fix}; OUT=${OUT:-/tmp/session-next}; mkdir -p "$OUT"
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. tools/gpu/kcache.sh
export GPUKIT_REQUIRE_GPU=1
A=$B/tests/gpukit-core.gpu_alloc.test
echo "== gpu_alloc: the retired-stream test alone, twice, then the binary in order"
for i in 1 2; do
  timeout 30 "$A" --exact retired_streams_are_never_waited_for > "$OUT/alloc.alone.$i" 2>&1
  echo "  alone $i: rc $? $(grep -h 'waited' "$OUT/alloc.alone.$i" | head -1)"
done
for t in $("$A" --list 2>/dev/null | sed -n 's/: test$//p' | grep -v retired_streams); do
  timeout 60 "$A" --exact "$t" > /dev/null 2>&1
  timeout 30 "$A" --exact retired_streams_are_never_waited_for > "$OUT/alloc.after.$t" 2>&1
  echo "  after $t (separate processes): rc $?"
done
timeout 60 "$A" --test-threads=1 > "$OUT/alloc.serial" 2>&1
echo "  serial: $(grep '^test result' "$OUT/alloc.serial") $(grep -h 'waited' "$OUT/alloc.serial" | head -1)"
echo "== small gelsd past the gate ($((SECONDS - T0)) s)"
timeout 120 "$B/tests/gpukit-offload.gpu.test" --exact small_gelsd_on_the_backend_past_the_gate > "$OUT/gelsd.log" 2>&1
echo "  rc $? $(grep '^test result' "$OUT/gelsd.log")"
echo "== issue 22's programs, numpy suite budget 300 s ($((SECONDS - T0)) s)"
PROGRAMS="small pool njobs short" BUNDLE=$B OUT=$OUT/i22 RUN_BUDGET=430 NUMPY_BUDGET=300 timeout 450 \
  bash gpukit-offload/bench/issue22/run.sh 2>&1 | grep -vE "^\s*$" | tail -45
echo "total $((SECONDS - T0)) s"
if [ "${SCHED:-0}" = 1 ] && [ -x "$FIX/sched_bench_core.base" ]; then
  for r in 1 2; do
    for v in base new; do
      if [ $v = base ]; then bench=$FIX/sched_bench_core.base; else bench=$B/examples/sched_bench_core; fi
      timeout 60 "$bench" > "$OUT/sched.$v.$r" 2>&1
      echo "  sched $v round $r: $(grep -E 'submit \+ admission \(median' "$OUT/sched.$v.$r" | cut -d'|' -f4) raw launch $(grep -E 'kernel launch from' "$OUT/sched.$v.$r" | cut -d'|' -f5)"
    done
  done
fi
echo "total $((SECONDS - T0)) s"
