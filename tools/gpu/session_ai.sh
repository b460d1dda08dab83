#!/usr/bin/env bash
# 2026-12-07, thirteenth session, last call (issue 23): does P:ks pay, paired against cuBLAS and
# against the build before it on the same machine? gemm_bench --quick --paired (cuBLAS TF32 and
# ours alternating, the tuner measuring afresh from each build's prewarmed cache) of HEAD's build
# (new) and of b123976 (old, version 14), new / old, on the shapes where the full bench chose P:ks
# or found it best (1024^3, 3000^3, 8192x64x8192, 6000x1000x384), 256x256x8192 (whose cuBLAS ran
# at half its usual rate in call 2). About 100 s.
#   tar xJf .gpu-bundle-ab.tar.xz && OUT=$OUT bash tools/gpu/session_ai.sh
set -u
OUT=${OUT:-/tmp/session-ai}
here=$(dirname "$0")
B=.gpu-bundle-ab/new
. "$here/gemm_session.sh"
SH="1024,1024,1024;3000,3000,3000;8192,64,8192;6000,1000,384;256,256,8192"
for v in new old; do
  fresh_cache ".gpu-bundle-ab/$v/kcache"
  echo "== paired $v ($(el) s)"
  paired "$OUT/paired_$v.log" ".gpu-bundle-ab/$v/examples/gemm_bench" "$SH"
done
echo "total $(el) s"
