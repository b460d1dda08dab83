#!/usr/bin/env bash
# 2026-12-06, seventh session, call 1 (bundle of the commit that lifts the small-gelsd gate,
# `call::Scalar` 16-byte aligned; output kept short, only the last 12 000 characters come back):
#   1. every GPU test of the workspace (tools/gpu/final_tests.sh, GPUKIT_REQUIRE_GPU=1), with
#      `small_gelsd_of_every_precision_in_one_process` (s, d, c, then z in one process: the
#      order that crashed) among gpukit-offload's;
#   2. numpy.linalg's `TestDet::test_generalized_sq_cases` forced onto the GPU in one process
#      (no other worker: what the test costs without seven other contexts time-slicing the GPU);
#   2b. the same test in 8 processes at once (the contention of eight contexts on one GPU), and
#      again under an MPS daemon of our own where the host has one (one shared context);
#   3. numpy.linalg's suite forced under 8 workers with what is left (LIMIT, default 570 s),
#      small gelsd included now.
# Logs come back as one archive ($OUT/logs.tar.xz).
#   tar xJf .gpu-bundle.tar.xz && B=.gpu-bundle OUT=$OUT bash tools/gpu/session_o.sh
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/session-o}; mkdir -p "$OUT"
here=$(dirname "$0")
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0
. "$here/kcache.sh"
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
det8() { # label: 8 concurrent one-test pytest processes, forced; prints their seconds
  local t=$SECONDS k
  for k in 1 2 3 4 5 6 7 8; do
    ( s=$SECONDS; LD_PRELOAD=$(realpath "$B/examples/liboffload_preload.so") GPUKIT_OFFLOAD_GPU=always GPUKIT_OFFLOAD_LOG=off \
      timeout -s INT 100 python3 -m pytest --pyargs numpy.linalg -q -p no:cacheprovider -k "TestDet and test_generalized_sq_cases" \
      > "$OUT/det8.$1.$k.log" 2>&1; echo "$? $((SECONDS - s))" > "$OUT/det8.$1.$k.rc" ) &
  done
  wait
  echo "  $1: 8 processes, wall $((SECONDS - t)) s; each (rc s): $(cat "$OUT"/det8.$1.*.rc | tr '\n' ' ')"
}
echo "== 2b. TestDet generalized forced, 8 processes at once (t=$((SECONDS - T0)))"
det8 plain-contexts
if command -v nvidia-cuda-mps-control > /dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d) CUDA_MPS_LOG_DIRECTORY=$(mktemp -d)
  if nvidia-cuda-mps-control -d 2> "$OUT/mps.err"; then
    sleep 1; det8 mps; echo quit | nvidia-cuda-mps-control; sleep 1
  else echo "  mps: the daemon did not start: $(head -c 200 "$OUT/mps.err")"; fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
else echo "  mps: no nvidia-cuda-mps-control on this host"; fi
left=$(( ${LIMIT:-570} - (SECONDS - T0) ))
echo "== 3. numpy.linalg forced under 8 workers, budget $left s (t=$((SECONDS - T0)))"
[ $left -gt 60 ] && B=$B OUT=$OUT/numpy BUDGET=$left bash "$here/numpy_diag.sh" 2>&1 | tail -30
tar cJf "$OUT/logs.tar.xz" -C "$OUT" --exclude=logs.tar.xz . 2> /dev/null
echo "total $((SECONDS - T0)) s"
