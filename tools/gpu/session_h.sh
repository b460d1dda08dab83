#!/usr/bin/env bash
# Issue 22 diagnostics (2026-12-06, fifth session): resident memory of a CUDA start with and
# without malloc_trim; the thread pool under `offload run` several times with every decision
# logged, forced beside it; scikit-learn n_jobs plain / `offload run` / every process `lazy`
# (workers start CUDA at their first call that pays) alternated; the new GPU test alone.
#   B=.gpu-bundle OUT=$OUT bash tools/gpu/session_h.sh
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/session-h}; mkdir -p "$OUT"
I22=gpukit-offload/bench/issue22
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0
T0=$SECONDS
echo "== rss, forced, malloc_trim before each figure"
RSS_TRIM=1 GPUKIT_OFFLOAD_GPU=always "$B/examples/offload" run python3 tools/gpu/rss_probe.py 2>&1 |
  grep -E "^(numpy|first|dgemm|dpotrf|dgesdd|dgesv) " | cut -c1-120
for r in ${POOL_ROUNDS:-1 2 3 4}; do
  for m in offload forced; do
    log=$OUT/pool.$m.$r.log
    if [ $m = forced ]; then
      GPUKIT_OFFLOAD_GPU=always timeout 60 "$B/examples/offload" run python3 $I22/service_pool.py > "$log" 2>&1
    else
      GPUKIT_OFFLOAD_LOG=calls timeout 60 "$B/examples/offload" run python3 $I22/service_pool.py > "$log" 2>&1
    fi
    echo "== pool $m $r: $(grep -E '^wall|^section' "$log" | tr '\n' ' ')"
    if [ $m = offload ]; then
      grep -oE "GPU start ready in [0-9.]+s" "$log"
      grep -E " -> (cpu|gpu)" "$log" | awk '{
        for (i = 1; i <= NF; i++) if ($i == "->") { be = $(i+1); rs = (be == "cpu") ? $(i+2) : "-"; t = (be == "cpu") ? $(i+3) : $(i+2) }
        sub(/s$/, "", t); n[$2 " " be " " rs]++; s[$2 " " be " " rs] += t
        if (t + 0 > 0.25) slow = slow sprintf("    slow: %s\n", substr($0, 17, 150)) }
        END { for (k in n) printf "    %-34s %3d calls %7.3f s\n", k, n[k], s[k]; printf "%s", slow }' | sort
    fi
  done
done
echo "== njobs plain / offload / offload with every process lazy, alternated ($((SECONDS - T0)) s)"
for r in 1 2 3; do
  for m in plain offload lazy; do
    log=$OUT/njobs.$m.$r.log
    t0=$(date +%s.%N)
    if [ $m = plain ]; then
      timeout 90 python3 $I22/sklearn_njobs.py > "$log" 2>&1
    elif [ $m = lazy ]; then
      GPUKIT_OFFLOAD_START=lazy GPUKIT_OFFLOAD_LOG=summary timeout 90 "$B/examples/offload" run python3 $I22/sklearn_njobs.py > "$log" 2>&1
    else
      GPUKIT_OFFLOAD_LOG=summary timeout 90 "$B/examples/offload" run python3 $I22/sklearn_njobs.py > "$log" 2>&1
    fi
    t1=$(date +%s.%N)
    echo "  njobs $m $r: process $(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }") s; $(grep -E '^wall|^section' "$log" | tr '\n' ' ') starts $(grep -c 'GPU start ready' "$log") restarts $(grep -c 'memory leak' "$log")"
    [ $m != plain ] && [ $r = 1 ] && grep -E "^gpukit-offload: d[a-z]+ calls=" "$log" | sort | uniq -c | sort -rn | head -6 | cut -c1-190
  done
done
echo "== the first-GPU-call test ($((SECONDS - T0)) s)"
t=$B/tests/gpukit-offload.gpu.test
[ -x "$t" ] && GPUKIT_REQUIRE_GPU=1 timeout 120 "$t" --exact a_routines_first_gpu_call_is_not_learned_from --nocapture 2>&1 | grep -E "test result|panicked|learned" | head -5
echo "total $((SECONDS - T0)) s"
