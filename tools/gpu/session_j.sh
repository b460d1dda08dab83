#!/usr/bin/env bash
# After session_i (2026-12-06, fifth session): the descendants' lazy start with the machine-load
# wait rule. Issue 22's short-process script and n_jobs program plain / `offload run`
# alternated (short also with every process on `savings`, the previous descendants' policy),
# the thread pool `offload run` / forced, then gpukit-offload's GPU tests and the shim tests.
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/session-j}; mkdir -p "$OUT"
I22=gpukit-offload/bench/issue22
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0
T0=$SECONDS
one() { # program mode round
  local p=$1 m=$2 r=$3 c log=$OUT/$1.$2.$3.log
  case $p in
    njobs) c=(python3 $I22/sklearn_njobs.py) ;;
    short) c=(bash $I22/short_processes.sh) ;;
    pool) c=(python3 $I22/service_pool.py) ;;
  esac
  local t0; t0=$(date +%s.%N)
  case $m in
    plain) timeout 90 "${c[@]}" > "$log" 2>&1 ;;
    offload) GPUKIT_OFFLOAD_LOG=summary timeout 90 "$B/examples/offload" run "${c[@]}" > "$log" 2>&1 ;;
    savings) GPUKIT_OFFLOAD_START=savings timeout 90 "$B/examples/offload" run "${c[@]}" > "$log" 2>&1 ;;
    forced) GPUKIT_OFFLOAD_GPU=always timeout 90 "$B/examples/offload" run "${c[@]}" > "$log" 2>&1 ;;
  esac
  local t1; t1=$(date +%s.%N)
  echo "  $p $m $r: process $(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }") s; $(grep -E '^wall|^section|^checksum' "$log" | tr '\n' ' ')restarts $(grep -c 'memory leak' "$log") gpu-calls $(grep -h '^gpukit-offload: .* calls=' "$log" | grep -o ' gpu=[0-9]*' | awk -F= '{s += $2} END {print s + 0}')"
}
for r in 1 2; do
  for m in plain offload savings; do one short $m $r; done
  for m in plain offload; do one njobs $m $r; done
  for m in offload forced; do one pool $m $r; done
done
grep -h "reasons=" $OUT/short.offload.1.log | sort | uniq -c | cut -c1-170 | head
echo "== tests ($((SECONDS - T0)) s)"
for t in gpukit-offload.gpu.test main.offload_shim.test; do
  GPUKIT_REQUIRE_GPU=1 timeout 200 "$B/tests/$t" --test-threads=1 > "$OUT/$t.log" 2>&1
  echo "  $t rc=$? $(grep -E '^test result' "$OUT/$t.log")"
  grep -E "^test .* FAILED|panicked at" "$OUT/$t.log" | head -6
done
echo "total $((SECONDS - T0)) s"
