#!/usr/bin/env bash
# 2026-12-07, fourteenth session (issue 23): P:mn through 32-row boxes with the 128-byte swizzle
# (whole 128-byte lines per copied row, half the copies; fragment loads ordered per lane so each
# takes two wavefronts) against the 16-row unswizzled boxes of HEAD before it, on one machine:
#   1. every GPU test of the new bundle (final_tests.sh, GPUKIT_REQUIRE_GPU=1; the gemm_gpu tests
#      each in its own process: wgmma_paths_on_awkward_shapes runs P:mn in every tile it fits);
#   2. gemm_bench --configs (tuner off, persistent P:mn plans, cuBLAS TF32 beside) old, new, old,
#      new on the shapes the swapped plans serve;
#   3. gemm_bench --quick --paired (cuBLAS TF32 and ours alternating, tuner on) old and new.
#   tar xJf .gpu-bundle.tar.xz && tar xJf .gpu-bundle-ab2.tar.xz && OUT=$OUT bash tools/gpu/session_ak.sh
set -u
OUT=${OUT:-/tmp/session-ak}
here=$(dirname "$0")
. "$here/gemm_session.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,power.limit,temperature.gpu --format=csv,noheader
# the old build's cache holds only the kernels whose source changed; the rest are the new bundle's
cp -rn .gpu-bundle/kcache/. .gpu-bundle-ab2/old/kcache/
all_tests 330
SH="8,768,768,768;2500,2500,500;2504,2504,504;4096,4096,4096;1024,1024,1024;1500,1500,300;2000,6000,400;3000,3000,3000"
for r in 1 2; do
  for v in old new; do
    [ $v = new ] && b=.gpu-bundle || b=.gpu-bundle-ab2/old
    echo "== configs $v $r ($(el) s)"
    B=$b configs "$OUT/configs_${v}_$r.log" 100 wgmma_128x128_pp,wgmma_128x256_c2,wgmma_128x128,wgmma_128x64,wgmma_128x256 "$SH" > /dev/null
    grep -E "^config.*P:mn" "$OUT/configs_${v}_$r.log" | cut -c1-120
    grep -E "^\| [0-9]" "$OUT/configs_${v}_$r.log" | cut -c1-100 | head -12
  done
done
PS="8,768,768,768;2500,2500,500;1024,1024,1024;1500,1500,300;2000,6000,400;4096,4096,4096;8192,8192,8192;4096,4096,256"
for v in old new; do
  [ $v = new ] && b=.gpu-bundle || b=.gpu-bundle-ab2/old
  fresh_cache "$b/kcache"
  echo "== paired $v ($(el) s)"
  paired "$OUT/paired_$v.log" "$b/examples/gemm_bench" "$PS"
done
(cd "$OUT" && tar cJf logs_ak.tar.xz --exclude='*.tar.xz' --exclude=tests . 2> /dev/null)
echo "total $(el) s"
