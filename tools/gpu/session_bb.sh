#!/usr/bin/env bash
# 2026-12-07, twentieth session (issue 23): the last 175 s of device time, on a bundle of this
# commit (about 70 s): the split-K workspace's rows staged whatever N (gemm_gpu's staged-output,
# split-K and long-K tests), and gemm_bench's plan sweep with its finalists timed again in
# alternation at 32x12288x4096 (the FP32 planner's 0.88 in the sweep of call 2), 192x160x32768
# and 257x131x4800.
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/session_bb.sh
set -u
OUT=${OUT:-/tmp/session-bb}
here=$(dirname "$0")
. "$here/gemm_session.sh"
gemm_tests_matching "staged_output|split_k_reduction|skinny_and_small|large_k" 45
fresh_cache
timeout 35 "$B/examples/gemm_bench" --shapes "32,12288,4096;192,160,32768;257,131,4800" > "$OUT/bench.log" 2>&1
echo "gemm_bench rc $?"
grep -E "^\[|planner vs best|^targets" "$OUT/bench.log" | cut -c1-330
echo "total $(el) s"
