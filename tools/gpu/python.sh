#!/usr/bin/env bash
# The Python package on the GPU host, in one call: install the carried wheel, run its pytest
# suite with the GPU required (torch and CuPy present there), then the benchmarks beside CuPy and
# torch and the scheduler shares from Python. Logs under $OUT.
#   bash tools/gpu/python.sh WHEEL_DIR [KCACHE]
set -u
W=${1:?wheel folder}; K=${2:-}
OUT=${OUT:-/tmp/py-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GPUKIT_REQUIRE_GPU=1
if [ -n "$K" ] && [ -d "$K" ]; then
  export GPUKIT_CACHE_DIR=$(mktemp -d); cp -r "$K"/. "$GPUKIT_CACHE_DIR"/; chmod -R go-rwx "$GPUKIT_CACHE_DIR"
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpukit-site "$W"/*.whl || exit 1
export PYTHONPATH=/tmp/gpukit-site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/gpukit-site/bin:$PATH
python3 -c 'import gpukit, torch, cupy; print("gpukit", gpukit.__version__, "devices", gpukit.device_count(), "torch", torch.__version__, "cupy", cupy.__version__)'
t=$(date +%s)
(cd gpukit-python/tests && timeout "${T_PYTEST:-300}" python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 \
   --hypothesis-seed=0 . 2>&1 | tee "$OUT/pytest.log" | tail -60)
echo "pytest: $(( $(date +%s) - t )) s"
t=$(date +%s)
timeout "${T_OVERHEAD:-150}" python3 gpukit-python/bench/overhead.py 2>&1 | tee "$OUT/overhead.log"
echo "overhead bench: $(( $(date +%s) - t )) s"
t=$(date +%s)
timeout "${T_SHARES:-60}" python3 gpukit-python/bench/sched_shares.py 4 2>&1 | tee "$OUT/shares.log"
echo "shares bench: $(( $(date +%s) - t )) s"
