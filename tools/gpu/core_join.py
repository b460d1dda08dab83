#!/usr/bin/env python3
"""Joins core_bench's and core_torch.py's rows into one table: gpukit ms, torch ms, the ratio
torch / gpukit (above 1: gpukit is faster) and the issue's target for the row, met or MISSED.

Targets (issue 15): every elementwise operation and reduction >= 0.95 at 1 GiB and >= 0.8 at
1 MiB; random generation >= 0.9; softmax and layer norm (rows of 4096 and 32768) >= 1.0.
Issue 23: the operator rows (op_*) likewise; and every fused expression (fusedN_*) faster than
gpukit's own same operations one by one (chainN_*), in a second table.

Usage: core_join.py GPUKIT.tsv TORCH.tsv   (exit status 1 when a row misses its target)
"""
import sys


def read(path):
    rows = {}
    with open(path) as fh:
        next(fh)
        for line in fh:
            op, size, ms = line.rstrip("\n").split("\t")
            rows[(op, size)] = float(ms)
    return rows


def target(op, size):
    if op in ("uniform", "normal"):
        return 0.9
    if op.startswith("softmax") or op.startswith("layernorm"):
        return 1.0
    return 0.95 if size == "1GiB" else 0.8


def main():
    ours, theirs = read(sys.argv[1]), read(sys.argv[2])
    print("| op | size | gpukit ms | torch ms | torch/gpukit | target | |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    missed = met = 0
    for key in ours:
        op, size = key
        g = ours[key]
        t = theirs.get(key)
        if t is None:
            print(f"| {op} | {size} | {g:.4f} | - | - | - | no torch row |")
            continue
        ratio = t / g
        tgt = target(op, size)
        ok = ratio >= tgt
        met += ok
        missed += not ok
        print(f"| {op} | {size} | {g:.4f} | {t:.4f} | {ratio:.2f} | >= {tgt:.2f} | {'met' if ok else 'MISSED'} |")
    # Issue 23: a fused expression (one kernel) is faster than its operations one by one.
    fused = [k for k in ours if k[0].startswith("fused")]
    if fused:
        print("\n| fused expression | size | fused ms | one by one ms | speed-up | target | |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
    for op, size in fused:
        chain = ours.get(("chain" + op[len("fused"):], size))
        if chain is None:
            continue
        f = ours[(op, size)]
        ok = chain > f
        met += ok
        missed += not ok
        print(f"| {op} | {size} | {f:.4f} | {chain:.4f} | {chain / f:.2f} | > 1.00 | {'met' if ok else 'MISSED'} |")
    print(f"\nratios met: {met}, missed: {missed}")
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
