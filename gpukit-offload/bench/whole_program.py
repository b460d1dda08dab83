"""Whole-program benchmark for gpukit-offload: realistic numpy linear algebra at n = 6000.

Least squares (normal equations: syrk + gesv), Gaussian-process style kernel + cholesky + solves
(potrf, gesv with 200 right-hand sides), PCA (syrk, eigh -> syevd, thin svd -> gesdd), float32
products (sgemm) and a rectangular float64 product (dgemm 3000x3000x6000). Part of the
time is outside BLAS/LAPACK (random numbers, the kernel's exp, broadcasting): the data are
generated once and the linear algebra is repeated over a hyper-parameter sweep, as in model
fitting.

Run plainly, then under the shim (`offload run python3 whole_program.py`); prints the wall time
and a checksum of the results (numerical, not bitwise: the GPU rounds differently).
Environment: N (default 6000), REPS (default 6)."""
import os, time
import numpy as np

n = int(os.environ.get("N", 6000))
reps = int(os.environ.get("REPS", 6))
rng = np.random.default_rng(0)
sections = {}


def sec(name, f):
    t = time.perf_counter()
    r = f()
    sections[name] = sections.get(name, 0.0) + time.perf_counter() - t
    return r


t0 = time.perf_counter()
# data: generated once (a model-fitting loop reuses its data)
X = rng.standard_normal((n, n // 2))
y = rng.standard_normal(n)
P = rng.standard_normal((n, 20))
sq = (P * P).sum(1)
K0 = sec("setup", lambda: np.exp(-(sq[:, None] + sq[None, :] - 2.0 * (P @ P.T)) / 40.0))
Y = rng.standard_normal((n, 200))
A32 = rng.standard_normal((n, n), dtype=np.float32)
B32 = rng.standard_normal((n, n), dtype=np.float32)
R = rng.standard_normal((n, n // 2))
Xc = X[:, : n // 3] - X[:, : n // 3].mean(0)
check = []
for r in range(reps):
    lam = 10.0 ** (-3 + r)  # a hyper-parameter sweep: every repetition refits
    # least squares via the normal equations (ridge)
    G = sec("lstsq", lambda: X.T @ X + lam * np.eye(n // 2))
    beta = sec("lstsq", lambda: np.linalg.solve(G, X.T @ y))
    # Gaussian process: kernel + noise, cholesky, solves
    K = K0 + (0.1 + lam) * np.eye(n)
    L = sec("gp", lambda: np.linalg.cholesky(K))
    alpha = sec("gp", lambda: np.linalg.solve(K, Y))
    # PCA
    C = sec("pca", lambda: Xc.T @ Xc / n + lam * np.eye(n // 3))
    w, V = sec("pca", lambda: np.linalg.eigh(C))
    U, s, Vt = sec("pca", lambda: np.linalg.svd(Xc * (1.0 + lam), full_matrices=False))
    # float32 products and a rectangular float64 product
    Z = sec("f32", lambda: A32 @ (B32 * np.float32(1.0 + lam)))
    W = sec("gemm", lambda: X.T @ (R * (1.0 + lam)))
    check.append([float(np.abs(beta).sum()), float(np.abs(L).sum()), float(np.abs(alpha).sum()),
                  float(w.sum()), float(s.sum()), float(np.abs(Z).sum()), float(np.abs(W).sum())])
total = time.perf_counter() - t0
c = np.array(check).sum(0)
print("sections: " + " ".join(f"{k}={v:.2f}s" for k, v in sections.items()))
print("checksum: " + " ".join(f"{x:.6e}" for x in c))
print(f"whole_program n={n} reps={reps} time={total:.2f}s")
