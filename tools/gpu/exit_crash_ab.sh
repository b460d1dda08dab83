#!/usr/bin/env bash
# A/B of the exit-time SIGSEGV seen under `offload run` after an eager start (pytest's
# test_offload_run_of_a_numpy_program, H100, 2026-12-06): the same short numpy program N times
# under each `offload` binary given (its liboffload_preload.so beside it); prints the crashes.
#   bash tools/gpu/exit_crash_ab.sh N OFFLOAD_A [OFFLOAD_B ...]
set -u
n=$1; shift
prog=$(mktemp --suffix=.py)
cat > "$prog" <<'PY'
import numpy as np
rng = np.random.default_rng(0)
a = rng.standard_normal((400, 400))
x = np.linalg.solve(a @ a.T + 400 * np.eye(400), np.ones(400))
print('checksum', round(float(x.sum()), 6))
PY
for exe in "$@"; do
  bad=0
  for i in $(seq "$n"); do
    PYTHONFAULTHANDLER=1 timeout 60 "$exe" run python3 "$prog" > /tmp/ab.out 2> /tmp/ab.err
    rc=$?
    if [ $rc -ne 0 ] || ! grep -q "dgesv\|dgemm\|offload" /tmp/ab.err; then
      bad=$((bad + 1)); echo "  $exe run $i: rc $rc; stderr: $(tail -c 400 /tmp/ab.err | tr '\n' '|')"
    fi
  done
  echo "$exe: $bad of $n runs ended badly"
done
