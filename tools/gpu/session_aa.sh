#!/usr/bin/env bash
# 2026-12-07, eleventh session, call 1 (issue 23): the interior-tile epilogue's first run.
#   1. every GPU test of the bundle with GPUKIT_REQUIRE_GPU=1 (final_tests.sh);
#   2. gemm_bench --paired (cuBLAS TF32 alternating with ours), the kernels before the epilogue
#      (gemm_bench.old, 56d62f6) then after, nine shapes, both from prewarmed caches;
#   3. ncu on the new cooperative 128x256 at 4096x4096x256 (per-SASS-line stalls, to set beside
#      the tenth session's 50 % on the epilogue), and, time allowing, the ping-pong 128x128 with P
#      from registers (cuBLAS's short-K design, 27 % slower than cuBLAS in version 10).
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/session_aa.sh
set -u
OUT=${OUT:-/tmp/session-aa}; mkdir -p "$OUT"
here=$(dirname "$0")
B=.gpu-bundle
T0=$SECONDS
echo "host $(hostname) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
BUNDLE=$B OUT=$OUT/final timeout 320 bash "$here/final_tests.sh" > "$OUT/final.txt" 2>&1
grep -vE "^\s*$" "$OUT/final.txt" | grep -E "rc=[1-9]|FAILED|panicked|TIMEOUT|pytest|passed in|Rust test binaries|done at" | cut -c1-220 | head -30
(cd "$OUT" && tar cJf final_logs.tar.xz final final.txt && rm -rf final final.txt)
echo "== tests took $((SECONDS - T0)) s"
SH="4096,4096,4096;8192,8192,8192;4096,4096,256;8192,2048,256;2500,2500,500;1500,1500,300;2000,6000,400;8,768,768,768;1000,1000,1000"
for v in old new; do
  GB=$B/examples/gemm_bench; [ $v = old ] && GB=.gpu-bundle-small/examples/gemm_bench.old
  export GPUKIT_CACHE_DIR=$(mktemp -d); cp -r "$B/kcache"/. "$GPUKIT_CACHE_DIR"/; chmod -R go-rwx "$GPUKIT_CACHE_DIR"
  echo "== paired $v (t=$((SECONDS - T0)))"
  timeout 100 "$GB" --quick --paired --shapes "$SH" > "$OUT/paired_$v.log" 2>&1
  echo "  rc $?"
  grep -E "^paired" "$OUT/paired_$v.log" | sed 's/(medians of 25 alternating samples)//' | cut -c1-200
done
# ncu_one NAME KERNEL-REGEX CONFIG: one launch of CONFIG's "swap P:mn Q:tma pers" plan at
# 4096x4096x256 (the tuner off), its details and per-SASS-line source page.
ncu_one() {
  echo "== ncu $3 new at 4096x4096x256 (t=$((SECONDS - T0)))"
  GPUKIT_GEMM_TUNE=off timeout 70 ncu --clock-control none --set full --import-source no --kernel-name-base demangled \
    -k regex:"$2" --launch-skip 2 --launch-count 1 -o "$OUT/$1" -f \
    "$B/examples/gemm_bench" --quick --configs --only "$3" --plan-has "swap P:mn Q:tma pers" --shapes 4096,4096,256 > "$OUT/$1.run.txt" 2>&1
  echo "  rc $?"
  ncu -i "$OUT/$1.ncu-rep" --page details > "$OUT/$1.txt" 2>&1
  ncu -i "$OUT/$1.ncu-rep" --page source --csv --print-source sass > "$OUT/$1.sass.csv" 2>&1
  grep -E "^  [a-zA-Z_].*\(|Duration|L2 Cache Throughput|DRAM Throughput|Compute \(SM\)|SM Frequency|SM Active Cycles|Elapsed Cycles" "$OUT/$1.txt" | cut -c1-150 | head -12
  rm -f "$OUT/$1.ncu-rep"
}
ncu_one coop 'gemm_wgmma<.int.256' wgmma_128x256
[ $((SECONDS - T0)) -lt 470 ] && ncu_one pp 'gemm_wgmma<.int.128.*bool.1>' wgmma_128x128_pp
tar cJf "$OUT/logs.tar.xz" -C "$OUT" --exclude=logs.tar.xz --exclude=final_logs.tar.xz . 2> /dev/null
rm -f "$OUT"/*.log "$OUT"/*.txt "$OUT"/*.csv
echo "total $((SECONDS - T0)) s"
