#!/usr/bin/env bash
# 2026-12-07, fourteenth session (issue 23): the tuner's L2 flush reads its buffer (the split-K
# reduction) instead of writing it (a memset, whose dirty lines' write-back shared DRAM with the
# timed product), bundle of the branch tuner-read-flush (tools/gpu/bundle.sh), about 150 s:
#   1. gemm_gpu's tuner tests (GPUKIT_REQUIRE_GPU=1), each in its own process;
#   2. the full gemm_bench (the planner against the best plan on 46 shapes), the tuner's files.
#   tar xJf .gpu-bundle-al.tar.xz && OUT=$OUT bash tools/gpu/session_al.sh
set -u
OUT=${OUT:-/tmp/session-al}
here=$(dirname "$0")
. "$here/gemm_session.sh"
gemm_tests_matching "tune|autotuner" 100
full_bench 170
grep -E "^\| (192x160x32768|1024x1024x1024) " "$OUT/gemm_bench.log" | cut -c1-250 | tail -2
echo "total $(el) s"
