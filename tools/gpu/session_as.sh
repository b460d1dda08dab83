#!/usr/bin/env bash
# 2026-12-07, sixteenth session (issue 23): the 128x192 tile (wgmma_128x192) and the tuner's third
# stage (siblings of a second-stage winner), a bundle of HEAD (tools/gpu/bundle.sh). About 360 s:
#   1. gemm_gpu's wgmma, tail, split-K and tuner tests (GPUKIT_REQUIRE_GPU=1), each in its own
#      process: the new tile in every layout, one block per unit and persistent, with tails;
#   2. gemm_bench --configs (tuner off, persistent plans) for the 128x192 tile beside the 128x256
#      and 128x128 ping-pong tiles, cuBLAS TF32 in the same process;
#   3. the full gemm_bench (both planners against the best plan on 46 shapes; the tuner's files);
#   4. gemm_bench --quick --paired on the named shapes.
#   tar xJf .gpu-bundle-as.tar.xz && OUT=$OUT bash tools/gpu/session_as.sh
set -u
OUT=${OUT:-/tmp/session-as}
here=$(dirname "$0")
. "$here/gemm_session.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,power.limit,temperature.gpu --format=csv,noheader
gemm_tests_matching "wgmma|tail|split|tune|autotuner" 150
echo "== configs ($(el) s)"
configs "$OUT/configs.log" 60 wgmma_128x192,wgmma_128x256,wgmma_128x128_pp \
  "2048,3000,1000;3000,2000,300;2500,2500,500;2000,6000,400;8192,8192,8192;4096,4096,4096"
full_bench 200
grep -E "^\| (2048x3000x1000 TT|2000x6000x400 NT|3000x2000x300|192x160x32768) .*\(.*\(" "$OUT/gemm_bench.log" | cut -c1-250 | tail -4
fresh_cache
echo "== paired ($(el) s)"
paired "$OUT/paired.log" "$B/examples/gemm_bench" "4096,4096,4096;8192,8192,8192;4096,4096,256;8,768,768,768;192,160,32768;2000,6000,400;2500,2500,500;2048,3000,1000;3000,2000,300"
(cd "$OUT" && tar cJf logs.tar.xz --exclude='*.tar.xz' . 2> /dev/null)
echo "total $(el) s"
