#!/usr/bin/env bash
# 2026-12-07, eighteenth session (issue 23), the second call. On an H200: the whole final run of
# session_au.sh (the proof issue 23 asks for; the bundle's kernels are those it was built for).
# On any other card, where the sweep's last shapes under 0.9 of cuBLAS TF32 lose (about 330 s):
#   1. the cuBLAS kernels PyTorch's TF32 matmul runs at 2000x6000x400 NT, 1500x1500x300 TT and
#      their NN twins (ncu LaunchStats: tile, grid, cluster);
#   2. gemm_bench --quick --paired on those layouts (gemm_bench's main table times cuBLAS and ours
#      one after the other, under the power limit's clock);
#   3. gemm_bench --explore on the two layouts: every configuration x split x grid of ours;
#   4. ncu --set full on one launch of ours (the tuner's choice, read from the files the tuner
#      wrote in a run just before) and one of cuBLAS at 2000x6000x400 NT;
#   5. gemm_gpu's tuner tests (plan.rs and tune.rs as of HEAD).
#   tar xJf .gpu-bundle-av.tar.xz && OUT=$OUT bash tools/gpu/session_av.sh
set -u
OUT=${OUT:-/tmp/session-av}
here=$(dirname "$0")
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash "$here/session_au.sh" all
fi
. "$here/gemm_session.sh"
NCU="ncu --clock-control none"
LAY="2000,6000,400,NT;2000,6000,400;1500,1500,300,TT;1500,1500,300"
echo "== 1. cuBLAS kernel names ($(el) s)"
timeout 90 $NCU --section LaunchStats -k regex:'nvjet|gemm|xmma|cutlass' \
  python3 "$here/cublas_kernels.py" "$LAY" > "$OUT/cublas_names.txt" 2>&1
echo "  rc $?"
grep -E "done$|^  [a-zA-Z_].*\(|Cluster Size|Grid Size|Block Size|Dynamic Shared" "$OUT/cublas_names.txt" | cut -c1-180 | head -60
echo "== 2. paired ($(el) s)"
fresh_cache
paired "$OUT/paired.log" "$B/examples/gemm_bench" "$LAY;2500,2500,500;192,160,32768"
echo "== 3. explore ($(el) s)"
fresh_cache
timeout 100 "$B/examples/gemm_bench" --explore --shapes "2000,6000,400,NT;1500,1500,300,TT" > "$OUT/explore.log" 2>&1
echo "  rc $?"
grep -E "^explore .*(cuBLAS|best)" "$OUT/explore.log" | cut -c1-220
sort -t= -k2 -rn <(grep -E "^explore 2000x6000x400 NT wgmma" "$OUT/explore.log") | head -8 | cut -c1-160
sort -t= -k2 -rn <(grep -E "^explore 1500x1500x300 TT (wgmma|tf32)" "$OUT/explore.log") | head -8 | cut -c1-160
echo "== 4. ncu at 2000x6000x400 NT ($(el) s)"
fresh_cache
GPUKIT_GEMM_TUNE=on timeout 40 "$B/examples/gemm_bench" --quick --shapes 2000,6000,400,NT > "$OUT/tuned.log" 2>&1
grep -E "^\| 2000" "$OUT/tuned.log" | cut -c1-200
GPUKIT_GEMM_TUNE=on timeout 90 $NCU --set full --import-source no --kernel-name-base demangled \
  -k regex:'gemm_wgmma<.int.[0-9]+, .int.[0-9]+, .int.1,' --launch-skip 3 --launch-count 1 \
  "$B/examples/gemm_bench" --quick --shapes 2000,6000,400,NT > "$OUT/ncu_ours.txt" 2>&1
echo "  ours rc $?"
timeout 90 $NCU --set full --import-source no -k regex:'nvjet|gemm|xmma|cutlass' --launch-skip 2 --launch-count 1 \
  python3 "$here/cublas_kernels.py" 2000,6000,400,NT > "$OUT/ncu_cublas.txt" 2>&1
echo "  cuBLAS rc $?"
for f in "$OUT"/ncu_ours.txt "$OUT"/ncu_cublas.txt; do
  echo "---- $(basename "$f")"
  grep -E "^  [a-zA-Z_].*\(|Duration|Throughput|L2 Hit|Issue Slots|Executed Ipc|Cluster Size|Grid Size|Registers|Stall|DRAM Throughput|Compute \(SM\)|Memory Throughput|SM Frequency|SM Active Cycles|Elapsed Cycles|One or More" "$f" | cut -c1-150 | head -40
done
echo "== 5. tuner tests ($(el) s)"
gemm_tests_matching "tune|autotuner" 100
(cd "$OUT" && tar cJf all.tar.xz --exclude='*.tar.xz' . 2> /dev/null)
echo "total $(el) s"
