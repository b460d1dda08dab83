#!/usr/bin/env bash
# The next session's first GPU call (closing note of 2026-12-06's fourth session): what changed
# after the last GPU run, measured. Needs the bundle extracted in $B (pack --prewarm --wheel),
# and for the sched rows $FIX/sched_bench_core.base (a release build of 32b903b's
# gpukit-sched example sched_bench_core; SCHED=1).
#   1. issue 22's programs with the crowded-wait rule (531aa49) and `offload run`'s signal rules
#      (abfae4b), plain | offload run | forced, and numpy's suite forced under 8 workers, stopped
#      with SIGINT at NUMPY_BUDGET (durations of every finished test printed);
#   2. the pool under `offload run` with every decision logged (did the crowded calls wait?);
#   3. (SCHED=1) sched_bench base / now alternated, two rounds (issue 21's admitted path).
#   B=.gpu-bundle FIX=.gpu-fix OUT=$OUT bash tools/gpu/session_next.sh
set -u
B=${B:-.gpu-bundle}; FIX=${FIX:-.gpu-fix}; OUT=${OUT:-/tmp/session-next}; mkdir -p "$OUT"
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. tools/gpu/kcache.sh
echo "== issue 22's programs and numpy's suite ($((SECONDS - T0)) s)"
PROGRAMS="small pool njobs short" BUNDLE=$B OUT=$OUT/i22 RUN_BUDGET=${I22_BUDGET:-420} \
  NUMPY_BUDGET=${NUMPY_BUDGET:-240} timeout 460 bash gpukit-offload/bench/issue22/run.sh 2>&1 |
  grep -vE "^\s*$" | grep -vE "gpu path|^  (dgemm|dpotrf|dgetrf|dgesv|dsyevd|dgesdd).*\|" | tail -60
echo "== pool, every decision logged ($((SECONDS - T0)) s)"
GPUKIT_OFFLOAD_PERSIST=0 GPUKIT_OFFLOAD_LOG=calls timeout 90 "$B/examples/offload" run python3 \
  gpukit-offload/bench/issue22/service_pool.py > "$OUT/pool.calls.log" 2>&1
grep -E "^wall|^section|GPU start ready| -> cpu" "$OUT/pool.calls.log" | cut -c1-200 | head -20
if [ "${SCHED:-0}" = 1 ] && [ -x "$FIX/sched_bench_core.base" ]; then
  echo "== sched_bench base / now ($((SECONDS - T0)) s)"
  for r in 1 2; do
    for v in base new; do
      if [ $v = base ]; then bench=$FIX/sched_bench_core.base; else bench=$B/examples/sched_bench_core; fi
      timeout 60 "$bench" > "$OUT/sched.$v.$r" 2>&1
      echo "  $v $r: $(grep -E 'submit \+ admission \(median' "$OUT/sched.$v.$r" | cut -d'|' -f4) raw launch $(grep -E 'kernel launch from' "$OUT/sched.$v.$r" | cut -d'|' -f4-5)"
    done
  done
fi
echo "total $((SECONDS - T0)) s"
