#!/usr/bin/env python3
"""The torch side of gpukit-core's operations table (core_bench): the same operations on the
same shapes and element types, written the way torch users write them, timed the same way
(CUDA events on the current stream around back-to-back calls after a warm-up pass, median of 7
trials; the 1 MiB cases rotate through enough input sets to exceed four times the L2 cache).

Usage: core_torch.py OUT.tsv   (rows: op, size, ms)
"""
import sys

import torch

REPS, TRIALS = 5, 7


def time_sets(sets, f):
    for k in range(max(sets, 2)):
        f(k % sets)
    reps = max(sets, REPS)
    trials = []
    for _ in range(TRIALS):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        for r in range(reps):
            f(r % sets)
        e1.record()
        e1.synchronize()
        trials.append(e0.elapsed_time(e1) / reps)
    trials.sort()
    return trials[len(trials) // 2]


def main():
    out_path = sys.argv[1]
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size or (1 << 20)
    gen = torch.Generator(device=dev).manual_seed(2024)
    rows = []
    for label, nbytes in [("1MiB", 1 << 20), ("1GiB", 1 << 30)]:
        n = nbytes // 4
        sets = max(1, -(-(4 * l2) // (2 * nbytes)))
        a = [torch.rand(n, device=dev, generator=gen) * 2 - 1 for _ in range(sets)]
        b = [torch.rand(n, device=dev, generator=gen) * 1.5 + 0.5 for _ in range(sets)]
        ma = [x > 0 for x in a]
        mb = [x > 1 for x in b]
        ia = [(x * 1e6).to(torch.int32) for x in a]
        ib = [(x * 1e6).to(torch.int32) for x in b]
        ops = [
            ("add", lambda k: torch.add(a[k], b[k])),
            ("sub", lambda k: a[k] - b[k]),
            ("mul", lambda k: a[k] * b[k]),
            ("div", lambda k: a[k] / b[k]),
            ("mul_scalar", lambda k: a[k] * 2.0),
            ("maximum", lambda k: torch.maximum(a[k], b[k])),
            ("pow", lambda k: torch.pow(b[k], a[k])),
            ("remainder", lambda k: torch.remainder(a[k], b[k])),
            ("neg", lambda k: torch.neg(a[k])),
            ("abs", lambda k: torch.abs(a[k])),
            ("exp", lambda k: torch.exp(a[k])),
            ("log", lambda k: torch.log(b[k])),
            ("sqrt", lambda k: torch.sqrt(b[k])),
            ("tanh", lambda k: torch.tanh(a[k])),
            ("sigmoid", lambda k: torch.sigmoid(a[k])),
            ("relu", lambda k: torch.relu(a[k])),
            ("sin", lambda k: torch.sin(a[k])),
            ("cos", lambda k: torch.cos(a[k])),
            ("floor", lambda k: torch.floor(a[k])),
            ("round", lambda k: torch.round(a[k])),
            ("clip", lambda k: torch.clamp(a[k], -0.5, 0.5)),
            ("isnan", lambda k: torch.isnan(a[k])),
            ("eq", lambda k: torch.eq(a[k], b[k])),
            ("logical_and", lambda k: torch.logical_and(ma[k], mb[k])),
            ("where", lambda k: torch.where(ma[k], a[k], b[k])),
            ("bitwise_and_i32", lambda k: torch.bitwise_and(ia[k], ib[k])),
            ("cast_f16", lambda k: a[k].to(torch.float16)),
            ("expr_2a_plus_b", lambda k: 2.0 * a[k] + b[k]),
            # gpukit's operator forms (`&a + &b`, ...): torch's operators are its functions.
            ("op_add", lambda k: a[k] + b[k]),
            ("op_sub", lambda k: a[k] - b[k]),
            ("op_mul", lambda k: a[k] * b[k]),
            ("op_div", lambda k: a[k] / b[k]),
            ("op_mul_scalar", lambda k: a[k] * 2.0),
            ("op_rsub_scalar", lambda k: 1.0 - a[k]),
            ("op_neg", lambda k: -a[k]),
            ("op_exp", lambda k: torch.exp(a[k])),
            ("op_maximum", lambda k: torch.maximum(a[k], b[k])),
            ("op_add_row_bias", lambda k: a[k].view(n // 1024, 1024) + b[0][:1024]),
            ("add_row_bias", lambda k: torch.add(a[k].view(n // 1024, 1024), b[0][:1024])),
            ("op_mul_column", lambda k: a[k].view(n // 1024, 1024) * b[0][: n // 1024].view(-1, 1)),
            ("mul_column", lambda k: torch.mul(a[k].view(n // 1024, 1024), b[0][: n // 1024].view(-1, 1))),
            # Expressions of 2-4 operations: torch runs them one kernel per operation (eager), as
            # gpukit's chainN rows; gpukit's fusedN rows run one kernel.
            ("fused2_2a_plus_b", lambda k: 2.0 * a[k] + b[k]),
            ("chain2_2a_plus_b", lambda k: 2.0 * a[k] + b[k]),
            ("fused3_amb_times_a_plus_1", lambda k: (a[k] - b[k]) * a[k] + 1.0),
            ("chain3_amb_times_a_plus_1", lambda k: (a[k] - b[k]) * a[k] + 1.0),
            ("fused4_exp_ab_plus_a_over_b", lambda k: torch.exp((a[k] * b[k] + a[k]) / b[k])),
            ("chain4_exp_ab_plus_a_over_b", lambda k: torch.exp((a[k] * b[k] + a[k]) / b[k])),
            ("sum", lambda k: torch.sum(a[k])),
            ("mean", lambda k: torch.mean(a[k])),
            ("max", lambda k: torch.max(a[k])),
            ("min", lambda k: torch.min(a[k])),
            ("prod", lambda k: torch.prod(b[k])),
            ("any", lambda k: torch.any(a[k])),
            ("all", lambda k: torch.all(a[k])),
            ("var", lambda k: torch.var(a[k], unbiased=False)),
            ("std", lambda k: torch.std(a[k], unbiased=False)),
            ("argmax", lambda k: torch.argmax(a[k])),
            ("sum_i32", lambda k: torch.sum(ia[k])),
            ("sum_rows_1024", lambda k: torch.sum(a[k].view(n // 1024, 1024), dim=1)),
            ("sum_axis0_2cols", lambda k: torch.sum(a[k].view(n // 2, 2), dim=0)),
            ("cumsum", lambda k: torch.cumsum(a[k], 0)),
            ("uniform", lambda k: torch.rand(n, device=dev, generator=gen)),
            ("normal", lambda k: torch.randn(n, device=dev, generator=gen)),
        ]
        for name, f in ops:
            rows.append((name, label, time_sets(sets, f)))
        del a, b, ma, mb, ia, ib
        torch.cuda.empty_cache()
    total = 1 << 26
    for r in (4096, 32768):
        x = torch.randn(total // r, r, device=dev, generator=gen)
        g = torch.rand(r, device=dev, generator=gen) + 0.5
        bb = torch.rand(r, device=dev, generator=gen) - 0.5
        rows.append((f"softmax_{r}", "256MiB", time_sets(1, lambda k: torch.softmax(x, dim=-1))))
        rows.append((f"layernorm_{r}", "256MiB", time_sets(
            1, lambda k: torch.nn.functional.layer_norm(x, (r,), g, bb, 1e-5))))
    with open(out_path, "w") as fh:
        fh.write("op\tsize\tms\n")
        for op, size, ms in rows:
            fh.write(f"{op}\t{size}\t{ms:.6f}\n")
    print(f"torch {torch.__version__}: {len(rows)} rows written to {out_path}")


if __name__ == "__main__":
    main()
