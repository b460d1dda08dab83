#!/usr/bin/env bash
# First GPU call of 2026-12-06's fourth session, in parts (PARTS, default "probe alloc sched
# calls"; "i22" runs issue 22's programs and numpy's suite, about 6 minutes, in a call of its
# own). Expects the bundle extracted in $B (with kcache), $FIX/sched_bench_core.base (a build of
# 32b903b) for the sched rows, and the wheel installed for nothing here (plain python3 + numpy).
#   probe: which CUDA calls wait for a kernel on another non-blocking stream (cupy)
#   alloc: gpu_alloc's retired-stream test alone twice, then the binary serially
#   sched: sched_bench base / now twice each, alternating (issue 21's submit row)
#   calls: issue 22's pool and njobs under `offload run` with every decision logged
#   i22:   bench/issue22/run.sh (plain | offload run | forced, fixed cost, numpy forced)
set -u
B=${B:-.gpu-bundle}; FIX=${FIX:-.gpu-fix}; OUT=${OUT:-/tmp/session-f}; mkdir -p "$OUT"
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
. tools/gpu/kcache.sh
for part in ${PARTS:-probe alloc sched calls}; do
case $part in
probe|alloc)
  # the same parts as session_g.sh (where they grew: the reduce_partial registers were a
  # one-off of this call, tools/gpu/reduce_regs.sh)
  B=$B OUT=$OUT PARTS=$part bash tools/gpu/session_g.sh | grep -v '^total' ;;
sched)
  echo "== sched_bench base / now ($((SECONDS - T0)) s)"
  for r in 1 2; do
    for v in base new; do
      if [ $v = base ]; then bench=$FIX/sched_bench_core.base; else bench=$B/examples/sched_bench_core; fi
      [ -x "$bench" ] || { echo "  $bench missing"; continue; }
      t=$SECONDS
      timeout 90 "$bench" > "$OUT/sched.$v.$r" 2>&1
      echo "  $v $r (rc $?, $((SECONDS - t)) s): submit $(grep -E 'submit \+ admission \(median' "$OUT/sched.$v.$r" | cut -d'|' -f3-5) | raw launch $(grep -E 'kernel launch from' "$OUT/sched.$v.$r" | head -2 | cut -d'|' -f3-5 | tr '\n' ' ')"
    done
  done
  grep -E 'FAIL' "$OUT"/sched.new.* | head -5 ;;
calls)
  echo "== pool and njobs, every decision logged ($((SECONDS - T0)) s)"
  export GPUKIT_OFFLOAD_PERSIST=0 PYTHONUNBUFFERED=1
  for p in service_pool sklearn_njobs; do
    t=$SECONDS
    GPUKIT_OFFLOAD_LOG=calls timeout 120 "$B/examples/offload" run python3 gpukit-offload/bench/issue22/$p.py > "$OUT/calls.$p.log" 2>&1
    echo "  $p: rc $? $((SECONDS - t)) s; $(grep -E '^wall|^section' "$OUT/calls.$p.log" | tr '\n' ' ')"
    # the decisions: backend and reason per routine and shape, with counts and summed seconds
    grep -E '^gpukit-offload: [a-z]+ ' "$OUT/calls.$p.log" | grep -E ' -> ' |
      awk '{r=$2; sh=$3; b=$0; sub(/.* -> /, "", b); split(b, x, " "); be=x[1]; why=""; if (x[2] ~ /^\(/) why=x[2];
            for (i=1;i<=NF;i++) if ($i ~ /s$/ && $i ~ /^[0-9.]+s$/) s=$i; sub(/s$/, "", s);
            k=r" "sh" "be" "why; n[k]++; tot[k]+=s} END {for (k in n) printf "    %-60s n=%-4d sum=%.3fs\n", k, n[k], tot[k]}' |
      sort -t= -k3 -rn | head -25
    grep -E 'summary|start|worker|memory leak' "$OUT/calls.$p.log" | grep -v ' -> ' | head -12 | cut -c1-220
  done ;;
i22)
  echo "== issue 22's programs ($((SECONDS - T0)) s)"
  PROGRAMS="${I22_PROGRAMS:-small pool njobs short}" BUNDLE=$B OUT=$OUT/i22 RUN_BUDGET=${I22_BUDGET:-500} \
    NUMPY_BUDGET=${NUMPY_BUDGET:-240} timeout 560 bash gpukit-offload/bench/issue22/run.sh 2>&1 | grep -vE "^\s*$" | tail -50 ;;
esac
done
echo "total $((SECONDS - T0)) s"
