#!/usr/bin/env bash
# 2026-12-07, fifteenth session (issue 23): where 192x160x32768 spends its time, about 150 s.
# Every kernel of `gemm_bench --quick --shapes 192,160,32768` through ncu with a few metrics each
# (duration, grid, cluster, DRAM and L2 bytes, throughputs), --clock-control none, the tuner's
# choices read from the files of call 1 (.gpu-bundle-tuning/tuning.tar.xz: under ncu the tuner
# would time serialised kernels); then gemm_bench --quick --paired at that shape and 8 x 768^3,
# the event timings the durations add up to.
#   tar xJf .gpu-bundle-al.tar.xz && OUT=$OUT bash tools/gpu/session_am.sh
set -u
OUT=${OUT:-/tmp/session-am}
here=$(dirname "$0")
. "$here/gemm_session.sh"
which ncu nsys 2>&1 | head -2
M=gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__cluster_dim_x,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed
prof() { # tag shape [env...]
  local tag=$1 shape=$2; shift 2
  fresh_cache
  tar xJf .gpu-bundle-tuning/tuning.tar.xz -C "$GPUKIT_CACHE_DIR" && chmod -R go-rwx "$GPUKIT_CACHE_DIR"
  echo "== ncu $tag ($(el) s)"
  env "$@" timeout 150 ncu --clock-control none --metrics $M --csv --print-units base --launch-count 900 \
    "$B/examples/gemm_bench" --quick --shapes "$shape" > "$OUT/$tag.csv" 2> "$OUT/$tag.err"
  echo "  rc $? $(wc -l < "$OUT/$tag.csv") lines"
  grep -E "^\| [0-9]" "$OUT/$tag.csv" | cut -c1-200 | head -4
}
prof tuned 192,160,32768 GPUKIT_GEMM_TUNE=on
fresh_cache
echo "== paired ($(el) s)"
paired "$OUT/paired.log" "$B/examples/gemm_bench" "192,160,32768;8,768,768,768"
(cd "$OUT" && xz -9 *.csv)
echo "total $(el) s"
