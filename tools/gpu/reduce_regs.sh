#!/usr/bin/env bash
# Registers of the full-reduction kernel's instantiations (issue 23's max/min rows): nvcc with
# ptxas -v on the GPU host (its CUDA toolkit), sm_90a. Blocks of 256 threads: at most 32
# registers let 8 blocks (the launch's grid of 8 per SM) be resident at once.
set -u
d=$(mktemp -d)
cp gpukit-core/kernels/common.cuh gpukit-core/kernels/reduce.cu "$d"/
cat > "$d/inst.cu" <<'CU'
#include "reduce.cu"
template __global__ void reduce_partial<float, 0>(const float*, long long, void*);
template __global__ void reduce_partial<float, 2>(const float*, long long, void*);
template __global__ void reduce_partial<float, 3>(const float*, long long, void*);
template __global__ void reduce_partial<double, 0>(const double*, long long, void*);
template __global__ void reduce_partial<double, 2>(const double*, long long, void*);
CU
(cd "$d" && nvcc -std=c++17 -arch=sm_90a -Xptxas -v -c inst.cu -o inst.o 2>&1 | grep -E "Compiling|registers" | sed 's/^ptxas info *: //' | paste - - | sed -E 's/Compiling entry function .(_Z[^ ]*). for .sm_90a./\1/' | cut -c1-200)
