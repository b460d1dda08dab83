"""Many small matrices: every call stays on the CPU; the shim must add < 2 % here.
Environment: ITERS (default 100000), REPEAT (default 1: the loop is run REPEAT times and the
fastest is reported, which removes one-off interruptions from short runs). Prints the wall time
and a bitwise hash of all results (of the first run of the loop)."""
import hashlib, os, time
import numpy as np

iters = int(os.environ.get("ITERS", 100000))
repeat = max(1, int(os.environ.get("REPEAT", 1)))
rng = np.random.default_rng(1)
mats = [rng.standard_normal((k, k)) for k in (4, 8, 16, 32, 48)]
spd = [m @ m.T + m.shape[0] * np.eye(m.shape[0]) for m in mats]
h = hashlib.sha256()
times = []
for rep in range(repeat):
    t0 = time.perf_counter()
    for i in range(iters):
        j = i % len(mats)
        a, s = mats[j], spd[j]
        r = [a @ a, np.linalg.solve(s, a), np.linalg.cholesky(s)]
        if i % 10 == 0:
            r += [np.linalg.eigh(s)[0], np.linalg.svd(a, compute_uv=False), a.astype(np.float32) @ a.astype(np.float32)]
        if rep == 0 and i % 97 == 0:
            for x in r:
                h.update(np.ascontiguousarray(x).tobytes())
    times.append(time.perf_counter() - t0)
total = min(times)
print(f"hash: {h.hexdigest()}")
print(f"small_matrices iters={iters} repeat={repeat} time={total:.4f}s")
