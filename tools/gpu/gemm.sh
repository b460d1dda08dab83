#!/usr/bin/env bash
# GEMM on the GPU host in one call (about 60 s on the H200, well under 120 s): the kernel cache
# (precompiled into .kcache, or compiled here on all cores if absent), the GEMM tests with
# GPUKIT_REQUIRE_GPU=1 (each gemm_gpu test in its own process, all at once, so a GPU fault in one
# path cannot take the others down; then gemm_api), and gemm_bench (8 benchmark shapes and the
# 24-shape awkward sweep, cuBLAS FP32/TF32 in the same process, 3xTF32 with its error beside
# cuBLAS SGEMM's). Logs under $OUT; the test summary, then the tables, are printed last.
#   ../shared/gpu/pack -p gpukit-core && ../shared/gpu/pack -p gpukit   (or one `pack` of the
#   workspace): .gpu-bundle/tests/gpukit-core.gemm_{gpu,api}.test, .gpu-bundle/examples/gemm_bench
#   .gpu-bundle/examples/gemm_bench --precompile .kcache   (here, with the NVRTC wheel; optional)
#   bash tools/gpu/gemm.sh
set -u
B=${BUNDLE:-.gpu-bundle}
OUT=${OUT:-/tmp/gemm-out}; mkdir -p "$OUT"
S=$OUT/gemm_summary.txt; : > "$S"
T=$(mktemp -d)
export GPUKIT_CACHE_DIR=${GPUKIT_CACHE_DIR:-$PWD/.kcache} GPUKIT_REQUIRE_GPU=1 RUST_BACKTRACE=0
t0=$SECONDS
el() { echo "t=$((SECONDS - t0))s"; }
GPU=$B/tests/gpukit-core.gemm_gpu.test; API=$B/tests/gpukit-core.gemm_api.test; BENCH=$B/examples/gemm_bench
for f in "$GPU" "$API" "$BENCH"; do [ -x "$f" ] || { echo "missing $f (run ../shared/gpu/pack)"; exit 2; }; done
timeout 60 "$BENCH" --precompile "$GPUKIT_CACHE_DIR" > "$OUT/gemm_precompile.log" 2>&1
echo "kernel cache: rc=$? $(tail -1 "$OUT/gemm_precompile.log") $(el)" >> "$S"

tests=$("$GPU" --list 2>/dev/null | sed -n 's/: test$//p')
for t in $tests; do
  ( timeout 90 "$GPU" --exact "$t" --nocapture > "$T/$t.log" 2>&1; echo "rc=$?" >> "$T/$t.log" ) &
done
( timeout 60 "$API" --nocapture > "$OUT/gemm_api.log" 2>&1; echo "rc=$?" >> "$OUT/gemm_api.log" ) &
wait
: > "$OUT/gemm_gpu.log"
for t in $tests; do echo "=== $t" >> "$OUT/gemm_gpu.log"; cat "$T/$t.log" >> "$OUT/gemm_gpu.log"; done
rm -rf "$T"
pass=$(cat "$OUT/gemm_gpu.log" "$OUT/gemm_api.log" | sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' | awk '{p+=$1; f+=$2} END {print p+0 " passed, " f+0 " failed"}')
echo "GEMM tests: $pass $(el)" >> "$S"
grep -hE "^test .* FAILED$" "$OUT/gemm_gpu.log" "$OUT/gemm_api.log" >> "$S"
grep -h -A3 "panicked at" "$OUT/gemm_gpu.log" "$OUT/gemm_api.log" | cut -c1-300 | head -24 >> "$S"
grep -E "^(Normal|WideExponent) |cuBLAS SGEMM differs" "$OUT/gemm_gpu.log" | cut -c1-300 >> "$S"

timeout 100 "$BENCH" > "$OUT/gemm_bench.log" 2>&1
echo "gemm_bench rc=$? $(el)" >> "$S"
echo "================ GEMM SUMMARY ================"
cat "$S"
echo "================ gemm_bench (cuBLAS in the same process) ================"
grep -E "^device" "$OUT/gemm_bench.log"
if grep -q "^GEMM on" "$OUT/gemm_bench.log"; then
  sed -n '/^Forced paths/,$p' "$OUT/gemm_bench.log"
else
  echo "(gemm_bench did not finish: the rows measured so far)"; grep -E "^\|" "$OUT/gemm_bench.log"
fi
