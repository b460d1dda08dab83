#!/usr/bin/env bash
# gpukit-sched on the GPU host (issue 14's proof): sched_bench (green-context rows, the pacing
# fallback with green contexts off, the failure paths with the time to each outcome, the memory
# race) and gpukit-sched's tests with GPUKIT_REQUIRE_GPU=1, from a bundle built by
# /work/shared/gpu/pack. Every step runs under `timeout`; the summary table comes last.
#
#   Build (build machine, in the checkout to test):
#     ../shared/gpu/pack -p gpukit-sched
#     mkdir -p /work/main/.gpu-bundle-sched
#     cp -r .gpu-bundle/tests .gpu-bundle/examples tools/gpu/sched.sh /work/main/.gpu-bundle-sched/
#   Run (one device call, carry [".gpu-bundle-sched"]):
#     bash .gpu-bundle-sched/sched.sh
#
# Expected time (estimated, never run there): sched_bench 30-45 s, GPU tests 20-30 s, the CPU
# tests about 3 s; limits 80 + 50 + 4 x 5 s = 150 s. Exit status: 0 when every step passed.
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

# 2. GPU tests (one scheduler per device at a time: the tests serialize themselves).
export GPUKIT_REQUIRE_GPU=1
gpu_test=$B/tests/gpukit-sched.gpu.test
if [ -x "$gpu_test" ]; then
  run gpu_tests 50 "$OUT/gpu_tests.log" "$gpu_test" --nocapture
  echo "== gpukit-sched GPU tests (rc=$LAST_RC, ${LAST_DT} s)"
  grep -E "^test |panicked at|^(one group|raw|task:|a:|created|core op|GPU time|sgemm|throughput|pacing|green)" "$OUT/gpu_tests.log" | head -80
  ROWS+=("gpu tests|$LAST_RC|$LAST_DT|$(grep -E '^test result' "$OUT/gpu_tests.log" | tail -1)")
else
  status=1; ROWS+=("gpu tests|-|0|missing: $gpu_test")
fi

# 3. The CPU-side tests on this host too (library incl. NVRTC kernel compile, planner, ledger,
#    state machine).
for t in gpukit_sched.lib cpu_runtime.test ledger.test plan.test; do
  bin=$B/tests/gpukit-sched.$t
  t=${t%%.*}; [ "$t" = gpukit_sched ] && t=lib
  if [ ! -x "$bin" ]; then ROWS+=("$t tests|-|0|missing: $bin"); status=1; continue; fi
  run "$t" 5 "$OUT/$t.log" "$bin"
  ROWS+=("$t tests|$LAST_RC|$LAST_DT|$(grep -E '^test result' "$OUT/$t.log" | tail -1)")
done

echo
echo "failures (if any):"
grep -hE "\| FAIL \|$|\.\.\. FAILED|TIMEOUT|^error" "$OUT"/sched_bench.log "$OUT"/gpu_tests.log "$OUT"/lib.log "$OUT"/cpu_runtime.log "$OUT"/ledger.log "$OUT"/plan.log 2>/dev/null | head -30
echo
echo "================ SUMMARY (gpukit-sched, logs in $OUT) ================"
printf '| %-12s | %-3s | %-5s | %s\n' step rc s result
for r in "${ROWS[@]}"; do
  IFS='|' read -r a b c d <<< "$r"
  printf '| %-12s | %-3s | %-5s | %s\n' "$a" "$b" "$c" "$d"
done
exit $status
