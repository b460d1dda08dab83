#!/usr/bin/env bash
# 2026-12-07, thirteenth session, call 1 (issue 23): the two shapes still under 0.9x read with ncu
# beside cuBLAS's own kernel in the same process (gemm_bench's baseline), about 250 s:
#   1. gemm_bench --configs (tuner off) at four row pitches: 2500x2500x500 (A's 2000 B and B's
#      10000 B not multiples of 128 B), 2500x2500x512, 2560x2560x512, 2504x2504x504;
#   2. ncu --set full, one launch each, details + raw metrics + per-SASS-line stall samples:
#      2500x2500x500: cuBLAS TF32; ours 64x128_pp_c2 swap P:mn Q:tma (cuBLAS's own structure there:
#      64x128 ping-pong, P from registers, version 11); ours 128x128_pp packed (the fastest, with
#      its pack); batch 8 of 768^3: cuBLAS TF32; ours 128x128_pp swap P:mn Q:tma.
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/session_ag.sh
set -u
OUT=${OUT:-/tmp/session-ag}
here=$(dirname "$0")
. "$here/gemm_session.sh"
echo "== 1. configs ($(el) s)"
configs "$OUT/configs.log" 150 wgmma_128x128_pp,wgmma_64x128_pp_c2,wgmma_128x256_c2 \
  "2500,2500,500;2500,2500,512;2560,2560,512;2504,2504,504"
# ncu_one TAG KERNEL-REGEX SHAPE [gemm_bench options]: one launch (the third that matches), its
# details page, raw metrics and SASS source page with stall samples.
ncu_one() {
  local tag=$1 re=$2 shape=$3; shift 3
  echo "== 2. ncu $tag ($(el) s)"
  GPUKIT_GEMM_TUNE=off timeout 100 ncu --clock-control none --set full --import-source no --kernel-name-base demangled \
    -k regex:"$re" --launch-skip 2 --launch-count 1 -o "$OUT/$tag" -f \
    "$B/examples/gemm_bench" --quick --shapes "$shape" "$@" > "$OUT/$tag.run.txt" 2>&1
  echo "  rc $?"
  grep -E "==PROF==|==ERROR==|==WARNING==" "$OUT/$tag.run.txt" | head -3 | cut -c1-160
  ncu -i "$OUT/$tag.ncu-rep" --page details > "$OUT/$tag.txt" 2>&1
  ncu -i "$OUT/$tag.ncu-rep" --page raw --csv > "$OUT/$tag.raw.csv" 2>&1
  ncu -i "$OUT/$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/$tag.sass.csv" 2>&1
  grep -E "^  [a-zA-Z_].*\(|Duration|SM Frequency|Compute \(SM\)|L2 Cache Throughput|DRAM Throughput|L2 Hit Rate|Executed Ipc A|Warp Cycles Per Issued|Cluster Size|Grid Size|Registers Per" "$OUT/$tag.txt" | cut -c1-150 | head -16
  rm -f "$OUT/$tag.ncu-rep"
}
ncu_one cub2500 'tf32f32|nvjet' 2500,2500,500
ncu_one ours2500_64swap 'gemm_wgmma_c2<.int.128, .int.9, .int.1, .int.2' 2500,2500,500 \
  --configs --only wgmma_64x128_pp_c2 --plan-has "swap P:mn Q:tma pers"
ncu_one ours2500_pk 'gemm_wgmma<.int.128, .int.7, .int.1, .int.0' 2500,2500,500 \
  --configs --only wgmma_128x128_pp --plan-has "wgmma_128x128_pp s1 pers"
ncu_one cub768 'tf32f32|nvjet' 8,768,768,768
ncu_one ours768_swap 'gemm_wgmma<.int.128, .int.7, .int.1, .int.2' 8,768,768,768 \
  --configs --only wgmma_128x128_pp --plan-has "swap P:mn Q:tma pers"
tar cJf "$OUT/logs.tar.xz" -C "$OUT" --exclude=logs.tar.xz . 2> /dev/null
rm -f "$OUT"/*.csv "$OUT"/*.txt
echo "total $(el) s"
