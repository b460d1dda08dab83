"""A one-shot scikit-learn + scipy.linalg pipeline, written the way such a pipeline is written:
scale the data, reduce it, fit a few models, then some dense linear algebra on a Gram matrix.

Sizes 2000-20000: StandardScaler and PCA(svd_solver="full") on 20000 x 2000, Ridge with the
Cholesky solver, LinearRegression (scipy's lstsq), a GaussianProcessRegressor fitted on 2000
points (its default optimizer), then scipy.linalg on a 4000 x 4000 Gram matrix: eigh (default
driver), solve(assume_a="pos"), cholesky + solve_triangular, inv, qr, lstsq. Prints each
section's wall time and checksums of the results (sign-independent quantities, 6 significant
digits; 4 for the Gaussian process, whose optimizer stops at a tolerance).

Left as written; ONESHOT_SCALE exists only for the runner's smoke test (bench/oneshot/run.sh).
"""
import os
import time

import numpy as np
import scipy.linalg as sla
from sklearn.decomposition import PCA
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, WhiteKernel
from sklearn.linear_model import LinearRegression, Ridge
from sklearn.preprocessing import StandardScaler

scale = float(os.environ.get("ONESHOT_SCALE", 1.0))


def size(x):
    return max(16, int(x * scale))


start = time.perf_counter()
rng = np.random.default_rng(11)


class section:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.t = time.perf_counter()

    def __exit__(self, *exc):
        print(f"section {self.name} {time.perf_counter() - self.t:.3f}s", flush=True)


def checksum(name, value, digits=6):
    print(f"checksum {name} {value:.{digits - 1}e}", flush=True)


n_samples, n_features = size(20000), size(2000)

with section("data"):
    latent = rng.standard_normal((n_samples, 50))
    mixing = rng.standard_normal((50, n_features))
    X = latent @ mixing + 0.5 * rng.standard_normal((n_samples, n_features))
    y = X[:, :10].sum(axis=1) + rng.standard_normal(n_samples)

with section("scale"):
    Xs = StandardScaler().fit_transform(X)

with section("pca"):
    pca = PCA(n_components=100, svd_solver="full").fit(Xs)
    Xp = pca.transform(Xs)
    checksum("pca.explained", pca.explained_variance_ratio_.sum())
    checksum("pca.scores", np.abs(Xp).sum())

with section("ridge"):
    ridge = Ridge(alpha=10.0, solver="cholesky").fit(Xs, y)
    checksum("ridge.coef", np.abs(ridge.coef_).sum())

with section("linear_regression"):
    lr = LinearRegression().fit(Xs[:, : n_features // 2], y)
    checksum("linreg.coef", np.abs(lr.coef_).sum())

with section("gaussian_process"):
    idx = rng.choice(n_samples, size(2000), replace=False)
    kernel = 1.0 * RBF(length_scale=1.0) + WhiteKernel(noise_level=0.1)
    gpr = GaussianProcessRegressor(kernel=kernel, normalize_y=True, random_state=0)
    gpr.fit(Xp[idx, :5], y[idx])
    mean, std = gpr.predict(Xp[: size(4000), :5], return_std=True)
    checksum("gp.mean", np.abs(mean).sum(), 4)
    checksum("gp.std", std.sum(), 4)

with section("scipy_linalg"):
    m = size(4000)
    G = Xs[:m] @ Xs[:m].T / n_features + 0.1 * np.eye(m)
    b = rng.standard_normal((m, 20))
    w, V = sla.eigh(G)
    checksum("eigh.values", w.sum())
    checksum("eigh.top_vectors", np.abs(V[:, -20:]).sum())
    x = sla.solve(G, b, assume_a="pos")
    checksum("solve_pos", np.abs(x).sum())
    L = sla.cholesky(G, lower=True)
    z = sla.solve_triangular(L, b, lower=True)
    checksum("solve_triangular", np.abs(z).sum())
    Ginv = sla.inv(G)
    checksum("inv", np.abs(Ginv).sum())
    Q, R = sla.qr(Xs[:, : n_features // 2], mode="economic")
    checksum("qr.R", np.abs(R).sum())
    coef, res, rank, sv = sla.lstsq(Xs[:m, : n_features // 2], y[:m])
    checksum("lstsq.coef", np.abs(coef).sum())

print(f"oneshot sklearn n_samples={n_samples} wall={time.perf_counter() - start:.3f}s", flush=True)
