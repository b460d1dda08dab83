#!/usr/bin/env bash
# 2026-12-07, twelfth session (issue 23): the 64-row ping-pong tile's first run (bundle of its
# commit, `tools/gpu/bundle.sh`), in two calls on one warm machine:
#   phase 1 (about 380 s): every GPU test of the bundle with GPUKIT_REQUIRE_GPU=1
#     (final_tests.sh: gemm_gpu's tests run the new tiles in every layout, tails included);
#     gemm_bench --quick --paired (cuBLAS TF32 and ours alternating, the tuner measuring afresh);
#     gemm_bench --configs --only the four ping-pong tiles at the two misses (tuner off);
#   phase 2 (about 250 s): the full gemm_bench; then session_ad's question (gemm_bench of
#     f4a111f and of 8a112d9, new / old / new, from .gpu-bundle-small.tar.xz).
#   phase s (about 250 s, when little device time is left): gemm_gpu's tests and pytest in
#     parallel instead of every test, then phase 1's benches.
#   tar xJf .gpu-bundle.tar.xz && tar xJf .gpu-bundle-small.tar.xz && OUT=$OUT bash tools/gpu/session_ae.sh 1
set -u
PH=${1:-1}
OUT=${OUT:-/tmp/session-ae}; mkdir -p "$OUT"
here=$(dirname "$0")
B=.gpu-bundle
T0=$SECONDS
el() { echo $((SECONDS - T0)); }
echo "host $(hostname) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
fresh_cache() { export GPUKIT_CACHE_DIR=$(mktemp -d); cp -r "$B/kcache"/. "$GPUKIT_CACHE_DIR"/; chmod -R go-rwx "$GPUKIT_CACHE_DIR"; }
if [ "$PH" = s ]; then
  # The short form (little device time left): gemm_gpu's tests, one process each, and the
  # wheel's pytest, in parallel; then the paired bench and the configs below.
  GG=$B/tests/gpukit-core.gemm_gpu.test
  mkdir -p "$OUT/logs"
  for t in $("$GG" --list 2>/dev/null | sed -n 's/: test$//p'); do
    (fresh_cache; GPUKIT_REQUIRE_GPU=1 timeout 150 "$GG" --exact "$t" > "$OUT/logs/$t.log" 2>&1; echo "$t rc=$?" >> "$OUT/logs/rc.txt") &
  done
  (python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpukit-site "$B"/wheels/*.whl \
    && cd gpukit-python/tests && PYTHONPATH=/tmp/gpukit-site PATH=/tmp/gpukit-site/bin:$PATH GPUKIT_REQUIRE_GPU=1 \
    timeout 120 python3 -m pytest -q -rs -p no:cacheprovider --timeout 100 --hypothesis-seed=0 . > "$OUT/pytest.log" 2>&1) &
  wait
  grep -v "rc=0" "$OUT/logs/rc.txt" | head
  cat "$OUT"/logs/*.log | sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' | awk '{p+=$1; f+=$2} END {print "gemm_gpu: " p " passed, " f " failed"}'
  grep -h -A8 "panicked at" "$OUT"/logs/*.log | cut -c1-300 | head -20
  echo "pytest: $(tail -1 "$OUT/pytest.log")"
  echo "== tests done ($(el) s)"
fi
if [ "$PH" = 1 ]; then
  OUT=$OUT/tests timeout 330 bash "$here/final_tests.sh" > "$OUT/final_tests.log" 2>&1
  echo "== final_tests rc $? ($(el) s)"
  tail -n 45 "$OUT/final_tests.log" | cut -c1-220
  (cd "$OUT/tests" && tar cJf ../tests_logs.tar.xz logs 2> /dev/null)
fi
if [ "$PH" = 1 ] || [ "$PH" = s ]; then
  SH="4096,4096,4096;8192,8192,8192;4096,4096,256;2500,2500,500;8,768,768,768;1000,1000,1000;3000,3000,3000;1500,1500,300"
  fresh_cache
  echo "== paired ($(el) s)"
  timeout 75 "$B/examples/gemm_bench" --quick --paired --shapes "$SH" > "$OUT/paired.log" 2>&1
  echo "  rc $?"
  grep -E "^paired" "$OUT/paired.log" | sed 's/(medians of 25 alternating samples)//' | cut -c1-200
  fresh_cache
  echo "== configs ($(el) s)"
  GPUKIT_GEMM_TUNE=off timeout 60 "$B/examples/gemm_bench" --quick --configs \
    --only wgmma_128x128_pp,wgmma_128x128_pp_c2,wgmma_64x128_pp,wgmma_64x128_pp_c2 --plan-has pers \
    --shapes "2500,2500,500;8,768,768,768" > "$OUT/configs.log" 2>&1
  echo "  rc $?"
  grep -E "^config|^\| " "$OUT/configs.log" | cut -c1-170 | head -80
else
  fresh_cache
  echo "== gemm_bench ($(el) s)"
  OUT=$OUT timeout 150 "$B/examples/gemm_bench" > "$OUT/gemm_bench.log" 2>&1
  echo "  rc $?"
  grep -E "^\| (2500x2500x500|8x 768|4096x4096x4096 \||8192x8192x8192 \||4096x4096x256 \|)" "$OUT/gemm_bench.log" | cut -c1-250
  grep -E "^lowest ratio|^targets|^autotuner: [0-9]" "$OUT/gemm_bench.log" | cut -c1-400
  [ -d .gpu-bundle-small ] && timeout 100 bash "$here/session_ad.sh"
fi
(cd "$OUT" && tar cJf logs_$PH.tar.xz --exclude='*.tar.xz' --exclude=tests --exclude=gemm_bench.tsv . 2> /dev/null)
echo "total $(el) s"
