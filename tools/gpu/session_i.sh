#!/usr/bin/env bash
# The fifth session's final call (2026-12-06): every GPU test (final_tests.sh), then issue 22's
# programs plain | offload run | forced (pool, njobs, short), a second plain / offload round of
# njobs and short, and short with every process on `savings` (the descendants' previous start
# policy) beside it. B: the bundle; OUT: logs.
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/session-i}; mkdir -p "$OUT"
I22=gpukit-offload/bench/issue22
T0=$SECONDS
OUT=$OUT/ft BUNDLE=$B bash tools/gpu/final_tests.sh 2>&1 | tail -30
echo "== issue 22's programs ($((SECONDS - T0)) s)"
PROGRAMS="pool njobs short" BUNDLE=$B OUT=$OUT/i22 RUN_BUDGET=200 NUMPY_BUDGET=0 FIXED_COST=/nonexistent \
  timeout 230 bash $I22/run.sh 2>&1 | grep -E "^\||^  (pool|njobs|short) |sections" | grep -v "^\s*$"
grep -h "reasons=" $OUT/i22/pool.offload.log | cut -c1-170
echo "== second round, and short with every process on savings ($((SECONDS - T0)) s)"
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0
for m in plain offload savings; do
  for p in njobs short; do
    [ $p = njobs ] && [ $m = savings ] && continue
    case $p in njobs) c=(python3 $I22/sklearn_njobs.py) ;; short) c=(bash $I22/short_processes.sh) ;; esac
    t0=$(date +%s.%N)
    case $m in
      plain) timeout 90 "${c[@]}" > "$OUT/$p.$m.2.log" 2>&1 ;;
      offload) timeout 90 "$B/examples/offload" run "${c[@]}" > "$OUT/$p.$m.2.log" 2>&1 ;;
      savings) GPUKIT_OFFLOAD_START=savings timeout 90 "$B/examples/offload" run "${c[@]}" > "$OUT/$p.$m.2.log" 2>&1 ;;
    esac
    t1=$(date +%s.%N)
    echo "  $p $m: process $(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }") s; $(grep -E '^wall|^section|^checksum' "$OUT/$p.$m.2.log" | tr '\n' ' ') restarts $(grep -c 'memory leak' "$OUT/$p.$m.2.log") gpu-calls $(grep -h '^gpukit-offload: .* calls=' "$OUT/$p.$m.2.log" | grep -o ' gpu=[0-9]*' | awk -F= '{s += $2} END {print s + 0}')"
  done
done
echo "total $((SECONDS - T0)) s"
