#!/usr/bin/env bash
# 2026-12-07, thirteenth session (issue 23): P read by wgmma straight from a rounding tensor map
# (`P:ks`, a097f28) and P packed beside a mapped Q (`P:pack Q:tma`, d404874), in two calls on one
# warm machine (bundle of HEAD, tools/gpu/bundle.sh):
#   phase 1 (about 300 s): gemm_bench --configs (tuner off) of four tiles' persistent plans at
#     2500x2500x500, 2504x2504x504 and 8 x 768^3 (P:ks beside the packed and swapped plans);
#     gemm_bench --quick --paired (cuBLAS TF32 and ours alternating, the tuner measuring afresh);
#     the full gemm_bench (benchmark shapes, sweep, both planners against the best plan);
#   phase 2 (about 250 s): every GPU test of the bundle with GPUKIT_REQUIRE_GPU=1
#     (final_tests.sh; gemm_gpu's tests run the new layouts in every tile and product they fit).
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/session_ah.sh 1
#   phase all (one call, about 560 s, when device time is short): phase 2's tests first, then
#     phase 1's configs and paired bench, then the full gemm_bench within what is left of 570 s.
set -u
PH=${1:-1}
OUT=${OUT:-/tmp/session-ah}
here=$(dirname "$0")
. "$here/gemm_session.sh"
if [ "$PH" = all ]; then
  all_tests 330
fi
if [ "$PH" = 1 ] || [ "$PH" = all ]; then
  echo "== configs ($(el) s)"
  configs "$OUT/configs.log" 120 wgmma_128x128_pp,wgmma_128x256_c2,wgmma_128x128,wgmma_128x128_2 \
    "2500,2500,500;2504,2504,504;8,768,768,768"
  SH="4096,4096,4096;8192,8192,8192;4096,4096,256;2500,2500,500;8,768,768,768;1500,1500,300;1000,1000,1000;1024,1024,1024;3000,3000,3000;2000,6000,400"
  fresh_cache
  echo "== paired ($(el) s)"
  paired "$OUT/paired.log" "$B/examples/gemm_bench" "$SH"
  left=$(( 570 - $(el) )); [ "$left" -gt 200 ] && left=200
  full_bench "$left"
elif [ "$PH" = 2 ]; then
  all_tests 400
fi
(cd "$OUT" && tar cJf logs_$PH.tar.xz --exclude='*.tar.xz' --exclude=tests . 2> /dev/null)
echo "total $(el) s"
