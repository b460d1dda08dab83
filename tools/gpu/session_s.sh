#!/usr/bin/env bash
# 2026-12-06, eighth session, call 3: issue 22's remaining figures on the GPU host, with
# `offload run`'s MPS daemon (gpukit-offload `share`):
#   1. the one-shot statsmodels and scikit-learn programs plain / wave 2's `offload run` (BASE,
#      32b903b) / now (not slower than before with the daemon);
#   2. the process trees (short Python processes, scikit-learn n_jobs) plain / now / now without
#      the daemon, with the GPU's memory in use sampled every 100 ms (nvidia-smi): the peak above
#      the idle figure, and the most processes on the GPU at once.
#   tar xJf .gpu-bundle.tar.xz && tar xJf .gpu-base.tar.xz && B=.gpu-bundle OUT=$OUT bash tools/gpu/session_s.sh
set -u
OUT=${OUT:-/tmp/session-s}
. "$(dirname "$0")/session_common.sh"
echo "== 1. one-shot programs, plain / wave 2 / now (t=$((SECONDS - T0)))"
for p in statsmodels_fits sklearn_pipeline; do for m in plain base now; do one $p $m 0 python3 $ONE/$p.py; done; done
echo "== 2. process trees with the GPU's memory sampled (t=$((SECONDS - T0)))"
idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
echo "  idle: $idle MiB in use"
sampled() { # name mode command...
  local name=$1 m=$2; shift 2
  local mem=$OUT/$name.$m.mem apps=$OUT/$name.$m.apps
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$mem" 2> /dev/null & local s1=$!
  ( while :; do echo "t $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2> /dev/null | wc -l)"; sleep 0.2; done ) > "$apps" & local s2=$!
  one "$name" "$m" 0 "$@"
  kill $s1 $s2 2> /dev/null; wait $s1 $s2 2> /dev/null
  echo "    $name $m: peak $(sort -n "$mem" | tail -1) MiB in use (idle $idle), at most $(awk '{print $2}' "$apps" | sort -n | tail -1) processes on the GPU at once"
}
for p in short njobs; do
  case $p in short) cmd=(bash $I22/short_processes.sh) ;; *) cmd=(python3 $I22/sklearn_njobs.py) ;; esac
  sampled $p plain "${cmd[@]}"; sampled $p now "${cmd[@]}"; GPUKIT_OFFLOAD_SHARE=off sampled $p now-noshare "${cmd[@]}"
done
tar cJf "$OUT/logs.tar.xz" -C "$OUT" --exclude=logs.tar.xz . 2> /dev/null
echo "total $((SECONDS - T0)) s"
