#!/usr/bin/env bash
# A shell script that starts many short Python processes, one after another and four at a
# time, each importing numpy and doing a little linear algebra (most of them below anything
# the GPU could win; every fifth a medium solve), as build and data scripts do.
# Prints the wall time and a checksum of the processes' outputs.
PY=${PYTHON:-python3}
COUNT=${SHORT_COUNT:-24}
t0=$(date +%s.%N)
out=$(
  for i in $(seq 1 "$COUNT"); do
    if [ $((i % 5)) = 0 ]; then n=1500; else n=200; fi
    "$PY" -c "
import numpy as np
rng = np.random.default_rng($i)
a = rng.standard_normal(($n, $n)) + $n * np.eye($n)
x = np.linalg.solve(a, np.ones($n))
print('$i', round(float(x.sum()), 6))
" &
    if [ $((i % 4)) = 0 ]; then wait; fi
  done
  wait
)
t1=$(date +%s.%N)
echo "processes $(echo "$out" | wc -l)"
echo "checksum $(echo "$out" | sort | sha256sum | cut -c1-16)"
echo "wall $(awk "BEGIN { printf \"%.3f\", $t1 - $t0 }")"
