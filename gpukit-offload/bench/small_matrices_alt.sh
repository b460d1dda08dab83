#!/usr/bin/env bash
# Small-matrix overhead of the shim, decided at 2 %: PAIRS alternating runs of small_matrices.py
# plainly and under the shim, both pinned to the same cores (taskset -c CORES, default one CPU, 5: no migration between CPUs) with
# the same OPENBLAS_NUM_THREADS (default 1: these calls are single-threaded in OpenBLAS anyway,
# and idle worker threads only add noise); the order inside a pair alternates (plain first, then
# shim first) so that drift cancels. Each run reports the fastest of REPEAT loops of ITERS
# iterations. Prints every pair, the median of the per-pair ratios with a bootstrap 95 %
# interval, min/min, whether the results are bit-identical, and the verdict against +2 %.
# Usage: small_matrices_alt.sh OFFLOAD_BIN OUTDIR   (about PAIRS * 2 * (0.25 + ITERS*REPEAT*35us) s)
set -u
OFF=$1; O=$2; P=${PAIRS:-100}; S=$(dirname "$0")
CORES=${SMALL_CORES:-5}
export OPENBLAS_NUM_THREADS=${SMALL_THREADS:-1} ITERS=${ITERS:-3000} REPEAT=${REPEAT:-5}
PIN=""; command -v taskset >/dev/null && taskset -c "$CORES" true 2>/dev/null && PIN="taskset -c $CORES"
: > "$O/small_plain.log"; : > "$O/small_shim.log"
plain() { $PIN python3 "$S/small_matrices.py" >> "$O/small_plain.log" 2>&1; }
shim() { $PIN "$OFF" run python3 "$S/small_matrices.py" >> "$O/small_shim.log" 2>&1; }
plain; shim  # warm-up pair (page cache, CPU frequency), not counted
: > "$O/small_plain.log"; : > "$O/small_shim.log"
for i in $(seq "$P"); do
  if [ $((i % 2)) = 1 ]; then plain; shim; else shim; plain; fi
done
python3 - "$O" "${PIN:-no pinning}" <<'PY'
import random, re, sys, statistics as st
o, pin = sys.argv[1], sys.argv[2]
def ts(f): return [float(x) for x in re.findall(r"time=([0-9.]+)s", open(f"{o}/{f}").read())]
def hashes(f): return set(re.findall(r"hash: (\w+)", open(f"{o}/{f}").read()))
p, s = ts("small_plain.log"), ts("small_shim.log")
r = [b / a - 1 for a, b in zip(p, s)]
random.seed(0)
boot = sorted(st.median(random.choices(r, k=len(r))) for _ in range(2000))
lo, hi = boot[50], boot[1949]
med = st.median(r)
print("small matrices pairs (plain, shim): " + " ".join(f"({a:.3f},{b:.3f})" for a, b in zip(p, s)))
print(f"small matrices ({pin}, OPENBLAS_NUM_THREADS set): median plain {st.median(p):.4f}s, median shim {st.median(s):.4f}s, "
      f"median pair overhead {med*100:+.2f}% (95% bootstrap {lo*100:+.2f}% .. {hi*100:+.2f}%), "
      f"min/min {(min(s)/min(p)-1)*100:+.2f}%, identical={hashes('small_plain.log')==hashes('small_shim.log')} pairs={len(r)}")
verdict = "within 2 %" if hi < 0.02 else ("over 2 %" if lo > 0.02 else "undecided at 2 %")
print(f"small matrices verdict: {verdict}")
PY
