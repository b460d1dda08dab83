#!/usr/bin/env bash
# 2026-12-06, tenth session, call 1 (issue 23): why the ping-pong tile with P from registers
# (the MN-major operand of NN products) runs slower at short K than the same tile with both
# operands packed, read from the hardware counters before any change:
#   1. gemm_bench --paired: cuBLAS TF32 and ours in alternating samples (the headline ratios);
#   2. ncu --set full (with per-SASS-line stall sampling) on one persistent launch each at
#      4096x4096x256: wgmma_128x128_pp with P:mn, the same tile packed (and its pack kernel),
#      the cooperative 128x256 swap P:mn Q:tma, and cuBLAS.
#   B=.gpu-bundle OUT=$OUT bash tools/gpu/session_v.sh   (B holds examples/gemm_bench)
set -u
OUT=${OUT:-/tmp/session-v}
. "$(dirname "$0")/session_common.sh"
GB="$B/examples/gemm_bench"
echo "== 1. paired (t=$((SECONDS - T0)))"
timeout 150 "$GB" --quick --paired --shapes "4096,4096,4096;8192,8192,8192;4096,4096,256;8192,2048,256;2500,2500,500" > "$OUT/paired.log" 2>&1
echo "  rc $?"
grep -iE "paired|alternat|^\|" "$OUT/paired.log" | cut -c1-220 | head -40
NCU="ncu --clock-control none"
S=4096,4096,256
prof() { # $1 tag, $2 kernel regex, $3 plan filter
  echo "== 2. ncu $1 (t=$((SECONDS - T0)))"
  GPUKIT_GEMM_TUNE=off timeout 150 $NCU --set full --import-source no --kernel-name-base demangled \
    -k regex:"$2" --launch-skip 2 --launch-count 1 -o "$OUT/$1" -f \
    "$GB" --quick --configs --only wgmma_128x128_pp,wgmma_128x256 --plan-has "$3" --shapes "$S" > "$OUT/$1.run.txt" 2>&1
  echo "  rc $?"
  ncu -i "$OUT/$1.ncu-rep" --page details > "$OUT/$1.txt" 2>&1
  ncu -i "$OUT/$1.ncu-rep" --page source --csv --print-source sass > "$OUT/$1.sass.csv" 2>&1
  grep -E "config |TFLOP" "$OUT/$1.run.txt" | head -5 | cut -c1-160
}
prof pp_mn 'gemm_wgmma<.int.128.*bool.1>' "wgmma_128x128_pp s1 swap P:mn Q:tma pers"
prof pp_packed 'gemm_wgmma<.int.128.*bool.1>' "wgmma_128x128_pp s1 pers"
prof pp_pack_kernel 'gemm_wgmma_pack' "wgmma_128x128_pp s1 pers"
prof coop256_mn 'gemm_wgmma<.int.256' "wgmma_128x256 s1 swap P:mn Q:tma pers"
echo "== 2. ncu cuBLAS (t=$((SECONDS - T0)))"
timeout 150 $NCU --set full -k regex:'nvjet|gemm|xmma|cutlass' --launch-skip 2 --launch-count 1 -o "$OUT/cublas" -f \
  python3 "$here/cublas_kernels.py" "$S" > "$OUT/cublas.run.txt" 2>&1
echo "  rc $?"
ncu -i "$OUT/cublas.ncu-rep" --page details > "$OUT/cublas.txt" 2>&1
for f in pp_mn pp_packed pp_pack_kernel coop256_mn cublas; do
  echo "---- $f"
  grep -E "^  [a-zA-Z_].*\(|Duration|Throughput|L2 Hit|Issue Slots|Executed Ipc|Grid Size|Registers|Stall|DRAM Throughput|Compute \(SM\)|Memory Throughput|SM Frequency|Bank|Tensor|Warp Cycles|Eligible|No Eligible" "$OUT/$f.txt" | cut -c1-150 | head -40
done
python3 - "$OUT" <<'PY'
import csv, sys, os
out = sys.argv[1]
for tag in ("pp_mn", "pp_packed", "coop256_mn"):
    p = os.path.join(out, tag + ".sass.csv")
    try:
        rows = list(csv.reader(open(p)))
    except Exception as e:
        print(tag, "no csv", e); continue
    hdr = None
    for i, r in enumerate(rows):
        if "Source" in r and any("Sampling" in c for c in r):
            hdr = i; break
    if hdr is None:
        print(tag, "no header", rows[:3]); continue
    h = rows[hdr]
    src = h.index("Source")
    samp = [j for j, c in enumerate(h) if c.startswith("Warp Stall Sampling (All")][0]
    data = []
    for r in rows[hdr + 1:]:
        try: data.append((float(r[samp] or 0), r[src]))
        except: pass
    tot = sum(x for x, _ in data) or 1
    print("----", tag, "top SASS lines by stall samples (total %d)" % tot)
    for x, s in sorted(data, reverse=True)[:22]:
        print("  %5.1f%%  %s" % (100 * x / tot, s[:110]))
PY
tar cJf "$OUT/logs.tar.xz" -C "$OUT" --exclude=logs.tar.xz --exclude='*.ncu-rep' . 2> /dev/null
echo "total $((SECONDS - T0)) s"
