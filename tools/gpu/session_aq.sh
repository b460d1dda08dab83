#!/usr/bin/env bash
# 2026-12-07, fifteenth session (issue 23): the final bundle of HEAD (tools/gpu/bundle.sh): the
# split-K reduction with lanes, launched programmatically; the tuner charging write-back; the
# 64x256 ping-pong tile. One call, about 420 s:
#   1. every GPU test of the bundle with GPUKIT_REQUIRE_GPU=1 (final_tests.sh);
#   2. gemm_bench --configs (tuner off, persistent plans) for the 64x256 ping-pong tile beside the
#      128x128 ping-pong and the 128x256 tiles, cuBLAS TF32 in the same process;
#   3. the full gemm_bench (the tuner's files kept);
#   4. gemm_bench --quick --paired on the named shapes.
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/session_aq.sh
set -u
OUT=${OUT:-/tmp/session-aq}
here=$(dirname "$0")
. "$here/gemm_session.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,power.limit,temperature.gpu --format=csv,noheader
all_tests 330
echo "== configs ($(el) s)"
configs "$OUT/configs.log" 60 wgmma_64x256_pp,wgmma_128x128_pp,wgmma_128x256 \
  "8,768,768,768;2000,6000,400;2048,3000,1000;2500,2500,500;3000,2000,300"
full_bench 150
grep -E "^\| (2048x3000x1000 TT|2000x6000x400 NT|3000x2000x300|192x160x32768) .*\(.*\(" "$OUT/gemm_bench.log" | cut -c1-250 | tail -4
fresh_cache
echo "== paired ($(el) s)"
paired "$OUT/paired.log" "$B/examples/gemm_bench" "4096,4096,4096;8192,8192,8192;4096,4096,256;8,768,768,768;192,160,32768;2000,6000,400;2500,2500,500"
(cd "$OUT" && tar cJf logs.tar.xz --exclude='*.tar.xz' --exclude=tests . 2> /dev/null)
echo "total $(el) s"
