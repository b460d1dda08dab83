#!/usr/bin/env bash
# 2026-12-07, sixteenth session (issue 23): the final bundle of this session (the 128x192 tile,
# the tuner's third stage, its confirmation stage and first-pass cap), tools/gpu/bundle.sh
# --wheel with the prewarmed kernel cache of .gpu-bundle-as (kernels unchanged since). About 480 s:
#   1. the full gemm_bench (fresh cache; both planners against the best plan on 46 shapes, cuBLAS
#      TF32 and SGEMM beside), the tuner's files;
#   2. gemm_bench --quick --paired on the named shapes;
#   3. every GPU test of the bundle with GPUKIT_REQUIRE_GPU=1 (final_tests.sh);
#   4. core_bench beside PyTorch in the same call;
#   everything in one tar (the host returns about eight files). Phase `bench` runs 1 and 2 (with
#   gemm_gpu's tuner tests first), `tests` 3 and 4, `all` (the default) everything, `final` 1 to 3
#   (the tuner tests within 3), `gemm` 1 and 2 after every gemm_gpu test.
#   tar xJf .gpu-bundle-au.tar.xz && OUT=$OUT bash tools/gpu/session_au.sh [bench|tests|all|final|gemm]
set -u
PH=${1:-all}
OUT=${OUT:-/tmp/session-au}
here=$(dirname "$0")
. "$here/gemm_session.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,power.limit,temperature.gpu --format=csv,noheader
if [ "$PH" != tests ]; then
case $PH in
  final) ;;
  gemm) gemm_tests_matching "." 200 ;;
  *) gemm_tests_matching "tune|autotuner" 100 ;;
esac
full_bench 200
grep -E "^\| (2048x3000x1000 TT|3000x3000x3000|12288x12288x4096|777x1555x2333|192x160x32768) .*\(.*\(" "$OUT/gemm_bench.log" | cut -c1-250 | tail -5
fresh_cache
echo "== paired ($(el) s)"
paired "$OUT/paired.log" "$B/examples/gemm_bench" "4096,4096,4096;8192,8192,8192;4096,4096,256;8,768,768,768;192,160,32768;2000,6000,400;2500,2500,500;2048,3000,1000;3000,2000,300"
# First in name order: what comes back if the call is cut short later.
(cd "$OUT" && tar cJf a_bench.tar.xz --exclude='*.tar.xz' . 2> /dev/null)
fi
if [ "$PH" != bench ] && [ "$PH" != gemm ]; then
all_tests 330
if [ "$PH" != final ]; then
  core_vs_torch
  tail -40 "$OUT/core_table.md"
fi
fi
(cd "$OUT" && tar cJf all.tar.xz --exclude='*.tar.xz' --exclude=tests . 2> /dev/null)
echo "total $(el) s"
