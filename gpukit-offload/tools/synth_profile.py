"""Writes a synthetic offload profile (rates from the H200 host anchors in BRIEF.md) used as the
embedded default until a calibrated profile replaces it. Usage: python3 synth_profile.py OUT.json"""
import json, sys

def flops(op, vec, p, m, n, k):
    mn, mx = min(m, n), max(m, n)
    f = {
        "gemm": 2*m*n*k, "symm": 2*m*n*k, "syrk": n*n*k, "trsm": m*n*k,
        "getrf": m*n*mn - (m+n)*mn*mn/2 + 2*mn**3/3, "getrs": 2*n*n*k,
        "gesv": 2*n**3/3 + 2*n*n*k, "potrf": n**3/3, "potrs": 2*n*n*k, "posv": n**3/3 + 2*n*n*k,
        "syevd": 4*n**3 if vec else 4*n**3/3,
        "gesdd": (4*mx*mn*mn + 8*mn**3) if vec else (4*mx*mn*mn - 4*mn**3/3),
        "geqrf": 2*mx*mn*mn - 2*mn**3/3,
    }
    f["gesvd"] = f["gesdd"]
    return max(f[op], 1) * (4 if p in "cz" else 1)

def canon(op, x1, x2):
    if op == "gemm": return x1, x1, x2
    if op == "syrk": return 1, x1, x2
    if op in ("trsm", "symm"): return x1, x2, x1
    if op in ("getrs", "gesv", "potrs", "posv"): return 1, x1, x2
    if op in ("potrf", "syevd"): return 1, x1, 1
    return x1 * x2, x1, 1

# (cpu peak GF/s f64, cpu half size, gpu peak GF/s f64, gpu half size)
RATES = {
    "gemm": (900, 200, 55000, 1500), "symm": (800, 200, 40000, 1500), "syrk": (800, 200, 45000, 1500),
    "trsm": (700, 300, 30000, 2000), "getrf": (500, 600, 20000, 3000), "getrs": (300, 300, 8000, 3000),
    "gesv": (450, 600, 15000, 3000), "potrf": (250, 600, 25000, 2500), "potrs": (300, 300, 8000, 3000),
    "posv": (250, 600, 20000, 2500), "syevd": (60, 300, 1800, 2500), "syevd+v": (90, 400, 2000, 2500),
    "gesdd": (60, 400, 300, 3000), "gesdd+v": (130, 400, 600, 3000), "gesvd": (40, 400, 300, 3000),
    "gesvd+v": (50, 400, 500, 3000), "geqrf": (300, 500, 12000, 3000),
}
KINDS = list(RATES)
curves = []
for key in KINDS:
    op, vec = key.split("+")[0], key.endswith("+v")
    for p in "sdcz":
        x1 = [64, 128, 256, 512, 1024, 2048, 4096, 8192]
        if op in ("potrf", "syevd"): x2 = [1]
        elif op in ("getrf", "geqrf", "gesdd", "gesvd"): x2 = [1, 2, 4]
        elif op in ("getrs", "gesv", "potrs", "posv"): x2 = [1, 16, 128, 1024, 4096]
        else: x2 = [16, 128, 512, 2048, 8192]
        cpeak, chalf, gpeak, ghalf = RATES[key]
        mult = 2.0 if p in "sc" else 1.0
        for backend, peak, half, lat in (("cpu", cpeak, chalf, 2e-6), ("gpu", gpeak, ghalf, 30e-6)):
            secs = []
            for a in x1:
                for b in x2:
                    m, n, k = canon(op, a, b)
                    s = min(a, 4 * b) if op in ("gemm", "symm", "syrk", "trsm") else a
                    rate = peak * 1e9 * mult * s / (s + half)
                    secs.append(lat + flops(op, vec, p, m, n, k) / rate)
            curves.append({"op": key, "precision": p, "backend": backend, "x1": [float(v) for v in x1],
                           "x2": [float(v) for v in x2], "seconds": secs})
prof = {"version": 1, "machine": {"cpu": "synthetic (BRIEF.md H200 host anchors)", "gpu": "NVIDIA H200 (synthetic)",
        "cpu_library": "numpy scipy_openblas64_"}, "created_unix": 0, "calibration_s": 0.0, "startup_s": 0.3,
        "copy": {"h2d_bytes_per_s": 2.0e10, "d2h_bytes_per_s": 2.0e10, "latency_s": 6e-5},
        "curves": curves, "corrections": {}}
json.dump(prof, open(sys.argv[1], "w"), indent=1)
