#!/usr/bin/env bash
# Issue 22's proof, in ONE device call on the GPU host (about 4-5 minutes; every step has a
# time limit and the whole run a budget, RUN_BUDGET seconds, default 330): for each program of
# this folder, written as users write them,
#   plain  |  `offload run`  |  `offload run` with every supported call forced onto the GPU
# side by side (wall times and checksums; GPU results are not bit-identical to the CPU's, so a
# checksum of a GPU run may differ in its rounded digits), then numpy's linalg test suite with
# the GPU forced under 8 pytest-xdist workers with the slowest test durations. Optional
# (RUN_TESTS=1): the crate's GPU tests and the shim tests with GPUKIT_REQUIRE_GPU=1, when their
# binaries are in the bundle. Run from the repository root:
#
#   BUNDLE=.gpu-bundle OUT=$OUT bash gpukit-offload/bench/issue22/run.sh
#
# BUNDLE: a folder with examples/offload and examples/liboffload_preload.so (release build),
#   examples/fixed_cost if present (`cargo build --release -p gpukit-offload --example
#   fixed_cost`; FIXED_COST=PATH names it elsewhere), and for RUN_TESTS=1 tests/gpu-* and
#   tests/offload_shim-* (as /work/shared/gpu/pack makes).
# PYTHON (default python3). OUT: logs (default /tmp/issue22-out); the summary is
# $OUT/issue22.log. PROGRAMS: which programs (default "small pool njobs short").
# NUMPY_BUDGET: the numpy.linalg suite's limit in seconds (default 200; within RUN_BUDGET).
# Exit status: 0 when every run finished (a step over its limit or the budget counts as failed).
set -u
here=$(cd "$(dirname "$0")" && pwd)
B=${BUNDLE:-.gpu-bundle}
OFFLOAD=${OFFLOAD:-$B/examples/offload}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/issue22-out}
BUDGET=${RUN_BUDGET:-330}
mkdir -p "$OUT"
SUM=$OUT/issue22.log
: > "$SUM"
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0 PYTHON="$PY"
T0=$(date +%s)
say() { echo "$*" | tee -a "$SUM"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
status=0
if [ ! -x "$OFFLOAD" ] || [ ! -f "$(dirname "$OFFLOAD")/liboffload_preload.so" ]; then
  say "issue22: $OFFLOAD or liboffload_preload.so beside it missing (set BUNDLE or OFFLOAD)"
  exit 1
fi
say "issue22: $(date -u +%FT%TZ) host $(hostname) cores $(nproc) $($PY -c 'import numpy, scipy, sklearn; print("numpy", numpy.__version__, "scipy", scipy.__version__, "sklearn", sklearn.__version__)' 2>&1)"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/issue22: gpu /' | tee -a "$SUM"

# run NAME LIMIT LOG CMD...: one timed run within min(LIMIT, budget left); prints wall, rc,
# the program's own wall/checksum lines and the shim's summary of GPU calls
run() {
  local name=$1 limit=$2 log=$3; shift 3
  local l; l=$(left)
  if [ "$l" -le 5 ]; then say "  $name: skipped (run budget used)"; status=1; return; fi
  [ "$limit" -gt "$l" ] && limit=$l
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout "$limit" "$@" > "$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local wall; wall=$(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }")
  [ $rc -ne 0 ] && status=1
  local ck; ck=$(grep -m1 '^checksum' "$log" | cut -d' ' -f2)
  local gpu; gpu=$(grep '^gpukit-offload: .* calls=' "$log" | awk '{for(i=1;i<=NF;i++) if ($i ~ /^gpu=/) {split($i,a,"="); g+=a[2]} if ($0 ~ / calls=/) {split($3,c,"="); n+=c[2]}} END {printf "%d/%d", g, n}')
  printf '  %-8s %-7s wall %8ss rc %-3s checksum %-16s gpu calls %s\n' "$P" "$name" "$wall" "$rc" "${ck:--}" "${gpu:-0/0}" | tee -a "$SUM"
  eval "W_${name//-/_}=$wall"
}

cmd_of() {
  case "$1" in
    small) echo "$PY $here/small_calls.py" ;;
    pool) echo "$PY $here/service_pool.py" ;;
    njobs) echo "$PY $here/sklearn_njobs.py" ;;
    short) echo "bash $here/short_processes.sh" ;;
  esac
}
limit_of() { case "$1" in small) echo 60 ;; pool) echo 90 ;; njobs) echo 90 ;; short) echo 60 ;; esac; }

say "== programs: plain | offload run | forced (GPUKIT_OFFLOAD_GPU=always)"
ROWS=()
for P in ${PROGRAMS:-small pool njobs short}; do
  c=$(cmd_of "$P"); lim=$(limit_of "$P")
  W_plain=- W_offload=- W_forced=-
  run plain "$lim" "$OUT/$P.plain.log" $c
  GPUKIT_OFFLOAD_LOG=summary run offload "$lim" "$OUT/$P.offload.log" "$OFFLOAD" run $c
  GPUKIT_OFFLOAD_LOG=summary GPUKIT_OFFLOAD_GPU=always run forced "$lim" "$OUT/$P.forced.log" "$OFFLOAD" run $c
  ROWS+=("$(printf '| %-6s | %8s | %8s | %8s |' "$P" "$W_plain" "$W_offload" "$W_forced")")
  for m in plain offload forced; do
    echo "    $m sections: $(grep '^section' "$OUT/$P.$m.log" 2>/dev/null | cut -d' ' -f2- | tr '\n' ';')" >> "$SUM"
  done
done
say ""
say "| program | plain s | offload run s | forced s |"
say "| --- | --- | --- | --- |"
for r in "${ROWS[@]}"; do say "$r"; done

FC=${FIXED_COST:-$B/examples/fixed_cost}
if [ -x "$FC" ] && [ "$(left)" -gt 60 ]; then
  say ""
  say "== fixed cost of one GPU call (examples/fixed_cost: ours beside cuBLAS/cuSOLVER's own)"
  timeout 60 "$FC" 300 > "$OUT/fixed_cost.log" 2>&1 || status=1
  sed 's/^/  /' "$OUT/fixed_cost.log" | tee -a "$SUM"
fi

say ""
say "== numpy.linalg test suite, GPU forced, 8 workers"
l=$(left); nb=${NUMPY_BUDGET:-200}; lim=$(( l > nb ? nb : l ))
if [ "$lim" -gt 20 ]; then
  t0=$(date +%s.%N)
  # SIGINT at the limit (to the process group: `offload run` waits through it, pytest stops
  # and still prints the durations of the tests that finished)
  GPUKIT_OFFLOAD_GPU=always GPUKIT_OFFLOAD_LOG=summary timeout -k 20 -s INT "$lim" "$OFFLOAD" run "$PY" -m pytest --pyargs numpy.linalg -n 8 -q -p no:cacheprovider --durations=30 --durations-min=2 > "$OUT/numpy_suite.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  [ $rc -ne 0 ] && status=1
  say "  numpy.linalg forced: rc $rc wall $(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }")s :: $(grep -E '^[0-9]+ (passed|failed)|passed|failed' "$OUT/numpy_suite.log" | tail -1)"
  sed -n '/slowest/,/^$/p' "$OUT/numpy_suite.log" | head -34 | sed 's/^/    /' | tee -a "$SUM"
else
  say "  skipped (run budget used)"; status=1
fi

if [ "${RUN_TESTS:-0}" = 1 ]; then
  say ""
  say "== GPU tests (GPUKIT_REQUIRE_GPU=1)"
  for pat in "gpu-*" "offload_shim-*"; do
    bin=$(ls $B/tests/$pat 2>/dev/null | grep -v '\.d$' | head -1)
    l=$(left)
    if [ -z "$bin" ] || [ "$l" -le 20 ]; then say "  $pat: skipped (no binary or no budget)"; continue; fi
    GPUKIT_REQUIRE_GPU=1 timeout "$l" "$bin" --test-threads=2 > "$OUT/$(basename "$bin").log" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    say "  $(basename "$bin"): rc $rc :: $(grep '^test result' "$OUT/$(basename "$bin").log" | tail -1)"
    grep -E '\.\.\. FAILED' "$OUT/$(basename "$bin").log" | head -10 | sed 's/^/    /' | tee -a "$SUM"
  done
fi
say ""
say "issue22: done in $(( $(date +%s) - T0 ))s, status $status; logs in $OUT"
exit $status
