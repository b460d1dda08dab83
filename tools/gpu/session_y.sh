#!/usr/bin/env bash
# 2026-12-06, tenth session (issue 23), one call when device time is short: every GPU test of the
# bundle with GPUKIT_REQUIRE_GPU=1; gemm_bench --paired, the kernels before this session's
# epilogue (gemm_bench.old) and after, on five shapes; then the full gemm_bench (benchmark shapes
# and sweep, the tuner measuring every class afresh).
#   tar xJf .gpu-bundle.tar.xz && TOTAL=500 OUT=$OUT bash tools/gpu/session_y.sh
set -u
OUT=${OUT:-/tmp/session-y}; mkdir -p "$OUT"
TOTAL=${TOTAL:-560}  # seconds this call may take in all: the bench gets what the rest leaves
here=$(dirname "$0")
T0=$SECONDS
echo "host $(hostname) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
BUNDLE=.gpu-bundle OUT=$OUT/final timeout 300 bash "$here/final_tests.sh" > "$OUT/final.txt" 2>&1
grep -vE "^\s*$" "$OUT/final.txt" | grep -E "rc=[1-9]|FAILED|panicked|TIMEOUT|pytest|passed in|Rust test binaries|done at" | cut -c1-220 | head -30
(cd "$OUT" && tar cJf final_logs.tar.xz final final.txt && rm -rf final final.txt)
echo "== tests took $((SECONDS - T0)) s"
SH="4096,4096,4096;8192,8192,8192;4096,4096,256;8192,2048,256;2500,2500,500"
for v in old new; do
  GB=.gpu-bundle/examples/gemm_bench; [ $v = old ] && GB=.gpu-bundle-small/examples/gemm_bench.old
  echo "== paired $v (t=$((SECONDS - T0)))"
  GPUKIT_CACHE_DIR=$(mktemp -d) timeout 80 "$GB" --quick --paired --shapes "$SH" > "$OUT/paired_$v.log" 2>&1
  echo "  rc $?"
  grep -E "^paired" "$OUT/paired_$v.log" | sed 's/(medians of 25 alternating samples)//' | cut -c1-200
done
. "$here/kcache.sh"
B=.gpu-bundle
echo "== gemm_bench (t=$((SECONDS - T0)))"
left=$((TOTAL - (SECONDS - T0) - 15)); echo "  limit $left s"
[ $left -gt 30 ] && OUT=$OUT timeout $left "$B/examples/gemm_bench" > "$OUT/gemm_bench.log" 2>&1
echo "  rc $?"
tail -n 62 "$OUT/gemm_bench.log" | cut -c1-250
tar cJf "$OUT/logs.tar.xz" -C "$OUT" --exclude=logs.tar.xz --exclude=final_logs.tar.xz . 2> /dev/null
echo "total $((SECONDS - T0)) s"
