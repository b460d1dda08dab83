"""A one-shot scikit-learn study of a wide data set, written the way such a study is written:
standardise 20000 samples of 3000 features, look at the spectrum with a full PCA, fit a linear
discriminant analysis (SVD solver), a kernel ridge regression with an RBF kernel on 8000
samples, and an empirical covariance with its precision matrix. Prints each section's wall time
and checksums of the results (sign-independent quantities, 6 significant digits).

Left as written; ONESHOT_SCALE exists only for the runner's smoke test (bench/oneshot/run.sh).
"""
import os
import time

import numpy as np
from sklearn.covariance import EmpiricalCovariance
from sklearn.decomposition import PCA
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.kernel_ridge import KernelRidge
from sklearn.preprocessing import StandardScaler

scale = float(os.environ.get("ONESHOT_SCALE", 1.0))


def size(x):
    return max(16, int(x * scale))


start = time.perf_counter()
rng = np.random.default_rng(23)


class section:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.t = time.perf_counter()

    def __exit__(self, *exc):
        print(f"section {self.name} {time.perf_counter() - self.t:.3f}s", flush=True)


def checksum(name, value, digits=6):
    print(f"checksum {name} {value:.{digits - 1}e}", flush=True)


n_samples, n_features, n_classes = size(20000), size(3000), 10

with section("data"):
    labels = rng.integers(0, n_classes, n_samples)
    centers = rng.standard_normal((n_classes, n_features))
    latent = rng.standard_normal((n_samples, 80))
    X = centers[labels] + latent @ rng.standard_normal((80, n_features)) + rng.standard_normal((n_samples, n_features))
    y = X[:, :20].sum(axis=1) + 0.1 * rng.standard_normal(n_samples)

with section("scale"):
    Xs = StandardScaler().fit_transform(X)

with section("pca"):
    pca = PCA(svd_solver="full").fit(Xs)
    checksum("pca.explained_top100", pca.explained_variance_ratio_[:100].sum())
    checksum("pca.singular_values", pca.singular_values_.sum())

with section("lda"):
    lda = LinearDiscriminantAnalysis(solver="svd").fit(Xs, labels)
    checksum("lda.score", lda.score(Xs, labels))
    checksum("lda.scalings", np.abs(lda.scalings_).sum())

with section("kernel_ridge"):
    m = size(8000)
    kr = KernelRidge(alpha=1.0, kernel="rbf", gamma=1.0 / n_features).fit(Xs[:m], y[:m])
    pred = kr.predict(Xs[m : 2 * m])
    checksum("kernel_ridge.pred", np.abs(pred).sum())

with section("covariance"):
    cov = EmpiricalCovariance().fit(Xs)
    checksum("covariance.trace", np.trace(cov.covariance_))
    checksum("covariance.precision", np.abs(cov.get_precision()).sum())

print(f"oneshot sklearn_decompositions n_samples={n_samples} wall={time.perf_counter() - start:.3f}s", flush=True)
