#!/usr/bin/env bash
# One GPU call: where issue 22's short-process program loses time under `offload run`. The same
# program (SHORT_COUNT processes) plain, under the shim with the GPU off, under `offload run`
# as it is, and with each descendant's start policy forced (lazy, eager), interleaved over two
# rounds; then one `offload run` with GPUKIT_OFFLOAD_LOG=calls (per-process start-up lines).
#   B=.gpu-bundle OUT=$OUT bash tools/gpu/session_d.sh
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/session-d}; mkdir -p "$OUT"
T0=$SECONDS
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0 SHORT_COUNT=${SHORT_COUNT:-12}
short=gpukit-offload/bench/issue22/short_processes.sh
O=$B/examples/offload
wall() { grep '^wall' "$1" | cut -d' ' -f2; }
for r in 1 2; do
  timeout 60 bash $short > $OUT/plain.$r 2>&1
  GPUKIT_OFFLOAD_GPU=off timeout 60 $O run bash $short > $OUT/off.$r 2>&1
  timeout 60 $O run bash $short > $OUT/auto.$r 2>&1
  GPUKIT_OFFLOAD_START=lazy timeout 60 $O run bash $short > $OUT/lazy.$r 2>&1
  GPUKIT_OFFLOAD_GPU=always timeout 60 $O run bash $short > $OUT/forced.$r 2>&1
  echo "round $r: plain $(wall $OUT/plain.$r) | shim gpu off $(wall $OUT/off.$r) | offload run $(wall $OUT/auto.$r) | start lazy $(wall $OUT/lazy.$r) | forced $(wall $OUT/forced.$r)"
done
GPUKIT_OFFLOAD_LOG=calls timeout 60 $O run bash $short > $OUT/calls.txt 2>&1
echo "offload run, log=calls: $(wall $OUT/calls.txt) s"
grep -E "start policy|GPU start|dgesv calls|cuSOLVER" $OUT/calls.txt | cut -c1-220 | head -60
echo "total $((SECONDS - T0)) s"
