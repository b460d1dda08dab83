"""Another user's job on the same GPU: large float32 products in torch, back to back, for
SECONDS (default 60), synchronising every 20 products as a training loop's logging would.
Prints how many products it finished (its own throughput beside whatever else runs).

    python3 gpu_hog.py [SECONDS]
"""
import sys
import time

import torch

secs = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
a = torch.randn(8192, 8192, device="cuda")
b = torch.randn(8192, 8192, device="cuda")
torch.cuda.synchronize()
t0 = time.time()
n = 0
while time.time() - t0 < secs:
    c = a @ b
    n += 1
    if n % 20 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
print(f"hog: {n} products in {time.time() - t0:.1f} s ({n / (time.time() - t0):.1f} per s)")
