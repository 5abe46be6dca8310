"""Probe (issue 45): the 4096-token MLP block's communication through torch symmetric memory instead of NCCL.

torchrun --nproc-per-node 2 python/bench/tp_symm_probe.py [--calls 30 --repeats 5]

Cases (bf16, bs 64, 25%, 4096 -> 11008 SiLU -> 4096, 4096 tokens), ms per call (max over ranks, median of rounds):
- 1gpu: the unsharded block on rank 0;
- nccl: shard_mlp with a bf16 all-reduce (the library today);
- symm-2shot / symm-1shot: the down partial written by the kernel into a symmetric buffer, all-reduced by
  torch.ops.symm_mem's two-shot / one-shot kernels;
- rs-ag: the down partial of the peer's token half stored by the kernel straight into the peer's symmetric buffer
  (NVLink), the own half locally, a barrier, the add, the own half copied into the peer (all-gather), a barrier;
- sp: sequence-parallel layout (input and output split by tokens): the input half copied to the peer on a side
  stream while up runs on the own half, then as rs-ag without the all-gather;
- pieces: the all-reduces alone, a 16 MB copy into the peer, the barrier, down's half product local vs into the peer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import traceback

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

from sparsek import distributed as sd
from sparsek.nn import BlockSparseLinear


def log(*a):
    if dist.get_rank() == 0:
        print(*a, file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--graph-calls", type=int, default=10)
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dev = torch.device("cuda", torch.cuda.current_device())
    group = dist.group.WORLD
    gname = group.group_name
    d, h, bs, T, dt = 4096, 11008, 64, args.tokens, torch.bfloat16
    half = T // 2
    peer = 1 - rank
    own, prow = slice(rank * half, (rank + 1) * half), slice(peer * half, (peer + 1) * half)

    up = BlockSparseLinear(d, h, bs, 0.25, activation="silu", seed=3, dtype=dt, device=dev)
    down = BlockSparseLinear(h, d, bs, 0.25, seed=4, dtype=dt, device=dev)
    mu, md = sd.shard_mlp(up, down, reduce_dtype=dt)
    V, C, I, hr = md.values, md.crow_indices, md.col_indices, md.in_features
    bias = md.bias
    g = torch.Generator().manual_seed(7)
    x = torch.randn(T, d, generator=g).to(dt).to(dev)
    with torch.no_grad():
        ref = down(up(x))

    S = symm_mem.empty((T, d), dtype=dt, device=dev)
    hS = symm_mem.rendezvous(S, group)
    B = symm_mem.empty((2 * half, d), dtype=dt, device=dev)  # [0, half): R (partials in), [half, 2 half): G (gather)
    hB = symm_mem.rendezvous(B, group)
    X = symm_mem.empty((T, d), dtype=dt, device=dev)  # the sp layout's gathered input
    hX = symm_mem.rendezvous(X, group)
    R_local, G_local = B[:half], B[half:]
    R_peer = hB.get_buffer(peer, (half, d), dt, 0)
    G_peer = hB.get_buffer(peer, (half, d), dt, half * d)
    X_peer_own = hX.get_buffer(peer, (half, d), dt, rank * half * d)
    log(f"backend {symm_mem.get_backend(dev)}; peer view ptr {R_peer.data_ptr():#x} device {R_peer.device}")
    side = torch.cuda.Stream()
    mm_out = torch.ops.sparsek.bsr_mm_out
    lin = torch.ops.sparsek.linear

    def f_1gpu():
        return down(up(x))

    def f_nccl():
        return md(mu(x))

    def f_symm2():
        hid = mu(x)
        mm_out(V, C, I, d, hr, hid.t(), 1.0, 0.0, S.t())
        torch.ops.symm_mem.two_shot_all_reduce_(S, "sum", gname)
        return S + bias

    def f_symm1():
        hid = mu(x)
        mm_out(V, C, I, d, hr, hid.t(), 1.0, 0.0, S.t())
        return torch.ops.symm_mem.one_shot_all_reduce(S, "sum", gname) + bias

    def f_rsag():
        hid = mu(x)
        mm_out(V, C, I, d, hr, hid[prow].t(), 1.0, 0.0, R_peer.t())
        L = lin(hid[own], V, C, I, hr, bias, 0)
        hB.barrier()
        out = torch.empty(T, d, dtype=dt, device=dev)
        torch.add(L, R_local, out=out[own])
        G_peer.copy_(out[own])
        hB.barrier()
        out[prow].copy_(G_local)
        return out

    x_own = x[own].contiguous()

    def f_sp():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            X_peer_own.copy_(x_own)
        hid_own = mu(x_own)
        torch.cuda.current_stream().wait_stream(side)
        hX.barrier()
        hid_peer = mu(X[prow])
        mm_out(V, C, I, d, hr, hid_peer.t(), 1.0, 0.0, R_peer.t())
        L = lin(hid_own, V, C, I, hr, bias, 0)
        hB.barrier()
        return L + R_local

    # Pieces.
    ar = torch.randn(T, d, generator=g).to(dt).to(dev)
    src16 = torch.randn(half, d, generator=g).to(dt).to(dev)
    dst16 = torch.empty_like(src16)
    hid_fixed = mu(x)
    Lbuf = torch.empty(half, d, dtype=dt, device=dev)

    pieces = {
        "ar-nccl-32MB": lambda: dist.all_reduce(ar),
        "ar-symm-2shot-32MB": lambda: torch.ops.symm_mem.two_shot_all_reduce_(S, "sum", gname),
        "ar-symm-1shot-32MB": lambda: torch.ops.symm_mem.one_shot_all_reduce(S, "sum", gname),
        "copy-16MB-to-peer": lambda: G_peer.copy_(src16),
        "copy-16MB-local": lambda: dst16.copy_(src16),
        "barrier": lambda: hB.barrier(),
        "up-4096": lambda: mu(x),
        "up-2048": lambda: mu(x_own),
        "down-4096-local": lambda: mm_out(V, C, I, d, hr, hid_fixed.t(), 1.0, 0.0, S.t()),
        "down-2048-local": lambda: mm_out(V, C, I, d, hr, hid_fixed[prow].t(), 1.0, 0.0, Lbuf.t()),
        "down-2048-into-peer": lambda: mm_out(V, C, I, d, hr, hid_fixed[prow].t(), 1.0, 0.0, R_peer.t()),
        "add-16MB": lambda: torch.add(Lbuf, R_local, out=dst16),
    }
    blocks = {"1gpu": (f_1gpu, ref, True), "nccl": (f_nccl, ref, False), "symm-2shot": (f_symm2, ref, False),
              "symm-1shot": (f_symm1, ref, False), "rs-ag": (f_rsag, ref, False), "sp": (f_sp, ref[own], False)}

    def check(name, fn, want):
        try:
            with torch.no_grad():
                for _ in range(2):
                    out = fn()
                torch.cuda.synchronize()
            err = float((out.double() - want.double()).abs().max())
            tol = 2.0 ** -6 * float(want.double().abs().max())
            ok = bool(torch.isfinite(out).all()) and err <= tol
            return ok, f"err {err:.3g} tol {tol:.3g}"
        except Exception as e:  # noqa: BLE001
            return False, f"{type(e).__name__}: {e}"[:300] + ("\n" + traceback.format_exc()[-800:] if rank == 0 else "")

    usable = {}
    for name, (fn, want, only0) in blocks.items():
        if only0:
            ok, msg = check(name, fn, want) if rank == 0 else (True, "")
        else:
            ok, msg = check(name, fn, want)
        dist.barrier()
        flags = torch.tensor([0.0 if ok else 1.0], device=dev)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        print(f"rank {rank} check {name}: {'ok' if ok else 'FAIL'} {msg}", file=sys.stderr, flush=True)
        if flags.item() == 0.0:
            usable[name] = (fn, only0)
    for name, fn in pieces.items():
        try:
            with torch.no_grad():
                fn()
            torch.cuda.synchronize()
            usable[name] = (fn, False)
        except Exception as e:  # noqa: BLE001
            print(f"rank {rank} piece {name}: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr, flush=True)
        dist.barrier()

    # CUDA graphs: --graph-calls calls of each case captured in one graph, replayed (the GPU's time, without the
    # host's per-op cost, which eager timing of these many-op blocks mostly measures).
    graphs = {}
    for name, (fn, only0) in list(usable.items()):
        active = not only0 or rank == 0
        err = None
        if active:
            try:
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s), torch.no_grad():
                    for _ in range(2):
                        fn()
                torch.cuda.current_stream().wait_stream(s)
                torch.cuda.synchronize()
                gr = torch.cuda.CUDAGraph()
                with torch.cuda.graph(gr), torch.no_grad():
                    for _ in range(args.graph_calls):
                        fn()
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                err = f"{type(e).__name__}: {str(e)[:200]}"
        dist.barrier()
        flags = torch.tensor([0.0 if err is None else 1.0], device=dev)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        if err is not None:
            print(f"rank {rank} graph {name}: {err}", file=sys.stderr, flush=True)
        if flags.item() == 0.0:
            graphs[name + " [graph]"] = ((lambda gr=gr: gr.replay()) if active else None, only0)
    times = {k: [] for k in list(usable) + list(graphs)}
    usable.update(graphs)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    for _ in range(args.repeats):
        for name, (fn, only0) in usable.items():
            with torch.no_grad():
                for _ in range(3):
                    if not only0 or rank == 0:
                        fn()
                torch.cuda.synchronize()
                dist.barrier()
                t = 0.0
                if not only0 or rank == 0:
                    ev[0].record()
                    reps = args.calls if not name.endswith("[graph]") else max(1, args.calls // args.graph_calls)
                    for _ in range(reps):
                        fn()
                    ev[1].record()
                    ev[1].synchronize()
                    t = ev[0].elapsed_time(ev[1]) / (reps * (args.graph_calls if name.endswith("[graph]") else 1))
                tt = torch.tensor([t], dtype=torch.float64, device=dev)
                dist.all_reduce(tt, op=dist.ReduceOp.MAX)
                times[name].append(tt.item())
    base = statistics.median(times["1gpu [graph]"]) if "1gpu [graph]" in times else None
    log(f"\n| case (T={T}) | ms per call (median, max over ranks) | min-max | vs 1 GPU |")
    log("|---|--:|--:|--:|")
    for name, v in times.items():
        m = statistics.median(v)
        sp = f"{base / m:.2f}x" if base and name.split(" ")[0] in blocks else ""
        log(f"| {name} | {m:.4f} | {min(v):.4f}-{max(v):.4f} | {sp} |")
    sys.stdout.flush()
    sys.stderr.flush()
    # No destroy_process_group (as bench_tp.py: the job hung there after NCCL collectives were captured).
    os._exit(0)


if __name__ == "__main__":
    main()
