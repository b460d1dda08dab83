#!/usr/bin/env bash
# gpukit-sched on the GPU host (issues 14, 21 and 24's single-GPU part): sched_bench
# (green-context rows, the pacing fallback with green contexts off, the failure paths with the
# time to each outcome, the memory race) and gpukit-sched's tests with GPUKIT_REQUIRE_GPU=1 —
# gpu (confinement, partitions, cuBLAS from the shared cache, lanes), gpu_faults (a kernel that
# never ends, an illegal address: each in a child process), gpu_multi (the scheduler over every
# visible GPU; the spreading test skips on one GPU unless GPUKIT_REQUIRE_MULTI_GPU=1) — from a
# bundle built by /work/shared/gpu/pack. Every step runs under `timeout`; the summary table
# comes last.
#
#   Build (build machine, in the checkout to test):
#     ../shared/gpu/pack -p gpukit-sched
#     mkdir -p /work/main/.gpu-bundle-sched
#     cp -r .gpu-bundle/tests .gpu-bundle/examples tools/gpu/sched.sh /work/main/.gpu-bundle-sched/
#   Run (one device call, carry [".gpu-bundle-sched"]):
#     bash .gpu-bundle-sched/sched.sh
#
# Expected time (estimated, never run there): sched_bench 30-45 s, GPU tests 30-60 s, the CPU
# tests about 20 s; limits 80 + 90 + 60 + 60 + 5 x 30 s = 440 s. Exit status: 0 when every step passed.
# In a git worktree /work/shared/gpu/pack stops at `.git/info/exclude` (not a directory there);
# run it from a plain checkout, or with that path replaced by `git rev-parse --git-path
# info/exclude`.
set -u
B=${1:-$(cd "$(dirname "$0")" && pwd)}
[ -d "$B/tests" ] || B=.gpu-bundle
OUT=${OUT:-/tmp/sched-out}; mkdir -p "$OUT"
export GPUKIT_CACHE_DIR="${GPUKIT_CACHE_DIR:-$OUT/kcache}"
export RUST_BACKTRACE=1
declare -a ROWS=()
status=0

run() { # name, limit (s), log, command...
  local name=$1 limit=$2 log=$3; shift 3
  local t0=$SECONDS
  timeout "$limit" "$@" > "$log" 2>&1
  local rc=$?
  local dt=$((SECONDS - t0))
  [ $rc -eq 0 ] || status=1
  [ $rc -eq 124 ] && echo "TIMEOUT after ${limit} s" >> "$log"
  LAST_RC=$rc; LAST_DT=$dt
}

echo "== device"
timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader 2>&1 | tee "$OUT/device.txt"

# 1. sched_bench: the table; exits non-zero when a row fails.
bench=$B/examples/sched_bench_core; [ -x "$bench" ] || bench=$B/examples/sched_bench
run sched_bench 80 "$OUT/sched_bench.log" "$bench"
echo "== sched_bench (rc=$LAST_RC, ${LAST_DT} s)"
grep -E "^gpukit-sched on|^\|" "$OUT/sched_bench.log"
bench_line=$(grep -E "^[0-9]+ rows, [0-9]+ failed" "$OUT/sched_bench.log" | tail -1)
[ -n "$bench_line" ] || bench_line="no table (see $OUT/sched_bench.log: $(tail -1 "$OUT/sched_bench.log"))"
ROWS+=("sched_bench|$LAST_RC|$LAST_DT|$bench_line")

# 2. GPU tests (one scheduler per device at a time: the tests serialize themselves; the fault
#    tests run each fault in a child process of their own binary).
export GPUKIT_REQUIRE_GPU=1
for spec in gpu:90 gpu_faults:60 gpu_multi:60; do
  t=${spec%%:*}; limit=${spec##*:}
  bin=$B/tests/gpukit-sched.$t.test
  if [ ! -x "$bin" ]; then status=1; ROWS+=("$t|-|0|missing: $bin"); continue; fi
  run "$t" "$limit" "$OUT/$t.log" "$bin" --nocapture --test-threads=1
  echo "== gpukit-sched $t (rc=$LAST_RC, ${LAST_DT} s)"
  grep -E "^test |panicked at|SKIPPED|^(one group|raw|task|a:|created|core op|GPU time|sgemm|throughput|pacing|green|hung|paced|two tasks|poisoner|unhealthy|handles|after|tasks per|pinned|[0-9]+ device)" "$OUT/$t.log" | head -80
  ROWS+=("$t|$LAST_RC|$LAST_DT|$(grep -E '^test result' "$OUT/$t.log" | tail -1)")
done

# 3. The CPU-side tests on this host too (library incl. planner, ledger, placement proptests;
#    state machine; handle API; simulated devices; NVRTC kernel compile).
for t in gpukit_sched.lib cpu_runtime.test handle.test multi.test kernels.test; do
  bin=$B/tests/gpukit-sched.$t
  t=${t%%.*}; [ "$t" = gpukit_sched ] && t=lib
  if [ ! -x "$bin" ]; then ROWS+=("$t tests|-|0|missing: $bin"); status=1; continue; fi
  run "$t" 30 "$OUT/$t.log" "$bin"
  ROWS+=("$t tests|$LAST_RC|$LAST_DT|$(grep -E '^test result' "$OUT/$t.log" | tail -1)")
done

echo
echo "failures (if any):"
grep -hE "\| FAIL \|$|\.\.\. FAILED|TIMEOUT|^error" "$OUT"/*.log 2>/dev/null | head -30
echo
echo "================ SUMMARY (gpukit-sched, logs in $OUT) ================"
printf '| %-12s | %-3s | %-5s | %s\n' step rc s result
for r in "${ROWS[@]}"; do
  IFS='|' read -r a b c d <<< "$r"
  printf '| %-12s | %-3s | %-5s | %s\n' "$a" "$b" "$c" "$d"
done
exit $status
