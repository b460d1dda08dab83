#!/usr/bin/env bash
# gpukit-mutex on the GPU host, in one device call of about 40-70 s (every step under
# `timeout`: 25 s + 60 s, so 85 s at most in all). Run from the project root, with the
# binaries built on the build machine:
#
#   /work/shared/gpu/pack -p gpukit-mutex -p gpukit --bench      # (on the build machine)
#   bash tools/gpu/mutex.sh                                      # (on the GPU host)
#
# B= the bundle directory (default .gpu-bundle), OUT= where logs go (default /tmp/mutex-out).
# Steps:
#   1. the mutex bench (benches/mutex.rs): its percentile summary (uncontended acquire+release,
#      hand-over from a holder's release to the next waiter's return in another process), then
#      criterion with a short measurement time;
#   2. the preload with real CUDA programs (tools/torch_mutex_check.sh, PyTorch): two torch
#      processes never hold device 0 together, Ctrl-C ends a wait inside cuInit at once without
#      CUDA being granted, and gpumutex-run + the preload inside it share one claim.
# The summary table comes last, with the figures measured before (H200, protocol v1).
set -u
B=${B:-.gpu-bundle}
OUT=${OUT:-/tmp/mutex-out}
mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
rows=()
row() { rows+=("| $1 | $2 | $3 |"); }

# 1. bench ---------------------------------------------------------------------------------------
bench=$(ls "$B"/benches/mutex-* 2>/dev/null | head -1)
if [ -z "$bench" ]; then
  row "mutex bench" "MISSING (no $B/benches/mutex-*; pack with --bench)" "-"
else
  GPUKIT_MUTEX_BENCH_UNCONTENDED=3000 GPUKIT_MUTEX_BENCH_HANDOVERS=400 \
    timeout 25 "$bench" --bench --warm-up-time 0.5 --measurement-time 2 --noplot \
    > "$OUT/bench.log" 2>&1
  rc=$?
  pct() { grep -E "^$1" "$OUT/bench.log" | sed -E 's/.*n=([0-9]+) p50=([^ ]+) p90=([^ ]+) p99=([^ ]+).*/p50 \2, p90 \3, p99 \4 (n=\1)/'; }
  crit() { grep -A1 -E "^$1" "$OUT/bench.log" | grep -o 'time: *\[[^]]*\]' | head -1; }
  row "acquire+release, uncontended (summary)" "$(pct "uncontended acquire")" "27 us"
  row "hand-over release -> next waiter (summary)" "$(pct "hand-over release")" "0.13-0.16 ms p50"
  row "criterion uncontended_acquire_release" "$(crit uncontended_acquire_release)" "27 us"
  row "criterion handover_latency" "$(crit handover_latency)" "0.13-0.16 ms"
  [ $rc = 0 ] || row "mutex bench exit" "rc=$rc (124 = timed out; see $OUT/bench.log)" "0"
fi

# 2. preload with torch ----------------------------------------------------------------------
so=$B/examples/libgpumutex_preload.so
run=$B/examples/gpumutex-run
if [ ! -e "$so" ] || [ ! -x "$run" ]; then
  row "preload + torch" "MISSING ($so or $run; pack -p gpukit)" "-"
else
  timeout 60 bash "$here/../torch_mutex_check.sh" "$so" "$run" > "$OUT/torch.log" 2>&1
  rc=$?
  while read -r _ name verdict detail; do
    case $name in
      exclusive) before="PASS (the previous check)" ;;
      ctrl_c) before="Ctrl-C ignored until the device was granted (issue 12, attack 8)" ;;
      *) before="not checked before" ;;
    esac
    row "torch: $name" "$verdict: $detail" "$before"
  done < <(grep '^RESULT ' "$OUT/torch.log")
  [ $rc = 0 ] || row "torch check exit" "rc=$rc (124 = timed out; see $OUT/torch.log)" "0"
fi

echo
echo "================ gpukit-mutex on $(hostname) ================"
echo "| what | now | before |"
echo "| --- | --- | --- |"
printf '%s\n' "${rows[@]}"
