#!/usr/bin/env bash
# 2026-12-07, fifteenth session (issue 23): the tuner charges each product the write-back of
# what it left dirty (timed window: the product and the flush after it, less a clean flush).
# Bundle: .gpu-bundle-ao's with gemm_bench and gemm_gpu rebuilt from HEAD (the kernels are
# unchanged, so its prewarmed cache holds them). About 150 s:
#   1. gemm_gpu's tuner tests (GPUKIT_REQUIRE_GPU=1), each in its own process;
#   2. the full gemm_bench (the planner against the best plan on 46 shapes), the tuner's files.
#   tar xJf .gpu-bundle-ap.tar.xz && OUT=$OUT bash tools/gpu/session_ap.sh
# Also run (call 8) with .gpu-bundle-ar: call 7's bundle with gemm_bench and gemm_gpu of 80d6f57.
set -u
OUT=${OUT:-/tmp/session-ap}
here=$(dirname "$0")
. "$here/gemm_session.sh"
gemm_tests_matching "tune|autotuner" 100
full_bench 200
grep -E "^\| (192x160x32768|256x256x8192|3000x2000x300|2000x6000x400 NT) .*\(.*\(" "$OUT/gemm_bench.log" | cut -c1-250 | tail -4
(cd "$OUT" && tar cJf logs.tar.xz --exclude='*.tar.xz' . 2> /dev/null)
echo "total $(el) s"
