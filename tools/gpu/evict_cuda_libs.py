"""Drops the CUDA libraries' pages from the page cache (posix_fadvise DONTNEED; no root needed,
nothing else changed), so that the next CUDA start reads them from disk as on a freshly
started machine. Prints how many files and MiB it asked the kernel to drop.
   python3 tools/gpu/evict_cuda_libs.py"""
import glob
import os
import sys

dirs = ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu"]
try:
    import nvidia  # the pip CUDA wheels (namespace package)

    for p in nvidia.__path__:
        dirs += glob.glob(os.path.join(p, "*", "lib"))
except ImportError:
    pass
seen, files, total = set(), 0, 0
for d in dirs:
    for f in glob.glob(os.path.join(d, "*.so*")):
        name = os.path.basename(f)
        if not any(k in name for k in ("cublas", "cusolver", "cusparse", "cudart", "nvJitLink", "libcuda", "nvrtc", "nvidia-ptxjitcompiler")):
            continue
        real = os.path.realpath(f)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        try:
            fd = os.open(real, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            files += 1
            total += os.fstat(fd).st_size
        finally:
            os.close(fd)
print(f"evicted {files} CUDA library files, {total / 2**20:.0f} MiB", file=sys.stderr)
