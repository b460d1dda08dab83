#!/usr/bin/env bash
# 2026-12-07, eleventh session (issue 23): did the stream-K tail's kernel change slow the plans
# that cannot have a tail? gemm_bench of f4a111f (interior epilogue, no tail) and of 8a112d9
# (tail) in one call on one card, each tuning afresh from a cache with both builds' kernels
# (precompiled here), `--quick --paired` (cuBLAS TF32 alternating with ours), new / old / new.
#   OUT=$OUT bash tools/gpu/session_ad.sh     (carry .gpu-bundle-small)
set -u
OUT=${OUT:-/tmp/session-ad}
S=.gpu-bundle-small
. "$(dirname "$0")/gemm_session.sh"
SH="16,4096,4096;1023,1025,1027;1024,1024,1024;1000,1000,1000;3000,3000,3000;8,768,768,768"
i=0
for v in new f4a new; do
  i=$((i + 1))
  fresh_cache "$S/kcache"
  echo "== $i $v ($(el) s)"
  paired "$OUT/paired_${i}_$v.log" "$S/examples/gemm_bench.$v" "$SH"
done
echo "total $(el) s"
