"""Pairs the per-call lines (GPUKIT_OFFLOAD_LOG=calls) of a CPU-only run and a GPU run of the same
script and reports, per routine, the CPU time, the time of the backend chosen, and every call
slower than the better known alternative by more than 10 %. Usage: compare_calls.py CPU.log GPU.log"""
import re, sys
from collections import defaultdict

pat = re.compile(r"^gpukit-offload: (\w+) (m=\d+ n=\d+ k=\d+) -> (cpu|gpu)(?: \(([\w-]+)\))? ([0-9.]+)s")

def calls(path):
    return [(m.group(1), m.group(2), m.group(3), m.group(4), float(m.group(5)))
            for m in map(pat.match, open(path, errors="replace")) if m]

cpu, gpu = calls(sys.argv[1]), calls(sys.argv[2])
by = defaultdict(list)
for c in cpu:
    by[(c[0], c[1])].append(c[4])
seen = defaultdict(int)
rows = defaultdict(lambda: [0, 0.0, 0.0, 0])
bad = []
for name, shape, be, reason, t in gpu:
    k = (name, shape)
    i = seen[k]; seen[k] += 1
    if i >= len(by[k]):
        continue
    tc = by[k][i]
    r = rows[k]
    r[0] += 1; r[1] += tc; r[2] += t; r[3] += be == "gpu"
    if be == "gpu" and t > 1.1 * tc:
        bad.append(f"{name} {shape}: gpu {t:.4f}s vs cpu {tc:.4f}s")
print(f"{'routine':8} {'shape':28} {'n':>3} {'gpu':>3} {'cpu s':>8} {'chosen s':>9} {'ratio':>6}")
for (name, shape), (n, tc, tg, g) in sorted(rows.items(), key=lambda x: -x[1][1]):
    print(f"{name:8} {shape:28} {n:3d} {g:3d} {tc:8.3f} {tg:9.3f} {tc / max(tg, 1e-9):6.2f}")
print(f"offloaded calls slower than the CPU by > 10 %: {len(bad)}")
for b in bad[:20]:
    print("  " + b)
