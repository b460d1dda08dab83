#!/usr/bin/env bash
# 2026-12-06, ninth session, call 1 (issue 23): where the 128x256 TF32 kernel and cuBLAS differ,
# read from the hardware counters (ncu, --clock-control none as METHOD.md asks):
#   1. the cuBLAS kernels PyTorch's TF32 matmul runs on the shapes (names: tile, cluster);
#   2. ncu --set full on one launch of ours (the model's plan, tuner off) and of cuBLAS, 4096^3
#      and 4096x4096x256, NN.
#   tar xJf .gpu-bundle.tar.xz && B=.gpu-bundle OUT=$OUT bash tools/gpu/session_t.sh
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/session-t}; mkdir -p "$OUT"
here=$(dirname "$0")
. "$here/kcache.sh"
T0=$SECONDS
echo "host $(hostname) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
NCU="ncu --clock-control none"
echo "== 1. cuBLAS kernel names (t=$((SECONDS - T0)))"
timeout 120 $NCU --section LaunchStats -k regex:'nvjet|gemm|xmma|cutlass' \
  python3 "$here/cublas_kernels.py" "4096,4096,4096;8192,8192,8192;4096,4096,256;2500,2500,500;8192,2048,256;1500,1500,300" \
  > "$OUT/cublas_names.txt" 2>&1
echo "  rc $?"
grep -E "^  [a-zA-Z_].*\(|Cluster|Grid Size|Block Size|Dynamic Shared|Registers" "$OUT/cublas_names.txt" | cut -c1-200 | head -80
for shape in "4096,4096,4096" "4096,4096,256"; do
  tag=${shape//,/x}
  echo "== 2. ncu --set full, ours $tag (t=$((SECONDS - T0)))"
  GPUKIT_GEMM_TUNE=off timeout 150 $NCU --set full --kernel-name-base demangled -k regex:'gemm_wgmma<.int.256' \
    --launch-skip 3 --launch-count 1 "$B/examples/gemm_bench" --quick --shapes "$shape" > "$OUT/ncu_ours_$tag.txt" 2>&1
  echo "  rc $?"
  echo "== 2. ncu --set full, cuBLAS $tag (t=$((SECONDS - T0)))"
  timeout 150 $NCU --set full -k regex:'nvjet|gemm|xmma|cutlass' --launch-skip 2 --launch-count 1 \
    python3 "$here/cublas_kernels.py" "$shape" > "$OUT/ncu_cublas_$tag.txt" 2>&1
  echo "  rc $?"
done
for f in "$OUT"/ncu_*.txt; do
  echo "---- $(basename $f)"
  grep -E "^  [a-zA-Z_].*\(|Duration|Throughput|L2 Hit|Mem Pipes|Issue Slots|Executed Ipc|Cluster|Grid Size|Registers|Achieved Occupancy|Stall|L1/TEX Hit|DRAM Throughput|Compute \(SM\)|Memory Throughput|SM Frequency|One or More|Bank" "$f" | cut -c1-160 | head -45
done
tar cJf "$OUT/logs.tar.xz" -C "$OUT" --exclude=logs.tar.xz . 2> /dev/null
echo "total $((SECONDS - T0)) s"
