"""Where a process's resident memory goes when gpukit-offload starts CUDA in it (issue 22: loky
restarts a worker whose RSS grows by more than 300 MB after its first task). Run under the shim
with the GPU forced (RSS_TRIM=1: malloc_trim(0) before each figure): prints RssAnon / RssFile / RssShmem after each step and, at the end, the
mappings holding the most resident memory, grouped by file."""
import collections
import ctypes
import os
import time

import numpy as np


def status():
    f = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            f[k] = int(v.split()[0]) // 1024
    return f


TRIM = os.environ.get("RSS_TRIM") == "1"
LIBC = ctypes.CDLL(None)


def show(step, t0):
    if TRIM:
        LIBC.malloc_trim(0)
        step += " +trim"
    s = status()
    print(f"{step:<28} {time.perf_counter() - t0:7.3f}s  rss {s['VmRSS']:6d} MiB  anon "
          f"{s['RssAnon']:6d}  file {s['RssFile']:6d}  shmem {s['RssShmem']:6d}", flush=True)


def by_mapping(top=14):
    rss = collections.Counter()
    name = "?"
    for line in open("/proc/self/smaps"):
        parts = line.split()
        if parts and not parts[0].endswith(":"):
            name = parts[5] if len(parts) > 5 else "[anon]"
        elif parts and parts[0] == "Rss:":
            rss[name] += int(parts[1])
    for n, kb in rss.most_common(top):
        print(f"  {kb // 1024:6d} MiB  {n}")


t0 = time.perf_counter()
rng = np.random.default_rng(0)
show("numpy imported", t0)
a = rng.standard_normal((64, 64))
a @ a
show("first dgemm 64 (start)", t0)
g = rng.standard_normal((2000, 2000))
g @ g
show("dgemm 2000", t0)
np.linalg.cholesky(g @ g.T + 2000 * np.eye(2000))
show("dpotrf 2000 (cuSOLVER)", t0)
np.linalg.svd(rng.standard_normal((1500, 800)), full_matrices=False)
show("dgesdd 1500x800", t0)
np.linalg.solve(g + 2000 * np.eye(2000), rng.standard_normal((2000, 8)))
show("dgesv 2000", t0)
by_mapping()
print(f"end {time.time():.6f}", flush=True)
