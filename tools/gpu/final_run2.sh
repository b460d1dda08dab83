#!/usr/bin/env bash
# Second test call of the session: the test binaries that failed or changed since the first full
# run (offload GPU tests after the fixed-cost work was taken out, the offload shim tests, the
# sched fault tests, the GEMM autotuner test, the device-lock tests with a simulated machine,
# the Python suite), then the Python benchmarks and sched_bench / peer_bench. At most 8 files
# come back under $OUT.
set -u
B=${BUNDLE:-.gpu-bundle}
export GPUKIT_REQUIRE_GPU=1 RUST_BACKTRACE=1 PYTHONUNBUFFERED=1
export GPUKIT_CACHE_DIR=$(mktemp -d); cp -r "$B/kcache"/. "$GPUKIT_CACHE_DIR"/; chmod -R go-rwx "$GPUKIT_CACHE_DIR"
T=$B/tests; T0=$SECONDS
cap() { tail -c 3000000; }
sumline() { sed -n 's/^test result: \(.*\)/\1/p' "$1" | tail -3 | tr '\n' ' '; }
run() { # file limit cmd...
  local f=$1 l=$2; shift 2; local t=$SECONDS
  { timeout "$l" "$@" 2>&1; echo "rc=$? after $((SECONDS - t)) s"; } | cap >> "$OUT/$f"
}
run offload_gpu.log 150 "$T/gpukit-offload.gpu.test" --test-threads=1 --nocapture
echo "offload gpu: $(sumline "$OUT/offload_gpu.log") $(tail -1 "$OUT/offload_gpu.log")"
run shim.log 120 "$T/main.offload_shim.test"
echo "offload shim: $(sumline "$OUT/shim.log") $(tail -1 "$OUT/shim.log")"
run faults.log 110 "$T/gpukit-sched.gpu_faults.test" --test-threads=1 --nocapture
echo "sched faults: $(sumline "$OUT/faults.log") $(tail -1 "$OUT/faults.log")"
run misc.log 60 "$T/gpukit-core.gemm_gpu.test" --exact autotuner_measures_a_class_once_and_its_choice_runs_correctly --nocapture
run misc.log 30 "$T/gpukit-mutex.devices.test"
run misc.log 40 "$T/main.gpumutex_run.test"
echo "misc: $(grep -c '^test result: ok' "$OUT/misc.log") ok of 3; $(grep '^test result' "$OUT/misc.log" | tr '\n' ' ')"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpukit-site "$B"/wheels/*.whl
export PYTHONPATH=/tmp/gpukit-site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/gpukit-site/bin:$PATH
(cd gpukit-python/tests && timeout 150 python3 -m pytest -q -rs -p no:cacheprovider --tb=short --timeout 120 --hypothesis-seed=0 . 2>&1 | cap > "$OUT/pytest.log")
echo "pytest: $(tail -1 "$OUT/pytest.log")"
{ timeout 90 python3 gpukit-python/bench/overhead.py; timeout 40 python3 gpukit-python/bench/sched_shares.py 4; } 2>&1 | cap > "$OUT/py_bench.log"
bench=$B/examples/sched_bench_core; [ -x "$bench" ] || bench=$B/examples/sched_bench
{ timeout 80 "$bench"; echo "sched_bench rc=$?"; timeout 30 "$B/examples/peer_bench" 512; } 2>&1 | cap > "$OUT/benches.log"
echo "total $((SECONDS - T0)) s"
cat "$OUT/py_bench.log"
grep -E "^gpukit-sched on|^\||rows, |rc=" "$OUT/benches.log" | tail -50
