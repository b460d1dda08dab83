#!/usr/bin/env bash
# 2026-12-07, eleventh session, call 2 (issue 23): the stream-K tail's first run, and the issue's
# proof in one call (under 590 s, every step under `timeout`):
#   1. the tail's GPU test alone (GPUKIT_REQUIRE_GPU=1); should it fail or hang, the steps after
#      run with GPUKIT_GEMM_TAIL=off (so a broken tail cannot take the benches with it);
#   2. every GPU test of the bundle (final_tests.sh);
#   3. gemm_bench --paired (cuBLAS TF32 alternating with ours) with GPUKIT_GEMM_TAIL=off, then on,
#      each process tuning afresh: the tail's effect, cuBLAS beside both;
#   4. the full gemm_bench (benchmark shapes, 38-shape sweep, planner vs best, cuBLAS TF32/SGEMM);
#   5. core_bench's operator rows beside torch (tools/gpu/core_torch.py), joined (core_join.py).
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/session_ab.sh
set -u
OUT=${OUT:-/tmp/session-ab}; mkdir -p "$OUT"
here=$(dirname "$0")
B=.gpu-bundle
T0=$SECONDS
el() { echo $((SECONDS - T0)); }
echo "host $(hostname) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
fresh_cache() { export GPUKIT_CACHE_DIR=$(mktemp -d); cp -r "$B/kcache"/. "$GPUKIT_CACHE_DIR"/; chmod -R go-rwx "$GPUKIT_CACHE_DIR"; }
fresh_cache
GPUKIT_REQUIRE_GPU=1 timeout 80 "$B/tests/gpukit-core.gemm_gpu.test" --exact tail_pieces_of_the_last_wave_sum_like_whole_tiles --nocapture > "$OUT/tail_test.log" 2>&1
rc=$?
echo "== tail test rc $rc ($(el) s): $(grep -c 'pieces per tail tile' "$OUT/tail_test.log") tail plans ran; $(grep -E '^test result' "$OUT/tail_test.log")"
grep -E "panicked|error" "$OUT/tail_test.log" | head -5 | cut -c1-300
TAIL=on; [ $rc -ne 0 ] && TAIL=off
unset GPUKIT_CACHE_DIR
BUNDLE=$B OUT=$OUT/final timeout 320 bash "$here/final_tests.sh" > "$OUT/final.txt" 2>&1
grep -vE "^\s*$" "$OUT/final.txt" | grep -E "rc=[1-9]|FAILED|panicked|TIMEOUT|pytest|passed in|Rust test binaries|done at" | cut -c1-220 | head -30
(cd "$OUT" && tar cJf final_logs.tar.xz final final.txt && rm -rf final final.txt)
echo "== tests done ($(el) s)"
SH="4096,4096,4096;8192,8192,8192;4096,4096,256;8192,2048,256;2500,2500,500;1500,1500,300;2000,6000,400;8,768,768,768;1000,1000,1000"
TS="off on"; [ $TAIL = off ] && TS=off
for t in $TS; do
  fresh_cache
  echo "== paired GPUKIT_GEMM_TAIL=$t ($(el) s)"
  GPUKIT_GEMM_TAIL=$t timeout 100 "$B/examples/gemm_bench" --quick --paired --shapes "$SH" > "$OUT/paired_$t.log" 2>&1
  echo "  rc $?"
  grep -E "^paired" "$OUT/paired_$t.log" | sed 's/(medians of 25 alternating samples)//' | cut -c1-200
done
fresh_cache
left=$((440 - $(el))); [ $left -gt 100 ] && left=100
echo "== gemm_bench GPUKIT_GEMM_TAIL=$TAIL ($(el) s, limit $left s)"
[ $left -gt 30 ] && GPUKIT_GEMM_TAIL=$TAIL OUT=$OUT timeout $left "$B/examples/gemm_bench" > "$OUT/gemm_bench.log" 2>&1
echo "  rc $?"
grep -E "^\| (shape|1024x1024x1024|4096x4096x4096 \||8192x8192x8192|4096x4096x256|2500x2500x500|8x 768|1500x1500x300 TT|2000x6000x400 NT)" "$OUT/gemm_bench.log" | tail -n 12 | cut -c1-250
grep -E "^lowest ratio|^targets|^autotuner: [0-9]" "$OUT/gemm_bench.log" | cut -c1-400
unset GPUKIT_CACHE_DIR; . "$here/kcache.sh"
left=$((545 - $(el)))
echo "== core_bench beside torch ($(el) s, limit $left s)"
if [ $left -gt 145 ]; then
  CORE_BENCH_TSV="$OUT/gpukit.tsv" timeout $((left - 30)) "$B/examples/core_bench" > "$OUT/core_bench.log" 2>&1; echo "  core_bench rc $?"
  timeout 25 python3 "$here/core_torch.py" "$OUT/torch.tsv" > "$OUT/torch.log" 2>&1; echo "  torch rc $?"
  python3 "$here/core_join.py" "$OUT/gpukit.tsv" "$OUT/torch.tsv" > "$OUT/table.md" 2> "$OUT/join.err"; echo "  join rc $?"
  grep -E "op_|fused|MISSED|met" "$OUT/table.md" | grep -E "1 GiB|fused|MISSED|rows met" | head -30 | cut -c1-160
  tail -3 "$OUT/table.md"
fi
tar cJf "$OUT/logs.tar.xz" -C "$OUT" --exclude=logs.tar.xz --exclude=final_logs.tar.xz . 2> /dev/null
echo "total $(el) s"
