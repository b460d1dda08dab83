#!/usr/bin/env bash
# 2026-12-07, nineteenth session (issue 23): one call for the staged output and the proof run, on
# a bundle of 67c95b5 (tools/gpu/bundle.sh: prewarmed kernels, the wheel) (about 430 s):
#   1. gemm_bench --quick --paired with the staged output (GPUKIT_GEMM_TMA_STORE=on) and without
#      (off), one process each, on the shapes the staged tiles take;
#   2. the switch for step 3: `on` where it is at least as fast on the geometric mean of the five
#      paired ratios and faster at 2000x6000x400 NT, else `off` (printed);
#   3. session_au.sh all under that switch: the full gemm_bench, the paired shapes, every GPU test
#      with GPUKIT_REQUIRE_GPU=1 (gemm_gpu's tests with `on` run the staged output in every
#      layout, edge tile, batch and split-K slice against cuBLAS DGEMM), core_bench beside PyTorch;
#   4. with time left: gemm_bench --configs at 2000x6000x400 NT with the staged output on.
#   `short` instead (about 220 s, for a call with little device time left): 1, then every gemm_gpu
#   test with the staged output on, one process each.
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/session_ay.sh [short]
set -u
PH=${1:-full}
OUT=${OUT:-/tmp/session-ay}
here=$(dirname "$0")
. "$here/gemm_session.sh"
SH="2000,6000,400,NT;2500,2500,500;4096,4096,256;4096,4096,4096;192,160,32768"
for v in on off; do
  echo "== paired, staged output $v ($(el) s)"
  fresh_cache
  GPUKIT_GEMM_TMA_STORE=$v paired "$OUT/paired_$v.log" "$B/examples/gemm_bench" "$SH"
done
(cd "$OUT" && tar cJf a_paired.tar.xz --exclude='*.tar.xz' . 2> /dev/null)
if [ "$PH" = short ]; then
  echo "== gemm_gpu tests, staged output on ($(el) s)"
  GPUKIT_GEMM_TMA_STORE=on gemm_tests_matching "." 150
  (cd "$OUT" && tar cJf all.tar.xz --exclude='*.tar.xz' . 2> /dev/null)
  echo "total $(el) s"
  exit 0
fi
ratios() { # "shape ratio" per paired line, spaces in the shape's name as underscores
  sed -n 's/^paired \([^:]*\):.*ours \/ cuBLAS \([0-9.]*\).*/\1 \2/p' "$1" | sed 's/ \([^ ]*\)$/\t\1/; s/ /_/g; s/\t/ /'
}
choice=$(join <(ratios "$OUT/paired_on.log" | sort) <(ratios "$OUT/paired_off.log" | sort) | awk '
  { n++; s += log($2 / $3); if ($1 ~ /^2000x6000x400/) nt = $2 / $3 }
  END { if (n == 5 && s / n >= 0 && nt > 1.0) print "on"; else print "off" }')
echo "== staged output for the proof run: $choice ($(el) s)"
GPUKIT_GEMM_TMA_STORE=$choice OUT=$OUT bash "$here/session_au.sh" all
# With time left under the call's 600 s: the four staged tiles in every layout at 2000x6000x400
# NT with the staged output on (persistent plans, tuner off), beside version 20's without it.
if [ $(el) -lt 480 ]; then
  echo "== configs at 2000x6000x400 NT, staged output on ($(el) s)"
  GPUKIT_GEMM_TMA_STORE=on configs "$OUT/configs_nt.log" $((570 - $(el))) wgmma_128x256,wgmma_128x256_c2,wgmma_128x128,wgmma_128x64 "2000,6000,400,NT"
fi
echo "total $(el) s"
