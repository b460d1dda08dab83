#!/usr/bin/env bash
# 2026-12-07, eighteenth session (issue 23), the third call: why cuBLAS's ping-pong 128x128 tile
# in clusters of two (sm90_xmma ... tn_n_tilesize128x128x32_warpgroupsize1x1x1, 66 x 2 blocks)
# runs 2000x6000x400 NT at 227 TFLOP/s while our tile of the same design ran 166 in call 2's
# explore and our best plan (the cooperative 128x256) 204 (about 120 s):
#   1. gemm_bench --configs at 2000x6000x400 NT: every wgmma tile in every operand layout,
#      persistent grids, tuner off (explore times one layout per tile);
#   2. ncu --set full with per-SASS-line stall samples on one launch each: our 128x256 (P:k
#      Q:tma pers), our ping-pong 128x128 in clusters of two with P read by wgmma from shared
#      memory (P:ks Q:tma pers), cuBLAS's kernel.
#   tar xJf .gpu-bundle-av.tar.xz && OUT=$OUT bash tools/gpu/session_aw.sh
set -u
OUT=${OUT:-/tmp/session-aw}
here=$(dirname "$0")
. "$here/gemm_session.sh"
S=2000,6000,400,NT
ALL=wgmma_128x256,wgmma_128x256_c2,wgmma_128x192,wgmma_128x128,wgmma_128x128_pp,wgmma_128x128_pp_c2,wgmma_64x128_pp,wgmma_64x128_pp_c2,wgmma_64x256_pp,wgmma_128x128_2,wgmma_128x64
echo "== 1. configs ($(el) s)"
configs "$OUT/configs.log" 90 "$ALL" "$S"
NCU="ncu --clock-control none"
prof() { # tag kernel-regex only plan-filter
  echo "== 2. ncu $1 ($(el) s)"
  fresh_cache
  GPUKIT_GEMM_TUNE=off timeout 90 $NCU --set full --import-source no --kernel-name-base demangled \
    -k regex:"$2" --launch-skip 2 --launch-count 1 -o "$OUT/$1" -f \
    "$B/examples/gemm_bench" --quick --configs --only "$3" --plan-has "$4" --shapes "$S" > "$OUT/$1.run.txt" 2>&1
  echo "  rc $?"
  ncu -i "$OUT/$1.ncu-rep" --page details > "$OUT/$1.txt" 2>&1
  ncu -i "$OUT/$1.ncu-rep" --page source --csv --print-source sass > "$OUT/$1.sass.csv" 2>&1
  grep -E "^  [a-zA-Z_].*\(|Duration|L2 Cache Throughput|Compute \(SM\)|SM Active Cycles|Elapsed Cycles" "$OUT/$1.txt" | cut -c1-150 | head -6
  rm -f "$OUT/$1.ncu-rep"
}
prof coop256 'gemm_wgmma<.int.256, .int.4, .int.1, .int.1,' wgmma_128x256 "wgmma_128x256 s1 P:k Q:tma pers"
prof ppc2 'gemm_wgmma_c2<.int.128, .int.7, .int.1, .int.3' wgmma_128x128_pp_c2 "wgmma_128x128_pp_c2 s1 P:ks Q:tma pers"
echo "== 2. ncu cuBLAS ($(el) s)"
timeout 90 $NCU --set full --import-source no -k regex:'nvjet|gemm|xmma|cutlass' --launch-skip 2 --launch-count 1 \
  -o "$OUT/cublas" -f python3 "$here/cublas_kernels.py" "$S" > "$OUT/cublas.run.txt" 2>&1
echo "  rc $?"
ncu -i "$OUT/cublas.ncu-rep" --page details > "$OUT/cublas.txt" 2>&1
ncu -i "$OUT/cublas.ncu-rep" --page source --csv --print-source sass > "$OUT/cublas.sass.csv" 2>&1
grep -E "^  [a-zA-Z_].*\(|Duration|L2 Cache Throughput|Compute \(SM\)|SM Active Cycles" "$OUT/cublas.txt" | cut -c1-150 | head -5
rm -f "$OUT/cublas.ncu-rep"
(cd "$OUT" && tar cJf all.tar.xz --exclude='*.tar.xz' . 2> /dev/null)
echo "total $(el) s"
