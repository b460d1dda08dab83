#!/usr/bin/env bash
# 2026-12-06, sixth session, call 1 (issue 22): the thread pool with the own-threads wait rule
# (`offload run` / forced, three rounds alternated), the one-shot programs plain / wave 2's
# `offload run` (32b903b, BASE) / now, the short-process script and the n_jobs program plain /
# now, then gpukit-offload's GPU tests and the shim tests. Every figure of a row from this call.
#   tar xJf .gpu-bundle.tar.xz && tar xJf .gpu-base.tar.xz && B=.gpu-bundle OUT=$OUT bash tools/gpu/session_k.sh
set -u
B=${B:-.gpu-bundle}; BASE=${BASE:-.gpu-base}; OUT=${OUT:-/tmp/session-k}; mkdir -p "$OUT"
I22=gpukit-offload/bench/issue22; ONE=gpukit-offload/bench/oneshot
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0
T0=$SECONDS
echo "host $(hostname) cores $(nproc) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
one() { # program mode round
  local p=$1 m=$2 r=$3 c log=$OUT/$1.$2.$3.log
  case $p in
    pool) c=(python3 $I22/service_pool.py) ;;
    njobs) c=(python3 $I22/sklearn_njobs.py) ;;
    short) c=(bash $I22/short_processes.sh) ;;
    numpy) c=(python3 $ONE/numpy_oneshot.py) ;;
    sklearn) c=(python3 $ONE/sklearn_pipeline.py) ;;
    decomp) c=(python3 $ONE/sklearn_decompositions.py) ;;
    statsmodels) c=(python3 $ONE/statsmodels_fits.py) ;;
  esac
  local t0; t0=$(date +%s.%N)
  case $m in
    plain) timeout 120 "${c[@]}" > "$log" 2>&1 ;;
    offload) GPUKIT_OFFLOAD_LOG=summary timeout 120 "$B/examples/offload" run "${c[@]}" > "$log" 2>&1 ;;
    base) GPUKIT_OFFLOAD_LOG=summary timeout 120 "$BASE/offload" run "${c[@]}" > "$log" 2>&1 ;;
    forced) GPUKIT_OFFLOAD_GPU=always timeout 120 "$B/examples/offload" run "${c[@]}" > "$log" 2>&1 ;;
  esac
  local rc=$? t1; t1=$(date +%s.%N)
  echo "  $p $m $r: rc $rc process $(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }") s; $(grep -E '^wall|^section' "$log" | sed 's/^section //' | tr '\n' ' ')ck $(grep -E '^checksum' "$log" | md5sum | cut -c1-8) gpu-calls $(grep -h '^gpukit-offload: .* calls=' "$log" | grep -o ' gpu=[0-9]*' | awk -F= '{s += $2} END {print s + 0}') restarts $(grep -c 'memory leak' "$log")"
}
echo "== pool (offload / forced, alternated)"
for r in 1 2 3; do for m in offload forced; do one pool $m $r; done; done
for r in 1 2 3; do grep -h "reasons=" $OUT/pool.offload.$r.log | grep -E "dsyevd|dgesv|dpotrf|sgemm" | sed "s/^/    r$r /" | cut -c1-190; done
echo "== one-shot programs (plain / wave 2's offload run 32b903b / now) t=$((SECONDS - T0))"
for p in numpy sklearn decomp statsmodels; do for m in plain base offload; do one $p $m 1; done; done
echo "== short and njobs t=$((SECONDS - T0))"
for m in plain offload; do one short $m 1; done
for m in plain offload; do one njobs $m 1; done
echo "== tests t=$((SECONDS - T0))"
for t in gpukit-offload.gpu.test main.offload_shim.test; do
  GPUKIT_REQUIRE_GPU=1 timeout 200 "$B/tests/$t" --test-threads=1 > "$OUT/$t.log" 2>&1
  echo "  $t rc=$? $(grep -E '^test result' "$OUT/$t.log")"
  grep -E "^test .* FAILED|panicked at" "$OUT/$t.log" | head -6
done
echo "total $((SECONDS - T0)) s"
