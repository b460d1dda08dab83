#!/usr/bin/env bash
# 2026-12-07, twelfth session (issue 23): the 64-row ping-pong tile's first run (bundle of its
# commit, `tools/gpu/bundle.sh`), in two calls on one warm machine:
#   phase 1 (about 380 s): every GPU test of the bundle with GPUKIT_REQUIRE_GPU=1
#     (final_tests.sh: gemm_gpu's tests run the new tiles in every layout, tails included);
#     gemm_bench --quick --paired (cuBLAS TF32 and ours alternating, the tuner measuring afresh);
#     gemm_bench --configs --only the four ping-pong tiles at the two misses (tuner off);
#   phase 2 (about 250 s): the full gemm_bench; then session_ad's question (gemm_bench of
#     f4a111f and of 8a112d9, new / old / new, from .gpu-bundle-small.tar.xz).
#   phase s (about 250 s, when little device time is left): gemm_gpu's tests and pytest in
#     parallel instead of every test, then phase 1's benches.
#   tar xJf .gpu-bundle.tar.xz && tar xJf .gpu-bundle-small.tar.xz && OUT=$OUT bash tools/gpu/session_ae.sh 1
set -u
PH=${1:-1}
OUT=${OUT:-/tmp/session-ae}
here=$(dirname "$0")
. "$here/gemm_session.sh"
if [ "$PH" = s ]; then
  # The short form (little device time left): gemm_gpu's tests, one process each, and the
  # wheel's pytest, in parallel; then the paired bench and the configs below.
  gemm_tests 150
fi
if [ "$PH" = 1 ]; then
  all_tests 330
fi
if [ "$PH" = 1 ] || [ "$PH" = s ]; then
  SH="4096,4096,4096;8192,8192,8192;4096,4096,256;2500,2500,500;8,768,768,768;1000,1000,1000;3000,3000,3000;1500,1500,300"
  fresh_cache
  echo "== paired ($(el) s)"
  paired "$OUT/paired.log" "$B/examples/gemm_bench" "$SH"
  echo "== configs ($(el) s)"
  configs "$OUT/configs.log" 60 wgmma_128x128_pp,wgmma_128x128_pp_c2,wgmma_64x128_pp,wgmma_64x128_pp_c2 \
    "2500,2500,500;8,768,768,768"
else
  full_bench 150
  [ -d .gpu-bundle-small ] && OUT=$OUT timeout 130 bash "$here/session_ad.sh"
fi
(cd "$OUT" && tar cJf logs_$PH.tar.xz --exclude='*.tar.xz' --exclude=tests --exclude=gemm_bench.tsv . 2> /dev/null)
echo "total $(el) s"
