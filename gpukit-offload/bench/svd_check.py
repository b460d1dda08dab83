"""Accuracy of the thin SVD at the whole-program size, run under the shim with
GPUKIT_OFFLOAD_GPU=always (the GPU's polar-decomposition SVD, gesvdp) and plainly (the CPU's gesdd):
prints the reconstruction error ||A - U S Vt|| / ||A||, the orthogonality of U and V, and the
singular values' checksum, so the two runs can be compared. Environment: M, N (6000, 2000)."""
import os, time
import numpy as np

m, n = int(os.environ.get("M", 6000)), int(os.environ.get("N", 2000))
rng = np.random.default_rng(5)
A = rng.standard_normal((m, n))
A[:, -1] = A[:, 0] * 1e-9 + A[:, 1]  # one nearly dependent column: a tiny singular value
t = time.perf_counter()
U, s, Vt = np.linalg.svd(A, full_matrices=False)
dt = time.perf_counter() - t
rec = np.linalg.norm(A - (U * s) @ Vt) / np.linalg.norm(A)
ou = np.linalg.norm(U.T @ U - np.eye(n)) / np.sqrt(n)
ov = np.linalg.norm(Vt @ Vt.T - np.eye(n)) / np.sqrt(n)
print(f"svd_check m={m} n={n} time={dt:.3f}s reconstruction={rec:.2e} orthU={ou:.2e} orthV={ov:.2e} "
      f"smax={s[0]:.12e} smin={s[-1]:.6e} ssum={s.sum():.12e} sorted={bool(np.all(np.diff(s) <= 0))}")
