#!/usr/bin/env bash
# rss_probe.py plain and with the GPU forced under `offload run`, with how long each process
# took to exit after its last line (issue 22: njobs's workers). B: the bundle.
B=${B:-.gpu-bundle}
for mode in plain forced run; do
  echo "== rss_probe $mode"
  case $mode in
    plain) cmd=(python3 tools/gpu/rss_probe.py) ;;
    forced) cmd=(env GPUKIT_OFFLOAD_GPU=always GPUKIT_OFFLOAD_PERSIST=0 "$B/examples/offload" run python3 tools/gpu/rss_probe.py) ;;
    run) cmd=(env GPUKIT_OFFLOAD_PERSIST=0 "$B/examples/offload" run python3 tools/gpu/rss_probe.py) ;;
  esac
  t0=$(date +%s.%N)
  "${cmd[@]}" > /tmp/rss.$mode.log 2>&1
  t1=$(date +%s.%N)
  grep -v "^end " /tmp/rss.$mode.log | cut -c1-160
  end=$(grep "^end " /tmp/rss.$mode.log | cut -d' ' -f2)
  [ -n "$end" ] && awk "BEGIN { printf \"  process wall %.3f s, exit after the last line %.3f s\n\", $t1 - $t0, $t1 - $end }"
done
