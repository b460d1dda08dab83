"""Which cuBLAS kernels PyTorch's TF32 matmul runs (names, grid, cluster) for a few shapes of
issue 23: run under ncu (tools/gpu/session_t.sh). a @ b with row-major a (m x k), b (k x n) is
the NN product gemm_bench times."""
import sys

import torch

torch.backends.cuda.matmul.allow_tf32 = True
shapes = [tuple(int(x) for x in s.split(",")) for s in sys.argv[1].split(";")]
for m, n, k in shapes:
    a = torch.rand(m, k, device="cuda") * 2 - 1
    b = torch.rand(k, n, device="cuda") * 2 - 1
    for _ in range(3):
        c = a @ b
    torch.cuda.synchronize()
    print(f"{m}x{n}x{k}: done", flush=True)
