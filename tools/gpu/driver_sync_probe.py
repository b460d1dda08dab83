"""Which CUDA calls wait for a kernel running on another (non-blocking) stream? For
gpukit-core's gpu_alloc::retired_streams_are_never_waited_for (issue 21): with a ~1.5 s kernel
spinning on a non-blocking stream, time each call a caching allocator makes while a stream is
retired. A call that takes about the kernel's remaining time waited for it."""
import time

import cupy as cp

rt = cp.cuda.runtime
SPIN = cp.RawKernel(r'''
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}''', "spin")


def with_spin(label, fn, seconds=1.5):
    s = cp.cuda.Stream(non_blocking=True)
    ghz = rt.deviceGetAttribute(rt.cudaDevAttrClockRate, 0) * 1e-6
    with s:
        SPIN((1,), (1,), (cp.int64(int(seconds * ghz * 1e9)),))
    time.sleep(0.05)
    t = time.perf_counter()
    try:
        r = fn()
        err = ""
    except Exception as e:  # noqa: BLE001 - the probe reports whatever the call raised
        r, err = None, type(e).__name__ + ": " + str(e)[:60]
    dt = time.perf_counter() - t
    busy = s.done is False
    print(f"{label:<44} {dt * 1e3:9.2f} ms  kernel still running after: {busy}  {err}")
    s.synchronize()
    return r


free, total = rt.memGetInfo()
print(f"device: {rt.getDeviceProperties(0)['name'].decode()} free {free >> 20} MiB total {total >> 20} MiB")
keep = rt.malloc(64 << 20)
with_spin("nothing (sleep 1 ms)", lambda: time.sleep(0.001))
with_spin("cudaMemGetInfo", rt.memGetInfo)
p = with_spin("cudaMalloc 64 MiB (fits)", lambda: rt.malloc(64 << 20))
with_spin("cudaFree of an idle 64 MiB block", lambda: rt.free(p))
with_spin("cudaMalloc 1 TiB (fails)", lambda: rt.malloc(1 << 40))
with_spin("cudaMalloc free + 1 GiB (fails)", lambda: rt.malloc(rt.memGetInfo()[0] + (1 << 30)))
with_spin("cudaMalloc total - 1 MiB (fails)", lambda: rt.malloc(total - (1 << 20)))
hold = []
try:
    while True:
        hold.append(rt.malloc(1 << 30))
except Exception:  # noqa: BLE001 - out of memory ends the fill
    pass
print(f"  filled: {len(hold)} GiB held, {rt.memGetInfo()[0] >> 20} MiB free")
with_spin("cudaMalloc 1 GiB, device full (fails)", lambda: rt.malloc(1 << 30))
with_spin("cudaMalloc 1 TiB, device full (fails)", lambda: rt.malloc(1 << 40))
for h in hold:
    rt.free(h)
print(f"  freed: {rt.memGetInfo()[0] >> 20} MiB free")
with_spin("cudaMalloc 1 TiB after freeing 78 GiB (fails)", lambda: rt.malloc(1 << 40))
with_spin("cudaMalloc 1 TiB again (fails)", lambda: rt.malloc(1 << 40))
s2 = cp.cuda.Stream(non_blocking=True)
p2 = rt.mallocAsync(1 << 30, s2.ptr)
rt.freeAsync(p2, s2.ptr)
s2.synchronize()
with_spin("cudaMalloc 1 TiB, the default pool holding 1 GiB (fails)", lambda: rt.malloc(1 << 40))
rt.free(keep)
