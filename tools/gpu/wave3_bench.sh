#!/usr/bin/env bash
# One device call (under 9 minutes) of the wave-3 figures still to measure, baselines in the same
# call: gemm_bench's sweep (planner vs best plan with the tuner on, cuBLAS TF32 / SGEMM beside),
# core_bench's operators beside torch, and issue 22's programs (plain | offload run | forced),
# the fixed-cost table and numpy.linalg's suite forced under 8 workers.
#   BUNDLE=.gpu-bundle OUT=$OUT bash tools/gpu/wave3_bench.sh
set -u
B=${BUNDLE:-.gpu-bundle}
OUT=${OUT:-/tmp/wave3-bench}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 RUST_BACKTRACE=1
. "$(dirname "$0")/kcache.sh"
T0=$SECONDS
step() { echo; echo "=== $1 (t=$((SECONDS - T0)) s)"; }
step "gemm_bench --sweep-only (tuner on; the kernel cache copy holds no tuning files)"
OUT=$OUT timeout "${T_GEMM:-210}" "$B/examples/gemm_bench" --sweep-only > "$OUT/gemm_bench.log" 2>&1; echo "gemm_bench rc=$?"
tail -60 "$OUT/gemm_bench.log" | cut -c1-200
step "core_bench beside torch"
CORE_BENCH_TSV="$OUT/gpukit.tsv" timeout 90 "$B/examples/core_bench" > "$OUT/core_bench.log" 2>&1; echo "core_bench rc=$?"
timeout 40 python3 tools/gpu/core_torch.py "$OUT/torch.tsv" > "$OUT/torch.log" 2>&1; echo "torch rc=$?"
python3 tools/gpu/core_join.py "$OUT/gpukit.tsv" "$OUT/torch.tsv" > "$OUT/core_table.md" 2> "$OUT/join.err"
grep -iE "op_|add_row|mul_col|fused|target|missed|met" "$OUT/core_table.md" | head -40
step "issue 22"
PROGRAMS=${PROGRAMS:-small pool njobs} BUNDLE=$B OUT=$OUT RUN_BUDGET=${RUN_BUDGET:-230} bash gpukit-offload/bench/issue22/run.sh > "$OUT/issue22.out" 2>&1
echo "issue22 rc=$?"; grep -v "sections:" "$OUT/issue22.log" | tail -70 | cut -c1-220
echo; echo "total $((SECONDS - T0)) s"
