#!/usr/bin/env bash
# 2026-12-07, fifteenth session, call 3 (issue 23): the split-K reduction with lanes (bundle of
# HEAD, tools/gpu/bundle.sh), about 200 s:
#   1. gemm_gpu's split-K and tuner tests (GPUKIT_REQUIRE_GPU=1), each in its own process;
#   2. gemm_bench --quick --paired (cuBLAS TF32 and ours alternating) on the shapes that split K
#      or missed a target: 192x160x32768, 256x256x8192, 128x128x65536, 8 x 768^3, 4096^3, 8192^3;
#   3. ncu durations of every kernel at 192x160x32768 (the tuner's choices of call 1 seeded):
#      the reduction against cuBLAS's splitKreduce;
#   4. gemm_bench --explore at 192x160x32768: every TF32 config x split x grid beside cuBLAS.
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/session_an.sh
set -u
OUT=${OUT:-/tmp/session-an}
here=$(dirname "$0")
. "$here/gemm_session.sh"
gemm_tests_matching "split|tune|autotuner|long_k" 150
fresh_cache
echo "== paired ($(el) s)"
paired "$OUT/paired.log" "$B/examples/gemm_bench" "192,160,32768;256,256,8192;128,128,65536;8,768,768,768;4096,4096,4096;8192,8192,8192"
M=gpu__time_duration.sum,launch__grid_size,launch__block_size,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum
fresh_cache
tar xJf .gpu-bundle-tuning/tuning.tar.xz -C "$GPUKIT_CACHE_DIR" && chmod -R go-rwx "$GPUKIT_CACHE_DIR"
echo "== ncu ($(el) s)"
GPUKIT_GEMM_TUNE=on timeout 120 ncu --clock-control none --metrics $M --csv --print-units base --launch-count 900 \
  "$B/examples/gemm_bench" --quick --shapes 192,160,32768 > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
echo "  rc $?"
fresh_cache
echo "== explore ($(el) s)"
timeout 120 "$B/examples/gemm_bench" --explore --shapes 192,160,32768 > "$OUT/explore.log" 2>&1
echo "  rc $?"
grep -E "^explore" "$OUT/explore.log" | head -2 | cut -c1-250
grep -c "^explore" "$OUT/explore.log"
(cd "$OUT" && xz -9 *.csv)
echo "total $(el) s"
