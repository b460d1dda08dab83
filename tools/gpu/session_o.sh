#!/usr/bin/env bash
# 2026-12-06, seventh session, call 1 (bundle of the commit that lifts the small-gelsd gate,
# `call::Scalar` 16-byte aligned; output kept short, only the last 12 000 characters come back):
#   1. every GPU test of the workspace (tools/gpu/final_tests.sh, GPUKIT_REQUIRE_GPU=1), with
#      `small_gelsd_of_every_precision_in_one_process` (s, d, c, then z in one process: the
#      order that crashed) among gpukit-offload's;
#   2. numpy.linalg's `TestDet::test_generalized_sq_cases` forced onto the GPU in one process
#      (no other worker: what the test costs without seven other contexts time-slicing the GPU);
#   3. numpy.linalg's suite forced under 8 workers with what is left (LIMIT, default 570 s),
#      small gelsd included now.
# Logs come back as one archive ($OUT/logs.tar.xz).
#   tar xJf .gpu-bundle.tar.xz && B=.gpu-bundle OUT=$OUT bash tools/gpu/session_o.sh
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/session-o}; mkdir -p "$OUT"
here=$(dirname "$0")
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0
T0=$SECONDS
echo "host $(hostname) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
echo "== 1. GPU tests (t=$((SECONDS - T0)))"
BUNDLE=$B OUT=$OUT/final bash "$here/final_tests.sh" > "$OUT/final.txt" 2>&1
cat "$OUT/final/summary.txt"; tail -1 "$OUT/final.txt"
grep -h "^test .* FAILED\|^FAILED\|TIMEOUT\|fatal signal" "$OUT"/final/logs/*.log | sort | uniq -c | head -20 | cut -c1-200
grep -h "small_gelsd" "$OUT"/final/logs/gpukit-offload.gpu.test.log | head -3
echo "== 2. TestDet generalized forced, one process (t=$((SECONDS - T0)))"
t=$SECONDS
LD_PRELOAD=$(realpath "$B/examples/liboffload_preload.so") GPUKIT_OFFLOAD_GPU=always GPUKIT_OFFLOAD_LOG=summary \
  timeout -s INT 90 python3 -m pytest --pyargs numpy.linalg -q -p no:cacheprovider -k "TestDet and test_generalized_sq_cases" \
  --durations=3 > "$OUT/testdet.log" 2>&1
echo "  rc $? $((SECONDS - t)) s; $(grep -E ' call .*TestDet|passed|failed' "$OUT/testdet.log" | head -3 | tr '\n' ' ' | cut -c1-300)"
grep -E "^gpukit-offload: .*(dgetrf|zgetrf|sgetrf|cgetrf|calls)" "$OUT/testdet.log" | head -6 | cut -c1-200
left=$(( ${LIMIT:-570} - (SECONDS - T0) ))
echo "== 3. numpy.linalg forced under 8 workers, budget $left s (t=$((SECONDS - T0)))"
[ $left -gt 60 ] && B=$B OUT=$OUT/numpy BUDGET=$left bash "$here/numpy_diag.sh" 2>&1 | tail -30
tar cJf "$OUT/logs.tar.xz" -C "$OUT" final numpy testdet.log final.txt 2> /dev/null
echo "total $((SECONDS - T0)) s"
