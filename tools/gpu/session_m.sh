#!/usr/bin/env bash
# 2026-12-06, sixth session, call 2:
#   1. core_bench's operator and reduction rows beside torch (the f32 max / min reductions after
#      max.NaN / min.NaN and the pairwise vector combine; issue 23's 0.95 target);
#   2. issue 22's thread pool with the CUDA libraries dropped from the page cache before each
#      run (a freshly started machine: the pool's four first calls gave up together in the first
#      call of this session), `offload run` / forced alternated, then two warm rounds;
#   3. the small-gelsd crash: the test in its own process three times (crash reports on).
#   tar xJf .gpu-bundle.tar.xz && B=.gpu-bundle OUT=$OUT bash tools/gpu/session_m.sh
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/session-m}; mkdir -p "$OUT"
I22=gpukit-offload/bench/issue22
here=$(dirname "$0")
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0 GPUKIT_CACHE_DIR=$PWD/$B/kcache
T0=$SECONDS
echo "host $(hostname) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
echo "== 1. core_bench beside torch"
CORE_BENCH_TSV="$OUT/gpukit.tsv" timeout 90 "$B/examples/core_bench" > "$OUT/core_bench.log" 2>&1; echo "core_bench rc=$?"
timeout 40 python3 "$here/core_torch.py" "$OUT/torch.tsv" > "$OUT/torch.log" 2>&1; echo "torch rc=$?"
python3 "$here/core_join.py" "$OUT/gpukit.tsv" "$OUT/torch.tsv" > "$OUT/table.md" 2> "$OUT/join.err"
grep -E "^\| (max|min|sum|argmax|argmin|mean) " "$OUT/table.md"
grep -E "MISSED" "$OUT/table.md" | head -10
tail -2 "$OUT/table.md"
echo "== 2. pool, CUDA libraries dropped from the page cache before each run (t=$((SECONDS - T0)))"
pool() { # mode tag evict
  local m=$1 tag=$2 log=$OUT/pool.$1.$2.log t0 t1
  [ "$3" = 1 ] && python3 "$here/evict_cuda_libs.py" 2> "$OUT/evict.$tag.log"
  t0=$(date +%s.%N)
  case $m in
    offload) GPUKIT_OFFLOAD_LOG=summary timeout 60 "$B/examples/offload" run python3 $I22/service_pool.py > "$log" 2>&1 ;;
    forced) GPUKIT_OFFLOAD_GPU=always GPUKIT_OFFLOAD_LOG=summary timeout 60 "$B/examples/offload" run python3 $I22/service_pool.py > "$log" 2>&1 ;;
  esac
  local rc=$?; t1=$(date +%s.%N)
  echo "  pool $m $tag: rc $rc process $(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }") s; $(grep -E '^wall|^section' "$log" | sed 's/^section //' | tr '\n' ' ')$(cat "$OUT/evict.$tag.log" 2>/dev/null)"
  grep -h "reasons=" "$log" | grep -E "gpu-starting|busy" | sed 's/^/      /' | cut -c1-160
  grep -hi "ready in\|start" "$log" | grep -v "calls=" | head -3 | sed 's/^/      /' | cut -c1-200
}
for r in 1 2; do pool offload cold$r 1; pool forced cold$r 1; done
for r in 1 2; do pool offload warm$r 0; pool forced warm$r 0; done
echo "== 3. small gelsd past the gate, own process, three times (t=$((SECONDS - T0)))"
command -v gdb > /dev/null && echo "gdb: $(command -v gdb)" || echo "gdb: none"
for r in 1 2 3; do
  GPUKIT_REQUIRE_GPU=1 timeout 120 "$B/tests/gpukit-offload.gpu.test" --exact small_gelsd_on_the_backend_past_the_gate --test-threads=1 > "$OUT/gelsd.$r.log" 2>&1
  echo "  run $r rc=$? $(grep -E '^test result' "$OUT/gelsd.$r.log")"
  grep -A40 "fatal signal" "$OUT/gelsd.$r.log" | head -45 | cut -c1-200
  grep -B2 "fatal signal" "$OUT/gelsd.$r.log" | head -3 | cut -c1-200
done
echo "== 4. the one-shot programs' first calls, wave 2's offload run (BASE) and now, every call logged (t=$((SECONDS - T0)))"
ONE=gpukit-offload/bench/oneshot
for p in numpy_oneshot statsmodels_fits; do
  for m in base now; do
    off=$B/examples/offload; [ $m = base ] && off=${BASE:-.gpu-base}/offload
    [ -x "$off" ] || continue
    log=$OUT/$p.$m.calls.log; t0=$(date +%s.%N)
    GPUKIT_OFFLOAD_LOG=calls timeout 60 "$off" run python3 $ONE/$p.py > "$log" 2>&1
    echo "  $p $m: rc $? process $(awk "BEGIN { printf \"%.2f\", $(date +%s.%N) - $t0 }") s; $(grep -E '^section' "$log" | head -3 | sed 's/^section //' | tr '\n' ' ')"
    grep -E "^gpukit-offload: .* -> (cpu|gpu)" "$log" | grep -v "(small)\|(nested)\|(empty)" | head -6 | sed 's/^gpukit-offload: /      /' | cut -c1-170
  done
done
echo "total $((SECONDS - T0)) s"
