#!/usr/bin/env python3
"""What ``sparsek.set_programmatic_launch(True)`` buys a PyTorch decode loop: a stack of block-sparse layers
(LLaMA-7B's MLP shapes, 4096 -> 11008 -> 4096 repeated, 64-blocks at a given density, SiLU fused into the up
projections) run on 1, 8 or 16 tokens, eagerly and replayed from a CUDA graph, with programmatic launch off and
on. Every output of a programmatic run must equal the plain run's bit for bit. "Off" is the library's default: on an
H100/H200 the products still start early but wait before any read (``Policy::early_start``); "on" also reads the
weights before the wait.

Run on a GPU (the ``sparsek`` package importable)::

    python python/bench/programmatic.py [--layers 8] [--density 0.22] [--iters 50] [--md out.md]

Timing: CUDA events around each forward (eager) or each ``graph.replay()``, medians of ``--iters`` after 10
warm-up runs, the off and on contenders interleaved run by run. Eager forwards are bound by Python's launch
overhead (the GPU idles between launches), so there the setting has nothing to overlap; a graph replays the
launches back to back, which is where a product starts under the one before it.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

import sparsek
from sparsek.nn import BlockSparseLinear


def build(layers: int, density: float, seed: int) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    mods = []
    for i in range(layers):
        up = i % 2 == 0
        lin = torch.nn.Linear(4096 if up else 11008, 11008 if up else 4096, bias=False).cuda().half()
        mods.append(BlockSparseLinear.from_dense(lin, 64, density=density, activation="silu" if up else None))
    return torch.nn.Sequential(*mods)


def forward_eager(model, x):
    with torch.no_grad():
        return model(x)


def capture(model, x):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(2):
            model(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        y = model(x)
    return g, y


def time_once(fn) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3  # us


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--density", type=float, default=0.22)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--md", help="also write the table to this file")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("programmatic.py needs a GPU", file=sys.stderr)
        return 2
    info = sparsek.device_info()
    head = (
        f"{info['name']}, programmatic launch available: {info['programmatic_launch']}; {args.layers} layers "
        f"(4096 -> 11008 -> 4096 ...), bs 64, density {args.density:g}, f16; sparsek {sparsek.__version__}, "
        f"torch {torch.__version__}; medians of {args.iters} (µs per forward)"
    )
    model = build(args.layers, args.density, 7)
    rows = ["| tokens | mode | off | on | on / off |", "|--:|---|--:|--:|--:|"]
    for n in (1, 8, 16):
        x = torch.randn(n, 4096, device="cuda", dtype=torch.float16)
        runs = {}
        for on in (False, True):
            sparsek.set_programmatic_launch(on)
            g, y = capture(model, x)
            runs[on] = (g, y, forward_eager(model, x))
        sparsek.set_programmatic_launch(False)
        want = runs[False][2]
        for on in (False, True):
            g, y, eager = runs[on]
            g.replay()
            torch.cuda.synchronize()
            if not (torch.equal(eager, want) and torch.equal(y, want)):
                print(f"FAIL: {n} tokens, programmatic {on}: output differs from the plain eager one", file=sys.stderr)
                return 1
        for mode in ("eager", "graph"):
            times = {False: [], True: []}
            for i in range(10 + args.iters):
                for on in (False, True):
                    sparsek.set_programmatic_launch(on)
                    g = runs[on][0]
                    t = time_once(g.replay) if mode == "graph" else time_once(lambda: forward_eager(model, x))
                    if i >= 10:
                        times[on].append(t)
            sparsek.set_programmatic_launch(False)
            off, on_ = statistics.median(times[False]), statistics.median(times[True])
            rows.append(f"| {n} | {mode} | {off:.1f} | {on_:.1f} | {on_ / off:.3f} |")
            print(rows[-1], file=sys.stderr)
    out = head + "\n\n" + "\n".join(rows) + "\n"
    print(out)
    if args.md:
        with open(args.md, "w") as f:
            f.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
