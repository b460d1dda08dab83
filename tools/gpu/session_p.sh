#!/usr/bin/env bash
# 2026-12-06, seventh session, call 2 (output kept short; logs come back as $OUT/logs.tar.xz):
#   1. issue 22's thread pool (left as written): plain once; `offload run` / forced with the CUDA
#      libraries dropped from the page cache before each run (a cold machine), two rounds; one
#      warm round;
#   2. the one-shot programs plain / wave 2's `offload run` (BASE, 32b903b) / now (the eager
#      start at load outside launchers, never run on a GPU before);
#   3. the process trees: short processes and scikit-learn n_jobs, plain / `offload run`;
#   4. the fixed cost of one tiny GPU call beside cuBLAS / cuSOLVER's floor (examples/fixed_cost);
#   5. core_bench beside torch (operators, fused expressions, max / min), joined.
#   tar xJf .gpu-bundle.tar.xz && tar xJf .gpu-base.tar.xz && B=.gpu-bundle OUT=$OUT bash tools/gpu/session_p.sh
set -u
OUT=${OUT:-/tmp/session-p}
. "$(dirname "$0")/session_common.sh"
echo "== 1. pool (t=$((SECONDS - T0)))"
one pool plain 0 python3 $I22/service_pool.py
for r in 1 2; do one pool now-cold$r 1 python3 $I22/service_pool.py; one pool forced-cold$r 1 python3 $I22/service_pool.py; done
one pool now-warm 0 python3 $I22/service_pool.py; one pool forced-warm 0 python3 $I22/service_pool.py
echo "== 2. one-shot programs, plain / wave 2 / now (t=$((SECONDS - T0)))"
for p in numpy_oneshot statsmodels_fits sklearn_pipeline; do for m in plain base now; do one $p $m 0 python3 $ONE/$p.py; done; done
echo "== 3. process trees, plain / offload run (t=$((SECONDS - T0)))"
for m in plain now; do one short $m 0 bash $I22/short_processes.sh; done
for m in plain now; do one njobs $m 0 python3 $I22/sklearn_njobs.py; done
grep -c "worker stopped" "$OUT"/njobs.*.log
echo "== 4. fixed cost (t=$((SECONDS - T0)))"
timeout 60 "$B/examples/fixed_cost" 300 > "$OUT/fixed_cost.log" 2>&1; echo "fixed_cost rc=$?"
grep -E "^\|" "$OUT/fixed_cost.log" | head -24 | cut -c1-170
echo "== 5. core_bench beside torch (t=$((SECONDS - T0)))"
CORE_BENCH_TSV="$OUT/gpukit.tsv" timeout 100 "$B/examples/core_bench" > "$OUT/core_bench.log" 2>&1; echo "core_bench rc=$?"
timeout 45 python3 "$here/core_torch.py" "$OUT/torch.tsv" > "$OUT/torch.log" 2>&1; echo "torch rc=$?"
python3 "$here/core_join.py" "$OUT/gpukit.tsv" "$OUT/torch.tsv" > "$OUT/core_table.md" 2> "$OUT/join.err"
grep -E "1 GiB|MISSED|fused|chain" "$OUT/core_table.md" | grep -E "op_|max|min|sum|MISSED|fused" | head -40 | cut -c1-160
tar cJf "$OUT/logs.tar.xz" -C "$OUT" --exclude=logs.tar.xz . 2> /dev/null
echo "total $((SECONDS - T0)) s"
