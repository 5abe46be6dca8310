#!/usr/bin/env python3
"""What a PyTorch user sees in eager mode: sparsek's layers, a decode stack and a small encoder against dense (issue 43,
parts 2 and 5). The method in full: docs/BENCHMARKS.md, "Eager PyTorch".

Run on a GPU (the ``sparsek`` package importable, e.g. ``PYTHONPATH=python``)::

    python python/bench/bench_eager.py                       # bf16, every section, ~2-3 minutes on an H100
    python python/bench/bench_eager.py --dtype f16 --json out.json --md out.md
    python python/bench/bench_eager.py --device cpu --quick  # smoke test: small shapes, CUDA-only parts skipped

Sections (``--only layers,stack,encoder``), seeded per case, fresh random inputs: ``layers``: 11008 x 4096 and
4096 x 11008, 64-blocks at 25% (bench_torch's uniform ``random_bsr``), 1 and 16 tokens: ``sparsek.linear``,
``BlockSparseLinear`` over the same BSR weight, dense ``F.linear`` on the weight expanded (zeros included), PyTorch's
Triton ``bsr_dense_mm(w, x.t())`` (``y^T``; where it cannot run: reported, not fatal). ``stack``: 8 layers of
``x = x + down(silu(up(x)))`` at width 4096 / 11008, ``BlockSparseLinear.from_dense(..., 64, density=0.25)`` (SiLU
fused) against its dense twin (the same module class over ``nn.Linear``, the unpruned weights), 1 and 16 tokens.
``encoder``: 6 post-LN layers, width 384, FFN 1536, 12 heads, ``F.scaled_dot_product_attention``, 64 x 128 tokens,
every Linear a ``BlockSparseLinear`` of 32-blocks at 25% (GELU fused) against the dense twin.

Per contender, under ``torch.inference_mode()`` and ``torch.no_grad()``: the check against float64 (in each mode,
and of a CUDA graph's output; in the models every Linear also on its own input); the eager wall time per call of
``--calls`` (1000) back-to-back calls then one synchronize, and the host time per call (until the last call
returned), interleaved across contenders, median of ``--rounds`` (7), a layer's calls cycling over weight copies
that hold 2x L2; on CUDA, the graph time per call (``--graph-calls`` (64) calls over the copies for a layer, one
forward for a model, in one CUDA graph) and the kernel time per call (``torch.profiler``'s device activities over
``--kernel-calls`` (10) calls, named; at the end of the run). Speedups over dense, and issue 43's part 2 targets
as PASS/MISS lines.

``--quick``: small shapes, 50 calls, 3 rounds. ``--json`` / ``--md``: every number with bench_torch's run header
(GPU, driver, torch, commit from ``$SPARSEK_COMMIT``, date). Progress to stderr, the tables to stdout. Exit status 1
on a failed check or a sparsek/dense error (eager or in a graph), 2 for bad arguments or no GPU.
"""

import argparse
import functools
import json
import math
import os
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch as bt  # noqa: E402 (the shared method: random_bsr, check_close, Contender, run header)
import read_floor as rf  # noqa: E402 (the read floor: issue 43 part 3's reference)

import sparsek  # noqa: E402
import sparsek._ops  # noqa: E402
from sparsek.nn import BlockSparseLinear  # noqa: E402

SECTIONS = ("layers", "stack", "encoder")
MODES = (("inference_mode", torch.inference_mode), ("no_grad", torch.no_grad))
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
FATAL = ("sparsek.linear", "BlockSparseLinear", "dense")  # a failure of these fails the run (Triton's is reported)
# Tolerances in units of the dtype's unit roundoff u (module docstring): one product (bench_torch's for f16), and a
# model whose reference rounds where the model does.
LAYER_RTOL_U, LAYER_ATOL_U = 4.0, 0.2
MODEL_RTOL_U, MODEL_ATOL_U = 8.0, 4.0
# A model's whole output is checked x this; every Linear in it is checked on its own input with the layer tolerances.
# The encoder: attention and layer norms in the dtype (flash attention rounds its probabilities) over 6 layers; on the
# CPU at full size the worst element reached 1.8x the unscaled tolerance (f16, dense).
MODEL_TOL_SCALE = {"stack": 2.0, "encoder": 8.0}
# Weight copies a layer's calls cycle over: enough for 2x L2, at most this (--quick's small weights on a GPU: sparsek
# remembers 256 checked structures, and the printed bytes then show that the copies fit in L2).
MAX_COPIES = 32
TARGETS = {"layers": 1.5, "stack": 1.0, "encoder": 1.0}  # issue 43 part 2: eager speedup over dense (stack: >)
# Issue 43 part 3 (graph mode, weights of at least 8 MB of stored blocks, N <= 16; stated for the H100): the read
# floor's graph time / sparsek's at least this, and the speedup over dense at least 0.8 / density.
FLOOR_TARGET, FLOOR_MIN_BYTES = 0.9, 8e6
SPARSE = ("sparsek.linear", "BlockSparseLinear")


@dataclass
class Eager(bt.Contender):
    """A contender (``run``, ``check``, ``skip``) and, for the layers, ``copies(n)``: ``n`` calls over distinct weight
    copies of ``copy_bytes`` each, for the rotated CUDA graph."""

    copies: Optional[Callable[[int], list]] = None
    copy_bytes: int = 0


class Ctx(bt.Run):
    """bench_torch's run (options, device, failures, Triton's kernel or why not, ``case``) with the dtype, its unit
    roundoff u, the L2 size, and the contenders to profile at the end of the run (so that the profiler, CUPTI, is in
    no other measurement and no graph capture)."""

    def __init__(self, args):
        args.iters, args.warmup = args.rounds, 0  # what bench_torch's Run and run header read
        super().__init__(args, torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu"))
        self.dtype = DTYPES[args.dtype]
        self.u = UNIT_ROUNDOFF[self.dtype]
        self.l2 = torch.cuda.get_device_properties(self.device).L2_cache_size if self.cuda else 0
        self.profile_later = []  # (a contender's results, its calls)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------------
# Measurements.


def eager_round(ctx: Ctx, fns: list, calls: int) -> tuple:
    """``calls`` back-to-back calls cycling over ``fns``, then one synchronize: (wall, host) µs per call."""
    k = len(fns)
    ctx.sync()
    t0 = time.perf_counter()
    for i in range(calls):
        fns[i % k]()
    t1 = time.perf_counter()
    ctx.sync()
    t2 = time.perf_counter()
    return (t2 - t0) / calls * 1e6, (t1 - t0) / calls * 1e6


def capture(ctx: Ctx, fns: list, n: int):
    """One CUDA graph of ``n`` calls cycling over ``fns``, under inference_mode; each fn runs twice first, on a side
    stream (sparsek checks a new structure there). Returns (graph, the last call's output)."""
    side = torch.cuda.Stream(ctx.device)
    side.wait_stream(torch.cuda.current_stream(ctx.device))
    with torch.cuda.stream(side), torch.inference_mode():
        for fn in fns:
            fn()
            fn()
    torch.cuda.current_stream(ctx.device).wait_stream(side)
    ctx.sync()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.inference_mode():
        for i in range(n):
            out = fns[i % len(fns)]()
    return graph, out


def graph_round(ctx: Ctx, graph, n: int, reps: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / (reps * n)


def kernel_time(ctx: Ctx, fns: list, calls: int) -> dict:
    """The device activities of ``calls`` eager calls cycling over ``fns`` (torch.profiler): µs per call and
    {name: count per call}."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode():
        fns[0]()
        ctx.sync()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for i in range(calls):
                fns[i % len(fns)]()
            ctx.sync()
    total, names = 0.0, {}
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            total += e.time_range.elapsed_us()
            names[e.name] = names.get(e.name, 0) + 1
    if not names:
        raise RuntimeError("the profiler recorded no device activity")
    return {"us": total / calls, "kernels": {k: v / calls for k, v in sorted(names.items())}}


def measure(ctx: Ctx, contenders: list, graph_reps: int) -> dict:
    """Checks every contender in both modes, then eager rounds per mode, graph and kernel time (CUDA), each
    interleaved across contenders. ``{name: {...}}``."""
    a = ctx.args
    res = {c.name: {"checks": {}} for c in contenders}
    ready = []
    for c in contenders:
        if c.skip:
            res[c.name].update(status="skipped", reason=c.skip)
    for mode, context in MODES:
        outs = []
        with context():
            for c in contenders:
                if c.skip or res[c.name].get("status") == "error":
                    continue
                try:
                    y = c.run()
                    ctx.sync()
                    outs.append(y)  # held until all ran: no output lands in memory holding another's result
                    res[c.name]["checks"][mode] = c.check(y)
                except Exception as e:  # noqa: BLE001 (a contender's failure is a result)
                    res[c.name].update(status="error", error=bt.describe(e))
        del outs
    for c in contenders:
        r = res[c.name]
        if "status" not in r:
            r["status"] = "pass" if all(v["passed"] for v in r["checks"].values()) else "fail"
            ready.append(c)
    calls, rounds = a.calls, a.rounds
    fns = {}  # what each contender's eager calls and graph cycle over: its weight copies, or its one call
    for c in ready:
        if c.copies is not None and ctx.cuda:
            n_copies = min(MAX_COPIES, max(4, math.ceil(2 * ctx.l2 / c.copy_bytes)))
            fns[c.name] = c.copies(n_copies)
            res[c.name].update(weight_copies=n_copies, weight_copies_bytes=n_copies * c.copy_bytes)
        else:
            fns[c.name] = [c.run]
    for mode, context in MODES:
        with context():
            for c in ready:
                eager_round(ctx, fns[c.name], max(len(fns[c.name]), calls // 10))  # warm-up
            wall = {c.name: [] for c in ready}
            host = {c.name: [] for c in ready}
            for _ in range(rounds):
                for c in ready:
                    w, h = eager_round(ctx, fns[c.name], calls)
                    wall[c.name].append(w)
                    host[c.name].append(h)
        for c in ready:
            res[c.name][f"eager_us_{mode}"] = statistics.median(wall[c.name])
            res[c.name][f"host_us_{mode}"] = statistics.median(host[c.name])
            res[c.name][f"eager_rounds_us_{mode}"] = wall[c.name]
    if not ctx.cuda:
        return res
    graphs = {}
    for c in ready:
        try:
            n = a.graph_calls if c.copies is not None else 1
            graph, out = capture(ctx, fns[c.name], n)
            graph.replay()  # a capture runs nothing: the output is written by the first replay
            ctx.sync()
            with torch.no_grad():
                res[c.name]["graph_check"] = c.check(out)
            if not res[c.name]["graph_check"]["passed"]:
                res[c.name]["status"] = "fail"
            graphs[c.name] = (graph, n, out)
        except Exception as e:  # noqa: BLE001
            res[c.name]["graph_error"] = bt.describe(e)
    per = {name: [] for name in graphs}
    for name, (graph, n, _) in graphs.items():
        graph_round(ctx, graph, n, 2)  # warm
    for _ in range(rounds):
        for name, (graph, n, _) in graphs.items():
            per[name].append(graph_round(ctx, graph, n, graph_reps if n == 1 else 5))
    for name, us in per.items():
        res[name]["graph_us"] = statistics.median(us)
        res[name]["graph_rounds_us"] = us
    del graphs
    bt.free_memory()
    ctx.profile_later += [(res[c.name], fns[c.name]) for c in ready]  # kernel time: at the end (main)
    return res


MEASURES = ("eager_us_inference_mode", "eager_us_no_grad", "graph_us", "kernel_us")


def speedups(res: dict) -> dict:
    """dense's time / each contender's, per measure."""
    dense = res.get("dense", {})
    out = {}
    for name, r in res.items():
        out[name] = {m: dense[m] / r[m] for m in MEASURES if m in r and m in dense and r[m] > 0}
    return out


def floor_ratios(res: dict) -> dict:
    """The read floor's time / each contender's, per measure (graph and kernel): the contender's rate on the bytes
    it must move over the floor's."""
    floor = res.get("read floor", {})
    return {name: {m: floor[m] / r[m] for m in ("graph_us", "kernel_us") if m in r and m in floor and r[m] > 0}
            for name, r in res.items()}


def finish_case(ctx: Ctx, section: str, name: str, res: dict, extra: dict) -> dict:
    for cname, r in res.items():
        if cname in FATAL and (r["status"] in ("fail", "error") or "graph_error" in r):
            detail = r.get("error") or r.get("graph_error") or {
                m: v for m, v in {**r["checks"], "graph": r.get("graph_check")}.items() if v and not v["passed"]}
            ctx.failures.append(f"{section} {name}: {cname} {r['status']}: {str(detail)[:600]}")
    summary = ", ".join(f"{k} {v['eager_us_inference_mode']:.1f} us" if "eager_us_inference_mode" in v
                        else f"{k} {v['status']}" for k, v in res.items())
    log(f"    eager (inference_mode): {summary}")
    return {"case": name, **extra, "results": res, "speedup_vs_dense": speedups(res),
            "of_read_floor": floor_ratios(res)}


# ---------------------------------------------------------------------------------------------------------------
# Section layers.


def bsr_copy(w: torch.Tensor) -> torch.Tensor:
    """A distinct BSR tensor with the same structure and values (new index tensors too)."""
    return torch.sparse_bsr_tensor(w.crow_indices().clone(), w.col_indices().clone(), w.values().clone(), w.shape)


def layer_case(ctx: Ctx, w: torch.Tensor, w_dense: torch.Tensor, name: str, tokens: int) -> dict:
    torch.manual_seed(bt.seed_for(name))
    out_f, in_f = w.shape
    x = torch.randn(tokens, in_f, device=ctx.device).to(ctx.dtype)
    xt = x.t()
    ref = x.double() @ w_dense.double().t()
    atol = bt.product_atol(in_f, bt.amax(w.values()), bt.amax(x), LAYER_ATOL_U * ctx.u)
    rtol = LAYER_RTOL_U * ctx.u

    def check(y):
        return bt.check_close(y, ref, atol, rtol)

    module = BlockSparseLinear.from_bsr(w)
    sparse_bytes = sum(t.numel() * t.element_size() for t in (w.values(), w.crow_indices(), w.col_indices()))
    dense_bytes = w_dense.numel() * w_dense.element_size()

    def rotating(make, call):  # n calls, each over its own copy of the weight made by make()
        return lambda n: [functools.partial(call, make()) for _ in range(n)]

    floor_skip = rf.why_not(ctx.device)
    floor = None if floor_skip else rf.ReadFloor(sparse_bytes, x.numel() * x.element_size(),
                                                  tokens * out_f * x.element_size(), ctx.device)

    def nothing_to_check(_):
        return {"passed": True, "what": "nothing to check: the floor moves the bytes and computes nothing"}

    contenders = [
        Eager("sparsek.linear", lambda: sparsek.linear(x, w), check, copy_bytes=sparse_bytes,
              copies=rotating(lambda: bsr_copy(w), lambda wi: sparsek.linear(x, wi))),
        Eager("BlockSparseLinear", lambda: module(x), check, copy_bytes=sparse_bytes,
              copies=rotating(lambda: BlockSparseLinear.from_bsr(bsr_copy(w)), lambda m: m(x))),
        Eager("dense", lambda: F.linear(x, w_dense), check, copy_bytes=dense_bytes,
              copies=rotating(w_dense.clone, lambda wi: F.linear(x, wi))),
        Eager("triton", skip=ctx.triton_skip) if ctx.triton_mm is None else Eager(
            "triton", lambda: ctx.triton_mm(w, xt), lambda yt: check(yt.t()), copy_bytes=sparse_bytes,
            copies=rotating(lambda: bsr_copy(w), lambda wi: ctx.triton_mm(wi, xt))),
        Eager("read floor", skip=floor_skip) if floor is None else Eager(
            "read floor", floor.call, nothing_to_check, copy_bytes=sparse_bytes, copies=floor.copies),
    ]
    res = measure(ctx, contenders, 20)
    stored = w.values().numel() * w.values().element_size()
    return finish_case(ctx, "layers", name, res, {
        "out_features": out_f, "in_features": in_f, "tokens": tokens, "nnzb": w.values().shape[0],
        "sparse_weight_bytes": sparse_bytes, "stored_bytes": stored, "dense_weight_bytes": dense_bytes,
        "atol": atol, "rtol": rtol, "read_floor": None if floor is None else floor.describe()})


def section_layers(ctx: Ctx) -> dict:
    shapes = (("up", 1024, 512), ("down", 512, 1024)) if ctx.quick else (("up", 11008, 4096), ("down", 4096, 11008))
    records, i, n = [], 0, 2 * len(shapes)
    for proj, out_f, in_f in shapes:
        model = f"{proj} {out_f}×{in_f} bs64 25%"
        torch.manual_seed(bt.seed_for(model))
        w16 = bt.random_bsr(out_f, in_f, 64, 0.25, "uniform", ctx.device)  # f16 values, int64 indices
        w = torch.sparse_bsr_tensor(w16.crow_indices(), w16.col_indices(), w16.values().to(ctx.dtype), w16.shape)
        w_dense = bt.bsr_to_dense(w)
        for tokens in (1, 16):
            i += 1
            name = f"{model} tokens={tokens}"
            records.append(ctx.case("layers", i, n, name, lambda: layer_case(ctx, w, w_dense, name, tokens)))
        del w, w16, w_dense
        bt.free_memory()
    return {"records": records}


# ---------------------------------------------------------------------------------------------------------------
# Models: the decode stack and the encoder (one class per model, over dense or block-sparse Linears).


class MLPResidual(torch.nn.Module):
    """``x + down(act(up(x)))``; ``act`` None where up fuses it."""

    def __init__(self, up, act, down):
        super().__init__()
        self.up, self.act, self.down = up, act, down

    def forward(self, x):
        h = self.up(x)
        if self.act is not None:
            h = self.act(h)
        return x + self.down(h)


class EncoderLayer(torch.nn.Module):
    """A post-LN transformer encoder layer (BERT/MiniLM form); ``act`` None where ffn1 fuses it."""

    LINEARS = ("q", "k", "v", "o", "ffn1", "ffn2")

    def __init__(self, width: int, ffn: int, heads: int, device, dtype):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.heads = heads
        for lin, (i, o) in zip(self.LINEARS, [(width, width)] * 4 + [(width, ffn), (ffn, width)]):
            setattr(self, lin, torch.nn.Linear(i, o, **kw))
        self.act = torch.nn.GELU(approximate="tanh")
        self.ln1, self.ln2 = torch.nn.LayerNorm(width, **kw), torch.nn.LayerNorm(width, **kw)

    def forward(self, x):
        b, t, w = x.shape
        q, k, v = (getattr(self, n)(x).view(b, t, self.heads, w // self.heads).transpose(1, 2) for n in "qkv")
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, w)
        x = self.ln1(x + self.o(a))
        h = self.ffn1(x)
        if self.act is not None:
            h = self.act(h)
        return self.ln2(x + self.ffn2(h))


def linear_weights(m) -> tuple:
    """(weight, bias) in float64 of an nn.Linear or a BlockSparseLinear (its pruned weight)."""
    w = m.to_dense() if isinstance(m, BlockSparseLinear) else m.weight
    return w.detach().double(), m.bias.detach().double()


def stack_reference(model, x: torch.Tensor, dtype) -> tuple:
    """float64, rounded to ``dtype`` where the models round: (output, (max|h|, max|W_down|) of the last layer)."""
    def r(t):
        return t.to(dtype).double()
    x = x.double()
    for layer in model:
        (wu, bu), (wd, bd) = linear_weights(layer.up), linear_weights(layer.down)
        h = x @ wu.t() + bu
        h = r(F.silu(h if layer.act is None else r(h)))  # a separate activation rounds its input too
        x = r(x + r(h @ wd.t() + bd))
    return x, (bt.amax(h), bt.amax(wd), wd.shape[1])


def encoder_reference(model, x: torch.Tensor, dtype) -> tuple:
    def r(t):
        return t.to(dtype).double()
    x = x.double()
    b, t, w = x.shape
    for layer in model:
        lw = {n: linear_weights(getattr(layer, n)) for n in EncoderLayer.LINEARS}

        def lin(n, a, act=None):
            y = a @ lw[n][0].t() + lw[n][1]
            return r(act(y if layer.act is None else r(y)) if act else y)  # a separate activation: rounded input

        def ln(a, m):
            return r(F.layer_norm(a, (w,), m.weight.double(), m.bias.double(), m.eps))
        q, k, v = (lin(n, x).view(b, t, layer.heads, w // layer.heads).transpose(1, 2) for n in "qkv")
        a = r(F.scaled_dot_product_attention(q, k, v)).transpose(1, 2).reshape(b, t, w)
        x = ln(r(x + lin("o", a)), layer.ln1)
        h = lin("ffn1", x, lambda y: F.gelu(y, approximate="tanh"))
        x = ln(r(x + lin("ffn2", h)), layer.ln2)
    return x, (bt.amax(h), bt.amax(lw["ffn2"][0]), lw["ffn2"][0].shape[1])


ACTIVATIONS = {None: lambda t: t, "silu": F.silu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}


def linear_checks(ctx: Ctx, model, x: torch.Tensor) -> dict:
    """One more forward of ``model`` with a hook on every Linear (dense or block-sparse): each output against the
    float64 product of the input it was given and its own weights (and fused activation), with the layers'
    tolerances. The verdicts in short, and the worst one."""
    verdicts = []

    def hook(m, inputs, out):
        a, (w, b) = inputs[0], linear_weights(m)
        ref = ACTIVATIONS[getattr(m, "activation", None)](a.double() @ w.t() + b)
        atol = bt.product_atol(a.shape[-1], bt.amax(a), bt.amax(w), LAYER_ATOL_U * ctx.u)
        verdicts.append(bt.check_close(out, ref, atol, LAYER_RTOL_U * ctx.u))

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (torch.nn.Linear, BlockSparseLinear))]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    worst = max(verdicts, key=lambda v: (not v["passed"], v["max_rel_err"]))
    return {"passed": all(v["passed"] for v in verdicts), "linears": len(verdicts),
            "failures": sum(v["failures"] for v in verdicts), "worst": worst}


def model_checker(ctx: Ctx, reference, model, x: torch.Tensor, scale: float):
    """The whole output against the reference (tolerances x ``scale``), and every Linear on its own input."""
    with torch.no_grad():
        ref, (max_a, max_b, k) = reference(model, x, ctx.dtype)
    atol = scale * bt.product_atol(k, max_a, max_b, MODEL_ATOL_U * ctx.u)
    rtol = scale * MODEL_RTOL_U * ctx.u

    def check(y):
        verdict = bt.check_close(y, ref, atol, rtol)
        verdict["linears"] = linear_checks(ctx, model, x)
        verdict["passed"] = verdict["passed"] and verdict["linears"]["passed"]
        return verdict
    return check, atol, rtol


def model_bytes(model) -> int:
    return sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))


def model_case(ctx: Ctx, section: str, dense, sparse, reference, x: torch.Tensor, name: str, extra: dict) -> dict:
    scale = MODEL_TOL_SCALE[section]
    check_sparse, atol_s, rtol = model_checker(ctx, reference, sparse, x, scale)
    check_dense, atol_d, _ = model_checker(ctx, reference, dense, x, scale)
    res = measure(ctx, [Eager("BlockSparseLinear", lambda: sparse(x), check_sparse),
                        Eager("dense", lambda: dense(x), check_dense)], 20)
    return finish_case(ctx, section, name, res, {
        **extra, "sparse_model_bytes": model_bytes(sparse), "dense_model_bytes": model_bytes(dense),
        "atol": {"sparse": atol_s, "dense": atol_d}, "rtol": rtol})


def sparse_twin(dense_layers, convert) -> torch.nn.Sequential:
    """A deep copy of ``dense_layers`` with ``convert(layer)`` applied to each copy."""
    import copy
    sparse = copy.deepcopy(dense_layers)
    for layer in sparse:
        convert(layer)
    return sparse.eval()


def section_stack(ctx: Ctx) -> dict:
    width, ffn, depth = (512, 1024, 2) if ctx.quick else (4096, 11008, 8)
    model = f"{depth}× MLP {width}→{ffn}→{width} bs64 25%"
    torch.manual_seed(bt.seed_for(model))
    kw = dict(device=ctx.device, dtype=ctx.dtype)
    dense = torch.nn.Sequential(*(MLPResidual(torch.nn.Linear(width, ffn, **kw), torch.nn.SiLU(),
                                              torch.nn.Linear(ffn, width, **kw)) for _ in range(depth))).eval()

    def convert(layer):
        layer.up = BlockSparseLinear.from_dense(layer.up, 64, density=0.25, activation="silu")
        layer.act = None
        layer.down = BlockSparseLinear.from_dense(layer.down, 64, density=0.25)
    sparse = sparse_twin(dense, convert)
    records = []
    for i, tokens in enumerate((1, 16)):
        name = f"{model} tokens={tokens}"
        torch.manual_seed(bt.seed_for(name))
        x = torch.randn(tokens, width, device=ctx.device).to(ctx.dtype)
        records.append(ctx.case("stack", i + 1, 2, name, lambda: model_case(
            ctx, "stack", dense, sparse, stack_reference, x, name, {"tokens": tokens})))
    return {"records": records}


def section_encoder(ctx: Ctx) -> dict:
    width, ffn, heads, depth, batch, seq = (128, 256, 4, 2, 4, 16) if ctx.quick else (384, 1536, 12, 6, 64, 128)
    name = f"{depth}× {width} wide, FFN {ffn}, {heads} heads, {batch}×{seq} tokens, bs32 25%"
    torch.manual_seed(bt.seed_for(name))
    dense = torch.nn.Sequential(*(EncoderLayer(width, ffn, heads, ctx.device, ctx.dtype) for _ in range(depth)))
    dense = dense.eval()
    with torch.no_grad():  # layer norms not at their identity init: a check that can see them
        for layer in dense:
            for ln in (layer.ln1, layer.ln2):
                ln.weight.uniform_(0.5, 1.5)
                ln.bias.normal_(0, 0.1)

    def convert(layer):
        for n in EncoderLayer.LINEARS:
            act = "gelu_tanh" if n == "ffn1" else None
            setattr(layer, n, BlockSparseLinear.from_dense(getattr(layer, n), 32, density=0.25, activation=act))
        layer.act = None
    sparse = sparse_twin(dense, convert)
    x = torch.randn(batch, seq, width, device=ctx.device).to(ctx.dtype)
    return {"records": [ctx.case("encoder", 1, 1, name, lambda: model_case(
        ctx, "encoder", dense, sparse, encoder_reference, x, name, {"tokens": batch * seq}))]}


SECTION_FUNCS = {"layers": section_layers, "stack": section_stack, "encoder": section_encoder}


# ---------------------------------------------------------------------------------------------------------------
# Targets and tables.


def targets(sections: dict) -> list:
    """Issue 43 part 2, evaluated on the measured eager speedups: (passed, line)."""
    out = []
    for section, goal in TARGETS.items():
        for r in sections.get(section, {}).get("records", []):
            names = ("sparsek.linear", "BlockSparseLinear") if section == "layers" else ("BlockSparseLinear",)
            for name in names:
                s = r.get("speedup_vs_dense", {}).get(name, {})
                vals = [(m, s.get(f"eager_us_{m}")) for m, _ in MODES]
                status = r.get("results", {}).get(name, {}).get("status")
                if any(v is None for _, v in vals) or status != "pass":
                    out.append((False, f"MISS {section} {r['case']} {name}: not measured or check failed"))
                    continue
                ok = all(v > goal if section == "stack" else v >= goal for _, v in vals)
                rel = ">" if section == "stack" else ">="
                detail = ", ".join(f"{v:.2f}x ({m})" for m, v in vals)
                out.append((ok, f"{'PASS' if ok else 'MISS'} {section} {r['case']} {name} eager vs dense: "
                                f"{detail}; target {rel} {goal}x"))
    # Part 3, in graph mode (stated for the H100): the layers of at least 8 MB of stored blocks at <= 16 tokens.
    for r in sections.get("layers", {}).get("records", []):
        if r.get("stored_bytes", 0) < FLOOR_MIN_BYTES or r.get("tokens", 99) > 16 or "results" not in r:
            continue
        for name in SPARSE:
            if r["results"].get(name, {}).get("status") != "pass":
                continue
            of = r.get("of_read_floor", {}).get(name, {}).get("graph_us")
            if of is not None:
                ok = of >= FLOOR_TARGET
                out.append((ok, f"{'PASS' if ok else 'MISS'} part 3 (graph) {r['case']} {name} of read floor: "
                                f"{of:.1%}; target >= {FLOOR_TARGET:.0%}"))
            s = r.get("speedup_vs_dense", {}).get(name, {}).get("graph_us")
            if s is not None:
                density = r["nnzb"] * 64 * 64 / (r["out_features"] * r["in_features"])  # the layers' 64-blocks
                goal = 0.8 / density
                out.append((s >= goal, f"{'PASS' if s >= goal else 'MISS'} part 3 (graph) {r['case']} {name} vs "
                                       f"dense: {s:.2f}x; target >= {goal:.1f}x"))
    return out


def us(r: dict, key: str) -> str:
    if key not in r:
        return "error" if key.replace("_us", "_error") in r else "—"
    return f"{r[key]:.1f}" + ("" if r["status"] == "pass" else "!")


def sp(s: dict, key: str) -> str:
    return f"{s[key]:.2f}x" if key in s else "—"


def pct(s: dict, key: str) -> str:
    return f"{s[key]:.1%}" if key in s else "—"


def section_table(section: dict) -> str:
    head = ["case", "contender", "eager µs inf", "eager µs no_grad", "host µs inf", "host µs no_grad", "graph µs",
            "kernel µs", "vs dense: eager inf / no_grad", "graph", "kernel", "of read floor: graph / kernel",
            "check"]
    rows = []
    for rec in section["records"]:
        if "error" in rec:
            rows.append([rec["case"], "—", *(["error"] * (len(head) - 3)), rec["error"][:80]])
            continue
        for name, r in rec["results"].items():
            s = rec["speedup_vs_dense"].get(name, {})
            f = rec.get("of_read_floor", {}).get(name, {})
            status = r["status"] if r["status"] != "skipped" else f"skipped ({r['reason'][:60]})"
            if name == "read floor" and status == "pass":
                status = "— (computes nothing)"
            if r["status"] == "error":
                status = f"error: {r['error'][:80]}"
            for key in ("graph_error", "kernel_error"):
                if key in r:
                    status += f"; {key.split('_')[0]} error: {r[key][:80]}"
            rows.append([rec["case"], name, us(r, "eager_us_inference_mode"), us(r, "eager_us_no_grad"),
                         us(r, "host_us_inference_mode"), us(r, "host_us_no_grad"), us(r, "graph_us"),
                         us(r, "kernel_us"),
                         f"{sp(s, 'eager_us_inference_mode')} / {sp(s, 'eager_us_no_grad')}",
                         sp(s, "graph_us"), sp(s, "kernel_us"),
                         f"{pct(f, 'graph_us')} / {pct(f, 'kernel_us')}" if f else "—", status])
    return bt.md_table(head, rows, left=(0, 1))


def section_notes(name: str, section: dict, l2: int) -> list:
    notes, kernels = [], {}
    for rec in section["records"]:
        copies = [f"{c} {r['weight_copies']} ({r['weight_copies_bytes'] / 2**20:.0f} MiB)"
                  for c, r in rec.get("results", {}).items() if "weight_copies" in r]
        if copies:
            notes.append(f"- {rec['case']}: weight copies {', '.join(copies)}; L2 {l2 / 2**20:.0f} MiB")
        for cname, r in rec.get("results", {}).items():
            for k in r.get("kernel_kernels", {}):
                kernels.setdefault(cname, set()).add(k if len(k) <= 70 else k[:67] + "...")
        if name != "layers" and "sparse_model_bytes" in rec:
            notes.append(f"- {rec['case']}: one forward per call and per graph, no rotation; weights "
                         f"{rec['sparse_model_bytes'] / 2**20:.1f} MiB sparse, {rec['dense_model_bytes'] / 2**20:.1f}"
                         f" MiB dense (L2 {l2 / 2**20:.0f} MiB)")
    notes += [f"- kernels counted, {c}: {', '.join(sorted(ks)[:6])}" + (f" and {len(ks) - 6} more (--json)"
              if len(ks) > 6 else "") for c, ks in kernels.items()]
    return notes


def render(result: dict) -> str:
    h = result["header"]
    parts = ["# sparsek in eager PyTorch (bench_eager.py)", "", bt.header_lines({**h, "iters": 0, "warmup": 0})[0],
             f"dtype {h['dtype']}; eager: {h['calls']} back-to-back calls then one synchronize, wall and host time "
             f"per call, median of {h['rounds']} rounds interleaved across contenders; graph: replay time per call; "
             "kernel: profiler device time per call; `!`: a failed check. native ops: "
             f"{h['native_ops']}{'' if h['native_ops'] else ' (' + str(h['native_ops_why_not']) + ')'}."]
    if h["device"] != "cuda":
        parts.append("graph and kernel time: skipped (CUDA only; --device cpu is a smoke test, not a benchmark).")
    for name, section in result["sections"].items():
        parts += ["", f"## {name}", ""]
        if "error" in section:
            parts.append(f"section failed: {section['error']}")
            continue
        parts.append(section_table(section))
        notes = section_notes(name, section, h.get("gpu", {}).get("l2_bytes", 0)) if h["device"] == "cuda" else []
        if notes:
            parts += [""] + notes
    parts += ["", "## issue 43 targets (part 2: eager; part 3: graph, stated for the H100)", ""]
    if h["device"] != "cuda":
        parts.append("(CPU smoke test: the lines below show the evaluation runs; the targets are about CUDA)")
    parts += [line for _, line in result["targets"]]
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# Main.


def parse_args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small shapes, few calls (smoke test)")
    p.add_argument("--only", default=",".join(SECTIONS), help=f"comma list of sections ({','.join(SECTIONS)})")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="bf16")
    p.add_argument("--calls", type=int, help="back-to-back eager calls per round (1000; --quick 50)")
    p.add_argument("--rounds", type=int, help="interleaved rounds, median reported (7; --quick 3)")
    p.add_argument("--graph-calls", type=int, default=64, help="calls per CUDA graph for the layers (64)")
    p.add_argument("--kernel-calls", type=int, default=10, help="eager calls under the profiler (10)")
    p.add_argument("--json", metavar="OUT.json", help="write every number and the run's header here")
    p.add_argument("--md", metavar="OUT.md", help="write the tables here")
    args = p.parse_args(argv)
    args.calls = args.calls or (50 if args.quick else 1000)
    args.rounds = args.rounds or (3 if args.quick else 7)
    args.sections = [s.strip() for s in args.only.split(",") if s.strip()]
    if not args.sections or any(s not in SECTIONS for s in args.sections):
        p.error(f"--only: choose from {','.join(SECTIONS)}")
    if min(args.calls, args.rounds, args.graph_calls, args.kernel_calls) < 1:
        p.error("--calls, --rounds, --graph-calls and --kernel-calls must be >= 1")
    return args


def write(args, result: dict) -> str:
    """Writes ``--json`` / ``--md`` (after each section, marked partial, and at the end); returns the Markdown."""
    markdown = render(result) + ("\n(partial: the run has not finished)\n" if result.get("partial") else "")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, allow_nan=False)
            f.write("\n")
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown)
    return markdown


def main(argv=None) -> int:
    args = parse_args(argv)
    bt.quiet_bsr_notices()
    if bt.no_cuda(args, "bench_eager"):
        return 2
    ctx = Ctx(args)
    started = time.perf_counter()
    header = bt.run_header(ctx)
    for k in ("iters", "warmup"):
        header.pop(k)
    header.update(dtype=args.dtype, calls=args.calls, rounds=args.rounds, graph_calls=args.graph_calls,
                  kernel_calls=args.kernel_calls, modes=[m for m, _ in MODES],
                  native_ops=sparsek._ops.NATIVE_OPS, native_ops_why_not=sparsek._ops.NATIVE_OPS_WHY_NOT)
    result = {"header": header, "sections": {}}
    for name in args.sections:
        log(f"== {name}")
        try:
            result["sections"][name] = SECTION_FUNCS[name](ctx)
        except Exception as e:  # noqa: BLE001 (one section's failure must not stop the others)
            traceback.print_exc()
            result["sections"][name] = {"error": bt.describe(e)}
            ctx.failures.append(f"section {name} failed: {bt.describe(e, 300)}")
        bt.free_memory()
        write(args, {**result, "partial": True, "targets": targets(result["sections"])})  # in case the run is cut
    if ctx.profile_later:
        log(f"== kernel time: torch.profiler, {len(ctx.profile_later)} contenders")
    for res, fns in ctx.profile_later:
        try:
            res.update({f"kernel_{k}": v for k, v in kernel_time(ctx, fns, args.kernel_calls).items()})
        except Exception as e:  # noqa: BLE001 (the profiler's failure is the environment's: reported, not fatal)
            res["kernel_error"] = bt.describe(e)
    ctx.profile_later.clear()
    for section in result["sections"].values():
        for rec in section.get("records", []):
            if "results" in rec:
                rec["speedup_vs_dense"] = speedups(rec["results"])
                rec["of_read_floor"] = floor_ratios(rec["results"])
    result["targets"] = targets(result["sections"])
    result["failures"] = ctx.failures
    result["elapsed_s"] = time.perf_counter() - started
    print(write(args, result))
    for failure in ctx.failures:
        log(f"FAILED: {failure}")
    log(f"bench_eager: {result['elapsed_s']:.0f} s")
    return 1 if ctx.failures else 0


if __name__ == "__main__":
    sys.exit(main())
