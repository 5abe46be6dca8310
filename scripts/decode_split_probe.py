#!/usr/bin/env python3
"""How close can a block-sparse decode product get to the read floor when its work is cut into many small CTAs?
(issue 43 part 3; a measurement for the design, not a kernel of the library).

A Triton kernel for ``y = x @ W^T`` (W: BSR of 64-blocks, x: N x K row-major, N <= 16, y: N x M float32): one
program per (block row, part of ``P`` blocks), 4 warps, the part's blocks streamed through Triton's software
pipeline (``num_stages``), the part's 64 x N partial added into y with float32 atomics (so not deterministic: the
library's split rows reduce in a fixed order instead; this only asks what the smaller work units are worth). Timed
as the Python benches time (python/bench/decode_path.py): per call inside a CUDA graph of 48 calls over rotating
weight copies (at least 4, together at least 2x L2), median of 15 replays, beside ``sparsek.linear`` and the read
floor (python/bench/read_floor.py) on the same weights, for the LLaMA MLP layers at bs 64, 25% (equal rows). y is
not zeroed inside the timed graph (the atomics then add onto the last replay's sums: same work); the check zeroes it
first and compares with float64.

    python scripts/decode_split_probe.py [--tokens 1,16] [--parts 1,2,4,8,16,0] [--stages 1,3] [--det]
                                         [--square 8192 --density 0.22]

``--det`` adds the deterministic form of each part size: every part stores its partial into a slot of its own and a
second kernel adds the slots in part order (both kernels in the timed graph).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "bench"))
import decode_path as dp  # noqa: E402  (random_weight, graph_time)
import read_floor as rf  # noqa: E402

import sparsek  # noqa: E402


@triton.jit
def _bsr_parts(values, crow, col, x, out, n, K, M, parts, P: tl.constexpr, BS: tl.constexpr, BN: tl.constexpr,
               DET: tl.constexpr):
    """One part of ``P`` blocks of one block row: its 64 x N partial added into ``out`` (y) with atomics, or with
    ``DET`` stored into the part's own slot of ``out`` (parts x N x M, float32, every slot written: an empty part
    stores zeros), for _sum_parts to add in part order: deterministic."""
    pid = tl.program_id(0)
    row = pid // parts
    part = pid % parts
    start = tl.load(crow + row)
    end = tl.load(crow + row + 1)
    b0 = start + part * P
    b1 = tl.minimum(b0 + P, end)
    rm = tl.arange(0, BS)
    rk = tl.arange(0, BS)
    rn = tl.arange(0, BN)
    acc = tl.zeros((BS, BN), dtype=tl.float32)
    for b in range(b0, b1):
        c = tl.load(col + b)
        a = tl.load(values + b.to(tl.int64) * BS * BS + rm[:, None] * BS + rk[None, :])
        xb = tl.load(x + rn[None, :] * K + (c * BS + rk)[:, None], mask=rn[None, :] < n, other=0.0)
        acc += tl.dot(a, xb)
    at = rn[None, :] * M + (row * BS + rm)[:, None]
    if DET:
        tl.store(out + part.to(tl.int64) * n * M + at, acc, mask=rn[None, :] < n)
    elif b1 > b0:
        tl.atomic_add(out + at, acc, mask=rn[None, :] < n, sem="relaxed")


@triton.jit
def _sum_parts(ws, y, total, parts, BLOCK: tl.constexpr):
    """y[i] = sum over the parts of ws[part, i], in part order (i over N x M)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < total
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for q in range(parts):
        acc += tl.load(ws + q.to(tl.int64) * total + i, mask=m, other=0.0)
    tl.store(y + i, acc, mask=m)


def launch_det(pw, x, y, ws, P, stages):
    values, crow, col, m, k, longest = pw
    parts = max(1, -(-longest // P))
    _bsr_parts[(m // 64 * parts,)](values, crow, col, x, ws, x.shape[0], k, m, parts, P=P, BS=64, BN=16, DET=True,
                                   num_warps=4, num_stages=stages)
    total = x.shape[0] * m
    _sum_parts[(triton.cdiv(total, 1024),)](ws, y, total, parts, BLOCK=1024, num_warps=4)


def binomial_weight(m: int, k: int, density: float, gen) -> tuple:
    """A BSR weight of 64-blocks each kept with probability ``density`` (row lengths binomial, as the CLI's uniform
    pattern) and its dense twin, bf16."""
    mask = torch.rand(m // 64, k // 64, generator=gen) < density
    dense = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    dense *= mask.repeat_interleave(64, 0).repeat_interleave(64, 1).to(torch.bfloat16)
    dense = dense.cuda()
    return dense.to_sparse_bsr(64), dense


def prepare(w):
    """(values, crow, col, M, K, longest row): read once, outside any capture (no host sync inside a graph)."""
    crow = w.crow_indices()
    return (w.values(), crow, w.col_indices(), w.shape[0], w.shape[1], int((crow[1:] - crow[:-1]).max()))


def launch(pw, x, y, P, stages):
    values, crow, col, m, k, longest = pw
    parts = max(1, -(-longest // P)) if P else 1
    p = P if P else max(longest, 1)
    _bsr_parts[(m // 64 * parts,)](values, crow, col, x, y, x.shape[0], k, m, parts, P=p, BS=64, BN=16, DET=False,
                                   num_warps=4, num_stages=stages)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="1,16")
    ap.add_argument("--parts", default="1,2,4,8,16,0", help="blocks a part (0: whole rows)")
    ap.add_argument("--stages", default="1,3")
    ap.add_argument("--square", type=int, help="instead of the LLaMA layers: a square weight of this size")
    ap.add_argument("--density", type=float, default=0.22, help="with --square: each block kept with this chance")
    ap.add_argument("--det", action="store_true", help="also the deterministic form (slots + a summing kernel)")
    ap.add_argument("--calls", type=int, default=48)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("decode_split_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    dtype = torch.bfloat16
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    gen = torch.Generator().manual_seed(7)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}; graph us per "
          f"call (48 calls over rotated weights), median of {args.reps} replays")
    failed = False
    shapes = [(name, m, k, None) for name, m, k in dp.SHAPES]
    if args.square:
        shapes = [(f"{args.square}^2 {args.density:.0%}", args.square, args.square, args.density)]
    for name, m, k, density in shapes:
        weights = []
        while True:
            w, wd = dp.random_weight(m, k, dtype, gen) if density is None else binomial_weight(m, k, density, gen)
            weights.append((w, wd))
            stored = w.values().numel() * 2 + 4 * (w.col_indices().numel() + m // 64 + 1)
            if len(weights) >= 4 and len(weights) * stored >= 2 * l2:
                break
        copies = len(weights)
        prepared = [prepare(w) for w, _ in weights]
        for n in (int(t) for t in args.tokens.split(",")):
            x = torch.randn(n, k, generator=gen).to(dtype).cuda()
            y = torch.zeros(n, m, dtype=torch.float32, device="cuda")
            ref = x.double() @ weights[0][1].double().t()
            with torch.inference_mode():
                lin = dp.graph_time([lambda i=i: sparsek.linear(x, weights[i % copies][0]) for i in range(args.calls)],
                                    args.reps)
                floor = rf.ReadFloor(stored, n * k * 2, n * m * 2, torch.device("cuda", 0))
                fc = floor.copies(copies)
                fl = dp.graph_time([fc[i % copies] for i in range(args.calls)], args.reps)
            row = [f"{name} N={n}: floor {fl:.2f}", f"sparsek.linear {lin:.2f} ({fl / lin:.0%})"]
            for P in (int(p) for p in args.parts.split(",")):
                for st in (int(s) for s in args.stages.split(",")):
                    y.zero_()
                    launch(prepared[0], x, y, P, st)
                    torch.cuda.synchronize()
                    err = float(((y.double() - ref).abs() / (1e-2 * ref.abs() + 2e-3 * k**0.5)).max())
                    ok = err <= 1.0
                    failed |= not ok
                    us = dp.graph_time([lambda i=i: launch(prepared[i % copies], x, y, P, st)
                                        for i in range(args.calls)], args.reps)
                    row.append(f"P{P or 'row'}/s{st} {us:.2f} ({fl / us:.0%}){'' if ok else ' FAIL'}")
                    if P and args.det:  # the deterministic form: partials in slots, a second kernel adds them
                        longest = max(pw[5] for pw in prepared)
                        ws = torch.empty(max(1, -(-longest // P)) * n * m, dtype=torch.float32, device="cuda")
                        launch_det(prepared[0], x, y, ws, P, st)
                        torch.cuda.synchronize()
                        err = float(((y.double() - ref).abs() / (1e-2 * ref.abs() + 2e-3 * k**0.5)).max())
                        ok = err <= 1.0
                        failed |= not ok
                        us = dp.graph_time([lambda i=i: launch_det(prepared[i % copies], x, y, ws, P, st)
                                            for i in range(args.calls)], args.reps)
                        row.append(f"det P{P}/s{st} {us:.2f} ({fl / us:.0%}){'' if ok else ' FAIL'}")
            print(" | ".join(row), flush=True)
            del floor, fc
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
