#!/usr/bin/env python3
"""Issue 43, part 4: is the Python decode path the fast path? ``sparsek.linear`` at 1-64 tokens (x row-major, y in
the input dtype, with and without bias and activation) against the configuration the CLI's decode grid measures
(``bsr_mm`` with a row-major ``b`` and a float32 result), in one process, on the same weights.

Each configuration is timed per call inside a CUDA graph of ``--calls`` calls cycling over enough weights of the
layer's shape (each its own random structure and values; at least 4, and together at least twice the GPU's L2) that no call finds
its weight in L2; the graph is replayed ``--reps`` times, median per call. Every configuration's output is checked
against the float64 product of the same low-precision inputs first (``|got - ref| <= atol + rtol * |ref|``, atol
scaled with sqrt(K)); a failed check makes the exit status 1.

Configurations (``y^T = W x^T``; W is M x K, x is N x K):

- ``cli``: ``bsr_mm(W, b)`` with ``b`` a contiguous K x N tensor (row-major B) and ``out_dtype=torch.float32``: the
  decode grid's sparsek contender (which runs f16; here the run's dtype);
- ``linear``: ``sparsek.linear(x, W)``: B is x read column-major, C is y (N x M, the input dtype) written
  column-major;
- ``linear+bias+silu``: the same with a bias and ``activation="silu"`` fused;
- ``bsr_mm(x.t())``: ``bsr_mm(W, x.t())``: column-major B, a row-major M x N result of the input dtype;
- ``dense``: ``F.linear(x, W_dense)`` (cuBLAS on the weight expanded to dense);
- ``read floor``: a kernel reading ``linear``'s bytes (each weight copy's stored values and u32 indices, x) and
  writing y, and nothing else (python/bench/read_floor.py; the CLI decode grid's reference); "linear of read floor"
  is its time over ``linear``'s (issue 43 part 3 asks at least 90% in graph mode, for the H100).

Rate: the bytes a product must move once (W's stored values and u32 indices, x, y at its dtype) over the time.

    python python/bench/decode_path.py [--dtype bf16|f16] [--tokens 1,4,16,64] [--json out.json] [--md out.md]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import sparsek

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import read_floor as rf  # noqa: E402

SHAPES = (("up", 11008, 4096), ("down", 4096, 11008))
BS, DENSITY = 64, 0.25
RTOL, ATOL_PER_SQRT_K = 1e-2, 2e-3


def random_weight(m: int, k: int, dtype, gen) -> tuple[torch.Tensor, torch.Tensor]:
    """A BSR weight of ``DENSITY`` of its blocks (every block row the same count, random columns) and its dense twin."""
    r, c = m // BS, k // BS
    per_row = max(1, round(DENSITY * c))
    mask = torch.zeros(r, c, dtype=torch.bool)
    for i in range(r):
        mask[i, torch.randperm(c, generator=gen)[:per_row]] = True
    dense = torch.randn(m, k, generator=gen).to(dtype)
    dense *= mask.repeat_interleave(BS, 0).repeat_interleave(BS, 1).to(dtype)
    dense = dense.cuda()
    return dense.to_sparse_bsr(BS), dense


def graph_time(calls: list, reps: int) -> float:
    """Median µs per call of ``calls`` captured in one CUDA graph, replayed ``reps`` times."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # every weight's structure checked (and pinned) before the capture, as torch asks
        for f in calls:
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in calls:
            f()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / len(calls))
    return statistics.median(times)


def check(got: torch.Tensor, ref: torch.Tensor, k: int, scale: float) -> float:
    """Max violation ratio of ``|got - ref| <= atol + rtol |ref|`` (<= 1 passes; NaN fails)."""
    atol = ATOL_PER_SQRT_K * math.sqrt(k) * scale
    err = (got.double() - ref).abs() / (atol + RTOL * ref.abs())
    return float("inf") if torch.isnan(got).any() else float(err.max())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", choices=("bf16", "f16"), default="bf16")
    ap.add_argument("--tokens", default="1,4,16,64")
    ap.add_argument("--calls", type=int, default=48, help="calls per graph")
    ap.add_argument("--reps", type=int, default=15, help="graph replays")
    ap.add_argument("--json")
    ap.add_argument("--md")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("decode_path: no CUDA device; this benchmark times CUDA graphs only", file=sys.stderr)
        return 2
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    tokens = [int(t) for t in args.tokens.split(",")]
    props = torch.cuda.get_device_properties(0)
    l2 = props.L2_cache_size
    gen = torch.Generator().manual_seed(43)
    header = (f"{props.name}, torch {torch.__version__}, sparsek {sparsek.__version__}, {args.dtype}, "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {os.environ.get('SPARSEK_COMMIT', 'unknown')}")
    print(header, file=sys.stderr)
    records, failed = [], False
    for name, m, k in SHAPES:
        stored = None
        weights = []
        while True:
            w, wd = random_weight(m, k, dtype, gen)
            weights.append((w, wd, (torch.randn(m, generator=gen) * 0.1).to(dtype).cuda()))
            stored = w.values().numel() * w.values().element_size() + 4 * (w.col_indices().numel() + m // BS + 1)
            if len(weights) >= 4 and len(weights) * stored >= 2 * l2:
                break
        copies = len(weights)
        for n in tokens:
            xs = [torch.randn(n, k, generator=gen).to(dtype).cuda() for _ in range(copies)]
            bs_row = [x.t().contiguous() for x in xs]  # K x N row-major: the CLI's B
            configs = {
                "cli": (lambda i: sparsek.bsr_mm(weights[i][0], bs_row[i], out_dtype=torch.float32), 4, False),
                "linear": (lambda i: sparsek.linear(xs[i], weights[i][0]), dtype.itemsize, True),
                "linear+bias+silu": (
                    lambda i: sparsek.linear(xs[i], weights[i][0], weights[i][2], "silu"), dtype.itemsize, True),
                "bsr_mm(x.t())": (lambda i: sparsek.bsr_mm(weights[i][0], xs[i].t()), dtype.itemsize, False),
                "dense": (lambda i: F.linear(xs[i], weights[i][1]), dtype.itemsize, True),
            }
            rec = {"shape": name, "m": m, "k": k, "n": n, "copies": copies, "stored_bytes": stored, "configs": {}}
            scale = float(xs[0].abs().max()) * float(weights[0][0].values().abs().max())
            for cname, (f, out_size, transposed) in configs.items():
                y = f(0)
                ref = xs[0].double() @ weights[0][1].double().t()
                if cname == "linear+bias+silu":
                    ref = F.silu(ref + weights[0][2].double())
                got = y if transposed else y.t()
                viol = check(got, ref, k, scale)
                ok = viol <= 1.0
                failed |= not ok
                with torch.inference_mode():
                    us = graph_time([lambda i=i: f(i % copies) for i in range(args.calls)], args.reps)
                moved = stored + n * k * dtype.itemsize + n * m * out_size
                rec["configs"][cname] = {"us": us, "gbps": moved / us / 1e3, "check": "pass" if ok else f"FAIL {viol:.2f}"}
                print(f"  {name} N={n:<3} {cname:<18} {us:8.2f} us  {moved / us / 1e3:7.0f} GB/s  "
                      f"{rec['configs'][cname]['check']}", file=sys.stderr)
            floor = rf.ReadFloor(stored, n * k * dtype.itemsize, n * m * dtype.itemsize, torch.device("cuda", 0))
            fcalls = floor.copies(copies)
            with torch.inference_mode():
                us = graph_time([fcalls[i % copies] for i in range(args.calls)], args.reps)
            moved = stored + n * k * dtype.itemsize + n * m * dtype.itemsize
            rec["configs"]["read floor"] = {"us": us, "gbps": moved / us / 1e3, "check": "n/a"}
            print(f"  {name} N={n:<3} {'read floor':<18} {us:8.2f} us  {moved / us / 1e3:7.0f} GB/s", file=sys.stderr)
            records.append(rec)
            del xs, bs_row, floor, fcalls
    names = list(records[0]["configs"])
    lines = [f"# Python decode path vs the CLI's configuration ({header})", "",
             f"bs {BS}, {DENSITY:.0%} of blocks; per call inside a CUDA graph of {args.calls} calls over rotating weight "
             f"copies (>= 4, together >= 2x L2), median of {args.reps} replays; GB/s on the bytes moved once.", "",
             "| layer | N | " + " | ".join(f"{c} µs (GB/s)" for c in names)
             + " | linear / cli | linear of read floor |",
             "|---|--:|" + "--:|" * (len(names) + 2)]
    for r in records:
        c = r["configs"]
        cells = [f"{c[x]['us']:.2f} ({c[x]['gbps']:.0f})" + ("" if c[x]["check"] in ("pass", "n/a") else " !")
                 for x in names]
        lines.append(f"| {r['shape']} {r['m']}x{r['k']} | {r['n']} | " + " | ".join(cells)
                     + f" | {c['linear']['us'] / c['cli']['us']:.2f}"
                     + f" | {c['read floor']['us'] / c['linear']['us']:.1%} |")
    table = "\n".join(lines)
    print(table)
    if args.md:
        open(args.md, "w").write(table + "\n")
    if args.json:
        json.dump({"header": header, "records": records}, open(args.json, "w"), indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
