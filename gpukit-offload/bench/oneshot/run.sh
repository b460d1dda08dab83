#!/usr/bin/env bash
# One-shot programs, each run three times, each run the first of a fresh process:
#   1. plain                                  (the baseline)
#   2. under the shim, GPUKIT_OFFLOAD_GPU=off (with GPUKIT_OFFLOAD_LOG=calls, so that every call
#                                              is timed: the summary's timed= over the wall time
#                                              is the intercepted share, the Amdahl bound)
#   3. under the shim (`offload run`)         (what a user gets)
# and prints wall times, per-section times, the checksums (which must match plain's) and the
# shim's per-routine summary. Run from the repository root on the GPU host:
#
#   BUNDLE=.gpu-bundle bash gpukit-offload/bench/oneshot/run.sh [numpy] [sklearn] [statsmodels]
#
# BUNDLE: a folder made by /work/shared/gpu/pack with examples/offload and
#   examples/liboffload_preload.so (default .gpu-bundle). PYTHON (default python3).
# STEP_TIMEOUT: seconds per run (default 300). OUT: logs (default /tmp/oneshot-out).
# SHIM_LOG: GPUKIT_OFFLOAD_LOG of run 3 (default summary; `calls` logs every call).
# SMOKE=1: small sizes (ONESHOT_N=400, ONESHOT_SCALE=0.05, one BLAS thread) to test this runner;
#   without a bundle only the plain runs are made. The default workload is never changed.
# Expected duration on the H200 host: 3-6 minutes for the three programs x three runs (an
# estimate, not measured there; on the 2-core build VM under load the plain runs alone took
# 312 s (numpy), 647 s (sklearn), 698 s (statsmodels), peak RSS 2.4 / 1.9 / 1.6 GB).
# Exit status: 0 when every run finished and every checksum matched plain's, 1 otherwise.
set -u
here=$(cd "$(dirname "$0")" && pwd)
B=${BUNDLE:-.gpu-bundle}
OFFLOAD=$B/examples/offload
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/oneshot-out}
T=${STEP_TIMEOUT:-300}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GPUKIT_OFFLOAD_PERSIST=0
if [ "${SMOKE:-0}" = 1 ]; then
  export ONESHOT_N=${ONESHOT_N:-400} ONESHOT_SCALE=${ONESHOT_SCALE:-0.05}
  export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
fi
progs=("$@")
[ ${#progs[@]} -eq 0 ] && progs=(numpy sklearn statsmodels)
shim=1
if [ ! -x "$OFFLOAD" ] || [ ! -f "$B/examples/liboffload_preload.so" ]; then
  if [ "${SMOKE:-0}" = 1 ]; then
    echo "oneshot: no shim in $B (smoke mode): plain runs only"
    shim=0
  else
    echo "oneshot: $OFFLOAD or $B/examples/liboffload_preload.so missing (set BUNDLE)" >&2
    exit 1
  fi
fi

script_of() {
  case "$1" in
    numpy) echo "$here/numpy_oneshot.py" ;;
    sklearn) echo "$here/sklearn_pipeline.py" ;;
    decomp) echo "$here/sklearn_decompositions.py" ;;
    statsmodels) echo "$here/statsmodels_fits.py" ;;
    *) echo "oneshot: unknown program $1 (numpy, sklearn, decomp, statsmodels)" >&2; return 1 ;;
  esac
}

# step NAME LOG CMD...: one timed run; writes "wall=S rc=N" as the log's last line
step() {
  local name=$1 log=$2; shift 2
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout "$T" "$@" > "$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  echo "runner: wall=$(awk "BEGIN { printf \"%.3f\", $t1 - $t0 }") rc=$rc" >> "$log"
  echo "  $name: $(tail -1 "$log" | sed 's/^runner: //')"
}

status=0
for p in "${progs[@]}"; do
  s=$(script_of "$p") || { status=1; continue; }
  echo "== $p ($(basename "$s"))"
  step plain "$OUT/$p.plain.log" "$PY" "$s"
  if [ $shim = 1 ]; then
    # LOG=calls: every call is timed (the summary alone samples the small ones)
    GPUKIT_OFFLOAD_GPU=off GPUKIT_OFFLOAD_LOG=calls step "shim gpu=off" "$OUT/$p.off.log" "$OFFLOAD" run "$PY" "$s"
    GPUKIT_OFFLOAD_LOG=${SHIM_LOG:-summary} step "shim" "$OUT/$p.shim.log" "$OFFLOAD" run "$PY" "$s"
  fi
  "$PY" - "$OUT" "$p" <<'PY' || status=1
import re, sys
out, prog = sys.argv[1], sys.argv[2]
runs = {}
for kind in ("plain", "off", "shim"):
    try:
        text = open(f"{out}/{prog}.{kind}.log").read()
    except FileNotFoundError:
        continue
    m = re.search(r"runner: wall=([0-9.]+) rc=(\d+)", text)
    runs[kind] = {
        "wall": float(m.group(1)) if m else float("nan"),
        "rc": int(m.group(2)) if m else -1,
        "sections": dict((k, float(v)) for k, v in re.findall(r"^section (\S+) ([0-9.]+)s$", text, re.M)),
        "checksums": dict(re.findall(r"^checksum (\S+) (\S+)$", text, re.M)),
        "timed": sum(float(x) for x in re.findall(r"^gpukit-offload: \S+ calls=.* timed=([0-9.]+)s", text, re.M)),
        "routines": re.findall(r"^gpukit-offload: \S+ calls=.*$", text, re.M),
        "notes": re.findall(r"^gpukit-offload: (?!\S+ calls=).*$", text, re.M),
    }
ok = all(r["rc"] == 0 for r in runs.values())
plain = runs.get("plain")
print(f"  {'run':<14}{'wall s':>9}{'vs plain':>10}")
for kind, label in (("plain", "plain"), ("off", "shim gpu=off"), ("shim", "offload run")):
    if kind in runs:
        r = runs[kind]
        ratio = plain["wall"] / r["wall"] if plain and r["wall"] else float("nan")
        print(f"  {label:<14}{r['wall']:>9.2f}{ratio:>9.2f}x  rc={r['rc']}")
if "off" in runs:
    off = runs["off"]
    share = off["timed"] / off["wall"] if off["wall"] else float("nan")
    bound = 1 / (1 - share) if share < 1 else float("inf")
    print(f"  intercepted share (gpu=off): {share * 100:.1f}% ({off['timed']:.2f}s of {off['wall']:.2f}s); "
          f"Amdahl bound with intercepted calls free: {bound:.2f}x")
names = list(plain["sections"]) if plain else []
if names:
    print(f"  {'section':<20}" + "".join(f"{k:>12}" for k in runs) + f"{'shim/plain':>12}")
    for name in names:
        row = "".join(f"{runs[k]['sections'].get(name, float('nan')):>12.3f}" for k in runs)
        ratio = ""
        if "shim" in runs and plain["sections"].get(name):
            ratio = f"{runs['shim']['sections'].get(name, float('nan')) / plain['sections'][name]:>12.2f}"
        print(f"  {name:<20}{row}{ratio}")
mismatch = []
if plain:
    for kind in ("off", "shim"):
        if kind in runs:
            for k, v in plain["checksums"].items():
                if runs[kind]["checksums"].get(k) != v:
                    mismatch.append(f"{kind}:{k} plain={v} got={runs[kind]['checksums'].get(k)}")
    print(f"  checksums: {len(plain['checksums'])} in plain, "
          + ("all match" if not mismatch else f"{len(mismatch)} MISMATCH: " + "; ".join(mismatch)))
for line in runs.get("shim", {}).get("notes", []):
    print(f"  shim: {line}")
for line in runs.get("shim", {}).get("routines", []):
    print(f"  shim: {line}")
sys.exit(0 if ok and not mismatch and plain else 1)
PY
done
echo "oneshot: logs in $OUT; status $status"
exit $status
