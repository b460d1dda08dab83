"""A service-like program: a pool of four worker threads serving requests, each request a
large linear solve, a Cholesky factor, symmetric eigenvalues or a float32 product, all four
kinds in flight at the same time. Prints the wall time and a checksum."""
import hashlib
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

SCALE = float(os.environ.get("POOL_SCALE", "1"))
N_SOLVE = int(3000 * SCALE)
N_CHOL = int(4000 * SCALE)
N_EIG = int(1500 * SCALE)
N_MUL = int(4096 * SCALE)
REQUESTS = int(os.environ.get("POOL_REQUESTS", "24"))


def make(kind, seed):
    rng = np.random.default_rng(seed)
    if kind == "solve":
        a = rng.standard_normal((N_SOLVE, N_SOLVE)) + N_SOLVE * np.eye(N_SOLVE)
        return a, rng.standard_normal((N_SOLVE, 64))
    if kind == "chol":
        g = rng.standard_normal((N_CHOL, N_CHOL // 8))
        return g @ g.T + N_CHOL * np.eye(N_CHOL), None
    if kind == "eigh":
        g = rng.standard_normal((N_EIG, N_EIG))
        return (g + g.T) / 2, None
    a = rng.standard_normal((N_MUL, N_MUL)).astype(np.float32)
    return a, rng.standard_normal((N_MUL, N_MUL)).astype(np.float32)


def serve(request):
    kind, seed = request
    a, b = make(kind, seed)
    t = time.perf_counter()
    if kind == "solve":
        x = np.linalg.solve(a, b)
        out = float(np.abs(a @ x - b).max())
    elif kind == "chol":
        l = np.linalg.cholesky(a)
        out = float(np.log(np.diag(l)).sum())
    elif kind == "eigh":
        w, v = np.linalg.eigh(a)
        out = float(w.sum() + np.abs(v[:, 0]).sum())
    else:
        out = float((a @ b).astype(np.float64).sum())
    return kind, out, time.perf_counter() - t


def main():
    kinds = ["solve", "chol", "eigh", "mul"]
    requests = [(kinds[i % 4], i) for i in range(REQUESTS)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(serve, requests))
    wall = time.perf_counter() - t0
    per = {}
    for kind, _, dt in results:
        per[kind] = per.get(kind, 0.0) + dt
    h = hashlib.sha256()
    for kind, out, _ in results:
        h.update(f"{kind}:{out:.6e}".encode())
    for kind in kinds:
        print(f"section {kind} {per.get(kind, 0.0):.3f}")
    print(f"checksum {h.hexdigest()[:16]}")
    print(f"wall {wall:.3f}")


if __name__ == "__main__":
    sys.exit(main())
