#!/usr/bin/env bash
# Small-matrix overhead: PAIRS alternating runs of small_matrices.py plainly and under the shim
# (ITERS each); prints every pair and the median of the per-pair ratios. Usage: small_matrices_alt.sh OFFLOAD_BIN OUTDIR
set -u
OFF=$1; O=$2; P=${PAIRS:-7}; S=$(dirname "$0")
: > "$O/small_plain.log"; : > "$O/small_shim.log"
for i in $(seq "$P"); do
  python3 "$S/small_matrices.py" >> "$O/small_plain.log" 2>&1
  "$OFF" run python3 "$S/small_matrices.py" >> "$O/small_shim.log" 2>&1
done
python3 - "$O" <<'PY'
import re, sys, statistics as st
o = sys.argv[1]
def ts(f): return [float(x) for x in re.findall(r"time=([0-9.]+)s", open(f"{o}/{f}").read())]
def hashes(f): return set(re.findall(r"hash: (\w+)", open(f"{o}/{f}").read()))
p, s = ts("small_plain.log"), ts("small_shim.log")
r = [b / a - 1 for a, b in zip(p, s)]
print("small matrices pairs (plain, shim): " + " ".join(f"({a:.3f},{b:.3f})" for a, b in zip(p, s)))
print(f"small matrices: median plain {st.median(p):.3f}s, median shim {st.median(s):.3f}s, "
      f"median pair overhead {st.median(r)*100:+.2f}%, min/min {(min(s)/min(p)-1)*100:+.2f}%, "
      f"identical={hashes('small_plain.log')==hashes('small_shim.log')} pairs={len(r)}")
PY
