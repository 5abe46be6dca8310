"""cuBLAS dense fp16 GEMM (fp32 accumulation) through PyTorch, timed with CUDA events: a quick baseline on a GPU
machine that has PyTorch. `sparsek bench` measures cuBLAS itself in the same process; this is only a cross-check."""
import sys
import torch

torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
for n in [int(x) for x in (sys.argv[1:] or ["8192", "4096"])]:
    a = torch.randn(n, n, dtype=torch.half, device="cuda")
    b = torch.randn(n, n, dtype=torch.half, device="cuda")
    for _ in range(10):
        a @ b
    times = []
    for _ in range(30):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    ms = times[len(times) // 2]
    print(f"torch cublas fp16 {n}^3: median {ms:.3f} ms, {2 * n**3 / ms / 1e9:.1f} TFLOPS")
