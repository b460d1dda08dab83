"""scikit-learn with n_jobs: a cross-validated kernel ridge regression and a grid search over a
PCA + ridge pipeline, each with five worker processes (joblib's default loky backend), as a
user writes it. Prints the wall time, the scores and a checksum."""
import hashlib
import os
import time

import numpy as np
from sklearn.decomposition import PCA
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline

SCALE = float(os.environ.get("NJOBS_SCALE", "1"))
JOBS = int(os.environ.get("NJOBS", "5"))


def main():
    t0 = time.perf_counter()
    rng = np.random.default_rng(11)
    n, d = int(6000 * SCALE), 60
    X = rng.standard_normal((n, d))
    y = np.sin(X[:, 0]) + 0.1 * X[:, 1] ** 2 + 0.05 * rng.standard_normal(n)
    t = time.perf_counter()
    kr = cross_val_score(KernelRidge(kernel="rbf", alpha=1e-2, gamma=0.05), X, y, cv=5, n_jobs=JOBS)
    print(f"section kernel_ridge {time.perf_counter() - t:.3f}")
    m = int(8000 * SCALE)
    Z = rng.standard_normal((m, 800)) @ rng.standard_normal((800, 800))
    z = Z[:, :5].sum(axis=1) + rng.standard_normal(m)
    t = time.perf_counter()
    grid = GridSearchCV(
        make_pipeline(PCA(n_components=100, svd_solver="full"), Ridge()),
        {"ridge__alpha": [0.1, 1.0, 10.0]},
        cv=3,
        n_jobs=JOBS,
    ).fit(Z, z)
    print(f"section pca_ridge_grid {time.perf_counter() - t:.3f}")
    h = hashlib.sha256(f"{np.round(kr, 6).tolist()}:{grid.best_score_:.6f}".encode())
    print(f"scores kernel_ridge {np.mean(kr):.4f} grid {grid.best_score_:.4f}")
    print(f"checksum {h.hexdigest()[:16]}")
    print(f"wall {time.perf_counter() - t0:.3f}")


if __name__ == "__main__":
    main()
