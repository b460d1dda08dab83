#!/usr/bin/env bash
# The small-gelsd crash diagnostic on the GPU host: gpukit-offload's test
# `small_gelsd_of_every_precision_in_one_process`, one process per precision, restarted after a
# crash from the case after the one it died in (each case is named before it runs). Prints one
# line per crash (signal, case) and a summary per precision. Logs under $OUT.
#   BUNDLE=.gpu-bundle OUT=/tmp/gelsd bash tools/gpu/gelsd_diag.sh
set -u
B=${BUNDLE:-.gpu-bundle}
OUT=${OUT:-/tmp/gelsd-diag}; mkdir -p "$OUT"
BIN=$B/tests/gpukit-offload.gpu.test
export GPUKIT_REQUIRE_GPU=1 RUST_BACKTRACE=1 MALLOC_CHECK_=3 MALLOC_PERTURB_=165
. "$(dirname "$0")/kcache.sh"
for p in S D C Z; do
  from=0 runs=0 crashes=0
  while [ $runs -lt 12 ]; do
    runs=$((runs + 1))
    log=$OUT/$p.$runs.log
    GELSD_PREC=$p GELSD_FROM=$from timeout 120 "$BIN" --exact \
      small_gelsd_of_every_precision_in_one_process --nocapture > "$log" 2>&1
    rc=$?
    last=$(grep -o '^case [0-9]*' "$log" | tail -1 | awk '{print $2}')
    if [ $rc -eq 0 ] || grep -q "^test result" "$log"; then
      echo "$p: from case $from: rc $rc, $(grep -c '^case ' "$log") calls, $(grep -c 'gpu ' "$log") gpu errors; $(grep '^test result' "$log")"
      grep -E "failures:|error|gpu " "$log" | grep -v "^case" | head -12
      break
    fi
    crashes=$((crashes + 1))
    echo "$p: CRASH rc $rc in case $from+${last:-?}: $(grep '^case ' "$log" | tail -1); tail: $(tail -c 300 "$log" | tr '\n' '|')"
    [ -z "$last" ] && break
    from=$((from + last + 1))
  done
  echo "$p: $crashes crash(es)"
done
