"""A one-shot numpy analysis at n = 6000, written the way such scripts are written: every heavy
linear-algebra call once, in one process, top to bottom.

Least squares, a Gaussian-process style kernel matrix with a Cholesky factor and solves, a
symmetric eigendecomposition, SVDs (numpy's default full_matrices=True, and a thin one for PCA),
float32 products, an inverse and a QR factorization. Prints the time of each section and a
checksum of each result (quantities that do not depend on the signs of singular vectors or
eigenvectors, rounded to 6 significant digits, so that runs on different libraries compare).

Left as written; ONESHOT_N exists only for the runner's smoke test (bench/oneshot/run.sh).
"""
import os
import time

import numpy as np

n = int(os.environ.get("ONESHOT_N", 6000))
start = time.perf_counter()
rng = np.random.default_rng(2026)


class section:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.t = time.perf_counter()

    def __exit__(self, *exc):
        print(f"section {self.name} {time.perf_counter() - self.t:.3f}s", flush=True)


def checksum(name, value):
    print(f"checksum {name} {value:.6e}", flush=True)


with section("data"):
    X = rng.standard_normal((n, n // 2))
    beta = rng.standard_normal(n // 2)
    y = X @ beta + 0.1 * rng.standard_normal(n)

with section("lstsq"):
    coef, residuals, rank, sv = np.linalg.lstsq(X, y, rcond=None)
    checksum("lstsq.coef", np.abs(coef).sum())
    checksum("lstsq.residuals", residuals.sum())
    print(f"checksum lstsq.rank {rank}")

with section("kernel"):
    P = rng.standard_normal((n, 8))
    sq = (P**2).sum(axis=1)
    K = np.exp(-(sq[:, None] + sq[None, :] - 2 * P @ P.T) / 16.0)
    K += 1e-3 * np.eye(n)
    L = np.linalg.cholesky(K)
    Y = rng.standard_normal((n, 100))
    alpha = np.linalg.solve(K, Y)
    logdet = 2 * np.log(np.diag(L)).sum()
    checksum("kernel.cholesky", np.abs(L).sum())
    checksum("kernel.solve", np.abs(alpha).sum())
    checksum("kernel.logdet", logdet)

with section("eigh"):
    C = np.cov(X, rowvar=False)
    w, V = np.linalg.eigh(C)
    checksum("eigh.values", w.sum())
    checksum("eigh.vectors", np.abs(V).sum())

with section("svd"):
    Z = rng.standard_normal((n // 2, n // 6))
    Zc = Z - Z.mean(axis=0)
    U, s, Vt = np.linalg.svd(Zc)
    k = s.size
    checksum("svd.values", s.sum())
    checksum("svd.projection", np.abs(U[:, :k].T @ Zc).sum())
    print(f"checksum svd.U_orthonormal {np.allclose(U.T @ U, np.eye(U.shape[0]), atol=1e-8)}")
    Xc = X[:, : n // 3] - X[:, : n // 3].mean(axis=0)
    U2, s2, Vt2 = np.linalg.svd(Xc, full_matrices=False)
    checksum("pca.values", s2.sum())
    checksum("pca.scores", np.abs(U2[:, :50] * s2[:50]).sum())

with section("float32"):
    A32 = rng.standard_normal((n, n), dtype=np.float32)
    B32 = rng.standard_normal((n, n), dtype=np.float32)
    C32 = A32 @ B32
    checksum("float32.product", float(np.abs(C32).sum(dtype=np.float64)))

with section("inverse"):
    M = rng.standard_normal((n // 2, n // 2)) + (n // 2) ** 0.5 * np.eye(n // 2)
    Minv = np.linalg.inv(M)
    checksum("inverse", np.abs(Minv).sum())

with section("qr"):
    Q, R = np.linalg.qr(X)
    checksum("qr.Q", np.abs(Q).sum())
    checksum("qr.R", np.abs(R).sum())

print(f"oneshot numpy n={n} wall={time.perf_counter() - start:.3f}s", flush=True)
