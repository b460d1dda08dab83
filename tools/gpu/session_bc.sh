#!/usr/bin/env bash
# 2026-12-08, twenty-first session (issue 23), on a bundle of 14bbe40 (tools/gpu/bundle.sh) whose
# gpu_runtime test binary is 0257715's (its tests take a lock), the binary before it in
# .gpu-extra/gpu_runtime_old:
#   1. on an H200 only: session_au.sh bench (the tuner tests, the full gemm_bench with cuBLAS and
#      ours timed in turn, the paired shapes; about 90 s: the device time left is too short for
#      every GPU test too);
#   2. gpu_runtime, the fixed binary and the old one, 4 runs each (3 on an H200); the old one counted a
#      concurrent test's pinned-cache hit once in call 2 of this session;
#   3. gemm_bench --quick at 1024^3 first and last, 4096^3, 8192^3, 2048^3: is cuBLAS's 1024^3
#      (140 one after the other, 104 in turn with ours in call 2) a first-shape effect?
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/session_bc.sh
set -u
OUT=${OUT:-/tmp/session-bc}
here=$(dirname "$0")
. "$here/gemm_session.sh"
RUNS=4
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  OUT=$OUT bash "$here/session_au.sh" bench
  RUNS=3
fi
fresh_cache
for v in new old; do
  b=$B/tests/gpukit-core.gpu_runtime.test; [ $v = old ] && b=.gpu-extra/gpu_runtime_old
  [ -x "$b" ] || { echo "$v gpu_runtime: no binary at $b, skipped"; continue; }
  p=0; f=0
  for i in $(seq "$RUNS"); do
    if GPUKIT_REQUIRE_GPU=1 timeout 30 "$b" > "$OUT/rt_$v$i.log" 2>&1; then p=$((p+1)); else f=$((f+1)); fi
  done
  echo "$v gpu_runtime: $p runs passed, $f failed ($(el) s)"
  grep -h "^test result" "$OUT"/rt_$v*.log | sort | uniq -c
  grep -h "panicked" -A3 "$OUT"/rt_$v*.log | head -8
done
timeout 60 "$B/examples/gemm_bench" --quick --shapes "1024,1024,1024;4096,4096,4096;8192,8192,8192;2048,2048,2048;1024,1024,1024" > "$OUT/quick.log" 2>&1
echo "gemm_bench rc $? ($(el) s)"
grep -E "^\[" "$OUT/quick.log" | cut -c1-200
echo "total $(el) s"
