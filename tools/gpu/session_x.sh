#!/usr/bin/env bash
# 2026-12-06, tenth session, call 2 (issue 23): every GPU test of the bundle (interior-tile
# epilogue, tuner's second split) with GPUKIT_REQUIRE_GPU=1, then session_w.sh (old and new
# gemm_bench side by side, ncu on the ping-pong tile with P from registers).
#   tar xJf .gpu-bundle.tar.xz && OUT=$OUT bash tools/gpu/session_x.sh
set -u
OUT=${OUT:-/tmp/session-x}; mkdir -p "$OUT"
here=$(dirname "$0")
T0=$SECONDS
BUNDLE=.gpu-bundle OUT=$OUT/final timeout 340 bash "$here/final_tests.sh" > "$OUT/final.txt" 2>&1
grep -vE "^\s*$" "$OUT/final.txt" | grep -E "rc=[1-9]|FAILED|panicked|TIMEOUT|pytest|passed in|Rust test binaries|done at" | cut -c1-220 | head -30
(cd "$OUT" && tar cJf final_logs.tar.xz final final.txt && rm -rf final final.txt)
echo "== tests took $((SECONDS - T0)) s"
B=.gpu-bundle-small OUT=$OUT/w bash "$here/session_w.sh"
mv "$OUT/w/logs.tar.xz" "$OUT/w_logs.tar.xz"; mv "$OUT/w/pp_mn.ncu-rep" "$OUT/" 2> /dev/null; rm -rf "$OUT/w"
echo "total $((SECONDS - T0)) s"
