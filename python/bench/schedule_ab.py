#!/usr/bin/env python3
"""What the block rows' schedule buys a torch tensor: ``sparsek.bsr_mm`` and ``sparsek.linear`` on a BSR tensor
whose launches carry the schedule made when its structure was checked (longest rows first, the longest row's
blocks: ``_ops._schedule``, the library's ``Gpu::row_schedule``), against the same product on a copy of its index tensors remembered without one (the
launches of sparsek before the schedule: rows in their own order, the longest row unknown). Same values, same
B, one process, timed interleaved launch by launch with bench_torch.py's method (CUDA events, L2 flushed and the
GPU kept busy before each launch, median of 30 after 5 warm-up), each output checked against float64 first.

    PYTHONPATH=<sparsek package> python python/bench/schedule_ab.py [--json OUT.json] [--quick]

Prints one table (times in microseconds, and the ratio without / with the schedule).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch as bt  # noqa: E402 (the shared method: Timer, random_bsr, checks)

import sparsek  # noqa: E402
from sparsek import _ops  # noqa: E402

# (op, M, K, N or tokens, bs, density, pattern)
CASES = (
    [("bsr_mm", 8192, 8192, 8192, bs, 0.22, "skewed") for bs in (64, 128)]
    + [("bsr_mm", 8192, 8192, 8192, 64, 0.22, "uniform")]
    + [("bsr_mm", 8192, 8192, n, 64, 0.22, "skewed") for n in (1, 16)]
    + [("bsr_mm", 16384, 16384, n, 64, 0.22, "skewed") for n in (8, 64)]
    + [("bsr_mm", 16384, 16384, 8, 64, 0.22, "uniform")]
    + [("linear", 11008, 4096, n, 64, 0.2, "skewed") for n in (16, 48, 512)]
    + [("linear", 4096, 11008, 16, 64, 0.2, "skewed")]
)
QUICK = [("bsr_mm", 2048, 2048, 2048, 64, 0.22, "skewed"), ("linear", 2048, 1024, 16, 64, 0.2, "skewed")]


def without_schedule(a: torch.Tensor) -> torch.Tensor:
    """``a``'s values over copies of its index tensors, checked (and remembered) with no schedule."""
    plain = torch.sparse_bsr_tensor(a.crow_indices().clone(), a.col_indices().clone(), a.values(), a.shape)
    real = _ops._schedule
    _ops._schedule = lambda *args: None
    try:
        sparsek.bsr_mm(plain, torch.zeros(a.shape[1], 16, dtype=a.dtype, device=a.device))
    finally:
        _ops._schedule = real
    return plain


def case_result(timer: bt.Timer, case) -> dict:
    op, m, k, n, bs, density, pattern = case
    torch.manual_seed(bt.seed_for(repr(case)))
    a = bt.random_bsr(m, k, bs, density, pattern, timer.device)
    plain = without_schedule(a)
    dense = bt.bsr_to_dense(a).double()
    if op == "bsr_mm":
        b = torch.randn(k, n, device=timer.device).to(bt.DTYPE)
        ref = dense @ b.double()
        runs = {"with": lambda: sparsek.bsr_mm(a, b), "without": lambda: sparsek.bsr_mm(plain, b)}
    else:
        x = torch.randn(n, k, device=timer.device).to(bt.DTYPE)
        ref = x.double() @ dense.t()
        runs = {"with": lambda: sparsek.linear(x, a), "without": lambda: sparsek.linear(x, plain)}
    operand = b if op == "bsr_mm" else x
    atol = bt.product_atol(k, bt.amax(a.values()), bt.amax(operand))
    for name, run in runs.items():
        verdict = bt.check_close(run(), ref, atol, 1e-2)
        if not verdict["passed"]:
            raise SystemExit(f"{case} {name}: output failed its check: {verdict}")
    timed = timer.time(runs)
    lengths = a.crow_indices()[1:] - a.crow_indices()[:-1]
    return {
        "case": dict(op=op, m=m, k=k, n=n, bs=bs, density=density, pattern=pattern, nnzb=int(a.values().shape[0]),
                     longest=int(lengths.max()), mean=float(lengths.double().mean())),
        "with_us": timed["with"]["ms"] * 1e3,
        "without_us": timed["without"]["ms"] * 1e3,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="OUT.json")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("schedule_ab: no CUDA GPU", file=sys.stderr)
        return 2
    timer = bt.Timer(torch.device("cuda"), warmup=5, iters=30)
    rows = []
    for case in QUICK if args.quick else CASES:
        r = case_result(timer, case)
        rows.append(r)
        print(f"{r['case']} without {r['without_us']:.1f} us, with {r['with_us']:.1f} us", file=sys.stderr)
        bt.free_memory()
    header = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "sparsek": sparsek.__version__,
              "commit": os.environ.get("SPARSEK_COMMIT", "unknown"), "driver": bt.driver_version()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header, "cases": rows}, f, indent=1)
    print(f"{header['gpu']}, torch {header['torch']}, sparsek {header['sparsek']} at {header['commit']}")
    print("| op | M×K | N | bs | density | pattern | longest / mean row | without µs | with µs | without / with |")
    print("|---|---|--:|--:|--:|---|--:|--:|--:|--:|")
    for r in rows:
        c = r["case"]
        print(f"| {c['op']} | {c['m']}×{c['k']} | {c['n']} | {c['bs']} | {c['density']:.0%} | {c['pattern']} | "
              f"{c['longest']} / {c['mean']:.1f} | {r['without_us']:.1f} | {r['with_us']:.1f} | "
              f"{r['without_us'] / r['with_us']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
