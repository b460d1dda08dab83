"""Whole-program benchmark for gpukit-offload: realistic numpy linear algebra at n = 6000.

Least squares (normal equations: syrk + gesv), Gaussian-process style kernel + cholesky + solves
(potrf, gesv with 200 right-hand sides), PCA (syrk, eigh -> syevd, thin svd -> gesdd), float32
products (sgemm) and a rectangular float64 product (dgemm 3000x3000x6000). The data are
generated once and the linear algebra is repeated over a hyper-parameter sweep, as in model
fitting.

Written the way a careful numpy programmer writes a fitting loop: no O(n^2) temporaries that
the arithmetic does not need. Changed from the first version (same BLAS/LAPACK calls, same
shapes, same values bit for bit; only numpy glue outside the intercepted calls differs):
- ridge / noise terms go onto the diagonal in place through a strided view
  (`G.ravel()[::m + 1] += lam`) instead of `G + lam * np.eye(m)`, which built an identity, a
  scaled copy and a sum (three m x m arrays) per use: 3 x 288 MB for the 6000 kernel;
- the kernel matrix is not copied per repetition: K0's diagonal is set to `d0 + (0.1 + lam)`
  through the same view (off-diagonal entries are untouched, so K is exactly K0 + c I);
- scaled operands (`B32 * s`, `R * s`, `Xc * s`) and the products are written into buffers
  allocated once (`np.multiply(..., out=)`, `np.matmul(..., out=)`), the checksums take `abs`
  into a scratch buffer, and the loop-invariant `X.T @ y` (a gemv) is computed once;
- `C = Xc.T @ Xc / n` divides in place.
numpy still copies the inputs of `linalg.cholesky/solve/eigh/svd` into Fortran-ordered work
arrays (its own code, not avoidable from the caller), and the one-off data generation stays.

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


def diag(a):
    """A writable view of a square C-contiguous matrix's diagonal."""
    assert a.flags.c_contiguous and a.shape[0] == a.shape[1]
    return a.ravel()[:: a.shape[0] + 1]


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
# buffers reused by every repetition
Kd = diag(K0)
d0 = Kd.copy()
Bs, Z = np.empty_like(B32), np.empty_like(B32)
Rs = np.empty_like(R)
W = np.empty((n // 2, n // 2))
Xs = np.empty_like(Xc)
scratch = np.empty(n * n)
Xty = X.T @ y


def asum(a):
    """sum(|a|) through the scratch buffer (no temporary of a's size)."""
    s = scratch[: a.size].reshape(a.shape)
    np.abs(a, out=s)
    return float(s.sum())


check = []
for r in range(reps):
    lam = 10.0 ** (-3 + r)  # a hyper-parameter sweep: every repetition refits
    s = 1.0 + lam
    # least squares via the normal equations (ridge)
    G = sec("lstsq", lambda: X.T @ X)
    diag(G)[:] += lam
    beta = sec("lstsq", lambda: np.linalg.solve(G, Xty))
    # Gaussian process: kernel + noise on the diagonal, cholesky, solves
    np.add(d0, 0.1 + lam, out=Kd)
    L = sec("gp", lambda: np.linalg.cholesky(K0))
    alpha = sec("gp", lambda: np.linalg.solve(K0, Y))
    # PCA
    C = sec("pca", lambda: Xc.T @ Xc)
    C /= n
    diag(C)[:] += lam
    w, V = sec("pca", lambda: np.linalg.eigh(C))
    np.multiply(Xc, s, out=Xs)
    U, sv, Vt = sec("pca", lambda: np.linalg.svd(Xs, full_matrices=False))
    # float32 products and a rectangular float64 product
    np.multiply(B32, np.float32(s), out=Bs)
    sec("f32", lambda: np.matmul(A32, Bs, out=Z))
    np.multiply(R, s, out=Rs)
    sec("gemm", lambda: np.matmul(X.T, Rs, out=W))
    check.append([float(np.abs(beta).sum()), asum(L), asum(alpha),
                  float(w.sum()), float(sv.sum()), float(np.abs(Z, out=Bs).sum()), asum(W)])
np.copyto(Kd, d0)
total = time.perf_counter() - t0
c = np.array(check).sum(0)
print("sections: " + " ".join(f"{k}={v:.2f}s" for k, v in sections.items()))
print("checksum: " + " ".join(f"{x:.6e}" for x in c))
print(f"whole_program n={n} reps={reps} time={total:.2f}s")
