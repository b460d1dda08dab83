#!/usr/bin/env bash
# 2026-12-06, tenth session, call 2 (issue 23): the interior-tile epilogue (straight stores, no
# per-element tests) beside the kernels before it, in one call:
#   1. gemm_bench --paired, old binary then new (cuBLAS TF32 alternating with ours in each);
#   2. gemm_bench --configs --only (the tiles NN products use) at short and long K, old and new;
#   3. ncu on the new ping-pong tile with P from registers (per-SASS-line stalls).
#   B=.gpu-bundle OUT=$OUT bash tools/gpu/session_w.sh  (B/examples: gemm_bench, gemm_bench.old)
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/session-w}; mkdir -p "$OUT"
here=$(dirname "$0")
T0=$SECONDS
echo "host $(hostname) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
SH="4096,4096,4096;8192,8192,8192;4096,4096,256;8192,2048,256;2500,2500,500;1500,1500,300;2000,6000,400;8,768,768,768;1000,1000,1000"
for v in old new; do
  GB="$B/examples/gemm_bench"; [ $v = old ] && GB="$B/examples/gemm_bench.old"
  export GPUKIT_CACHE_DIR=$(mktemp -d)
  echo "== paired $v (t=$((SECONDS - T0)))"
  timeout 200 "$GB" --quick --paired --shapes "$SH" > "$OUT/paired_$v.log" 2>&1
  echo "  rc $?"
  grep -E "^paired" "$OUT/paired_$v.log" | sed 's/(medians of 25 alternating samples)//' | cut -c1-200
  echo "== configs $v (t=$((SECONDS - T0)))"
  GPUKIT_GEMM_TUNE=off timeout 150 "$GB" --quick --configs --only wgmma_128x256,wgmma_128x256_c2,wgmma_128x128_pp,wgmma_128x128_pp_c2 \
    --plan-has pers --shapes "4096,4096,4096;4096,4096,256;2500,2500,500" > "$OUT/configs_$v.log" 2>&1
  echo "  rc $?"
  grep -E "^config" "$OUT/configs_$v.log" | cut -c1-150
done
echo "== ncu pp P:mn, new (t=$((SECONDS - T0)))"
GPUKIT_GEMM_TUNE=off timeout 150 ncu --clock-control none --set full --import-source no --kernel-name-base demangled \
  -k regex:'gemm_wgmma<.int.128.*bool.1>' --launch-skip 2 --launch-count 1 -o "$OUT/pp_mn" -f \
  "$B/examples/gemm_bench" --quick --configs --only wgmma_128x128_pp --plan-has "swap P:mn Q:tma pers" --shapes 4096,4096,256 > "$OUT/pp_mn.run.txt" 2>&1
echo "  rc $?"
ncu -i "$OUT/pp_mn.ncu-rep" --page details > "$OUT/pp_mn.txt" 2>&1
ncu -i "$OUT/pp_mn.ncu-rep" --page source --csv --print-source sass > "$OUT/pp_mn.sass.csv" 2>&1
grep -E "^  [a-zA-Z_].*\(|Duration|L2 Cache Throughput|DRAM Throughput|Compute \(SM\)|SM Frequency|SM Active Cycles|Elapsed Cycles" "$OUT/pp_mn.txt" | cut -c1-150 | head -12
tar cJf "$OUT/logs.tar.xz" -C "$OUT" --exclude=logs.tar.xz --exclude='*.ncu-rep' . 2> /dev/null
rm -f "$OUT"/*.log "$OUT"/*.txt "$OUT"/*.csv
echo "total $((SECONDS - T0)) s"
