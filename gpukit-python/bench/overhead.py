"""gpukit from Python beside CuPy (and PyTorch where present), in one process on one GPU.

Written as users write these calls, then left as is. Prints one table:

* per-call overhead of a small elementwise op (``a + b`` on 1024 float32, and the function
  form) and of a user-kernel launch (``gp.jit`` vs ``cupy.RawKernel``), in microseconds: many
  calls queued back to back, one synchronisation at the end, median over repetitions;
* host copies of 1 GiB (``from_numpy`` / ``to_numpy`` vs ``cupy.asarray`` / ``cupy.asnumpy``),
  GB/s, median of 5 after one warm-up;
* large operations on 1 GiB of float32 (``a + b``, ``a * 2.0``, ``exp``, ``sum``): effective
  GB/s (bytes read + written) from CUDA events around 20 back-to-back calls after warm-up,
  median of 5 such runs.

Usage: python3 bench/overhead.py [--quick]
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import gpukit as gp

QUICK = "--quick" in sys.argv
try:
    import cupy as cp
except ImportError:  # pragma: no cover
    cp = None
try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

SRC = r'''
extern "C" __global__ void scale(float* x, float factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}
'''


def per_call_us(fn, sync, calls=2000, reps=15):
    for _ in range(200):
        fn()
    sync()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        out.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(out)


def copy_gbps(fn, nbytes, reps=5):
    fn()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(nbytes / (time.perf_counter() - t) / 1e9)
    return statistics.median(out)


def events_gbps(fn, nbytes, sync, calls=20, reps=5):
    """Effective bandwidth from wall-clock over `calls` back-to-back calls after a sync."""
    for _ in range(3):
        fn()
    sync()
    out = []
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        out.append(nbytes * calls / (time.perf_counter() - t) / 1e9)
    return statistics.median(out)


def row(name, ours, *others, unit="us"):
    cells = " | ".join(f"{v:10.2f}" if v is not None else "         -" for v in (ours, *others))
    ratio = ""
    if others and others[0]:
        ratio = f" | {ours / others[0]:5.2f}x" if unit == "us" else f" | {ours / others[0]:5.2f}x"
    print(f"| {name:<44} | {cells}{ratio} |", flush=True)


def main():
    print(f"gpukit {gp.__version__}, numpy {np.__version__}, cupy {cp.__version__ if cp else '-'}, "
          f"torch {torch.__version__ if torch else '-'}")
    gsync = gp.synchronize
    csync = (lambda: cp.cuda.runtime.deviceSynchronize()) if cp else None

    print("\n| per call (us, lower is better)                | gpukit     | CuPy       | gpukit/CuPy |")
    print("| --- | --- | --- | --- |")
    n = 1024
    a, b = gp.ones(n, dtype="float32"), gp.ones(n, dtype="float32")
    ca, cb = (cp.ones(n, dtype=cp.float32), cp.ones(n, dtype=cp.float32)) if cp else (None, None)
    row("a + b, 1024 float32", per_call_us(lambda: a + b, gsync), per_call_us(lambda: ca + cb, csync) if cp else None)
    row("add(a, b), 1024 float32", per_call_us(lambda: gp.add(a, b), gsync), per_call_us(lambda: cp.add(ca, cb), csync) if cp else None)
    row("a * 2.0, 1024 float32", per_call_us(lambda: a * 2.0, gsync), per_call_us(lambda: ca * 2.0, csync) if cp else None)
    k = gp.jit(SRC, func="scale")
    x = gp.ones(n, dtype="float32")
    k(x, factor=1.0, n=n)
    ours = per_call_us(lambda: k(x, factor=1.0, n=n), gsync)
    if cp:
        ck = cp.RawKernel(SRC, "scale")
        cx = cp.ones(n, dtype=cp.float32)
        blocks = (n + 255) // 256
        theirs = per_call_us(lambda: ck((blocks,), (256,), (cx, cp.float32(1.0), cp.int32(n))), csync)
    else:
        theirs = None
    row("kernel launch, 3 args (jit vs RawKernel)", ours, theirs)

    size = (256 if QUICK else 1024) << 20
    print(f"\n| host copies, {size >> 20} MiB (GB/s, higher is better)   | gpukit     | CuPy       | gpukit/CuPy |")
    print("| --- | --- | --- | --- |")
    host = np.random.default_rng(0).standard_normal(size // 4, dtype=np.float32)
    row("from_numpy / cupy.asarray", copy_gbps(lambda: (gp.from_numpy(host), gsync()), size),
        copy_gbps(lambda: (cp.asarray(host), csync()), size) if cp else None, unit="GB/s")
    g = gp.from_numpy(host)
    c = cp.asarray(host) if cp else None
    row("to_numpy / cupy.asnumpy", copy_gbps(lambda: g.to_numpy(), size),
        copy_gbps(lambda: cp.asnumpy(c), size) if cp else None, unit="GB/s")

    print(f"\n| large ops, {size >> 20} MiB float32 (GB/s moved)          | gpukit     | CuPy       | gpukit/CuPy | torch      |")
    print("| --- | --- | --- | --- | --- |")
    g2 = gp.from_numpy(host)
    c2 = cp.asarray(host) if cp else None
    t1 = torch.from_numpy(host).cuda() if torch and torch.cuda.is_available() else None
    t2 = t1.clone() if t1 is not None else None
    tsync = torch.cuda.synchronize if t1 is not None else None
    cases = [
        ("a + b", lambda: g + g2, (lambda: c + c2) if cp else None, (lambda: t1 + t2) if t1 is not None else None, 3),
        ("a * 2.0", lambda: g * 2.0, (lambda: c * 2.0) if cp else None, (lambda: t1 * 2.0) if t1 is not None else None, 2),
        ("exp(a)", lambda: gp.exp(g), (lambda: cp.exp(c)) if cp else None, (lambda: torch.exp(t1)) if t1 is not None else None, 2),
        ("a.sum()", lambda: g.sum(), (lambda: c.sum()) if cp else None, (lambda: t1.sum()) if t1 is not None else None, 1),
    ]
    for name, ours_fn, cp_fn, t_fn, passes in cases:
        nbytes = size * passes
        o = events_gbps(ours_fn, nbytes, gsync)
        cc = events_gbps(cp_fn, nbytes, csync) if cp_fn else None
        tt = events_gbps(t_fn, nbytes, tsync) if t_fn else None
        ratio = f"{o / cc:5.2f}x" if cc else "-"
        print(f"| {name:<48} | {o:10.1f} | {cc if cc else 0:10.1f} | {ratio} | {tt if tt else 0:10.1f} |", flush=True)


if __name__ == "__main__":
    main()
