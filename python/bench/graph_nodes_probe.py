"""Probe (issue 43 part 3): what the nodes around a captured launch cost a decode launch in a CUDA graph.

python python/bench/graph_nodes_probe.py [--calls 32 --replays 30]

A captured sparsek launch that balances its rows (split rows, the flat list, the sm_90a tile counter) took a
workspace of its own in the graph until 2026-11-29: an allocation node, a memset node zeroing its counters, the
kernel, a free node (since then: no memset node, the counters kept zeroed by the graph; docs/perf-notes.md, "Issue 43
part 3: the graph workspace without its memset node"). This probe puts those nodes (through the driver API, by
ctypes) around a launch that takes no workspace, a whole-row decode launch of an 11008 x 4096 bs-64 25% bf16 layer,
and times each form per launch inside one graph of `--calls` launches over 4 rotating weight copies (cold L2), median
of `--replays` replays:
- plain: the launch alone (what a workspace kept outside the graph's nodes gives);
- memset: a memset node zeroing 64 counters of a buffer made before the capture, then the launch;
- alloc+memset+free: the form until 2026-11-29 (1 MiB allocated in the graph, counters zeroed, the launch, freed);
- alloc+free: the allocation and free nodes without the memset (the form since: partial tiles in graph memory).
Then the library's own captured launches of 8192 x 8192 bs 128 at 10% and 22%, 1 and 16 tokens (balanced outside a
graph), in a graph against queued, with the plans printed.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import statistics
import sys

import torch

import sparsek
from sparsek.nn import BlockSparseLinear

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decode_path as dp  # noqa: E402 (the shared graph timing: every call once before the capture, as torch asks)

CU = ctypes.CDLL("libcuda.so.1")


def check(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what} failed: CUresult {rc}")


def alloc(nbytes, stream):
    p = ctypes.c_uint64()
    check(CU.cuMemAllocAsync(ctypes.byref(p), ctypes.c_size_t(nbytes), ctypes.c_void_p(stream)), "cuMemAllocAsync")
    return p.value


def memset32(ptr, words, stream):
    check(CU.cuMemsetD32Async(ctypes.c_uint64(ptr), ctypes.c_uint(0), ctypes.c_size_t(words),
                              ctypes.c_void_p(stream)), "cuMemsetD32Async")


def free(ptr, stream):
    check(CU.cuMemFreeAsync(ctypes.c_uint64(ptr), ctypes.c_void_p(stream)), "cuMemFreeAsync")


def layers(out_f, in_f, bs, density, copies, dev):
    return [BlockSparseLinear(in_f, out_f, bs, density, seed=11 + i, dtype=torch.bfloat16, device=dev).eval()
            for i in range(copies)]


def graph_time(body, calls, replays):
    """ms per launch: one graph of `calls` bodies, median over `replays` timed replays (decode_path's method)."""
    return dp.graph_time([functools.partial(lambda i: body(i, torch.cuda.current_stream().cuda_stream), i)
                          for i in range(calls)], replays) / 1000


def queued_time(body, calls, replays):
    """ms per launch queued back to back (the host may set this pace: a lower bound on the GPU's gaps)."""
    st = torch.cuda.current_stream().cuda_stream
    for i in range(4):
        body(i, st)
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for i in range(calls):
            body(i, st)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / calls)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=32)
    ap.add_argument("--replays", type=int, default=30)
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    rows = []
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, sparsek {sparsek.__version__}")

    # Nodes around a launch without a workspace.
    ls = layers(11008, 4096, 64, 0.25, 4, dev)
    xs = [torch.randn(1, 4096, dtype=torch.bfloat16, device=dev) for _ in range(4)]
    persist = torch.zeros(64, dtype=torch.int32, device=dev)

    def plain(i, st):
        ls[i % 4](xs[i % 4])

    def memset(i, st):
        memset32(persist.data_ptr(), 64, st)
        ls[i % 4](xs[i % 4])

    def alloc_memset_free(i, st):
        p = alloc(1 << 20, st)
        memset32(p + (1 << 19), 64, st)
        ls[i % 4](xs[i % 4])
        free(p, st)

    def alloc_free(i, st):
        p = alloc(1 << 20, st)
        ls[i % 4](xs[i % 4])
        free(p, st)

    with torch.no_grad():
        plain(0, torch.cuda.current_stream().cuda_stream)
        print("plan of the whole-row launch:", sparsek.last_plan())
        forms = [("plain", plain), ("memset", memset), ("alloc+memset+free", alloc_memset_free),
                 ("alloc+free", alloc_free)]
        for rnd in range(2):
            for name, body in forms:
                rows.append((f"11008x4096 bs64 25% N1 {name}", rnd, graph_time(body, args.calls, args.replays),
                             queued_time(body, args.calls, args.replays)))
        # The library's own captured balancing launches.
        for density in (0.10, 0.22):
            cs = layers(8192, 8192, 128, density, 4, dev)
            for n in (1, 16):
                xn = [torch.randn(n, 8192, dtype=torch.bfloat16, device=dev) for _ in range(4)]

                def lib(i, st, cs=cs, xn=xn):
                    cs[i % 4](xn[i % 4])

                lib(0, 0)
                eager_plan = sparsek.last_plan()
                g = graph_time(lib, args.calls, args.replays)
                captured_plan = sparsek.last_plan()
                q = queued_time(lib, args.calls, args.replays)
                rows.append((f"8192^2 bs128 {density:.0%} N{n} library", 0, g, q))
                print(f"8192^2 bs128 {density:.0%} N{n}\n  eager:    {eager_plan}\n  captured: {captured_plan}")
    print("\n| case | round | graph us/launch | queued us/launch |\n|---|---:|---:|---:|")
    for name, rnd, g, q in rows:
        print(f"| {name} | {rnd} | {1000 * g:.2f} | {1000 * q:.2f} |")


if __name__ == "__main__":
    main()
