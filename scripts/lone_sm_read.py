"""What one CTA alone on its SM streams from HBM at most (issue 12 step 37, docs/perf-notes.md).

A Triton read kernel: G programs, each reading its own contiguous chunk in tiles of BLOCK f32 (evict-first), the
loads pipelined by `tl.range(num_stages)`, the windows rotated over a 2 GiB buffer so that no launch finds its bytes
in L2; CUDA events around each launch, the median of 10 after 2 warm-up. Prints per configuration the time, the
bandwidth per CTA and in all. With G = 1, 4 or 16 every CTA has an SM to itself: that is the pace a CTA left alone
with a long block row could reach, against sparsek's (the lone CTAs of `sparsek bench --decode --case
256,8,16384,64,0.22 --split off`).

    python3 scripts/lone_sm_read.py        (a CUDA GPU, torch and triton)
"""
import statistics

import torch
import triton
import triton.language as tl

@triton.jit
def read_chunk(x, out, per_cta, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    base = x + pid.to(tl.int64) * per_cta
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    offs = tl.arange(0, BLOCK)
    for i in tl.range(0, per_cta, BLOCK, num_stages=STAGES):
        acc += tl.load(base + i + offs, eviction_policy="evict_first")
    tl.store(out + pid * BLOCK + offs, acc)

buf = torch.empty(2 << 28, dtype=torch.float32, device="cuda")  # 2 GiB
buf.uniform_()
out = torch.empty(1 << 22, dtype=torch.float32, device="cuda")
print("G  warps BLOCK stages | per CTA MB | us median | GB/s per CTA | GB/s total")
for G, per_cta_mb in [(1, 4), (4, 4), (16, 4), (132, 2), (264, 1)]:
    for warps, BLOCK, stages in [(4, 2048, 2), (4, 2048, 4), (4, 4096, 4), (8, 4096, 4), (8, 8192, 3), (16, 8192, 4)]:
        per_cta = per_cta_mb * (1 << 20) // 4
        window = G * per_cta
        nwin = buf.numel() // window
        ts = []
        for rep in range(12):
            w = buf[(rep % nwin) * window:]
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            read_chunk[(G,)](w, out, per_cta, BLOCK=BLOCK, STAGES=stages, num_warps=warps)
            e.record(); e.synchronize()
            if rep >= 2: ts.append(s.elapsed_time(e) * 1e3)
        t = statistics.median(ts)
        print(f"{G:4d} {warps:3d} {BLOCK:5d} {stages} | {per_cta_mb} | {t:9.1f} | {per_cta*4/t/1e3:7.1f} | {G*per_cta*4/t/1e3:8.1f}", flush=True)
