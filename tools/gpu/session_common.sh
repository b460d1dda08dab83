# Sourced first by the GPU-host session scripts (session_n, _p, _q): the bundle (B, default
# .gpu-bundle), wave 2's `offload` (BASE, default .gpu-base), the output folder (OUT, default
# /tmp/session), the program folders (I22, ONE), unbuffered Python, no profile writes, the
# bundle's kernel cache (kcache.sh), the start time T0 and a line naming the host and its GPU.
# Then `one NAME MODE EVICT COMMAND...` runs a program once
# as MODE (plain; base: wave 2's `offload run` from $BASE; now*: this bundle's `offload run`;
# forced*: the same with every call on the GPU), EVICT=1 first drops the CUDA libraries from the
# page cache, and prints one line: exit status, process seconds, the program's wall / section
# lines, a checksum digest, the calls that ran on the CPU while the GPU started. Logs under $OUT.
B=${B:-.gpu-bundle}; BASE=${BASE:-.gpu-base}; OUT=${OUT:-/tmp/session}; mkdir -p "$OUT"
I22=gpukit-offload/bench/issue22; ONE=gpukit-offload/bench/oneshot
here=$(dirname "${BASH_SOURCE[0]}")
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0
. "$here/kcache.sh"
T0=$SECONDS
echo "host $(hostname) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
one() { # name mode evict command...
  local name=$1 m=$2 ev=$3; shift 3
  local log=$OUT/$name.$m.log t0 t1 rc
  [ "$ev" = 1 ] && python3 "$here/evict_cuda_libs.py" 2> /dev/null
  t0=$(date +%s.%N)
  case $m in
    plain*) timeout 90 "$@" > "$log" 2>&1 ;;
    base) GPUKIT_OFFLOAD_LOG=summary timeout 90 "$BASE/offload" run "$@" > "$log" 2>&1 ;;
    now*) GPUKIT_OFFLOAD_LOG=summary timeout 90 "$B/examples/offload" run "$@" > "$log" 2>&1 ;;
    forced*) GPUKIT_OFFLOAD_GPU=always GPUKIT_OFFLOAD_LOG=summary timeout 90 "$B/examples/offload" run "$@" > "$log" 2>&1 ;;
  esac
  rc=$?; t1=$(date +%s.%N)
  echo "  $name $m: rc $rc $(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }") s; $(grep -E '^wall|^section' "$log" | head -4 | sed 's/^section //' | tr '\n' ' ')ck $(grep -E '^checksum' "$log" | md5sum | cut -c1-6) cpu-starting $(grep -ho 'gpu-starting:[0-9]*' "$log" | awk -F: '{s += $2} END {print s + 0}')"
}
