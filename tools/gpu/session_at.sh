#!/usr/bin/env bash
# 2026-12-07, sixteenth session (issue 23): call 1 (session_as.sh) left three planner misses
# (8192x1024x8192 0.93, 3000^3 0.90, FP32 1024^3 0.68) and 1009x2017x509 at 0.49 of cuBLAS in the
# main table while the sweep ran the same plan at 71.4 TFLOP/s. Same bundle, about 200 s:
#   1. the full gemm_bench again (fresh cache), its tuner files;
#   2. gemm_bench on those four shapes alone (fresh cache), twice, their tuner files;
#   everything in one tar (the host returns about eight files).
#   tar xJf .gpu-bundle-as.tar.xz && OUT=$OUT bash tools/gpu/session_at.sh
set -u
OUT=${OUT:-/tmp/session-at}
here=$(dirname "$0")
. "$here/gemm_session.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,power.limit,temperature.gpu --format=csv,noheader
full_bench 200
grep -E "^\| (1009x2017x509|8192x1024x8192|3000x3000x3000|1024x1024x1024) .*\(.*\(" "$OUT/gemm_bench.log" | cut -c1-250 | tail -4
for r in 1 2; do
  fresh_cache
  echo "== four shapes, run $r ($(el) s)"
  timeout 100 "$B/examples/gemm_bench" --shapes "1009,2017,509;8192,1024,8192;3000,3000,3000;1024,1024,1024" > "$OUT/four_$r.log" 2>&1
  echo "  rc $?"
  grep -E "^\| (1009x2017x509|8192x1024x8192|3000x3000x3000|1024x1024x1024) .*\(.*\(" "$OUT/four_$r.log" | cut -c1-250 | tail -4
  (cd "$GPUKIT_CACHE_DIR" && find . -path '*gemm-tuning*' -type f | tar cJf "$OUT/tuning_four_$r.tar.xz" -T - 2> /dev/null)
done
(cd "$OUT" && tar cJf all.tar.xz --exclude=all.tar.xz . 2> /dev/null)
echo "total $(el) s"
