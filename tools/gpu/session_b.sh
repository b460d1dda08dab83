#!/usr/bin/env bash
# One GPU call: the exit-during-start-up A/B (the shim before and after the __cxa_atexit
# interposer, interleaved, programs exiting at several moments of the eager start), the whole GPU
# test suite (failures printed), and the GEMM benchmark shapes beside cuBLAS.
#   B=.gpu-bundle OLD_SHIM=.gpu-fix/liboffload_preload.old.so OUT=$OUT bash tools/gpu/session_b.sh
set -u
B=${B:-.gpu-bundle}; OUT=${OUT:-/tmp/session-b}; mkdir -p "$OUT"
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== exit during the eager start-up: old shim vs new, interleaved"
declare -A bad=([old]=0 [new]=0) runs=([old]=0 [new]=0)
n=${EXIT_ROUNDS:-5}
for r in $(seq "$n"); do
  for d in 0 0.05 0.1 0.2 0.3 0.5; do
    for which in old new; do
      if [ $which = old ]; then so=$OLD_SHIM; else so=$B/examples/liboffload_preload.so; fi
      LD_PRELOAD=$PWD/$so GPUKIT_OFFLOAD_LOG=summary GPUKIT_OFFLOAD_START=eager GPUKIT_OFFLOAD_PERSIST=0 \
        GPUKIT_OFFLOAD_PROFILE=$OUT/p.json timeout 60 python3 -c "import time, numpy as np
a = np.ones((200, 200)); b = a @ a
time.sleep($d)
print('done')" > "$OUT/x.out" 2> "$OUT/x.err"; rc=$?
      runs[$which]=$((runs[$which] + 1))
      if [ $rc -ne 0 ] || ! grep -q "dgemm calls=1" "$OUT/x.err"; then
        bad[$which]=$((bad[$which] + 1)); echo "  $which delay $d rc $rc: $(tail -c 200 "$OUT/x.err" | tr '\n' '|')"
      fi
    done
  done
done
echo "exit A/B: old shim ${bad[old]} of ${runs[old]} bad, new shim ${bad[new]} of ${runs[new]} bad ($((SECONDS - T0)) s)"
echo "== final tests ($((SECONDS - T0)) s)"
OUT=$OUT/ft BUNDLE=$B timeout 330 bash tools/gpu/final_tests.sh > "$OUT/final.txt" 2>&1
grep -v "rc=0 " "$OUT/final.txt" | tail -60
echo "== GEMM benchmark shapes ($((SECONDS - T0)) s)"
(. tools/gpu/kcache.sh; timeout 150 "$B/examples/gemm_bench" --bench-only --with-3x > "$OUT/gemm_bench.txt" 2>&1; echo "rc $?"; tail -30 "$OUT/gemm_bench.txt")
echo "total $((SECONDS - T0)) s"
