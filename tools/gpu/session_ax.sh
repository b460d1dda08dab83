#!/usr/bin/env bash
# 2026-12-07, eighteenth session (issue 23), the fourth call: the wgmma TF32 kernels' output
# through shared memory and the copy engine (a tensor map of C; TileConfig::stages_output: the
# 128x256, its clustered sibling, the 128x128 and the 128x64), on the bundle of b31dee8 with its
# prewarmed kernel cache (.gpu-bundle-ay; .gpu-bundle-ax of 0aacfcf turned the staged output on
# by default and its kernels predate the review's helper) (about 220 s):
#   1. gemm_bench --quick --paired with the staged output (GPUKIT_GEMM_TMA_STORE=on) and
#      without (off), one process each, on the shapes the staged tiles take;
#   2. every gemm_gpu test with GPUKIT_GEMM_TMA_STORE=on (opt-in until measured), one process
#      each, GPUKIT_REQUIRE_GPU=1 (the staged output in every layout, edge tiles, batches,
#      split-K slices and tail pieces, against cuBLAS DGEMM).
#   tar xJf .gpu-bundle-ay.tar.xz && OUT=$OUT bash tools/gpu/session_ax.sh   (git-ignored: carry it)
set -u
OUT=${OUT:-/tmp/session-ax}
here=$(dirname "$0")
. "$here/gemm_session.sh"
SH="2000,6000,400,NT;2500,2500,500;4096,4096,256;4096,4096,4096;192,160,32768"
for v in on off; do
  echo "== paired, staged output $v ($(el) s)"
  fresh_cache
  GPUKIT_GEMM_TMA_STORE=$v timeout 50 "$B/examples/gemm_bench" --quick --paired --shapes "$SH" > "$OUT/paired_$v.log" 2>&1
  echo "  rc $?"
  grep -E "^paired" "$OUT/paired_$v.log" | sed 's/(medians of 25 alternating samples)//; s/^paired //' | cut -c1-190
done
(cd "$OUT" && tar cJf a_paired.tar.xz --exclude='*.tar.xz' . 2> /dev/null)
echo "== gemm_gpu tests, staged output on ($(el) s)"
GPUKIT_GEMM_TMA_STORE=on gemm_tests_matching "." 150
(cd "$OUT" && tar cJf all.tar.xz --exclude='*.tar.xz' . 2> /dev/null)
echo "total $(el) s"
