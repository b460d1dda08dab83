#!/usr/bin/env bash
# One GPU call: issue 22's short-process program under three builds of the shim (the previous
# session's head, before and after the __cxa_atexit interposer), forced and `offload run`,
# interleaved; then sched_bench at issue 21's base commit and now, one after the other.
#   B=.gpu-bundle FIX=.gpu-fix OUT=$OUT bash tools/gpu/session_c.sh
set -u
B=${B:-.gpu-bundle}; FIX=${FIX:-.gpu-fix}; OUT=${OUT:-/tmp/session-c}; mkdir -p "$OUT"
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader
for v in prev old; do
  mkdir -p /tmp/sh_$v && cp "$B/examples/offload" /tmp/sh_$v/ && cp "$FIX/liboffload_preload.$v.so" /tmp/sh_$v/liboffload_preload.so
done
dir_of() { case $1 in new) echo "$PWD/$B/examples" ;; *) echo /tmp/sh_$1 ;; esac; }
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0
short=gpukit-offload/bench/issue22/short_processes.sh
wall() { grep '^wall' "$1" | cut -d' ' -f2; }
echo "== short processes: plain $(timeout 60 bash $short > $OUT/plain.txt 2>&1; wall $OUT/plain.txt) s"
for r in 1 2; do
  for v in prev new old; do
    d=$(dir_of $v)
    GPUKIT_OFFLOAD_GPU=always GPUKIT_OFFLOAD_LOG=summary timeout 60 "$d/offload" run bash $short > "$OUT/f.$v.$r.txt" 2>&1
    echo "  round $r $v forced: $(wall "$OUT/f.$v.$r.txt") s, rc-lines $(grep -c 'calls=' "$OUT/f.$v.$r.txt")"
  done
done
for v in prev new; do
  d=$(dir_of $v)
  GPUKIT_OFFLOAD_LOG=summary timeout 60 "$d/offload" run bash $short > "$OUT/o.$v.txt" 2>&1
  echo "  $v offload run: $(wall "$OUT/o.$v.txt") s"
done
echo "== sched_bench ($((SECONDS - T0)) s)"
for v in base new; do
  if [ $v = base ]; then bench=$FIX/sched_bench_core.base; else bench=$B/examples/sched_bench_core; fi
  t=$SECONDS; timeout 110 "$bench" > "$OUT/sched.$v.log" 2>&1; echo "-- $v rc $? in $((SECONDS - t)) s"
  grep -E "^\|" "$OUT/sched.$v.log" | tail -30
done
echo "total $((SECONDS - T0)) s"
