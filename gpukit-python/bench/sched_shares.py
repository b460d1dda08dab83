"""Compute shares of the scheduler, measured from Python.

Two Guaranteed tasks asking for 25 % and 75 % of the GPU run the same compute-bound kernel
(written with gp.jit) in a loop for the same wall-clock window; each counts the launches it
completed. With shares enforced, their throughputs stand in the ratio of the SMs they were
granted; a BestEffort task alone beside them shows what it is lent. Written as a service author
would write it, then left as is.

Usage: python3 bench/sched_shares.py [seconds]
"""

from __future__ import annotations

import sys
import time

import gpukit as gp

SRC = r'''
extern "C" __global__ void spin(float* out, int iters) {
    float x = threadIdx.x * 1e-3f, y = blockIdx.x * 1e-3f;
    for (int i = 0; i < iters; ++i) { x = fmaf(x, 1.000001f, y); y = fmaf(y, 0.999999f, x); }
    out[blockIdx.x * blockDim.x + threadIdx.x] = x + y;
}
'''
WINDOW = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0


def run(window: float, start_at: float):
    t = gp.current_task()
    k = gp.jit(SRC, func="spin")
    blocks, threads = 132 * 16, 256
    out = gp.empty(blocks * threads, dtype="float32")
    while time.monotonic() < start_at:
        time.sleep(0.001)
    done = 0
    end = start_at + window
    while time.monotonic() < end:
        for _ in range(4):
            k(out, 4000, grid=blocks, block=threads)
        t.synchronize()
        done += 4
    return done, t.sms


def main():
    with gp.Scheduler(workers=3) as s:
        print("mechanism:", s.mechanism)
        # compile once outside the measured window
        gp.jit(SRC, func="spin").compile()
        start = time.monotonic() + 1.0
        fa = s.submit(run, WINDOW, start, policy="guaranteed", memory="64MB", bandwidth=0.25, name="quarter")
        fb = s.submit(run, WINDOW, start, policy="guaranteed", memory="64MB", bandwidth=0.75, name="three_quarters")
        (na, sa), (nb, sb) = fa.result(), fb.result()
        print(f"| task | SMs | launches in {WINDOW:.1f} s | share of launches | share of SMs |")
        print("| --- | --- | --- | --- | --- |")
        tot_n, tot_s = na + nb, sa + sb
        for name, n, sms in (("guaranteed 0.25", na, sa), ("guaranteed 0.75", nb, sb)):
            print(f"| {name} | {sms} | {n} | {n / tot_n:.3f} | {sms / tot_s:.3f} |")
        ratio = (na / nb) / (sa / sb)
        print(f"throughput ratio / SM ratio: {ratio:.3f} (1.000 = shares exact)")
        for f in (fa, fb):
            st = s.stats(f.id)
            print(f"stats {st['name']}: bandwidth {st['bandwidth']:.3f}, sms {st['sms']}, run_time {st['run_time']:.2f} s, "
                  f"queue_time {st['queue_time']:.3f} s, kernels {st['kernels_launched']}")
        # a BestEffort task alone is lent what is idle
        start = time.monotonic() + 0.5
        fc = s.submit(run, 1.5, start, policy="best_effort", name="alone")
        nc, sc = fc.result()
        print(f"best_effort alone: {nc} launches in 1.5 s on {sc} own SMs ({nc / 1.5:.1f}/s vs "
              f"{na / WINDOW:.1f}/s at 0.25 and {nb / WINDOW:.1f}/s at 0.75)")


if __name__ == "__main__":
    main()
