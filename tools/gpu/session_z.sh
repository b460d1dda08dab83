#!/usr/bin/env bash
# 2026-12-06, tenth session (issue 23), the call that fits the device time left: gemm_gpu's tests
# (every GEMM path and layout against cuBLAS, one process per test, GPUKIT_REQUIRE_GPU=1); then
# gemm_bench --paired with the kernels before this session's epilogue (gemm_bench.old) and after;
# then the sweep with what time is left.
#   tar xJf .gpu-bundle.tar.xz && TOTAL=280 OUT=$OUT bash tools/gpu/session_z.sh
set -u
OUT=${OUT:-/tmp/session-z}; mkdir -p "$OUT/logs"
TOTAL=${TOTAL:-280}
here=$(dirname "$0")
T0=$SECONDS
echo "host $(hostname) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
B=.gpu-bundle
. "$here/kcache.sh"
export GPUKIT_REQUIRE_GPU=1
GG=$B/tests/gpukit-core.gemm_gpu.test
for t in $("$GG" --list 2>/dev/null | sed -n 's/: test$//p'); do
  (timeout 140 "$GG" --exact "$t" > "$OUT/logs/$t.log" 2>&1; echo "$t rc=$?" >> "$OUT/logs/rc.txt") &
done
wait
awk '{print $2}' "$OUT/logs/rc.txt" | sort | uniq -c
grep -v "rc=0" "$OUT/logs/rc.txt" | head
cat "$OUT"/logs/*.log | sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' | awk '{p+=$1; f+=$2} END {print "gemm_gpu: " p " passed, " f " failed"}'
echo "== tests took $((SECONDS - T0)) s"
SH="4096,4096,4096;8192,8192,8192;4096,4096,256;8192,2048,256;2500,2500,500"
unset GPUKIT_REQUIRE_GPU
for v in old new; do
  GB=$B/examples/gemm_bench; [ $v = old ] && GB=.gpu-bundle-small/examples/gemm_bench.old
  echo "== paired $v (t=$((SECONDS - T0)))"
  GPUKIT_CACHE_DIR=$(mktemp -d) timeout 70 "$GB" --quick --paired --shapes "$SH" > "$OUT/paired_$v.log" 2>&1
  echo "  rc $?"
  grep -E "^paired" "$OUT/paired_$v.log" | sed 's/(medians of 25 alternating samples)//' | cut -c1-200
done
left=$((TOTAL - (SECONDS - T0) - 10)); echo "== sweep (t=$((SECONDS - T0)), limit $left s)"
[ $left -gt 30 ] && OUT=$OUT timeout $left "$B/examples/gemm_bench" --sweep-only > "$OUT/sweep.log" 2>&1
echo "  rc $?"
tail -n 45 "$OUT/sweep.log" | cut -c1-250
tar cJf "$OUT/logs.tar.xz" -C "$OUT" --exclude=logs.tar.xz . 2> /dev/null
echo "total $((SECONDS - T0)) s"
