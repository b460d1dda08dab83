#!/usr/bin/env bash
# A/B of `offload run` on a short numpy program: how often the process ends in a signal after its
# last line, with the bundle's shim (before the exit fix) and the wheel's (after). N runs each.
set -u
N=${N:-12}; B=${BUNDLE:-.gpu-bundle}
prog=$(mktemp --suffix .py)
cat > "$prog" <<'PY'
import numpy as np
rng = np.random.default_rng(0)
a = rng.standard_normal((400, 400))
x = np.linalg.solve(a @ a.T + 400 * np.eye(400), np.ones(400))
print("checksum", round(float(x.sum()), 6))
PY
for side in before after; do
  bad=0; codes=""
  for i in $(seq "$N"); do
    if [ $side = before ]; then "$B/examples/offload" run python3 "$prog" > /tmp/ab.out 2> /tmp/ab.err; rc=$?
    else gpukit-offload run python3 "$prog" > /tmp/ab.out 2> /tmp/ab.err; rc=$?; fi
    codes="$codes $rc"; [ $rc -ne 0 ] && bad=$((bad + 1))
  done
  echo "exit A/B $side: $bad of $N runs failed; codes:$codes; last summary: $(grep -c 'gpukit-offload:' /tmp/ab.err) lines"
done
