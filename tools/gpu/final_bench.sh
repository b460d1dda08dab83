#!/usr/bin/env bash
# The benchmarks of this wave on the GPU host, in two calls of under 9 minutes each (baselines in
# the same call as every figure):
#   part 1: issue 22's programs (plain | offload run | forced GPU, the fixed-cost table,
#           numpy.linalg's suite forced under 8 workers), the Python overhead bench beside CuPy
#           and torch, the scheduler shares from Python;
#   part 2: core_bench beside torch (operators, fused expressions, transfers), gemm_bench (the
#           benchmark shapes and the sweep, cuBLAS beside, planner vs best plan), sched_bench,
#           peer_bench.
#   BUNDLE=.gpu-bundle bash tools/gpu/final_bench.sh 1|2
set -u
B=${BUNDLE:-.gpu-bundle}
PART=${1:?part 1 or 2}
OUT=${OUT:-/tmp/final-bench}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 RUST_BACKTRACE=1
. "$(dirname "$0")/kcache.sh"
T0=$SECONDS
step() { echo; echo "=== $1 (t=$((SECONDS - T0)) s)"; }
if [ "$PART" = 1 ]; then
  step "issue 22 runner"
  BUNDLE=$B OUT=$OUT RUN_BUDGET=${RUN_BUDGET:-300} bash gpukit-offload/bench/issue22/run.sh > "$OUT/issue22.out" 2>&1
  echo "rc=$?"; cat "$OUT/issue22.log" 2>/dev/null | tail -80
  if ls "$B"/wheels/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpukit-site "$B"/wheels/*.whl
    export PYTHONPATH=/tmp/gpukit-site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/gpukit-site/bin:$PATH
    step "Python overhead beside CuPy / torch"
    timeout 120 python3 gpukit-python/bench/overhead.py 2>&1 | tee "$OUT/overhead.log"
    step "scheduler shares from Python"
    timeout 45 python3 gpukit-python/bench/sched_shares.py 4 2>&1 | tee "$OUT/shares.log"
  fi
else
  step "core_bench beside torch"
  CORE_BENCH_TSV="$OUT/gpukit.tsv" timeout 90 "$B/examples/core_bench" > "$OUT/core_bench.log" 2>&1; echo "core_bench rc=$?"
  timeout 40 python3 tools/gpu/core_torch.py "$OUT/torch.tsv" > "$OUT/torch.log" 2>&1; echo "torch rc=$?"
  python3 tools/gpu/core_join.py "$OUT/gpukit.tsv" "$OUT/torch.tsv" > "$OUT/core_table.md" 2> "$OUT/join.err"
  grep -E "^\| transfer|^\| gpukit from|^\| cuMemcpy" "$OUT/core_bench.log"
  grep -iE "operator|fused|op_|ratio|target" "$OUT/core_bench.log" | head -30
  tail -60 "$OUT/core_table.md"
  step "gemm_bench"
  OUT=$OUT timeout 270 "$B/examples/gemm_bench" > "$OUT/gemm_bench.log" 2>&1; echo "gemm_bench rc=$?"
  sed -n '/GEMM on/,$p' "$OUT/gemm_bench.log" | tail -120
  step "sched_bench"
  bench=$B/examples/sched_bench_core; [ -x "$bench" ] || bench=$B/examples/sched_bench
  timeout 80 "$bench" > "$OUT/sched_bench.log" 2>&1; echo "sched_bench rc=$?"
  grep -E "^gpukit-sched on|^\||rows, " "$OUT/sched_bench.log" | tail -40
  step "peer_bench"
  timeout 30 "$B/examples/peer_bench" 512 2>&1 | tee "$OUT/peer_bench.log"
fi
echo; echo "total $((SECONDS - T0)) s"
