"""Where symmetric memory beats NCCL's collectives (issue 45): the tensor-parallel MLP block at several token counts.

torchrun --nproc-per-node 2 python/bench/tp_comm_sweep.py [--tokens 64,256,1024,4096] [--md OUT.md]

bf16, bs 64, 25%, 4096 -> 11008 (SiLU) -> 4096; four blocks at each token count, each eager and as a CUDA graph
(10 calls captured, replayed): ``replicated`` (:func:`sparsek.distributed.shard_mlp`, bf16 reduction, the whole
output on every rank) with ``comm="nccl"`` (all-reduce) and ``comm="symmetric"`` (reduce-scatter by the kernel's
stores into the peer, all-gather by the copy engines), and ``seqpar`` (:func:`sequence_parallel_mlp`: tokens split
at both ends) with both. ms per call, max over ranks, median of ``--repeats`` interleaved rounds; the one-GPU block
(rank 0) for reference. Every output is checked against the one-GPU block first. Sets ``SYMMETRIC_MIN_TOKENS``
(``comm="auto"``'s threshold, sparsek/distributed.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.distributed as dist

from sparsek import distributed as sd
from sparsek.nn import BlockSparseLinear


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="64,256,512,1024,2048,4096")
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--md")
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dev = torch.device("cuda", torch.cuda.current_device())
    d, h, bs, dt = 4096, 11008, 64, torch.bfloat16
    up = BlockSparseLinear(d, h, bs, 0.25, activation="silu", seed=3, dtype=dt, device=dev)
    down = BlockSparseLinear(h, d, bs, 0.25, seed=4, dtype=dt, device=dev)
    blocks = {}
    for comm in ("nccl", "symmetric"):
        blocks[f"replicated-{comm}"] = sd.shard_mlp(up, down, reduce_dtype=dt, comm=comm)
        blocks[f"seqpar-{comm}"] = sd.sequence_parallel_mlp(up, down, reduce_dtype=dt, comm=comm)
    gen = torch.Generator().manual_seed(11)
    cases = []  # (tokens, name, fn, only rank 0)
    failures = []
    for t in [int(v) for v in args.tokens.split(",")]:
        x = torch.randn(t, d, generator=gen).to(dt).to(dev)
        mine = slice(rank * t // world, (rank + 1) * t // world)
        xm = x[mine].contiguous()
        with torch.no_grad():
            ref = down(up(x))
        fns = {"1gpu": (lambda x=x: down(up(x)), ref, True)}
        for name, b in blocks.items():
            if name.startswith("replicated"):
                u, dn = b
                fns[name] = (lambda x=x, u=u, dn=dn: dn(u(x)), ref, False)
            else:
                fns[name] = (lambda xm=xm, b=b: b(xm), ref[mine], False)
        for name, (fn, want, only0) in fns.items():
            ok = True
            if not only0 or rank == 0:
                with torch.no_grad():
                    out = fn()
                err = float((out.double() - want.double()).abs().max())
                ok = bool(torch.isfinite(out).all()) and err <= 2.0 ** -6 * float(want.double().abs().max())
            flag = torch.tensor([0.0 if ok else 1.0], device=dev)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if flag.item():
                failures.append(f"{name} at {t} tokens")
                continue
            cases.append((t, name, fn, only0))
            # The graph: 10 calls captured after warm-up on a side stream.
            gr = None
            if not only0 or rank == 0:
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s), torch.no_grad():
                    for _ in range(2):
                        fn()
                torch.cuda.current_stream().wait_stream(s)
                gr = torch.cuda.CUDAGraph()
                with torch.cuda.graph(gr), torch.no_grad():
                    for _ in range(10):
                        fn()
            torch.cuda.synchronize()
            dist.barrier()
            cases.append((t, name + " [graph]", (lambda gr=gr: gr.replay()) if gr is not None else None, only0))
    times = {(t, n): [] for t, n, _, _ in cases}
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    for _ in range(args.repeats):
        for t, name, fn, only0 in cases:
            active = not only0 or rank == 0
            graph = name.endswith("[graph]")
            reps = max(1, args.calls // 10) if graph else args.calls
            with torch.no_grad():
                torch.cuda.synchronize()
                dist.barrier()
                ms = 0.0
                if active:
                    for _ in range(2):
                        fn()
                    ev[0].record()
                    for _ in range(reps):
                        fn()
                    ev[1].record()
                    ev[1].synchronize()
                    ms = ev[0].elapsed_time(ev[1]) / (reps * (10 if graph else 1))
            tt = torch.tensor([ms], dtype=torch.float64, device=dev)
            dist.all_reduce(tt, op=dist.ReduceOp.MAX)
            times[(t, name)].append(tt.item())
    if rank == 0:
        import datetime
        import subprocess

        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True).stdout.split("\n")[0].strip()
        except OSError:
            driver = "?"
        tokens = sorted({t for t, _, _, _ in cases})
        names = []
        for _, n, _, _ in cases:
            if n not in names:
                names.append(n)
        lines = [f"# tp_comm_sweep: {torch.cuda.get_device_name()} x{world}, driver {driver}, torch {torch.__version__}, "
                 f"commit {os.environ.get('SPARSEK_COMMIT', '?')}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}",
                 "", "ms per call, max over ranks, median of rounds. Failures: " + (", ".join(failures) or "none"), "",
                 "| block | " + " | ".join(f"{t} tok" for t in tokens) + " |", "|---|" + "--:|" * len(tokens)]
        for n in names:
            row = [times.get((t, n)) for t in tokens]
            lines.append(f"| {n} | " + " | ".join("-" if not v else f"{statistics.median(v):.4f}" for v in row) + " |")
        md = "\n".join(lines) + "\n"
        print(md)
        if args.md:
            with open(args.md, "w") as f:
                f.write(md)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if failures else 0)  # (no destroy_process_group: see bench_tp.py)


if __name__ == "__main__":
    main()
