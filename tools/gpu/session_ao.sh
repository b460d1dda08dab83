#!/usr/bin/env bash
# 2026-12-07, fifteenth session (issue 23): the split-K reduction with lanes and launched
# programmatically (bundle of HEAD, tools/gpu/bundle.sh), two calls on one warm machine:
#   phase 1 (about 200 s): gemm_bench --quick --paired (cuBLAS TF32 and ours alternating) on the
#     split-K shapes and two that do not split, with GPUKIT_GEMM_PDL=off and on in alternating
#     processes (off, on, off, on); then the full gemm_bench (the tuner's files kept) and
#     core_bench beside PyTorch in the same call;
#   phase 2 (about 400 s): every GPU test of the bundle with GPUKIT_REQUIRE_GPU=1 (final_tests.sh).
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/session_ao.sh 1|2
set -u
PH=${1:?phase 1 or 2}
OUT=${OUT:-/tmp/session-ao}
here=$(dirname "$0")
. "$here/gemm_session.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,power.limit,temperature.gpu --format=csv,noheader
if [ "$PH" = 1 ]; then
  SH="192,160,32768;256,256,8192;128,128,65536;96,80,30000;384,384,8192;1000,1000,1000;4096,4096,4096"
  for r in 1 2; do
    for pdl in off on; do
      fresh_cache
      echo "== paired PDL $pdl, round $r ($(el) s)"
      GPUKIT_GEMM_PDL=$pdl paired "$OUT/paired_${pdl}_$r.log" "$B/examples/gemm_bench" "$SH"
    done
  done
  full_bench 280
  core_vs_torch
  grep -iE "met|missed|ratio" "$OUT/core_table.md" | tail -5
fi
if [ "$PH" = 2 ]; then
  all_tests 500
fi
(cd "$OUT" && tar cJf logs_$PH.tar.xz --exclude='*.tar.xz' --exclude=tests . 2> /dev/null)
echo "total $(el) s"
