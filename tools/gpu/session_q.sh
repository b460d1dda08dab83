#!/usr/bin/env bash
# 2026-12-06, seventh session, call 4: `offload run` shares the GPU among the program's
# processes through an MPS daemon of its own (gpukit-offload `share`), on the GPU host:
#   1. the offload shim tests (GPUKIT_REQUIRE_GPU=1; the process-tree tests now run under the
#      daemon, and `the_program_tree_runs_on_one_mps_server_on_the_gpu`);
#   2. numpy.linalg's suite forced under 8 workers through `offload run`, as users run it;
#   3. the programs plain, under `offload run` with the daemon (auto) and without
#      (GPUKIT_OFFLOAD_SHARE=off): the thread pool (forced beside), the n_jobs and short-process
#      trees, the one-shot numpy program;
#   4. the one-shot numpy program plain / `offload run` beside another process that keeps the
#      GPU busy (bench/issue22/gpu_hog.py, torch).
# Never ran in the seventh session (a failed start left too little device time); about 4 minutes.
#   tar xJf .gpu-bundle.tar.xz && B=.gpu-bundle OUT=$OUT bash tools/gpu/session_q.sh
set -u
OUT=${OUT:-/tmp/session-q}
. "$(dirname "$0")/session_common.sh"
echo "mps control: $(command -v nvidia-cuda-mps-control || echo none)"
echo "== 1. shim tests (t=$((SECONDS - T0)))"
GPUKIT_REQUIRE_GPU=1 timeout 120 "$B/tests/main.offload_shim.test" --test-threads=1 > "$OUT/shim.log" 2>&1
echo "  rc=$? $(grep -E '^test result' "$OUT/shim.log" | tail -1)"
grep -E "^test .* (FAILED|ok)$|SKIPPED" "$OUT/shim.log" | grep -E "FAILED|SKIPPED|mps|tree|spawn|shell" | head -12
echo "== 2. numpy.linalg forced under 8 workers through offload run (t=$((SECONDS - T0)))"
RUNNER=offload B=$B OUT=$OUT/numpy BUDGET=110 bash "$here/numpy_diag.sh" 2>&1 | grep -E "^forced|passed|failed|^ +[0-9.]+ s " | head -12
echo "== 3. programs: plain / offload run with the daemon / without (GPUKIT_OFFLOAD_SHARE=off) (t=$((SECONDS - T0)))"
for p in pool njobs short numpy_oneshot; do
  case $p in pool) cmd=(python3 $I22/service_pool.py) ;; njobs) cmd=(python3 $I22/sklearn_njobs.py) ;; short) cmd=(bash $I22/short_processes.sh) ;; *) cmd=(python3 $ONE/$p.py) ;; esac
  one $p plain 0 "${cmd[@]}"; one $p now 0 "${cmd[@]}"; GPUKIT_OFFLOAD_SHARE=off one $p now-noshare 0 "${cmd[@]}"
  [ $p = pool ] && one $p forced 0 "${cmd[@]}"
done
grep -c "worker stopped" "$OUT"/njobs.*.log
echo "== 4. beside another process that keeps the GPU busy (torch products): plain / offload run (t=$((SECONDS - T0)))"
timeout 60 python3 $I22/gpu_hog.py 28 > "$OUT/hog.log" 2>&1 & hog=$!
sleep 4
one numpy_oneshot now-hog 0 python3 $ONE/numpy_oneshot.py; one numpy_oneshot plain-hog 0 python3 $ONE/numpy_oneshot.py
wait $hog; tail -2 "$OUT/hog.log"
tar cJf "$OUT/logs.tar.xz" -C "$OUT" --exclude=logs.tar.xz . 2> /dev/null
echo "total $((SECONDS - T0)) s"
