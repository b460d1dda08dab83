"""Thousands of tiny calls, as array code makes them: determinants, solves, Cholesky factors
and symmetric eigenvalues of stacks of 4x4 matrices (numpy calls LAPACK once per matrix) and a
loop of 64x64 products. Prints microseconds per call of each kind, the wall time and a
checksum."""
import hashlib
import os
import time

import numpy as np

STACK = int(os.environ.get("SMALL_STACK", "3000"))
PRODUCTS = int(os.environ.get("SMALL_PRODUCTS", "3000"))


def main():
    t0 = time.perf_counter()
    rng = np.random.default_rng(5)
    a = rng.standard_normal((STACK, 4, 4)) + 4 * np.eye(4)
    s = a @ np.swapaxes(a, 1, 2) + np.eye(4)
    b = rng.standard_normal((STACK, 4, 1))
    out = []
    for name, f in [
        ("det", lambda: np.linalg.det(a)),
        ("solve", lambda: np.linalg.solve(a, b)),
        ("cholesky", lambda: np.linalg.cholesky(s)),
        ("eigh", lambda: np.linalg.eigh(s)[0]),
    ]:
        t = time.perf_counter()
        r = f()
        dt = time.perf_counter() - t
        out.append(r)
        print(f"section {name} {dt:.3f} ({dt / STACK * 1e6:.1f} us/call)")
    m = rng.standard_normal((64, 64))
    acc = np.zeros((64, 64))
    t = time.perf_counter()
    for _ in range(PRODUCTS):
        acc = m @ (acc * 1e-3 + m)
    dt = time.perf_counter() - t
    out.append(acc)
    print(f"section gemm64 {dt:.3f} ({dt / PRODUCTS * 1e6:.1f} us/call)")
    h = hashlib.sha256(b"".join(np.round(np.ascontiguousarray(x), 8).tobytes() for x in out))
    print(f"checksum {h.hexdigest()[:16]}")
    print(f"wall {time.perf_counter() - t0:.3f}")


if __name__ == "__main__":
    main()
