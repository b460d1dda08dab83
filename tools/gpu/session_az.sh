#!/usr/bin/env bash
# 2026-12-07, twentieth session (issue 23): the two gemm_gpu tests that failed with the staged
# output on (session_ay.sh: an element outside C written at 257x131x1000, ldc 132), each with the
# staged output on and off, full panic messages (about 60 s).
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/session_az.sh
set -u
OUT=${OUT:-/tmp/session-az}
here=$(dirname "$0")
. "$here/gemm_session.sh"
GG=$B/tests/gpukit-core.gemm_gpu.test
for t in wgmma_paths_on_awkward_shapes every_config_and_split_on_awkward_shapes; do
  for v in on off; do
    (fresh_cache; GPUKIT_GEMM_TMA_STORE=$v GPUKIT_REQUIRE_GPU=1 timeout 150 "$GG" --exact "$t" > "$OUT/$t.$v.log" 2>&1
     echo "$t $v rc=$? $(grep '^test result' "$OUT/$t.$v.log")") &
  done
done
wait
for f in "$OUT"/*.log; do
  echo "== $f"; grep -A3 "panicked at" "$f" | cut -c1-2500
done
echo "total $(el) s"
