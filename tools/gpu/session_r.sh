#!/usr/bin/env bash
# 2026-12-06, eighth session, call 2: the ping-pong TF32 kernel (wgmma_128x128_pp, issue 23) on
# the GPU host, and every GPU test of the bundle:
#   1. tools/gpu/final_tests.sh (GPUKIT_REQUIRE_GPU=1; gemm_gpu's forced-path tests run every
#      candidate, the new kernel on every operand layout, persistent on 3 blocks);
#   2. gemm_bench --configs on 4096^3, two short-K shapes and 3000^3: every
#      configuration's best plan, cuBLAS TF32 in the same process;
#   3. gemm_bench's benchmark shapes and 38-shape sweep with the tuner measuring every class
#      afresh (the tuner's choice beside the best planned candidate, cuBLAS beside).
# About 5-6 minutes.
#   tar xJf .gpu-bundle.tar.xz && B=.gpu-bundle OUT=$OUT bash tools/gpu/session_r.sh
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/session-r}; mkdir -p "$OUT"
here=$(dirname "$0")
T0=$SECONDS
echo "host $(hostname) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
BUNDLE=$B OUT=$OUT/final timeout 330 bash "$here/final_tests.sh" > "$OUT/final.txt" 2>&1
grep -vE "^\s*$" "$OUT/final.txt" | grep -E "rc=[1-9]|FAILED|panicked|TIMEOUT|pytest|Rust test binaries|gemm_gpu::wgmma|done at" | cut -c1-220 | head -40
. "$here/kcache.sh"
echo "== gemm_bench --configs (t=$((SECONDS - T0)))"
timeout 100 "$B/examples/gemm_bench" --configs --shapes "4096,4096,4096;4096,4096,256;2500,2500,500;3000,3000,3000" > "$OUT/gemm_configs.log" 2>&1
echo "  rc $?"
grep -E "wgmma_128x128_pp|wgmma_128x256 |wgmma_128x128 |cuBLAS|planner|^#|shape" "$OUT/gemm_configs.log" | head -70 | cut -c1-200
echo "== gemm_bench (t=$((SECONDS - T0)))"
OUT=$OUT timeout ${BENCH_LIMIT:-200} "$B/examples/gemm_bench" > "$OUT/gemm_bench.log" 2>&1
echo "  rc $?"
tar cJf "$OUT/logs.tar.xz" -C "$OUT" --exclude=logs.tar.xz . 2> /dev/null
echo "total $((SECONDS - T0)) s"
