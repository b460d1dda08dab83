# Sourced by the GPU-host session scripts: `one NAME MODE EVICT COMMAND...` runs a program once
# as MODE (plain; base: wave 2's `offload run` from $BASE; now*: this bundle's `offload run`;
# forced*: the same with every call on the GPU), EVICT=1 first drops the CUDA libraries from the
# page cache, and prints one line: exit status, process seconds, the program's wall / section
# lines, a checksum digest, the calls that ran on the CPU while the GPU started. Logs under $OUT.
# Needs: B, BASE, OUT, here.
one() { # name mode evict command...
  local name=$1 m=$2 ev=$3; shift 3
  local log=$OUT/$name.$m.log t0 t1 rc
  [ "$ev" = 1 ] && python3 "$here/evict_cuda_libs.py" 2> /dev/null
  t0=$(date +%s.%N)
  case $m in
    plain) timeout 90 "$@" > "$log" 2>&1 ;;
    base) GPUKIT_OFFLOAD_LOG=summary timeout 90 "$BASE/offload" run "$@" > "$log" 2>&1 ;;
    now*) GPUKIT_OFFLOAD_LOG=summary timeout 90 "$B/examples/offload" run "$@" > "$log" 2>&1 ;;
    forced*) GPUKIT_OFFLOAD_GPU=always GPUKIT_OFFLOAD_LOG=summary timeout 90 "$B/examples/offload" run "$@" > "$log" 2>&1 ;;
  esac
  rc=$?; t1=$(date +%s.%N)
  echo "  $name $m: rc $rc $(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }") s; $(grep -E '^wall|^section' "$log" | head -4 | sed 's/^section //' | tr '\n' ' ')ck $(grep -E '^checksum' "$log" | md5sum | cut -c1-6) cpu-starting $(grep -ho 'gpu-starting:[0-9]*' "$log" | awk -F: '{s += $2} END {print s + 0}')"
}
