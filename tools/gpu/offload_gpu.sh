#!/usr/bin/env bash
# The GPU backend of gpukit-offload on the GPU host (branch offload-gpu): its GPU tests with
# their output, and the start-up breakdown in a Python process. Run from the project root with
# the offload bundle (tests + examples/offload + examples/liboffload_preload.so):
#   B=.gpu-bundle-offload OUT=$OUT bash tools/gpu/offload_gpu.sh
# About 3-5 minutes. Every step has a timeout; logs go to $OUT; a summary table comes last.
set -u
B=${B:-.gpu-bundle-offload}
OUT=${OUT:-/tmp/offload-gpu-out}; mkdir -p "$OUT"
export GPUKIT_REQUIRE_GPU=1 GPUKIT_OFFLOAD_PERSIST=0 PYTHONUNBUFFERED=1 RUST_BACKTRACE=1
: > "$OUT/summary.txt"
sum() { echo "$*" | tee -a "$OUT/summary.txt"; }
lib=$(ls $B/tests/gpukit-offload.gpukit_offload.lib 2>/dev/null | head -1)
# 1. the backend's GPU tests (gpu_tests.rs), with their printed figures
if [ -n "$lib" ]; then
  timeout 420 "$lib" gpu_tests --test-threads=2 --nocapture > "$OUT/gpu_tests.log" 2>&1; rc=$?
  sum "gpu_tests: rc=$rc :: $(grep '^test result' "$OUT/gpu_tests.log" | tail -1)"
  grep -E "^test gpu_tests::" "$OUT/gpu_tests.log" | sed 's/^/  /' | tee -a "$OUT/summary.txt"
  grep -E "failures:|^    [a-z]+ .*error|start-up:|after a LAPACK call:|polar SVDs|presize potrf|12 dgemm" "$OUT/gpu_tests.log" | head -40 | tee -a "$OUT/summary.txt"
else
  sum "gpu_tests: no gpukit-offload lib test binary in $B/tests"
fi
# 2. start-up in a Python process: a one-shot numpy script with every call forced to the GPU and
#    per-call logging (the backend's start-up steps are logged), and the same script plain
cat > "$OUT/oneshot.py" <<'PY'
import time, numpy as np
t0 = time.perf_counter(); sec = {}
def step(name, f):
    t = time.perf_counter(); f(); sec[name] = time.perf_counter() - t
rng = np.random.default_rng(0); n = 3000
a = rng.standard_normal((n, n)); spd = a @ a.T + n * np.eye(n); b = rng.standard_normal((n, 8))
step("cholesky", lambda: np.linalg.cholesky(spd))
step("solve", lambda: np.linalg.solve(spd, b))
step("eigh", lambda: np.linalg.eigh(spd[:1500, :1500]))
step("svd", lambda: np.linalg.svd(a[:, :1000], full_matrices=False))
step("svd_full", lambda: np.linalg.svd(a[:2000, :1000]))
step("lstsq", lambda: np.linalg.lstsq(a[:, :500], b, rcond=None))
step("qr", lambda: np.linalg.qr(a[:, :1000]))
step("inv", lambda: np.linalg.inv(spd))
print("sections " + " ".join(f"{k}={v:.3f}s" for k, v in sec.items()) + f" total={time.perf_counter() - t0:.3f}s")
PY
timeout 120 python3 "$OUT/oneshot.py" > "$OUT/oneshot_plain.log" 2>&1
GPUKIT_OFFLOAD_GPU=always GPUKIT_OFFLOAD_LOG=calls timeout 120 $B/examples/offload run python3 "$OUT/oneshot.py" > "$OUT/oneshot_gpu.log" 2>&1
sum "one-shot plain:  $(grep '^sections' "$OUT/oneshot_plain.log")"
sum "one-shot forced: $(grep '^sections' "$OUT/oneshot_gpu.log")"
grep -E "GPU start-up steps|background start" "$OUT/oneshot_gpu.log" | tee -a "$OUT/summary.txt"
grep -E "fallback|nonfinite" "$OUT/oneshot_gpu.log" | head -10 | tee -a "$OUT/summary.txt"
echo "---- summary"; cat "$OUT/summary.txt"
