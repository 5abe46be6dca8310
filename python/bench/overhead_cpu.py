"""Host cost per call of sparsek's torch ops on the CPU, native kernels against the Python ones, beside dense torch.

    python python/bench/overhead_cpu.py [--calls 2000] [--rounds 15] [--product]

A 16 x 16 weight (one 16-block), 1 token: the arithmetic is negligible for dense torch; sparsek's own CPU backend
is left out by default (native kernels: ``_native.set_native_dry_run``; the Python kernels: ``_native.cpu_spmm``
a no-op; their outputs then stay unwritten), so what is timed is the call path: Python, the dispatcher, the
autograd kernel, the checks, the output's allocation and the operand descriptions. ``--product`` keeps the
product. Every call is timed in rounds of ``--calls`` back-to-back calls, interleaved across the calls, median
over ``--rounds``; under grad mode (inputs without grad), ``torch.no_grad()`` and ``torch.inference_mode()``. The
native and the Python kernels are timed in one process: ``torch.ops.sparsek.linear`` (native where registered)
and its twin ``torch.ops.sparsek._linear_py`` (the Python kernel, what the fallback registers)."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import platform
import statistics
import time
import warnings

import torch
import torch.nn.functional as F

import sparsek
from sparsek import BlockSparseLinear, _native, _ops


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--product", action="store_true", help="keep sparsek's CPU product in the timed calls")
    args = p.parse_args()
    warnings.filterwarnings("ignore", message="Sparse BSR tensor support is in beta state")
    torch.manual_seed(0)
    s = 16
    lin = torch.nn.Linear(s, s, bias=False).half()
    module = BlockSparseLinear.from_dense(torch.nn.Linear(s, s, bias=False), 16, density=1.0, dtype=torch.float16)
    w = module.to_bsr()
    wd = w.to_dense()
    with torch.no_grad():
        lin.weight.copy_(wd)
    v, c, ci = w.values(), w.crow_indices(), w.col_indices()
    x = torch.randn(1, s).half()
    b = x.t()
    calls = {
        "sparsek.linear (wrapper)": lambda: sparsek.linear(x, w),
        "torch.ops.sparsek.linear": lambda: torch.ops.sparsek.linear(x, v, c, ci, s, None, 0),
        "torch.ops.sparsek._linear_py (Python kernel)": lambda: torch.ops.sparsek._linear_py(x, v, c, ci, s, None, 0),
        "BlockSparseLinear.forward": lambda: module(x),
        "F.linear": lambda: F.linear(x, wd),
        "nn.Linear": lambda: lin(x),
        "sparsek.bsr_mm (wrapper)": lambda: sparsek.bsr_mm(w, b),
        "torch.ops.sparsek.bsr_mm": lambda: torch.ops.sparsek.bsr_mm(v, c, ci, s, s, b, 1.0, None),
        "torch.ops.sparsek._bsr_mm_py (Python kernel)": lambda: torch.ops.sparsek._bsr_mm_py(v, c, ci, s, s, b, 1.0,
                                                                                            None),
        "torch.mm": lambda: torch.mm(wd, b),
        "torch.ops.aten.mm (torch.ops path)": lambda: torch.ops.aten.mm(wd, b),
        "torch.empty(1) (floor)": lambda: torch.empty(1),
    }
    if not args.product:
        _native.set_native_dry_run(True)
        _native.cpu_spmm = lambda a: None
    print(f"# sparsek host cost per call, CPU ({platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} torch threads), torch {torch.__version__}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"native kernels registered: {_ops.NATIVE_OPS} {_ops.NATIVE_OPS_WHY_NOT}; sparsek product "
          f"{'kept' if args.product else 'left out (dry run)'}; {args.calls} calls x {args.rounds} rounds, median us")
    modes = [("grad", contextlib.nullcontext), ("no_grad", torch.no_grad), ("inference_mode", torch.inference_mode)]
    table = {}
    for mode, ctx in modes:
        with ctx():
            for f in calls.values():
                for _ in range(50):
                    f()
            rounds = {k: [] for k in calls}
            for _ in range(args.rounds):
                for k, f in calls.items():
                    t0 = time.perf_counter()
                    for _ in range(args.calls):
                        f()
                    rounds[k].append((time.perf_counter() - t0) / args.calls * 1e6)
        table[mode] = {k: statistics.median(u) for k, u in rounds.items()}
    print(f"| call | {' | '.join(m for m, _ in modes)} |")
    print(f"|---|{'--:|' * len(modes)}")
    for k in calls:
        print(f"| {k} | {' | '.join(f'{table[m][k]:.2f}' for m, _ in modes)} |")
    print("\nratios (issue 43 target <= 1.25):")
    for a, d in [("sparsek.linear (wrapper)", "F.linear"), ("BlockSparseLinear.forward", "nn.Linear"),
                 ("sparsek.bsr_mm (wrapper)", "torch.mm"), ("torch.ops.sparsek.linear", "F.linear"),
                 ("torch.ops.sparsek._linear_py (Python kernel)", "F.linear")]:
        print(f"- {a} / {d}: " + ", ".join(f"{m} {table[m][a] / table[m][d]:.2f}" for m, _ in modes))


if __name__ == "__main__":
    main()
