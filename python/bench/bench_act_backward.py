"""GELU's and SiLU's backward in a training step: recompute the pre-activation or save it (issue 44).

``sparsek.set_activation_backward`` chooses how the backward of a GELU or SiLU fused into ``BlockSparseLinear`` gets
the pre-activation z: ``"recompute"`` (the forward is one fused kernel; the backward recomputes z in float32 with one
more block-sparse product) or ``"save"`` (the forward runs the kernel with the bias and without the activation, then
torch's activation, whose autograd keeps z: tokens x out_features elements of bfloat16). This measures both, and
``nn.Linear`` + the torch activation (the dense reference, the same pruned weight as a dense matrix), on:

- ``BlockSparseLinear(4096, 11008, bs=64, density 0.25)`` and ``(11008, 4096, ...)``, bias on, bfloat16;
- 512 and 4096 tokens; activations ``gelu_tanh`` and ``silu``;
- one step = forward + backward (``y.backward(gy)`` with a fixed random ``gy``), with x, the values and the bias
  requiring grad (their gradients set to ``None`` before each step, so every step allocates them anew).

Every contender's output and gradients are checked against the dense reference first (bf16 tolerance; exit status
1 on a mismatch). Same process, same tensors, interleaved round by round; CUDA events around each step (each runs
for well over 50 us), medians of ``--iters`` rounds after warm-up; then each step captured in a CUDA graph and
its replays timed the same way (the GPU work alone, without the host's per-call cost, which eager steps of 512
tokens may be bound by; a failed capture is reported and leaves those cells empty; ``--no-graphs`` skips it).
Memory, per contender, from an eager step alone after the warm-up: ``peak`` is ``torch.cuda.max_memory_allocated()``
during the step minus the memory allocated before it (gradients included), ``kept`` the memory allocated after the
forward minus before it (the output and what autograd keeps for the backward). ``z MiB`` is tokens x out_features x
2 bytes, what "save" is expected to keep more.

    python python/bench/bench_act_backward.py --md out.md --json out.json     # H200: about a minute
    python python/bench/bench_act_backward.py --dry-run                       # CPU, tiny shapes: the logic only

Needs only torch and sparsek (no network). The commit is ``$SPARSEK_COMMIT`` or ``git rev-parse``'s.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

import torch

import sparsek
from sparsek.nn import BlockSparseLinear

SHAPES = [(4096, 11008), (11008, 4096)]  # (in_features, out_features)
TOKENS = [512, 4096]
DRY_SHAPES = [(256, 512), (512, 256)]
DRY_TOKENS = [16, 64]
ACTIVATIONS = ["gelu_tanh", "silu"]
BLOCK_SIZE, DENSITY = 64, 0.25
STRATEGIES = ["recompute", "save"]
CONTENDERS = STRATEGIES + ["dense"]


class Case:
    """One layer (sparse and its dense twin), its input and upstream gradient, and a step per contender."""

    def __init__(self, in_f, out_f, tokens, activation, device, seed):
        self.name = f"{in_f}->{out_f}"
        self.in_f, self.out_f, self.tokens, self.activation = in_f, out_f, tokens, activation
        self.sparse = BlockSparseLinear(in_f, out_f, BLOCK_SIZE, DENSITY, bias=True, activation=activation, seed=seed,
                                        dtype=torch.bfloat16, device=device)
        self.sparse.values.requires_grad_(True)
        self.sparse.bias.requires_grad_(True)
        self.dense = self.sparse.to_linear().to(torch.bfloat16)  # nn.Sequential(nn.Linear, the torch activation)
        gen = torch.Generator().manual_seed(seed + 1)
        self.x = torch.randn(tokens, in_f, generator=gen).to(torch.bfloat16).to(device).requires_grad_(True)
        self.gy = torch.randn(tokens, out_f, generator=gen).to(torch.bfloat16).to(device)

    def params(self, contender):
        return list((self.dense if contender == "dense" else self.sparse).parameters()) + [self.x]

    def forward(self, contender):
        if contender == "dense":
            return self.dense(self.x)
        sparsek.set_activation_backward(contender)
        return self.sparse(self.x)

    def step(self, contender):
        for p in self.params(contender):
            p.grad = None
        y = self.forward(contender)
        y.backward(self.gy)
        return y

    def check(self):
        """Each sparse strategy's output and gradients against the dense reference's (the same weight)."""
        results = {}
        for c in CONTENDERS:
            y = self.step(c)
            ps = self.params(c)
            results[c] = [y.detach()] + [p.grad.detach().clone() for p in ps]
        bad = []
        dense_y, dense_w, dense_b, dense_x = results["dense"]
        # The dense weight's gradient at the stored blocks, in the values' layout.
        s = self.sparse
        bs, r = BLOCK_SIZE, self.out_f // BLOCK_SIZE
        rows = torch.repeat_interleave(torch.arange(r, device=dense_w.device),
                                       (s.crow_indices[1:] - s.crow_indices[:-1]).long())
        dense_v = dense_w.reshape(r, bs, self.in_f // bs, bs).permute(0, 2, 1, 3)[rows, s.col_indices.long()]
        for c in STRATEGIES:
            y, gv, gb, gx = results[c]
            for what, got, want in (("y", y, dense_y), ("values.grad", gv, dense_v), ("bias.grad", gb, dense_b),
                                    ("x.grad", gx, dense_x)):
                scale = want.float().abs().max().item()
                err = (got.float() - want.float()).abs().max().item()
                ok = got.shape == want.shape and bool(torch.isfinite(got.float()).all()) and err <= 3e-2 * scale
                if not ok:
                    bad.append(f"{c} {what}: max abs err {err:.3e} against dense (scale {scale:.3e})")
        return bad


def time_steps(case, iters, warmup, cuda):
    """Per contender, the median of its step times (CUDA events, or the host clock without CUDA), interleaved."""
    for _ in range(warmup):
        for c in CONTENDERS:
            case.step(c)
    if cuda:
        ev = {c: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
              for c in CONTENDERS}
        for i in range(iters):
            for c in CONTENDERS:
                ev[c][i][0].record()
                case.step(c)
                ev[c][i][1].record()
        torch.cuda.synchronize()
        return {c: statistics.median(s.elapsed_time(e) for s, e in ev[c]) for c in CONTENDERS}
    times = {c: [] for c in CONTENDERS}
    for _ in range(iters):
        for c in CONTENDERS:
            t0 = time.perf_counter()
            case.step(c)
            times[c].append((time.perf_counter() - t0) * 1e3)
    return {c: statistics.median(v) for c, v in times.items()}


def time_graphs(case, iters):
    """Per contender, the median time of a replay of its step captured in a CUDA graph (no host overhead: the GPU
    work alone), interleaved; ``{contender: None}`` with the reason printed if a capture fails."""
    graphs = {}
    try:
        side = torch.cuda.Stream()  # warm-up on a side stream before capturing, as torch's docs ask
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                for c in CONTENDERS:
                    case.step(c)
        torch.cuda.current_stream().wait_stream(side)
        for c in CONTENDERS:
            for p in case.params(c):
                p.grad = None
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y = case.forward(c)
                y.backward(case.gy)
            del y
            graphs[c] = g
        for g in graphs.values():
            g.replay()
        ev = {c: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
              for c in CONTENDERS}
        for i in range(iters):
            for c in CONTENDERS:
                ev[c][i][0].record()
                graphs[c].replay()
                ev[c][i][1].record()
        torch.cuda.synchronize()
        return {c: statistics.median(s.elapsed_time(e) for s, e in ev[c]) for c in CONTENDERS}
    except Exception as e:  # reported, not fatal: the eager times stand
        print(f"{case.name} {case.tokens} {case.activation}: CUDA graph timing failed: {type(e).__name__}: {e}",
              file=sys.stderr)
        try:
            torch.cuda.synchronize()
        except Exception as e2:  # pragma: no cover
            print(f"  and the device did not synchronise after it: {e2}", file=sys.stderr)
        return {c: None for c in CONTENDERS}
    finally:
        for c in CONTENDERS:
            for p in case.params(c):
                p.grad = None
        del graphs


def memory(case, contender):
    """``(peak, kept)`` in MiB of one step (see the module's doc)."""
    for p in case.params(contender):
        p.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = case.forward(contender)
    torch.cuda.synchronize()
    kept = torch.cuda.memory_allocated() - base
    y.backward(case.gy)
    del y
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    return peak / 2**20, kept / 2**20


def header(cuda):
    commit = os.environ.get("SPARSEK_COMMIT")
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=os.path.dirname(os.path.abspath(__file__)), check=False).stdout.strip()
        except OSError:
            commit = ""
    driver = "n/a"
    if cuda:
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, check=False, timeout=30)
            driver = smi.stdout.strip().splitlines()[0] if smi.stdout.strip() else "unknown"
        except (OSError, subprocess.SubprocessError):
            driver = "unknown"
    return {
        "device": torch.cuda.get_device_name() if cuda else "cpu (dry run)",
        "driver": driver,
        "torch": torch.__version__,
        "sparsek": sparsek.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit or "unknown",
        "default_strategy": sparsek._ops.ACTIVATION_BACKWARD_DEFAULT,
    }


def fmt(v, spec=".3f"):
    return "-" if v is None else format(v, spec)


def table(h, rows):
    lines = [
        f"# Activation backward: recompute vs save ({h['device']}, driver {h['driver']}, torch {h['torch']}, "
        f"commit {h['commit']}, {h['date']})",
        "",
        f"BlockSparseLinear bs {BLOCK_SIZE}, density {DENSITY}, bias, bfloat16; one step = forward + backward (x, "
        f"values, bias require grad); medians of {h['timer']}, interleaved; graphed: the step captured in a CUDA "
        "graph and replayed (the GPU work without the host's per-call cost); dense = nn.Linear + torch's "
        f"activation. Default strategy at this commit: {h['default_strategy']}.",
        "",
        "| layer | tokens | act | recompute ms | save ms | dense ms | save / recompute | graphed ms rec / save / dense "
        "| graphed save / rec | peak MiB rec / save / dense | kept MiB rec / save / dense | z MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t, gt, p, k = r["ms"], r["graph_ms"], r["peak_mib"], r["kept_mib"]
        lines.append(
            f"| {r['layer']} | {r['tokens']} | {r['activation']} | {fmt(t['recompute'])} | {fmt(t['save'])} | "
            f"{fmt(t['dense'])} | {t['save'] / t['recompute']:.3f} | "
            + " / ".join(fmt(gt[c]) for c in CONTENDERS) + " | "
            + (f"{gt['save'] / gt['recompute']:.3f}" if gt["save"] and gt["recompute"] else "-") + " | "
            + " / ".join(fmt(p[c], ".0f") for c in CONTENDERS) + " | "
            + " / ".join(fmt(k[c], ".0f") for c in CONTENDERS) + f" | {r['z_mib']:.1f} |"
        )
    ratios = [r["ms"]["save"] / r["ms"]["recompute"] for r in rows]
    geo = statistics.geometric_mean(ratios)
    faster = sum(x < 1.0 for x in ratios)
    lines += ["", f"save / recompute eager step time: geometric mean {geo:.3f}, save faster in {faster} of "
              f"{len(rows)} cases (< 1: save is faster)."]
    graphed = [r["graph_ms"]["save"] / r["graph_ms"]["recompute"] for r in rows
               if r["graph_ms"]["save"] and r["graph_ms"]["recompute"]]
    if graphed:
        lines.append(f"save / recompute graphed step time (GPU work alone): geometric mean "
                     f"{statistics.geometric_mean(graphed):.3f}, save faster in {sum(x < 1.0 for x in graphed)} of "
                     f"{len(graphed)} cases.")
    return "\n".join(lines) + "\n", geo


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--md", help="write the markdown table here")
    ap.add_argument("--json", help="write the header and every number here")
    ap.add_argument("--no-graphs", action="store_true", help="skip the CUDA-graph timing of each step")
    ap.add_argument("--dry-run", action="store_true",
                    help="CPU, tiny shapes, 2 iterations: checks the cases and the output, times nothing meaningful")
    args = ap.parse_args(argv)
    cuda = not args.dry_run
    if cuda and not torch.cuda.is_available():
        sys.exit("bench_act_backward: no CUDA GPU visible to torch (--dry-run runs the logic on the CPU)")
    device = torch.device("cuda" if cuda else "cpu")
    shapes, token_counts = (SHAPES, TOKENS) if cuda else (DRY_SHAPES, DRY_TOKENS)
    iters, warmup = (args.iters, args.warmup) if cuda else (2, 1)
    h = header(cuda)
    h["timer"] = "CUDA-event-timed eager steps" if cuda else "host-clock-timed steps (dry run)"
    print(f"{h['device']}, driver {h['driver']}, torch {h['torch']}, sparsek {h['sparsek']} ({sparsek.__file__}), "
          f"commit {h['commit']}", file=sys.stderr)
    before = sparsek.activation_backward()
    rows, failures = [], []
    t_start = time.time()
    try:
        for si, (in_f, out_f) in enumerate(shapes):
            for ai, act in enumerate(ACTIVATIONS):
                for tokens in token_counts:
                    case = Case(in_f, out_f, tokens, act, device, seed=1000 * si + 10 * ai + 1)
                    bad = case.check()
                    if bad:
                        failures += [f"{case.name} {tokens} {act}: {b}" for b in bad]
                        print(f"{case.name} {tokens} tokens {act}: WRONG: {bad}", file=sys.stderr)
                        continue
                    ms = time_steps(case, iters, warmup, cuda)
                    graphed = cuda and not args.no_graphs
                    graph_ms = time_graphs(case, iters) if graphed else {c: None for c in CONTENDERS}
                    mem = {c: memory(case, c) if cuda else (None, None) for c in CONTENDERS}
                    row = {"layer": case.name, "tokens": tokens, "activation": act, "ms": ms, "graph_ms": graph_ms,
                           "peak_mib": {c: mem[c][0] for c in CONTENDERS},
                           "kept_mib": {c: mem[c][1] for c in CONTENDERS},
                           "z_mib": tokens * out_f * 2 / 2**20,
                           "nnzb": case.sparse.nnzb}
                    rows.append(row)
                    print(f"{case.name} {tokens} tokens {act}: recompute {ms['recompute']:.3f} ms, save "
                          f"{ms['save']:.3f} ms, dense {ms['dense']:.3f} ms; graphed "
                          + " / ".join(fmt(graph_ms[c]) for c in CONTENDERS) + f" ({time.time() - t_start:.0f} s)",
                          file=sys.stderr)
                    del case
                    if cuda:
                        torch.cuda.empty_cache()
    finally:
        sparsek.set_activation_backward(before)
    if rows:
        text, geo = table(h, rows)
        print(text)
        if args.md:
            with open(args.md, "w") as f:
                f.write(text)
    else:
        geo = None
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": h, "rows": rows, "failures": failures, "save_over_recompute_geomean": geo}, f,
                      indent=1)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
