# Sourced by the GEMM session scripts (session_ad, session_ae): the bundle (B, default
# .gpu-bundle), the output folder (OUT), the start time T0 and `el` (seconds since), a line naming
# the host and its GPU; `fresh_cache [DIR]` points GPUKIT_CACHE_DIR at a private copy of a
# prewarmed kernel cache (default $B/kcache), so that each process tunes afresh but compiles
# nothing; `paired LOG BIN SHAPES` runs `BIN --quick --paired --shapes SHAPES` (cuBLAS TF32 and
# ours in alternating samples) into LOG and prints its paired lines; `configs LOG LIMIT ONLY SHAPES`
# runs `gemm_bench --configs --only ONLY` (persistent plans, tuner off) into LOG and prints its
# rows; `all_tests LIMIT` runs every GPU test of the bundle (final_tests.sh) under $OUT/tests;
# `full_bench LIMIT` runs the full gemm_bench (fresh cache) into $OUT/gemm_bench.log, prints
# its headline rows and target lines and keeps the tuner's files in $OUT/tuning.tar.xz;
# `gemm_tests_matching REGEX LIMIT` runs the gemm_gpu tests whose names match, each in a process
# of its own (GPUKIT_REQUIRE_GPU=1), one line each; `core_vs_torch` runs core_bench and PyTorch's
# operations in the same call and joins them ($OUT/core_table.md).
B=${B:-.gpu-bundle}
OUT=${OUT:-/tmp/gemm-session}; mkdir -p "$OUT"
T0=$SECONDS
el() { echo $((SECONDS - T0)); }
echo "host $(hostname) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
fresh_cache() {
  export GPUKIT_CACHE_DIR=$(mktemp -d)
  cp -r "${1:-$B/kcache}"/. "$GPUKIT_CACHE_DIR"/
  chmod -R go-rwx "$GPUKIT_CACHE_DIR"
}
paired() { # log bin shapes
  timeout 75 "$2" --quick --paired --shapes "$3" > "$1" 2>&1
  echo "  rc $?"
  grep -E "^paired" "$1" | sed 's/(medians of 25 alternating samples)//; s/^paired //' | cut -c1-190
}
gemm_tests() { # limit: every gemm_gpu test of the bundle in a process of its own (each with its
  # own copy of the cache) and the wheel's pytest suite, in parallel, GPUKIT_REQUIRE_GPU=1;
  # logs under $OUT/logs, then one summary line each
  local GG=$B/tests/gpukit-core.gemm_gpu.test t
  mkdir -p "$OUT/logs"
  for t in $("$GG" --list 2>/dev/null | sed -n 's/: test$//p'); do
    (fresh_cache; GPUKIT_REQUIRE_GPU=1 timeout "$1" "$GG" --exact "$t" > "$OUT/logs/$t.log" 2>&1; echo "$t rc=$?" >> "$OUT/logs/rc.txt") &
  done
  (python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpukit-site "$B"/wheels/*.whl \
    && cd gpukit-python/tests && PYTHONPATH=/tmp/gpukit-site PATH=/tmp/gpukit-site/bin:$PATH GPUKIT_REQUIRE_GPU=1 \
    timeout 120 python3 -m pytest -q -rs -p no:cacheprovider --timeout 100 --hypothesis-seed=0 . > "$OUT/pytest.log" 2>&1) &
  wait
  awk '{print $2}' "$OUT/logs/rc.txt" | sort | uniq -c
  grep -v "rc=0" "$OUT/logs/rc.txt" | head
  cat "$OUT"/logs/*.log | sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' | awk '{p+=$1; f+=$2} END {print "gemm_gpu: " p " passed, " f " failed"}'
  grep -h -A8 "panicked at" "$OUT"/logs/*.log | cut -c1-300 | head -20
  echo "pytest: $(tail -1 "$OUT/pytest.log")"; grep -E "^SKIPPED|^FAILED" "$OUT/pytest.log" | head -5 | cut -c1-200
  echo "== tests done ($(el) s)"
}
configs() { # log limit only shapes
  fresh_cache
  GPUKIT_GEMM_TUNE=off timeout "$2" "$B/examples/gemm_bench" --quick --configs --only "$3" \
    --plan-has pers --shapes "$4" > "$1" 2>&1
  echo "  rc $?"
  grep -E "^config|^\| [0-9]" "$1" | cut -c1-170 | head -80
}
all_tests() { # limit
  OUT=$OUT/tests timeout "$1" bash "$(dirname "${BASH_SOURCE[0]}")/final_tests.sh" > "$OUT/final_tests.log" 2>&1
  echo "== final_tests rc $? ($(el) s)"
  tail -n 45 "$OUT/final_tests.log" | cut -c1-220
  (cd "$OUT/tests" && tar cJf ../tests_logs.tar.xz logs 2> /dev/null)
}
full_bench() { # limit
  fresh_cache
  echo "== gemm_bench ($(el) s)"
  OUT=$OUT timeout "$1" "$B/examples/gemm_bench" > "$OUT/gemm_bench.log" 2>&1
  echo "  rc $?"
  grep -E "^\| (2500x2500x500|8x 768|4096x4096x4096 \||8192x8192x8192 \||4096x4096x256 \|)" "$OUT/gemm_bench.log" | cut -c1-250
  grep -E "^lowest ratio|^targets|^autotuner: [0-9]" "$OUT/gemm_bench.log" | cut -c1-400
  (cd "$GPUKIT_CACHE_DIR" && find . -path '*gemm-tuning*' -type f | tar cJf "$OUT/tuning.tar.xz" -T - 2> /dev/null)
}
gemm_tests_matching() { # regex limit
  local GG=$B/tests/gpukit-core.gemm_gpu.test t
  for t in $("$GG" --list 2>/dev/null | sed -n 's/: test$//p' | grep -E "$1"); do
    (fresh_cache; GPUKIT_REQUIRE_GPU=1 timeout "$2" "$GG" --exact "$t" > "$OUT/$t.log" 2>&1; echo "$t rc=$? $(grep '^test result' "$OUT/$t.log")") &
  done
  wait
  echo "== tests done ($(el) s)"
}
core_vs_torch() {
  local here
  here=$(dirname "${BASH_SOURCE[0]}")
  echo "== core_bench beside torch ($(el) s)"
  fresh_cache
  CORE_BENCH_TSV="$OUT/gpukit.tsv" timeout 90 "$B/examples/core_bench" > "$OUT/core_bench.log" 2>&1; echo "core_bench rc=$?"
  timeout 40 python3 "$here/core_torch.py" "$OUT/torch.tsv" > "$OUT/torch.log" 2>&1; echo "torch rc=$?"
  python3 "$here/core_join.py" "$OUT/gpukit.tsv" "$OUT/torch.tsv" > "$OUT/core_table.md" 2> "$OUT/join.err"
  grep -iE "operator|fused|target" "$OUT/core_bench.log" | head -30
}
