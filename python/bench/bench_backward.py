"""The backward products from PyTorch against STK (the peer MegaBlocks trains with) and dense cuBLAS (issue 44).

Same tensors, same process, interleaved round by round: for a BSR weight W (M x K, f16, 128-blocks as STK requires)

- forward   ``W @ B``              sparsek ``bsr_mm``       STK ``dsd(W, B)``        dense ``torch.mm(W_dense, B)``
- A^T @ B   ``W^T @ G`` (dX)        sparsek ``bsr_mm_t``     STK ``dsd(W.t(), G)``    dense ``torch.mm(W_dense.t(), G)``
- SDDMM     ``(X @ Y)`` at W's blocks (dW)  sparsek ``sddmm(X, Y^T)``  STK ``sdd(X, Y, W)``  dense ``torch.mm(X, Y)``

with B, G (M x N), X (M x T) and Y (T x K) row-major. Every result is checked against the dense product (STK's and
sparsek's at W's blocks) before anything is timed. CUDA events around each call (each runs for well over 50 us),
medians of ``--iters`` rounds after warm-up. Effective TFLOPS count the stored blocks only
(``2 * nnzb * bs^2 * N``). A markdown table and a JSON record (device, driver, torch, date, commit) are written.

    python python/bench/bench_backward.py --md out.md --json out.json    # STK importable (PYTHONPATH) or skipped
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess

import torch

import sparsek

try:
    import stk  # noqa: F401  (stanford-stk, from PyPI)
    import stk.ops
    STK = True
except Exception as e:  # pragma: no cover (reported in the output)
    STK = f"STK not importable: {e}"

CASES = [  # (M, K, N or T, bs, density)
    (8192, 8192, 8192, 128, 0.22),
    (8192, 8192, 8192, 128, 0.10),
]


def bsr(m, k, bs, density, seed, device):
    g = torch.Generator().manual_seed(seed)
    br, bc = m // bs, k // bs
    keep = torch.rand(br, bc, generator=g) < density
    crow = torch.zeros(br + 1, dtype=torch.int64)
    crow[1:] = keep.sum(1).cumsum(0)
    col = keep.nonzero()[:, 1].contiguous()
    values = torch.randn(int(keep.sum()), bs, bs, generator=g).to(torch.float16)
    return values.to(device), crow.to(device), col.to(device), keep


def dense_of(values, crow, col, m, k, bs):
    d = torch.zeros(m // bs, bs, k // bs, bs, dtype=values.dtype, device=values.device)
    rows = torch.repeat_interleave(torch.arange(m // bs, device=values.device), crow.diff())
    d[rows, :, col, :] = values
    return d.reshape(m, k)


def stk_matrix(values, crow, col, m, k):
    rows = torch.repeat_interleave(torch.arange(crow.numel() - 1, device=crow.device), crow.diff())
    return stk.Matrix((m, k), values, rows.to(torch.int16), col.to(torch.int16), crow.to(torch.int32))


def time_ms(fns, iters, warmup=3):
    """Per contender, the median of its event-timed calls, interleaved round by round."""
    for _ in range(warmup):
        for f in fns:
            f()
    ev = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
          for _ in fns]
    for i in range(iters):
        for j, f in enumerate(fns):
            ev[j][i][0].record()
            f()
            ev[j][i][1].record()
    torch.cuda.synchronize()
    return [statistics.median(s.elapsed_time(e) for s, e in row) for row in ev]


def check(name, got, want, scale):
    err = (got.float() - want.float()).abs().max().item()
    ok = err <= 2e-2 * scale
    print(f"  check {name}: max abs err {err:.3e} (scale {scale:.3e}) {'ok' if ok else 'FAIL'}")
    if not ok:
        raise SystemExit(f"{name}: wrong result")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--md")
    ap.add_argument("--json")
    args = ap.parse_args()
    dev = torch.device("cuda")
    rows_out = []
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, sparsek {sparsek.__file__}, STK {STK}")
    for (m, k, n, bs, density) in CASES:
        values, crow, col, keep = bsr(m, k, bs, density, 1, dev)
        nnzb = values.shape[0]
        flops = 2 * nnzb * bs * bs * n
        w = dense_of(values, crow, col, m, k, bs)
        b = torch.randn(k, n, device=dev, dtype=torch.float16)
        g = torch.randn(m, n, device=dev, dtype=torch.float16)
        x = torch.randn(m, n, device=dev, dtype=torch.float16)
        y = torch.randn(n, k, device=dev, dtype=torch.float16)
        mm = torch.ops.sparsek.bsr_mm.default
        mm_t = torch.ops.sparsek.bsr_mm_t.default
        sddmm = torch.ops.sparsek.sddmm.default
        ops = {
            "forward": (lambda: mm(values, crow, col, m, k, b, 1.0, None), lambda: torch.mm(w, b)),
            "A^T @ B": (lambda: mm_t(values, crow, col, m, k, g, 1.0, None, False), lambda: torch.mm(w.t(), g)),
            "SDDMM": (lambda: sddmm(x, y.t(), crow, col, m, k, bs, 1.0, None), lambda: torch.mm(x, y)),
        }
        if STK is True:
            sw = stk_matrix(values, crow, col, m, k)
            peers = {
                "forward": lambda: stk.ops.dsd(sw, b),
                "A^T @ B": lambda: stk.ops.dsd(sw.t(), g),
                "SDDMM": lambda: stk.ops.sdd(x, y, sw),
            }
        else:
            peers = {}
        for name, (ours, dense) in ops.items():
            want = dense()
            got = ours()
            mask = keep.to(dev).repeat_interleave(bs, 0).repeat_interleave(bs, 1)
            scale = want.float().abs().max().item()
            if name == "SDDMM":
                check(f"sparsek {name}", dense_of(got, crow, col, m, k, bs), want * mask, scale)
            else:
                check(f"sparsek {name}", got, want, scale)
            fns = [ours, dense]
            if name in peers:
                p = peers[name]()
                pd = stk.ops.to_dense(p) if name == "SDDMM" else p
                check(f"STK {name}", pd, want * mask if name == "SDDMM" else want, scale)
                fns.append(peers[name])
            t = time_ms(fns, args.iters)
            row = {"case": f"{m}x{k}x{n} bs {bs} {density:.0%}", "op": name, "sparsek_ms": t[0], "dense_ms": t[1],
                   "stk_ms": t[2] if len(t) > 2 else None, "sparsek_tflops": flops / t[0] / 1e9}
            rows_out.append(row)
            stk_txt = f", STK {t[2]:.3f} ms (sparsek {t[2] / t[0]:.2f}x)" if len(t) > 2 else ""
            print(f"{row['case']} {name}: sparsek {t[0]:.3f} ms, dense {t[1]:.3f} ms ({t[1] / t[0]:.2f}x){stk_txt}")
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=False).stdout.strip() or os.environ.get("SPARSEK_COMMIT", "unknown")
    except OSError:
        commit = os.environ.get("SPARSEK_COMMIT", "unknown")
    header = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "date": datetime.date.today().isoformat(), "commit": os.environ.get("SPARSEK_COMMIT", commit),
              "stk": STK if STK is True else str(STK)}
    lines = [f"# Backward products from PyTorch vs STK and dense ({header['device']}, {header['date']}, "
             f"commit {header['commit']}, torch {header['torch']})", "",
             "| case | op | sparsek ms | STK ms | dense ms | vs STK | vs dense | sparsek TFLOPS |", "|---|---|---|---|---|---|---|---|"]
    for r in rows_out:
        stk_ms = f"{r['stk_ms']:.3f}" if r["stk_ms"] else "-"
        vs = f"{r['stk_ms'] / r['sparsek_ms']:.2f}" if r["stk_ms"] else "-"
        lines.append(f"| {r['case']} | {r['op']} | {r['sparsek_ms']:.3f} | {stk_ms} | {r['dense_ms']:.3f} | {vs} | "
                     f"{r['dense_ms'] / r['sparsek_ms']:.2f} | {r['sparsek_tflops']:.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.md:
        open(args.md, "w").write(text)
    if args.json:
        json.dump({"header": header, "rows": rows_out}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
