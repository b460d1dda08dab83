"""Which cuBLAS kernels PyTorch's TF32 matmul runs (names, grid, cluster) for a few shapes of
issue 23: run under ncu (tools/gpu/session_t.sh, session_av.sh). a @ b with row-major a (m x k),
b (k x n) is the NN product gemm_bench times; a shape's optional last field NT, TN or TT stores A
and / or B transposed (a = a_stored.T, a view: cuBLAS reads it with its transpose flag), as
gemm_bench's `--shapes m,n,k,NT` does."""
import sys

import torch

torch.backends.cuda.matmul.allow_tf32 = True


def operand(rows, cols, stored_transposed):
    if stored_transposed:
        return (torch.rand(cols, rows, device="cuda") * 2 - 1).T
    return torch.rand(rows, cols, device="cuda") * 2 - 1


for spec in sys.argv[1].split(";"):
    fields = spec.split(",")
    layout = fields.pop().upper() if fields[-1].isalpha() else "NN"
    m, n, k = (int(x) for x in fields)
    a = operand(m, k, layout[0] == "T")
    b = operand(k, n, layout[1] == "T")
    for _ in range(3):
        c = a @ b
    torch.cuda.synchronize()
    print(f"{m}x{n}x{k} {layout}: done", flush=True)
