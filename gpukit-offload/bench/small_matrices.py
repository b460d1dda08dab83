"""Many small matrices: every call stays on the CPU; the shim must add < 2 % here.
Environment: ITERS (default 100000). Prints the wall time and a bitwise hash of all results."""
import hashlib, os, time
import numpy as np

iters = int(os.environ.get("ITERS", 100000))
rng = np.random.default_rng(1)
mats = [rng.standard_normal((k, k)) for k in (4, 8, 16, 32, 48)]
spd = [m @ m.T + m.shape[0] * np.eye(m.shape[0]) for m in mats]
h = hashlib.sha256()
t0 = time.perf_counter()
for i in range(iters):
    j = i % len(mats)
    a, s = mats[j], spd[j]
    r = [a @ a, np.linalg.solve(s, a), np.linalg.cholesky(s)]
    if i % 10 == 0:
        r += [np.linalg.eigh(s)[0], np.linalg.svd(a, compute_uv=False), a.astype(np.float32) @ a.astype(np.float32)]
    if i % 97 == 0:
        for x in r:
            h.update(np.ascontiguousarray(x).tobytes())
total = time.perf_counter() - t0
print(f"hash: {h.hexdigest()}")
print(f"small_matrices iters={iters} time={total:.3f}s")
