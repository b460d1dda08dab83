#!/usr/bin/env bash
# Next GEMM call (issue 23, written 2026-12-07 after version 14): why the tensor-mapped plans
# (no pack) run at 75-107 TFLOP/s at 2500x2500x500 but 161 at 8 x 768^3. Hypothesis: 2500^2's
# row pitches (2000 B, 10000 B) are not multiples of 128 B, so each tensor-copy box row
# straddles two cache lines. About 200 s:
#   1. gemm_bench --configs (tuner off, cuBLAS TF32 in the same process), the ping-pong and
#      128x256 tiles, persistent, at 2500x2500x500 (A's and B's pitches unaligned),
#      2500x2500x512 (A's aligned), 2560x2560x512 (both aligned), 2504x2504x504 (32-B aligned);
#   2. ncu --set full on one launch each at 2500^2: `wgmma_128x128_pp` packed (with its pack
#      kernel) and P:k Q:pack, for L2 sectors per request and the stall reasons.
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/session_af.sh
set -u
OUT=${OUT:-/tmp/session-af}
here=$(dirname "$0")
. "$here/gemm_session.sh"
fresh_cache
echo "== 1. configs ($(el) s)"
GPUKIT_GEMM_TUNE=off timeout 120 "$B/examples/gemm_bench" --quick --configs \
  --only wgmma_128x128_pp,wgmma_128x256,wgmma_128x256_c2 --plan-has pers \
  --shapes "2500,2500,500;2500,2500,512;2560,2560,512;2504,2504,504" > "$OUT/configs.log" 2>&1
echo "  rc $?"
grep -E "^config|^\| [0-9]" "$OUT/configs.log" | cut -c1-170 | head -60
NCU="ncu --clock-control none --set full --import-source no --kernel-name-base demangled"
for plan in "pers:packed" "P:k Q:pack pers:pk"; do
  has=${plan%%:*}; tag=${plan##*:}
  [ "$has" = pers ] && has="wgmma_128x128_pp s1 pers"
  echo "== 2. ncu $has ($(el) s)"
  GPUKIT_GEMM_TUNE=off timeout 120 $NCU -k regex:'gemm_wgmma<.int.128, .int.7|gemm_wgmma_pack' --launch-skip 2 --launch-count 2 -o "$OUT/$tag" -f \
    "$B/examples/gemm_bench" --quick --configs --only wgmma_128x128_pp --plan-has "$has" --shapes 2500,2500,500 \
    > "$OUT/$tag.run.txt" 2>&1
  echo "  rc $?"
  ncu -i "$OUT/$tag.ncu-rep" --page details > "$OUT/$tag.txt" 2>&1
  grep -E "^  [a-zA-Z_].*\(|Duration|L2 Cache Throughput|DRAM Throughput|L2 Hit Rate|Mem Busy|SM Active Cycles|Elapsed Cycles|Compute \(SM\)" "$OUT/$tag.txt" | cut -c1-150 | head -24
done
tar cJf "$OUT/logs.tar.xz" -C "$OUT" --exclude=logs.tar.xz --exclude='*.ncu-rep' . 2> /dev/null
echo "total $(el) s"
