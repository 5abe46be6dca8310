#!/usr/bin/env python3
"""Issue 43: what the sm_90a kernel's C store and fused epilogue cost at many tokens, one launch each under ncu.

sparsek.linear (y = x W^T: C column-major; plain, with a bias, with bias + SiLU or GELU) against bsr_mm(W, x^T) (C row-major)
on 4096 x 5504 and 11008 x 4096 bs-64 25% bf16 weights at 4096 tokens; each call in an NVTX range. Run as:

    ncu --nvtx --nvtx-include "lin4096/" --nvtx-include "linbias4096/" ... (lin, linbias, linsilu, lingelu, mm x 4096, 11008) \
        --section SpeedOfLight --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis \
        --print-summary none python scripts/store_ncu.py

Records: docs/bench/2026-11-28-colmajor-store-ncu-h200.md, docs/perf-notes.md ("Issue 43: the bias epilogue and the
column-major store").
"""
import torch
import sparsek
torch.manual_seed(0)
for m, k in ((4096, 5504), (11008, 4096)):
    bs = 64
    mask = torch.rand(m // bs, k // bs) < 0.25
    dense = torch.randn(m, k).to(torch.bfloat16) * mask.repeat_interleave(bs, 0).repeat_interleave(bs, 1).to(torch.bfloat16)
    w = dense.cuda().to_sparse_bsr(bs)
    bias = torch.randn(m, device="cuda", dtype=torch.bfloat16)
    for n in (4096,):
        x = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        calls = {
            "lin": lambda: sparsek.linear(x, w),
            "linbias": lambda: sparsek.linear(x, w, bias),
            "linsilu": lambda: sparsek.linear(x, w, bias, "silu"),
            "lingelu": lambda: sparsek.linear(x, w, bias, "gelu_tanh"),
            "mm": lambda: sparsek.bsr_mm(w, x.t()),
        }
        for _ in range(3):
            for f in calls.values():
                f()
        torch.cuda.synchronize()
        ref = (x.float() @ dense.cuda().float().t())
        y1 = calls["lin"]().float(); y2 = calls["mm"]().float().t()
        print(m, k, n, "lin err", (y1 - ref).abs().max().item(), "mm err", (y2 - ref).abs().max().item())
        for name, f in calls.items():
            torch.cuda.nvtx.range_push(f"{name}{m}")
            f()
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
print("done")
