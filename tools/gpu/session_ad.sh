#!/usr/bin/env bash
# 2026-12-07, eleventh session (issue 23): did the stream-K tail's kernel change slow the plans
# that cannot have a tail? gemm_bench of f4a111f (interior epilogue, no tail) and of 8a112d9
# (tail) in one call on one card, each tuning afresh from a cache with both builds' kernels
# (precompiled here), `--quick --paired` (cuBLAS TF32 alternating with ours), new / old / new.
#   OUT=$OUT bash tools/gpu/session_ad.sh     (carry .gpu-bundle-small)
set -u
OUT=${OUT:-/tmp/session-ad}; mkdir -p "$OUT"
S=.gpu-bundle-small
T0=$SECONDS
echo "host $(hostname) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
SH="16,4096,4096;1023,1025,1027;1024,1024,1024;1000,1000,1000;3000,3000,3000;8,768,768,768"
i=0
for v in new f4a new; do
  i=$((i + 1))
  export GPUKIT_CACHE_DIR=$(mktemp -d); cp -r "$S/kcache"/. "$GPUKIT_CACHE_DIR"/; chmod -R go-rwx "$GPUKIT_CACHE_DIR"
  echo "== $i $v ($((SECONDS - T0)) s)"
  timeout 45 "$S/examples/gemm_bench.$v" --quick --paired --shapes "$SH" > "$OUT/paired_${i}_$v.log" 2>&1
  echo "  rc $?"
  grep -E "^paired" "$OUT/paired_${i}_$v.log" | sed 's/(medians of 25 alternating samples)//; s/^paired //' | cut -c1-170
done
echo "total $((SECONDS - T0)) s"
