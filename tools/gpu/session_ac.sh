#!/usr/bin/env bash
# 2026-12-07, eleventh session (issue 23): the stream-K tail's first run when under 600 s of
# device time are left (the call is about 300 s; every step under `timeout`):
#   1. the tail's GPU test alone (GPUKIT_REQUIRE_GPU=1); should it fail or hang, the benches run
#      with GPUKIT_GEMM_TAIL=off;
#   2. every gemm_gpu test, one process each, in parallel (GPUKIT_REQUIRE_GPU=1), and the wheel's
#      pytest suite (the preload libraries now in the wheel);
#   3. gemm_bench --paired with GPUKIT_GEMM_TAIL=off, then on (each process tuning afresh);
#   4. the full gemm_bench with what time is left (it ends by BENCH_END s, default 255).
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/session_ac.sh
set -u
OUT=${OUT:-/tmp/session-ac}
here=$(dirname "$0")
. "$here/gemm_session.sh"
GG=$B/tests/gpukit-core.gemm_gpu.test
fresh_cache
GPUKIT_REQUIRE_GPU=1 timeout 70 "$GG" --exact tail_pieces_of_the_last_wave_sum_like_whole_tiles --nocapture > "$OUT/tail_test.log" 2>&1
rc=$?
echo "== tail test rc $rc ($(el) s): $(grep -c 'pieces per tail tile' "$OUT/tail_test.log") tail plans ran; $(grep -E '^test result' "$OUT/tail_test.log")"
grep -E "panicked|error" "$OUT/tail_test.log" | head -5 | cut -c1-300
TAIL=on; [ $rc -ne 0 ] && TAIL=off
# 2. gemm_gpu, one process per test (each its own copy of the prewarmed cache), and pytest
gemm_tests 130
SH="4096,4096,4096;8192,8192,8192;4096,4096,256;2500,2500,500;8,768,768,768;1000,1000,1000"
TS="off on"; [ $TAIL = off ] && TS=off
for t in $TS; do
  fresh_cache
  echo "== paired GPUKIT_GEMM_TAIL=$t ($(el) s)"
  GPUKIT_GEMM_TAIL=$t timeout 60 "$B/examples/gemm_bench" --quick --paired --shapes "$SH" > "$OUT/paired_$t.log" 2>&1
  echo "  rc $?"
  grep -E "^paired" "$OUT/paired_$t.log" | sed 's/(medians of 25 alternating samples)//' | cut -c1-200
done
fresh_cache
left=$((${BENCH_END:-255} - $(el))); [ $left -gt 100 ] && left=100
echo "== gemm_bench GPUKIT_GEMM_TAIL=$TAIL ($(el) s, limit $left s)"
[ $left -gt 30 ] && GPUKIT_GEMM_TAIL=$TAIL OUT=$OUT timeout $left "$B/examples/gemm_bench" > "$OUT/gemm_bench.log" 2>&1
echo "  rc $?"
grep -E "^\| (2500x2500x500|8x 768|4096x4096x4096 \||8192x8192x8192 \|)" "$OUT/gemm_bench.log" | tail -n 4 | cut -c1-250
grep -E "^lowest ratio|^targets|^autotuner: [0-9]" "$OUT/gemm_bench.log" | cut -c1-400
(cd "$OUT" && tar cJf logs.tar.xz --exclude=logs.tar.xz --exclude=gemm_bench.tsv . 2> /dev/null)
echo "total $(el) s"
