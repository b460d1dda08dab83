#!/usr/bin/env bash
# 2026-12-06, ninth session (issue 23): the 128x256 and ping-pong tiles in clusters of two
# blocks sharing Q's tiles through TMA multicast (wgmma_128x256_c2, wgmma_128x128_pp_c2):
#   1. every GPU test of the bundle (tools/gpu/final_tests.sh, GPUKIT_REQUIRE_GPU=1; gemm_gpu's
#      forced-path tests run the new kernels in every operand layout, one cluster per unit and
#      persistent);
#   2. gemm_bench --configs --only (the two tiles and their clustered siblings) on 4096^3,
#      8192^3, two short-K shapes and 3000^3 (cuBLAS TF32 in the same process);
#   3. gemm_bench's benchmark shapes and sweep with the tuner measuring every class afresh.
#   tar xJf .gpu-bundle.tar.xz && B=.gpu-bundle OUT=$OUT bash tools/gpu/session_u.sh
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/session-u}; mkdir -p "$OUT"
here=$(dirname "$0")
T0=$SECONDS
echo "host $(hostname) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
BUNDLE=$B OUT=$OUT/final timeout 360 bash "$here/final_tests.sh" > "$OUT/final.txt" 2>&1
grep -vE "^\s*$" "$OUT/final.txt" | grep -E "rc=[1-9]|FAILED|panicked|TIMEOUT|pytest|Rust test binaries|gemm_gpu::wgmma|done at" | cut -c1-220 | head -40
fi
. "$here/kcache.sh"
echo "== gemm_bench --configs (t=$((SECONDS - T0)))"
GPUKIT_GEMM_TUNE=off timeout 120 "$B/examples/gemm_bench" --quick --configs --only wgmma_128x256,wgmma_128x256_c2,wgmma_128x128_pp,wgmma_128x128_pp_c2 \
  --shapes "4096,4096,4096;8192,8192,8192;4096,4096,256;2500,2500,500;3000,3000,3000" > "$OUT/gemm_configs.log" 2>&1
echo "  rc $?"
grep -E "pers:|^\[" "$OUT/gemm_configs.log" | head -90 | cut -c1-200
echo "== gemm_bench (t=$((SECONDS - T0)))"
OUT=$OUT timeout ${BENCH_LIMIT:-220} "$B/examples/gemm_bench" > "$OUT/gemm_bench.log" 2>&1
echo "  rc $?"
tail -n 70 "$OUT/gemm_bench.log" | cut -c1-250
tar cJf "$OUT/logs.tar.xz" -C "$OUT" --exclude=logs.tar.xz . 2> /dev/null
echo "total $((SECONDS - T0)) s"
