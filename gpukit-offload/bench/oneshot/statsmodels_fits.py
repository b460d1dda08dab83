"""Regression fits with statsmodels, near the CPU/GPU crossover: many medium calls (pinv of
20000 x 301 design matrices, X^T W X products and small solves in iterative fits), written as an
analyst writes them: OLS, WLS, a Poisson GLM, a logit, a robust fit and a bootstrap of OLS
coefficients. Prints each section's wall time and checksums (6 significant digits; 4 for the
iterative fits, which stop at a tolerance).

Left as written; ONESHOT_SCALE exists only for the runner's smoke test (bench/oneshot/run.sh).
"""
import os
import time

import numpy as np
import statsmodels.api as sm

scale = float(os.environ.get("ONESHOT_SCALE", 1.0))


def size(x):
    return max(16, int(x * scale))


start = time.perf_counter()
rng = np.random.default_rng(5)


class section:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.t = time.perf_counter()

    def __exit__(self, *exc):
        print(f"section {self.name} {time.perf_counter() - self.t:.3f}s", flush=True)


def checksum(name, value, digits=6):
    print(f"checksum {name} {value:.{digits - 1}e}", flush=True)


n, p = size(20000), size(300)

with section("data"):
    X = sm.add_constant(rng.standard_normal((n, p)))
    beta = rng.standard_normal(p + 1) / np.sqrt(p)
    eta = X @ beta
    y = eta + rng.standard_normal(n)
    counts = rng.poisson(np.exp(0.3 * eta))
    labels = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
    weights = rng.uniform(0.5, 2.0, n)

with section("ols"):
    ols = sm.OLS(y, X).fit()
    checksum("ols.params", np.abs(ols.params).sum())
    checksum("ols.bse", ols.bse.sum())

with section("wls"):
    wls = sm.WLS(y, X, weights=weights).fit()
    checksum("wls.params", np.abs(wls.params).sum())

with section("glm_poisson"):
    glm = sm.GLM(counts, X, family=sm.families.Poisson()).fit()
    checksum("glm.params", np.abs(glm.params).sum(), 4)

with section("logit"):
    logit = sm.Logit(labels, X).fit(disp=0)
    checksum("logit.params", np.abs(logit.params).sum(), 4)

with section("robust"):
    rlm = sm.RLM(y, X, M=sm.robust.norms.HuberT()).fit()
    checksum("rlm.params", np.abs(rlm.params).sum(), 4)

with section("bootstrap"):
    boot = []
    for _ in range(30):
        idx = rng.integers(0, n, n)
        boot.append(sm.OLS(y[idx], X[idx]).fit().params)
    checksum("bootstrap.sd", np.std(boot, axis=0).sum())

print(f"oneshot statsmodels n={n} p={p} wall={time.perf_counter() - start:.3f}s", flush=True)
