#!/usr/bin/env bash
# One GPU call: the deferred eager start beside the previous shim (a2833fc: eager at load) on
# issue 22's short-process script and on a one-shot program whose first call is large, then the
# whole GPU test suite.
#   B=.gpu-bundle FIX=.gpu-fix OUT=$OUT bash tools/gpu/session_e.sh
set -u
B=${B:-.gpu-bundle}; FIX=${FIX:-.gpu-fix}; OUT=${OUT:-/tmp/session-e}; mkdir -p "$OUT"
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /tmp/sh_prev && cp "$B/examples/offload" /tmp/sh_prev/ && cp "$FIX/liboffload_preload.prev.so" /tmp/sh_prev/liboffload_preload.so
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0 SHORT_COUNT=${SHORT_COUNT:-12}
short=gpukit-offload/bench/issue22/short_processes.sh
wall() { grep '^wall' "$1" | cut -d' ' -f2; }
for r in 1 2; do
  timeout 60 bash $short > $OUT/plain.$r 2>&1
  timeout 60 /tmp/sh_prev/offload run bash $short > $OUT/prev.$r 2>&1
  timeout 60 $B/examples/offload run bash $short > $OUT/new.$r 2>&1
  echo "short round $r: plain $(wall $OUT/plain.$r) | offload run, previous shim $(wall $OUT/prev.$r) | offload run, now $(wall $OUT/new.$r)"
done
cat > $OUT/oneshot.py <<'PY'
import time
t0 = time.perf_counter()
import numpy as np
rng = np.random.default_rng(0)
a = rng.standard_normal((6000, 6000))
b = a @ a
x = np.linalg.solve(a @ a.T + 6000 * np.eye(6000), np.ones(6000))
print("checksum", round(float(b[0, 0] + x.sum()), 4), "wall", round(time.perf_counter() - t0, 3))
PY
for r in 1 2 3; do
  p=$( { /usr/bin/time -f %e python3 $OUT/oneshot.py > /dev/null; } 2>&1 | tail -1 )
  o=$( { /usr/bin/time -f %e /tmp/sh_prev/offload run python3 $OUT/oneshot.py > /dev/null; } 2>&1 | tail -1 )
  n=$( { /usr/bin/time -f %e $B/examples/offload run python3 $OUT/oneshot.py > /dev/null; } 2>&1 | tail -1 )
  echo "one-shot 6000 round $r (process wall s): plain $p | previous shim $o | now $n"
done
echo "== final tests ($((SECONDS - T0)) s)"
OUT=$OUT/ft BUNDLE=$B timeout 300 bash tools/gpu/final_tests.sh > "$OUT/final.txt" 2>&1
grep -v "rc=0 " "$OUT/final.txt" | grep -v "^--" | tail -40
grep "pytest" "$OUT/final.txt" | tail -2
echo "total $((SECONDS - T0)) s"
