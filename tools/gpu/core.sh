#!/usr/bin/env bash
# gpukit-jit / gpukit-core on the GPU host, in one call (whole script <= 200 s, every step under
# `timeout`, summary table last):
#   1. the built-in kernels into the kernel cache (instant when .kcache was prepared here with
#      `GPUKIT_CACHE_DIR=.kcache cargo run --release -p gpukit-core --example prewarm_kernels -- sm_90`);
#   2. the core and jit test binaries with GPUKIT_REQUIRE_GPU=1 (no test may skip itself);
#   3. core_bench's operations table and the same operations in torch (tools/gpu/core_torch.py),
#      joined with ratios and the issue's targets (tools/gpu/core_join.py);
#   4. compute-sanitizer memcheck and racecheck over a selection of the core GPU tests (one
#      proptest case each: GPUKIT_TEST_CASES=1).
# Default limits add up to 215 s (T_* variables override them; core_bench has 60 s since issue 23
# added the operator and fused-expression rows); the prewarm step fits its 20 s
# only when the cache was prepared here (otherwise every program compiles on the host first).
# Usage, from the repository root on the GPU host:
#   bash tools/gpu/core.sh [BUNDLE]     BUNDLE: the packed binaries (../shared/gpu/pack -p gpukit-jit
#                                       -p gpukit-core), default .gpu-bundle; logs under $OUT.
set -u
B=${1:-.gpu-bundle}
OUT=${OUT:-/tmp/core-out}; mkdir -p "$OUT"
export GPUKIT_CACHE_DIR=${GPUKIT_CACHE_DIR:-$PWD/.kcache} PYTHONUNBUFFERED=1 RUST_BACKTRACE=1
SAN=${SAN:-/usr/local/cuda/bin/compute-sanitizer}
T0=$(date +%s)
S="$OUT/summary.md"; : > "$S"
row() { printf '| %s | %s | %s |\n' "$1" "$2" "$3" >> "$S"; echo "== $1: $2 ($3)"; }
secs() { echo "$(( $(date +%s) - $1 )) s"; }

# 1. Kernel cache.
t=$(date +%s)
timeout "${T_PREWARM:-20}" "$B/examples/prewarm_kernels" sm_90 > "$OUT/prewarm.log" 2>&1
row "kernel cache (prewarm sm_90)" "rc=$?" "$(tail -1 "$OUT/prewarm.log" | cut -c1-90); $(secs $t)"

# 2. Tests, GPU required. The NVRTC compile test is CI's (it runs without a GPU).
t=$(date +%s)
export GPUKIT_REQUIRE_GPU=1
: > "$OUT/tests.log"; bad=()
for bin in "$B"/tests/gpukit-core.* "$B"/tests/gpukit-jit.*; do
  case "$bin" in *gemm_*|*kernels_nvrtc*) continue ;; esac
  [ -x "$bin" ] || continue
  left=$(( ${T_TESTS:-60} - ($(date +%s) - t) ))
  [ "$left" -le 0 ] && { bad+=("(time budget reached before $(basename "$bin"))"); break; }
  lim=${T_TEST_BIN:-45}; [ "$left" -lt "$lim" ] && lim=$left
  echo "=== $bin" >> "$OUT/tests.log"
  timeout "$lim" "$bin" >> "$OUT/tests.log" 2>&1 || bad+=("$(basename "$bin")")
done
read -r p f < <(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$OUT/tests.log" | awk '{p+=$1; f+=$2} END {print p+0, f+0}')
skips=$(grep -c '^gpukit SKIPPED' "$OUT/tests.log")
row "core + jit GPU tests" "$p passed, $f failed, $skips binaries with skips" "failing: ${bad[*]:-none}; $(secs $t)"
unset GPUKIT_REQUIRE_GPU

# 3. Operations beside torch.
t=$(date +%s)
CORE_BENCH_TSV="$OUT/gpukit.tsv" timeout "${T_BENCH:-60}" "$B/examples/core_bench" > "$OUT/core_bench.log" 2>&1
rb=$?
timeout "${T_TORCH:-25}" python3 tools/gpu/core_torch.py "$OUT/torch.tsv" > "$OUT/torch.log" 2>&1
rt=$?
python3 tools/gpu/core_join.py "$OUT/gpukit.tsv" "$OUT/torch.tsv" > "$OUT/table.md" 2> "$OUT/join.err"
row "core_bench beside torch" "bench rc=$rb, torch rc=$rt" "$(tail -1 "$OUT/table.md" 2>/dev/null); $(secs $t)"

# 4. compute-sanitizer over a selection (small tests, one proptest case each).
export GPUKIT_REQUIRE_GPU=1 GPUKIT_TEST_CASES=1
t=$(date +%s)
if [ -x "$SAN" ]; then
  timeout "${T_MEMCHECK:-15}" "$SAN" --tool memcheck --error-exitcode 99 --print-limit 20 \
    "$B"/tests/gpukit-core.gpu_extras.* --test-threads 1 user_elementwise safe_launch pinned_arrays \
    > "$OUT/memcheck.log" 2>&1
  rm=$?
  timeout "${T_MEMCHECK2:-10}" "$SAN" --tool memcheck --error-exitcode 99 --print-limit 20 \
    "$B"/tests/gpukit-core.gpu_index.* --test-threads 1 integer_and_boolean squeeze_unsqueeze \
    >> "$OUT/memcheck.log" 2>&1
  rm2=$?
  row "memcheck (gpu_extras, gpu_index selection)" "rc=$rm/$rm2" "$(grep -h 'ERROR SUMMARY' "$OUT/memcheck.log" | sort | uniq -c | tr '\n' ' '); $(secs $t)"
  t=$(date +%s)
  timeout "${T_RACECHECK:-15}" "$SAN" --tool racecheck --error-exitcode 99 --print-limit 20 \
    "$B"/tests/gpukit-core.gpu_reduce.* --test-threads 1 reductions_over_axis_sets cumsum_and_cumprod \
    > "$OUT/racecheck.log" 2>&1
  rr=$?
  timeout "${T_RACECHECK2:-10}" "$SAN" --tool racecheck --error-exitcode 99 --print-limit 20 \
    "$B"/tests/gpukit-core.gpu_extras.* --test-threads 1 softmax_and_layernorm \
    >> "$OUT/racecheck.log" 2>&1
  rr2=$?
  row "racecheck (reductions, scans, softmax/layernorm)" "rc=$rr/$rr2" "$(grep -h 'RACECHECK SUMMARY' "$OUT/racecheck.log" | sort | uniq -c | tr '\n' ' '); $(secs $t)"
else
  row "compute-sanitizer" "not found at $SAN" "skipped"
fi

echo
echo "================ core_bench beside torch ================"
cat "$OUT/table.md" 2>/dev/null || echo "(no table: see $OUT/core_bench.log, $OUT/torch.log)"
echo
echo "================ SUMMARY ($(secs "$T0")) ================"
echo "| step | result | detail |"
echo "| --- | --- | --- |"
cat "$S"
