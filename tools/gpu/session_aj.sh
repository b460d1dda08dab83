#!/usr/bin/env bash
# 2026-12-07, fourteenth session (issue 23): the proof on the machine the issue names, a bundle of
# HEAD (tools/gpu/bundle.sh), two calls on one warm machine:
#   phase 1 (about 420 s): every GPU test of the bundle with GPUKIT_REQUIRE_GPU=1
#     (final_tests.sh), then core_bench beside PyTorch in the same call (operators, fused
#     expressions, transfers; tools/gpu/core_torch.py, core_join.py);
#   phase 2 (about 500 s): the full gemm_bench (benchmark shapes and sweep, cuBLAS TF32 and
#     SGEMM beside, both planners against the best plan), the tuner's files of that run (each
#     class's candidates and times, to read the planner's misses), gemm_bench --quick --paired
#     (cuBLAS TF32 and ours alternating) on the named shapes, and, with .gpu-bundle-ab unpacked,
#     the A/B of tools/gpu/session_ai.sh (P:ks against the build before it).
#   phase 3 (about 420 s, after a call that ran the tests): core_bench beside PyTorch, then the
#     full gemm_bench and the tuner's files.
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/session_aj.sh 1|2|3
set -u
PH=${1:?phase 1, 2 or 3}
OUT=${OUT:-/tmp/session-aj}
here=$(dirname "$0")
. "$here/gemm_session.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,power.limit,temperature.gpu --format=csv,noheader
if [ "$PH" = 1 ] || [ "$PH" = 3 ]; then
  [ "$PH" = 1 ] && all_tests 400
  core_vs_torch
  tail -40 "$OUT/core_table.md"
fi
if [ "$PH" = 2 ] || [ "$PH" = 3 ]; then
  full_bench 280
fi
if [ "$PH" = 2 ]; then
  SH="4096,4096,4096;8192,8192,8192;4096,4096,256;2500,2500,500;8,768,768,768;1500,1500,300;1000,1000,1000;1024,1024,1024;3000,3000,3000;2000,6000,400;192,160,32768"
  fresh_cache
  echo "== paired ($(el) s)"
  paired "$OUT/paired.log" "$B/examples/gemm_bench" "$SH"
  [ -d .gpu-bundle-ab/new ] && [ "$(el)" -lt 420 ] && OUT=$OUT bash "$here/session_ai.sh"
fi
(cd "$OUT" && tar cJf logs_$PH.tar.xz --exclude='*.tar.xz' --exclude=tests . 2> /dev/null)
echo "total $(el) s"
