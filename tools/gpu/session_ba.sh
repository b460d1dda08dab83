#!/usr/bin/env bash
# 2026-12-07, twentieth session (issue 23): the proof run of the staged output as the default, on
# a bundle of f2cffd4 (tools/gpu/bundle.sh) (about 330 s):
#   1. the old gemm_gpu test binary (bundle of 67c95b5, carried xz-compressed as
#      .gpu-bundle-oldgg.xz: C staged whatever its row length) at 257x131x1000 with ldc 132 and the
#      staged output on: the element of the padding it writes, in full;
#   2. session_au.sh all: the tuner tests, the full gemm_bench, the paired shapes, every GPU test
#      with GPUKIT_REQUIRE_GPU=1 (the staged output is the default now), core_bench beside PyTorch.
#   `short` (about 240 s, for a call with little device time left): 1, the paired shapes and every
#   GPU test (session_au.sh final without the full gemm_bench).
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/session_ba.sh [short]
set -u
PH=${1:-all}
OUT=${OUT:-/tmp/session-ba}
here=$(dirname "$0")
. "$here/gemm_session.sh"
if [ -f .gpu-bundle-oldgg.xz ]; then
  echo "== the old test binary, staged output on ($(el) s)"
  xz -dc .gpu-bundle-oldgg.xz > /tmp/oldgg && chmod +x /tmp/oldgg
  (fresh_cache; GPUKIT_GEMM_TMA_STORE=on GPUKIT_REQUIRE_GPU=1 timeout 100 /tmp/oldgg --exact wgmma_paths_on_awkward_shapes > "$OUT/old_awkward.log" 2>&1; echo "  rc $?")
  grep -A2 "panicked at" "$OUT/old_awkward.log" | sed 's/Some(Plan.*: element/ ... element/' | cut -c1-600
  grep -o "element [0-9]* outside C was written" "$OUT/old_awkward.log" | head -1 | awk '{i=$2; printf "  row %d, column %d of ldc 132\n", int(i/132), i%132}'
fi
if [ "$PH" = short ]; then
  fresh_cache
  echo "== paired ($(el) s)"
  paired "$OUT/paired.log" "$B/examples/gemm_bench" "4096,4096,4096;8192,8192,8192;4096,4096,256;2000,6000,400,NT;2500,2500,500;192,160,32768"
  (cd "$OUT" && tar cJf a_paired.tar.xz --exclude='*.tar.xz' . 2> /dev/null)
  all_tests 330
else
  OUT=$OUT bash "$here/session_au.sh" all
fi
echo "total $(el) s"
