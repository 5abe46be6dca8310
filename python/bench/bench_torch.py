#!/usr/bin/env python3
"""sparsek's Python package against PyTorch: BSR x dense products, LLM layers, an MLP block, per-call overhead.

Run on a GPU (the ``sparsek`` package importable, e.g. ``PYTHONPATH=python``)::

    python python/bench/bench_torch.py                          # every section, a few minutes on an H100
    python python/bench/bench_torch.py --quick                  # smoke test: small cases of each section
    python python/bench/bench_torch.py --only grid,overhead --json out.json --md out.md
    python python/bench/bench_torch.py --device cpu --quick     # sparsek's CPU backend vs torch (smoke test)

Options: ``--iters N`` timed launches per contender (30), ``--warmup N`` launches first (5), ``--only`` a comma
list of sections, ``--json`` / ``--md`` files for every number (and the run's header: GPU, driver, versions,
date, commit from ``$SPARSEK_COMMIT``) / the tables. ``--quick`` runs grid 2048^3 bs 64 and 128 at 22% (512^3
on CPU), layer at 20% with 1 and 16 tokens, mlp at 20% with 16 tokens, overhead with 500 calls per round.
Progress goes to stderr, the tables to stdout. The exit status is 1 when a sparsek output failed its check,
sparsek raised, or a case or a section could not run (the other contenders' failures are reported, not fatal);
2 for bad arguments or no GPU.

Sections:

- ``grid``: ``sparsek.bsr_mm(a, b)`` against PyTorch's Triton BSR kernel
  (``torch.sparse._triton_ops.bsr_dense_mm(a, b)``) and dense ``torch.matmul(a_dense, b)`` (cuBLAS) on ``a``
  expanded to dense f16, over the cases of docs/BENCHMARKS.md: 8192^3 at block sizes 16/32/64/128 x densities
  5/10/22/50%, 4096^3 bs 64 12.5%, 8192^3 bs 64 22% skewed, and N = 1, 16, 128 at M = K = 8192 bs 64 22%.
  ``a`` is ``torch.sparse_bsr_tensor`` with int64 indices (what torch builds) and normal f16 values; ``b`` is
  normal f16, contiguous. Uniform: ``round(density * block_rows * block_cols)`` blocks, every block row holding
  the floor or the ceiling of the mean (the rows that get one more drawn at random), distinct random columns,
  sorted. Skewed: the same number of blocks, block row ``i`` (before a random shuffle of the rows) getting a
  share proportional to ``1 / (i + 1)`` capped at the row's width, the excess water-filled into the other
  rows, rounded by largest remainders (the power law of the Rust generator, host/src/format/synth.rs): at
  8192^3 bs 64 22% the longest rows are full (128 blocks), ~4.5x the mean (28.2); the record holds both.
  Effective TFLOPS = 2 * nnzb * bs^2 * N / time, for every contender (the useful work). The dense contender
  multiplies the expanded ``a``, mostly zeros at low density, which if anything favours it (docs/BENCHMARKS.md).
- ``layer``: ``sparsek.linear(x, w)`` (``y = x @ w^T``) for LLaMA-7B's MLP weights, 11008 x 4096 (up) and
  4096 x 11008 (down), 64-blocks at 10/20/30% (uniform as above), 1/16/512/4096 tokens, against the Triton
  kernel computing ``y^T = w @ x^T`` on the view ``x.t()`` (taken as it is, no copy; its ``y^T`` is checked and
  timed as it is, the transpose a caller would need is not counted) and dense ``F.linear(x, w_dense)`` (the
  weight expanded to dense, zeros included).
- ``mlp``: ``Sequential(Linear(4096, 11008), SiLU(), Linear(11008, 4096))`` in f16 against the same with both
  Linears converted by ``BlockSparseLinear.from_dense(linear, 64, density=d)`` (SiLU fused into the first),
  d = 10/20/30%, 1/16/512/4096 tokens, under ``torch.inference_mode()``. The dense model keeps its unpruned
  weights (what it replaces); each model is checked against the float64 evaluation of its own weights.
- ``overhead``: host cost per call at a size where the GPU work is negligible (256 x 256 weight, bs 64, 50%,
  16 tokens, the fewest Triton's kernel takes): the public wrapper, the ``torch.library.Library`` op, its
  Python kernel without the dispatcher, the same kernel registered with ``torch.library.custom_op`` (and its
  autograd formula, as sparsek's op has), the module, the module under ``torch.compile(fullgraph=True)``, dense
  ``F.linear``, PyTorch's Triton ``bsr_dense_mm``, ``torch.empty`` as the floor of a Python -> torch call, and
  the module and ``F.linear`` as 100 calls captured in one CUDA graph (a replay's time / 100: what is left per
  call without host overhead, as in a decode loop under CUDA graphs); also the Python kernel of ``sparsek::linear`` and
  ``bsr_mm`` through the dispatcher (their twins ``_linear_py`` / ``_bsr_mm_py``: what the fallback registers where the
  native kernels are not), ``nn.Linear``, and ``sparsek.bsr_mm`` against ``torch.mm`` on the same dense operand; with
  the ratios issue 43 targets; in grad mode, under ``torch.no_grad()`` and under ``torch.inference_mode()``.
  ``--overhead-dry-run`` leaves sparsek's product out (the host path alone, on the CPU). Wall clock over
  ``--overhead-calls`` calls (2000; 500 with ``--quick``) between two ``synchronize``, median of 9 rounds
  interleaved across the calls. Every call's output is checked first (the floor's excepted).

Method (docs/BENCHMARKS.md, as far as Python allows):

- Checked before timed: each contender runs once; its output is compared with a float64 product of the same
  low-precision inputs, ``|got - ref| <= atol + rtol * |ref|`` on every element (NaN fails), rtol = 1e-2
  (2e-2 for the two-layer MLP), atol = 1e-3 * sqrt(K) * max|a| * max|b| for a product over K (for the MLP, of
  its second layer: max over the float64 hidden activations and the second weight). No contender is given an
  ``out=``: every output is a fresh tensor, and all of a case's outputs are held until every contender ran, so
  none can find a correct result left in recycled memory. A contender that fails is still timed, its time
  marked untrusted (``!``); one that raises is reported with its error and not timed.
- Timing on CUDA: ``--warmup`` launches per contender, then ``--iters`` launches interleaved launch by launch
  (sparsek, triton, dense, sparsek, ...), each between its own pair of ``torch.cuda.Event``, all read after one
  final synchronize; the median is reported (ms). Before every timed launch, outside its events: a buffer of
  twice the L2 size is read (no launch finds its operands in L2, as the Rust bench's rotated operand copies
  ensure), then ``torch.cuda._sleep`` keeps the GPU busy longer than the slowest contender's host-side enqueue
  time (measured during the warm-up), so the events time the GPU work, not Python's launch overhead (the
  ``overhead`` section measures that). On CPU: ``time.perf_counter`` around each call, interleaved likewise,
  median: a smoke test of the script and of sparsek's CPU backend, not a benchmark (``--quick`` on CPU runs
  512^3 instead of 2048^3, torch's f16 CPU GEMM being slow).
- Same process, same inputs, a fixed seed per case (derived from the case's name), so cases are reproducible.
- Triton's first launch per shape compiles (seconds, inside the untimed check); its launch configuration comes
  from torch's tables, nothing is autotuned.
"""

import argparse
import contextlib
import ctypes
import datetime
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
import warnings
import zlib
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F

import sparsek
import sparsek._ops
from sparsek.nn import BlockSparseLinear

SECTIONS = ("grid", "layer", "mlp", "overhead")
# One product: every contender's error measured on the H100 is the f16 rounding of the output (max relative
# error 4.9e-4 .. 9.2e-4, the same for all three), so rtol 2e-3; atol covers elements near zero.
RTOL = 2e-3
ATOL_PER_SQRT_K = 1e-4
# The MLP: the hidden activations are rounded to f16 before the second product, so its error is K-scaled at
# the f16 unit roundoff (~5e-4 per sqrt(K) of magnitude), not at f32's.
RTOL_MLP = 1e-2
ATOL_PER_SQRT_K_MLP = 1e-3
OVERHEAD_ROUNDS = 9
DTYPE = torch.float16


# ---------------------------------------------------------------------------------------------------------------
# The op registered with torch.library.custom_op, for the overhead section's comparison with sparsek's
# torch.library.Library registration: same kernel (sparsek._ops.linear_impl), same refusing autograd formula.


@torch.library.custom_op("sparsek_bench::linear", mutates_args=())
def _custom_linear(
    x: torch.Tensor,
    values: torch.Tensor,
    crow_indices: torch.Tensor,
    col_indices: torch.Tensor,
    in_features: int,
    bias: Optional[torch.Tensor],
    activation: int,
) -> torch.Tensor:
    return sparsek._ops.linear_impl(x, values, crow_indices, col_indices, in_features, bias, activation)


@_custom_linear.register_fake
def _custom_linear_fake(x, values, crow_indices, col_indices, in_features, bias, activation):
    return x.new_empty((*x.shape[:-1], (crow_indices.shape[0] - 1) * values.shape[1]))


def _custom_linear_backward(ctx, grad):
    raise NotImplementedError("sparsek_bench::linear has no backward")


_custom_linear.register_autograd(_custom_linear_backward, setup_context=lambda ctx, inputs, output: None)


# ---------------------------------------------------------------------------------------------------------------
# Inputs.


def seed_for(name: str) -> int:
    """A fixed seed per case, from its name."""
    return zlib.crc32(name.encode()) % (2**31)


def skewed_lengths(block_rows: int, block_cols: int, total: int) -> list:
    """Row lengths summing to ``total``: shares proportional to ``1 / (i + 1)``, water-filled under the cap
    ``block_cols`` (the capped rows form a prefix), rounded by largest remainders. Not yet shuffled."""
    weights = [1.0 / (i + 1) for i in range(block_rows)]
    suffix = [0.0] * (block_rows + 1)
    for i in reversed(range(block_rows)):
        suffix[i] = suffix[i + 1] + weights[i]
    capped = 0
    while capped < block_rows and (total - capped * block_cols) * weights[capped] / suffix[capped] > block_cols:
        capped += 1
    rest = total - capped * block_cols
    shares = [rest * weights[i] / suffix[capped] for i in range(capped, block_rows)]
    lengths = [block_cols] * capped + [math.floor(s) for s in shares]
    by_remainder = sorted(range(capped, block_rows), key=lambda i: math.floor(shares[i - capped]) - shares[i - capped])
    for i in by_remainder[: total - sum(lengths)]:
        lengths[i] += 1
    return lengths


def row_lengths(pattern: str, block_rows: int, block_cols: int, density: float) -> torch.Tensor:
    """Blocks per block row (CPU int64), ``round(density * block_rows * block_cols)`` in all."""
    total = round(density * block_rows * block_cols)
    if pattern == "uniform":
        lengths = torch.full((block_rows,), total // block_rows, dtype=torch.int64)
        lengths[torch.randperm(block_rows)[: total % block_rows]] += 1
        return lengths
    if pattern == "skewed":
        lengths = torch.tensor(skewed_lengths(block_rows, block_cols, total), dtype=torch.int64)
        return lengths[torch.randperm(block_rows)]
    raise ValueError(f"unknown pattern {pattern!r}")


def random_bsr(rows: int, cols: int, bs: int, density: float, pattern: str, device: torch.device) -> torch.Tensor:
    """A ``rows x cols`` ``torch.sparse_bsr`` f16 tensor with int64 indices: distinct random columns per block
    row, sorted; normal values. Draws from torch's global generators (seed them first)."""
    block_rows, block_cols = rows // bs, cols // bs
    lengths = row_lengths(pattern, block_rows, block_cols, density).to(device)
    ranks = torch.rand(block_rows, block_cols, device=device).argsort(dim=1).argsort(dim=1)
    col = (ranks < lengths[:, None]).nonzero()[:, 1]
    crow = torch.cat([torch.zeros(1, dtype=torch.int64, device=device), lengths.cumsum(0)])
    values = torch.randn(col.shape[0], bs, bs, device=device).to(DTYPE)
    return torch.sparse_bsr_tensor(crow, col, values, (rows, cols), check_invariants=True)


def bsr_to_dense(a: torch.Tensor) -> torch.Tensor:
    """The BSR tensor expanded to a contiguous dense matrix of its dtype (built from its components)."""
    values, crow, col = a.values(), a.crow_indices(), a.col_indices()
    bs = values.shape[1]
    rows, cols = a.shape
    block_rows = rows // bs
    row_of_block = torch.repeat_interleave(torch.arange(block_rows, device=values.device), crow.diff())
    dense = values.new_zeros(block_rows, cols // bs, bs, bs)
    dense[row_of_block, col] = values
    return dense.permute(0, 2, 1, 3).reshape(rows, cols)


def amax(t: torch.Tensor) -> float:
    return float(t.detach().abs().max()) if t.numel() else 0.0


# ---------------------------------------------------------------------------------------------------------------
# Checks.


def check_close(got: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> dict:
    """Every element of ``got`` against the float64 ``ref``: ``|got - ref| <= atol + rtol * |ref|``."""
    if tuple(got.shape) != tuple(ref.shape):
        return {"passed": False, "reason": f"shape {tuple(got.shape)}, expected {tuple(ref.shape)}"}
    err = (got.double() - ref).abs()
    failed = ~(err <= atol + rtol * ref.abs())  # NaN compares false: fails
    finite = torch.isfinite(err)
    big = finite & (ref.abs() > atol)
    max_rel = float((err[big] / ref.abs()[big]).max()) if bool(big.any()) else 0.0
    return {
        "passed": not bool(failed.any()),
        "checked": ref.numel(),
        "failures": int(failed.sum()),
        "non_finite": int((~finite).sum()),
        "max_abs_err": float(err[finite].max()) if bool(finite.any()) else None,  # over the finite elements
        "max_rel_err": max_rel,
        "atol": atol,
        "rtol": rtol,
    }


def product_atol(k: int, max_a: float, max_b: float, per_sqrt_k: float = ATOL_PER_SQRT_K) -> float:
    return per_sqrt_k * math.sqrt(k) * max_a * max_b


# ---------------------------------------------------------------------------------------------------------------
# Timing.


class Timer:
    """Interleaved timing of several contenders (module docstring, "Method")."""

    def __init__(self, device: torch.device, warmup: int, iters: int):
        self.device, self.warmup, self.iters = device, warmup, iters
        self.cuda = device.type == "cuda"
        if self.cuda:
            l2 = torch.cuda.get_device_properties(device).L2_cache_size
            self.flush_buffer = torch.zeros(2 * l2 // 4, dtype=torch.float32, device=device)
            self.cycles_per_us = self._sleep_rate()

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def _sleep_rate(self) -> float:
        """Clock cycles per microsecond of ``torch.cuda._sleep``, measured."""
        cycles = 2_000_000
        rates = []
        for _ in range(3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            rates.append(cycles / (start.elapsed_time(end) * 1e3))
        return statistics.median(rates)

    def time(self, runs: dict) -> dict:
        """``{name: {"ms": median, "samples_ms": [...], "host_us": ...}}`` for ``{name: callable}``."""
        if not runs:
            return {}
        host = {name: [] for name in runs}
        for _ in range(self.warmup):
            for name, run in runs.items():
                t0 = time.perf_counter()
                run()
                host[name].append(time.perf_counter() - t0)
        self.sync()
        samples = self._timed_cuda(runs, host) if self.cuda else self._timed_cpu(runs)
        out = {}
        for name, ms in samples.items():
            out[name] = {"ms": statistics.median(ms), "samples_ms": ms}
            if self.cuda and host[name]:
                out[name]["host_us"] = statistics.median(host[name]) * 1e6
        return out

    def _timed_cuda(self, runs: dict, host: dict) -> dict:
        enqueue_us = max((statistics.median(v) * 1e6 for v in host.values() if v), default=200.0)
        sleep_cycles = int(self.cycles_per_us * (1.5 * enqueue_us + 20.0))
        events = {name: [] for name in runs}
        for _ in range(self.iters):
            for name, run in runs.items():
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                self.flush_buffer.sum()
                torch.cuda._sleep(sleep_cycles)
                start.record()
                run()
                end.record()
                events[name].append((start, end))
        torch.cuda.synchronize(self.device)
        return {name: [s.elapsed_time(e) for s, e in pairs] for name, pairs in events.items()}

    def _timed_cpu(self, runs: dict) -> dict:
        samples = {name: [] for name in runs}
        for _ in range(self.iters):
            for name, run in runs.items():
                t0 = time.perf_counter()
                run()
                samples[name].append((time.perf_counter() - t0) * 1e3)
        return samples


@dataclass
class Contender:
    """One way of computing a case: ``run`` launches it once; ``check`` judges its output (a dict, see
    ``check_close``); ``skip`` says why it does not run here."""

    name: str
    run: Optional[Callable[[], torch.Tensor]] = None
    check: Optional[Callable[[torch.Tensor], dict]] = None
    skip: Optional[str] = None


def describe(e: BaseException, limit: int = 2000) -> str:
    return f"{type(e).__name__}: {e}"[:limit]


def measure(timer: Timer, contenders: list) -> dict:
    """Checks every contender, then times those that ran, interleaved. ``{name: {"status": "pass" | "fail" |
    "error" | "skipped", ...}}``; a failed check leaves the time untrusted."""
    results, runnable, outputs = {}, {}, []
    for c in contenders:
        if c.skip:
            results[c.name] = {"status": "skipped", "reason": c.skip}
            continue
        try:
            out = c.run()
            timer.sync()
            outputs.append(out)  # held until all ran: no output can land in memory holding another's result
            verdict = c.check(out)
        except Exception as e:  # noqa: BLE001 (a contender's failure is a result)
            results[c.name] = {"status": "error", "error": describe(e)}
            continue
        results[c.name] = {"status": "pass" if verdict["passed"] else "fail", "check": verdict}
        runnable[c.name] = c.run
    del outputs
    for name, timing in timer.time(runnable).items():
        results[name].update(timing)
        results[name]["trusted"] = results[name]["status"] == "pass"
    return results


def speedup(results: dict, base: str, other: str) -> Optional[dict]:
    """``other``'s time over ``base``'s (how many times faster ``base`` is), when both were timed."""
    a, b = results.get(base, {}), results.get(other, {})
    if "ms" not in a or "ms" not in b:
        return None
    return {"value": b["ms"] / a["ms"], "trusted": a["trusted"] and b["trusted"]}


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------------------------
# The run: options, shared state, failures.


class Run:
    def __init__(self, args: argparse.Namespace, device: torch.device):
        self.args, self.device, self.quick = args, device, args.quick
        self.cuda = device.type == "cuda"
        self.timer = Timer(device, args.warmup, args.iters)
        self.failures = []
        self.triton_mm, self.triton_skip = self._triton()

    def _triton(self):
        if not self.cuda:
            return None, "CUDA only"
        try:
            from torch.sparse._triton_ops import bsr_dense_mm
        except Exception as e:  # noqa: BLE001
            return None, f"unavailable: {describe(e, 300)}"
        return bsr_dense_mm, None

    def progress(self, section: str, i: int, n: int, name: str) -> None:
        print(f"[{section} {i}/{n}] {name}", file=sys.stderr, flush=True)

    def note_sparsek(self, section: str, case: str, results: dict) -> None:
        status = results.get("sparsek", {}).get("status")
        if status in ("fail", "error"):
            detail = results["sparsek"].get("error") or results["sparsek"]["check"]
            self.failures.append(f"{section} {case}: sparsek {status}: {detail}")

    def case(self, section: str, i: int, n: int, name: str, body: Callable[[], dict]) -> dict:
        """Runs one case, recording an exception instead of propagating it."""
        self.progress(section, i, n, name)
        try:
            record = body()
            summary = ", ".join(
                f"{k} {v['ms']:.4g} ms{'' if v['trusted'] else ' (untrusted)'}" if "ms" in v else f"{k} {v['status']}"
                for k, v in record.get("results", {}).items()
            )
            if summary:
                print(f"    {summary}", file=sys.stderr, flush=True)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            record = {"case": name, "error": describe(e)}
            self.failures.append(f"{section} {name}: case failed: {describe(e, 300)}")
        free_memory()
        return record


def triton_contender(run: Run, call: Callable[[], torch.Tensor], check) -> Contender:
    if run.triton_mm is None:
        return Contender("triton", skip=run.triton_skip)
    return Contender("triton", call, check)


# ---------------------------------------------------------------------------------------------------------------
# Section grid.


@dataclass
class GridCase:
    m: int
    n: int
    k: int
    bs: int
    density: float
    pattern: str = "uniform"

    @property
    def name(self) -> str:
        return f"{self.m}×{self.n}×{self.k} bs{self.bs} {self.density * 100:g}% {self.pattern}"


def grid_cases(quick: bool, cuda: bool) -> list:
    if quick:
        size = 2048 if cuda else 512
        return [GridCase(size, size, size, bs, 0.22) for bs in (64, 128)]
    cases = [GridCase(8192, 8192, 8192, bs, d) for bs in (16, 32, 64, 128) for d in (0.05, 0.10, 0.22, 0.50)]
    cases.append(GridCase(4096, 4096, 4096, 64, 0.125))
    cases.append(GridCase(8192, 8192, 8192, 64, 0.22, "skewed"))
    cases.extend(GridCase(8192, n, 8192, 64, 0.22) for n in (1, 16, 128))
    return cases


def grid_case(run: Run, case: GridCase) -> dict:
    torch.manual_seed(seed_for(case.name))
    a = random_bsr(case.m, case.k, case.bs, case.density, case.pattern, run.device)
    b = torch.randn(case.k, case.n, device=run.device).to(DTYPE)
    a_dense = bsr_to_dense(a)
    ref = a_dense.double() @ b.double()
    atol = product_atol(case.k, amax(a.values()), amax(b))

    def check(y):
        return check_close(y, ref, atol, RTOL)

    results = measure(run.timer, [
        Contender("sparsek", lambda: sparsek.bsr_mm(a, b), check),
        triton_contender(run, lambda: run.triton_mm(a, b), check),
        Contender("dense", lambda: torch.matmul(a_dense, b), check),
    ])
    nnzb = a.values().shape[0]
    lengths = a.crow_indices().diff()
    work = 2.0 * nnzb * case.bs**2 * case.n
    run.note_sparsek("grid", case.name, results)
    return {
        "case": case.name, "m": case.m, "n": case.n, "k": case.k, "bs": case.bs, "density": case.density,
        "pattern": case.pattern, "nnzb": nnzb, "mean_row_blocks": float(lengths.double().mean()),
        "max_row_blocks": int(lengths.max()), "seed": seed_for(case.name), "atol": atol, "rtol": RTOL,
        "results": results,
        "effective_tflops": {k: work / (v["ms"] * 1e-3) / 1e12 for k, v in results.items() if "ms" in v},
        "speedup_vs_dense": speedup(results, "sparsek", "dense"),
        "speedup_vs_triton": speedup(results, "sparsek", "triton"),
    }


def section_grid(run: Run) -> dict:
    cases = grid_cases(run.quick, run.cuda)
    records = [run.case("grid", i + 1, len(cases), c.name, lambda c=c: grid_case(run, c)) for i, c in enumerate(cases)]
    return {"records": records}


# ---------------------------------------------------------------------------------------------------------------
# Section layer.

LAYER_SHAPES = (("up", 11008, 4096), ("down", 4096, 11008))


def layer_case(run: Run, w: torch.Tensor, w_dense: torch.Tensor, name: str, tokens: int) -> dict:
    torch.manual_seed(seed_for(name))
    out_features, in_features = w.shape
    x = torch.randn(tokens, in_features, device=run.device).to(DTYPE)
    xt = x.t()  # the column-major view Triton multiplies by (no copy)
    ref = x.double() @ w_dense.double().t()
    atol = product_atol(in_features, amax(w.values()), amax(x))
    results = measure(run.timer, [
        Contender("sparsek", lambda: sparsek.linear(x, w), lambda y: check_close(y, ref, atol, RTOL)),
        triton_contender(run, lambda: run.triton_mm(w, xt), lambda yt: check_close(yt.t(), ref, atol, RTOL)),
        Contender("dense", lambda: F.linear(x, w_dense), lambda y: check_close(y, ref, atol, RTOL)),
    ])
    run.note_sparsek("layer", name, results)
    return {
        "case": name, "out_features": out_features, "in_features": in_features, "tokens": tokens,
        "nnzb": w.values().shape[0], "atol": atol, "rtol": RTOL, "results": results,
        "speedup_vs_dense": speedup(results, "sparsek", "dense"),
        "speedup_vs_triton": speedup(results, "sparsek", "triton"),
    }


def token_records(run: Run, section: str, models: list, token_counts: tuple, case) -> dict:
    """The records of `section`: for each `(model_name, build)` of `models`, its operands built once (`build()`, with
    torch seeded from the name) and freed after its cases, then one case per token count,
    `case(operands, name, tokens)`."""
    n = len(models) * len(token_counts)
    records, i = [], 0
    for model_name, build in models:
        torch.manual_seed(seed_for(model_name))
        operands = build()
        for tokens in token_counts:
            i += 1
            name = f"{model_name} tokens={tokens}"
            records.append(run.case(section, i, n, name, lambda: case(operands, name, tokens)))
        del operands
        free_memory()
    return {"records": records}


def section_layer(run: Run) -> dict:
    densities, token_counts = ((0.2,), (1, 16)) if run.quick else ((0.1, 0.2, 0.3), (1, 16, 512, 4096))

    def weight(out_f: int, in_f: int, d: float):
        w = random_bsr(out_f, in_f, 64, d, "uniform", run.device)
        return w, bsr_to_dense(w)

    models = [(f"{proj} {out_f}×{in_f} bs64 {d * 100:g}%", lambda out_f=out_f, in_f=in_f, d=d: weight(out_f, in_f, d))
              for proj, out_f, in_f in LAYER_SHAPES for d in densities]
    return token_records(run, "layer", models, token_counts,
                         lambda ops, name, tokens: layer_case(run, *ops, name, tokens))


# ---------------------------------------------------------------------------------------------------------------
# Section mlp.

MLP_DIMS = (4096, 11008)


def mlp_reference(x: torch.Tensor, first, second):
    """The float64 evaluation of ``second(silu(first(x)))`` from ``(weight, bias)`` pairs, and max|hidden|."""
    h = F.silu(x.double() @ first[0].double().t() + first[1].double())
    return h @ second[0].double().t() + second[1].double(), amax(h)


def mlp_models(density: float, device: torch.device):
    d_model, d_ff = MLP_DIMS
    dense = torch.nn.Sequential(
        torch.nn.Linear(d_model, d_ff, device=device, dtype=DTYPE),
        torch.nn.SiLU(),
        torch.nn.Linear(d_ff, d_model, device=device, dtype=DTYPE),
    ).eval()
    sparse = torch.nn.Sequential(
        BlockSparseLinear.from_dense(dense[0], 64, density=density, dtype=DTYPE, activation="silu"),
        BlockSparseLinear.from_dense(dense[2], 64, density=density, dtype=DTYPE),
    ).eval()
    return dense, sparse


def mlp_checker(x: torch.Tensor, first, second):
    ref, max_h = mlp_reference(x, first, second)
    atol = product_atol(MLP_DIMS[1], max_h, amax(second[0]), ATOL_PER_SQRT_K_MLP)
    return lambda y: check_close(y, ref, atol, RTOL_MLP)


def mlp_case(run: Run, dense, sparse, name: str, tokens: int) -> dict:
    torch.manual_seed(seed_for(name))
    with torch.inference_mode():
        x = torch.randn(tokens, MLP_DIMS[0], device=run.device).to(DTYPE)
        dense_layers = [(dense[i].weight, dense[i].bias) for i in (0, 2)]
        sparse_layers = [(sparse[i].to_dense(), sparse[i].bias) for i in (0, 1)]
        results = measure(run.timer, [
            Contender("sparsek", lambda: sparse(x), mlp_checker(x, *sparse_layers)),
            Contender("dense", lambda: dense(x), mlp_checker(x, *dense_layers)),
        ])
    run.note_sparsek("mlp", name, results)
    return {
        "case": name, "tokens": tokens, "nnzb": [sparse[0].nnzb, sparse[1].nnzb], "rtol": RTOL_MLP,
        "results": results, "speedup_vs_dense": speedup(results, "sparsek", "dense"),
    }


def section_mlp(run: Run) -> dict:
    densities, token_counts = ((0.2,), (16,)) if run.quick else ((0.1, 0.2, 0.3), (1, 16, 512, 4096))
    models = [(f"MLP {MLP_DIMS[0]}→{MLP_DIMS[1]}→{MLP_DIMS[0]} bs64 {d * 100:g}%",
               lambda d=d: mlp_models(d, run.device)) for d in densities]
    return token_records(run, "mlp", models, token_counts,
                         lambda ops, name, tokens: mlp_case(run, *ops, name, tokens))


# ---------------------------------------------------------------------------------------------------------------
# Section overhead.

SPARSEK_CALLS = ("a", "b", "b_py", "c", "d", "e", "e_compiled", "i", "k", "k_op", "k_py")
OVERHEAD_MODES = (
    ("grad", contextlib.nullcontext), ("no_grad", torch.no_grad), ("inference_mode", torch.inference_mode)
)
# The ratios the overhead section reports (issue 43: each within 1.25x): sparsek's call over its dense twin's.
OVERHEAD_RATIOS = (("a", "f"), ("e", "f_mod"), ("k", "l"), ("b", "f"), ("b_py", "f"))


def overhead_calls(run: Run):
    """``({key: (label, call)}, (x, w_dense))``: the ways of computing one tiny linear layer, the floor, and the
    operands (for the check)."""
    torch.manual_seed(seed_for("overhead"))
    device = run.device
    w = random_bsr(256, 256, 64, 0.5, "uniform", device)
    w_dense = bsr_to_dense(w)
    x = torch.randn(16, 256, device=device).to(DTYPE)  # 16 tokens: Triton's bsr_dense_mm needs N % 16 == 0
    xt = x.t()
    values, crow, col = w.values(), w.crow_indices(), w.col_indices()
    module = BlockSparseLinear.from_bsr(w)
    compiled = torch.compile(module, fullgraph=True)
    dense_module = torch.nn.Linear(256, 256, bias=False, device=device, dtype=DTYPE)
    with torch.no_grad():
        dense_module.weight.copy_(w_dense)
    native = "native kernel" if sparsek._ops.NATIVE_OPS else "Python kernel: native ones not registered"
    return {
        "a": ("sparsek.linear(x, w_bsr) (public wrapper)", lambda: sparsek.linear(x, w)),
        "b": (f"torch.ops.sparsek.linear ({native})",
              lambda: torch.ops.sparsek.linear(x, values, crow, col, 256, None, 0)),
        "b_py": ("torch.ops.sparsek._linear_py (the Python kernel, the fallback's registration)",
                 lambda: torch.ops.sparsek._linear_py(x, values, crow, col, 256, None, 0)),
        "c": ("sparsek._ops.linear_impl (no dispatcher)",
              lambda: sparsek._ops.linear_impl(x, values, crow, col, 256, None, 0)),
        "d": ("torch.ops.sparsek_bench.linear (custom_op)",
              lambda: torch.ops.sparsek_bench.linear(x, values, crow, col, 256, None, 0)),
        "e": ("BlockSparseLinear forward", lambda: module(x)),
        "e_compiled": ("torch.compile(BlockSparseLinear, fullgraph=True)", lambda: compiled(x)),
        "f": ("dense F.linear(x, w_dense)", lambda: F.linear(x, w_dense)),
        "f_mod": ("dense nn.Linear module", lambda: dense_module(x)),
        # bsr_mm against torch.mm on the same dense operand (16 columns); the result is y^T, checked as such.
        "k": ("sparsek.bsr_mm(w_bsr, x.t()) (public wrapper)", lambda: sparsek.bsr_mm(w, xt).t()),
        "k_op": (f"torch.ops.sparsek.bsr_mm ({native})",
                 lambda: torch.ops.sparsek.bsr_mm(values, crow, col, 256, 256, xt, 1.0, None).t()),
        "k_py": ("torch.ops.sparsek._bsr_mm_py (the Python kernel)",
                 lambda: torch.ops.sparsek._bsr_mm_py(values, crow, col, 256, 256, xt, 1.0, None).t()),
        "l": ("dense torch.mm(w_dense, x.t())", lambda: torch.mm(w_dense, xt).t()),
        "g": (f"torch.empty(1, device='{device.type}') (floor)", lambda: torch.empty(1, device=device)),
        **({} if run.triton_mm is None else {
            "h": ("Triton bsr_dense_mm(w_bsr, x.t()).t() (PyTorch's BSR kernel)", lambda: run.triton_mm(w, xt).t())
        }),
        **({} if not run.cuda else {
            "i": (f"BlockSparseLinear, {GRAPH_CALLS} calls in one CUDA graph (per call)", graph_replay(lambda: module(x))),
            "j": (f"dense F.linear, {GRAPH_CALLS} calls in one CUDA graph (per call)",
                  graph_replay(lambda: F.linear(x, w_dense))),
        }),
    }, (x, w_dense)


# Calls captured per CUDA graph in the overhead section: a replay's time over this is the per-call cost left when
# the host overhead is gone (decode loops under torch.cuda.graph or torch.compile(mode="reduce-overhead")).
GRAPH_CALLS = 100
GRAPH_KEYS = ("i", "j")


def graph_replay(call: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """A function that replays ``GRAPH_CALLS`` captured calls of ``call`` and returns the last one's output."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            call()  # warm-up outside the capture (sparsek checks its structure here)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        for _ in range(GRAPH_CALLS):
            out = call()

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    return replay


def overhead_mode(run: Run, calls: dict, x: torch.Tensor, w_dense: torch.Tensor, n_calls: int) -> dict:
    """Checks every call (all but the floor; none under ``--overhead-dry-run``) and measures its wall-clock µs per
    call, in the current mode."""
    ref = x.double() @ w_dense.double().t()
    atol = product_atol(x.shape[-1], amax(w_dense), amax(x))
    out, ready = {}, {}
    for key, (_, call) in calls.items():
        try:
            y = call()
            verdict = None if key == "g" or run.args.overhead_dry_run else check_close(y, ref, atol, RTOL)
            for _ in range(50):
                call()
            run.timer.sync()
        except Exception as e:  # noqa: BLE001 (torch.compile may fail: a result)
            out[key] = {"status": "error", "error": describe(e)}
            continue
        out[key] = {"status": "pass" if verdict is None or verdict["passed"] else "fail", "check": verdict}
        ready[key] = call
    rounds = {key: [] for key in ready}
    for _ in range(OVERHEAD_ROUNDS):
        for key, call in ready.items():
            run.timer.sync()
            t0 = time.perf_counter()
            for _ in range(n_calls):
                call()
            run.timer.sync()
            rounds[key].append((time.perf_counter() - t0) / n_calls * 1e6)
    for key, us in rounds.items():
        per = GRAPH_CALLS if key in GRAPH_KEYS else 1
        out[key].update({"us_per_call": statistics.median(us) / per, "rounds_us": [u / per for u in us]})
    return out


def section_overhead(run: Run) -> dict:
    n_calls = run.args.overhead_calls or (500 if run.quick else 2000)
    run.progress("overhead", 1, 1, f"{n_calls} calls x {OVERHEAD_ROUNDS} rounds per call, per mode")
    calls, (x, w_dense) = overhead_calls(run)
    dry = run.args.overhead_dry_run
    if dry:
        # The host path without sparsek's CPU backend arithmetic (native kernels: set_native_dry_run; the Python
        # kernels: cpu_spmm replaced by a no-op): sparsek's outputs are left unwritten and are not checked.
        sparsek._native.set_native_dry_run(True)
        cpu_spmm, sparsek._native.cpu_spmm = sparsek._native.cpu_spmm, lambda args: None
    modes = {}
    try:
        for mode, context in OVERHEAD_MODES:
            with context():
                modes[mode] = overhead_mode(run, calls, x, w_dense, n_calls)
            for key, r in modes[mode].items():
                # sparsek's calls must run and pass; the compiled module may fail to compile (reported), not be
                # wrong.
                if key in SPARSEK_CALLS and (r["status"] == "fail" or (r["status"] == "error" and key != "e_compiled")):
                    run.failures.append(f"overhead {mode} ({key}) {calls[key][0]}: {r}")
    finally:
        if dry:
            sparsek._native.set_native_dry_run(False)
            sparsek._native.cpu_spmm = cpu_spmm
    records = [
        {"key": key, "call": label, **{mode: modes[mode][key] for mode in modes}} for key, (label, _) in calls.items()
    ]
    return {"records": records, "calls_per_round": n_calls, "rounds": OVERHEAD_ROUNDS, "dry_run": dry,
            "native_ops": sparsek._ops.NATIVE_OPS, "native_ops_why_not": sparsek._ops.NATIVE_OPS_WHY_NOT}


SECTION_FUNCS = {"grid": section_grid, "layer": section_layer, "mlp": section_mlp, "overhead": section_overhead}


# ---------------------------------------------------------------------------------------------------------------
# Header.


def driver_version() -> dict:
    """The NVIDIA driver's version (nvidia-smi) and CUDA API version (libcuda), where they can be read."""
    out = {"driver": "unknown", "cuda_driver_api": "unknown"}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True)
        out["driver"] = smi.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    try:
        version = ctypes.c_int()
        if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version)) == 0:
            out["cuda_driver_api"] = f"{version.value // 1000}.{version.value % 1000 // 10}"
    except (OSError, AttributeError):
        pass
    return out


def triton_version() -> Optional[str]:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def run_header(run: Run) -> dict:
    header = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "commit": os.environ.get("SPARSEK_COMMIT", "unknown"),
        "device": run.device.type,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": triton_version(),
        "sparsek": sparsek.__version__,
        "iters": run.args.iters,
        "warmup": run.args.warmup,
        "quick": run.quick,
    }
    if run.cuda:
        p = torch.cuda.get_device_properties(run.device)
        header["gpu"] = {
            "name": p.name, "compute_capability": f"{p.major}.{p.minor}", "sms": p.multi_processor_count,
            "l2_bytes": p.L2_cache_size, "memory_bytes": p.total_memory,
        }
        header.update(driver_version())
        try:
            header["sparsek_device_info"] = sparsek.device_info(run.device)
        except Exception as e:  # noqa: BLE001 (the header records what it cannot read)
            header["sparsek_device_info"] = {"error": describe(e, 300)}
        header["cublas_fp16_reduced_precision_reduction"] = (
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
        )
    else:
        header["cpu"] = platform.processor() or platform.machine()
        header["cpu_threads"] = torch.get_num_threads()
    return header


# ---------------------------------------------------------------------------------------------------------------
# Tables.


def fmt_ms(ms: float) -> str:
    return f"{ms:.3f}" if ms >= 1 else f"{ms:.3g}"


def cell(results: dict, name: str) -> str:
    r = results.get(name)
    if r is None or r["status"] == "skipped":
        return "—"
    if "ms" not in r:
        return "error"
    return fmt_ms(r["ms"]) + ("" if r["trusted"] else "!")


def fmt_tflops(tflops: dict, name: str) -> str:
    if name not in tflops:
        return "—"
    return f"{tflops[name]:.1f}" if tflops[name] >= 10 else f"{tflops[name]:.3g}"


def fmt_speedup(s: Optional[dict]) -> str:
    return "—" if s is None else f"{s['value']:.2f}x" + ("" if s["trusted"] else "!")


def checks_cell(results: dict) -> str:
    bad = [f"{k} {v['status']}" for k, v in results.items() if v["status"] in ("fail", "error")]
    return ", ".join(bad) if bad else "pass"


def md_table(head: list, rows: list, left=(0,)) -> str:
    """A Markdown table, numbers right-aligned (the columns in ``left`` and a last "checks" column: left)."""
    left = set(left) | ({len(head) - 1} if head[-1] == "checks" else set())
    rule = "|" + "|".join("---" if i in left else "--:" for i in range(len(head))) + "|"
    lines = ["| " + " | ".join(head) + " |", rule]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def error_notes(records: list) -> list:
    """One line per distinct error (case errors and contender errors), with the cases it hit."""
    seen = {}
    for r in records:
        if "error" in r:
            seen.setdefault(f"case failed: {r['error'].splitlines()[0][:300]}", []).append(r["case"])
        for name, res in r.get("results", {}).items():
            if res["status"] == "error":
                seen.setdefault(f"{name}: {res['error'].splitlines()[0][:300]}", []).append(r["case"])
            elif res["status"] == "skipped":
                seen.setdefault(f"{name}: skipped ({res['reason']})", []).append(r["case"])
    return [f"- {msg} ({len(cases)} case{'s' if len(cases) > 1 else ''}: {cases[0]}"
            f"{', ...' if len(cases) > 1 else ''})" for msg, cases in seen.items()]


def record_table(section: dict, head: list, row) -> str:
    """A Markdown table of the section's records: row(r) for a case that ran, else its name and "error" in every
    other column."""
    rows = [[r["case"]] + ["error"] * (len(head) - 1) if "error" in r else row(r) for r in section["records"]]
    return md_table(head, rows)


def table_grid(section: dict) -> str:
    def row(r: dict) -> list:
        res, tf = r["results"], r["effective_tflops"]
        return [
            r["case"], r["nnzb"],
            cell(res, "sparsek"), fmt_tflops(tf, "sparsek"),
            cell(res, "triton"), fmt_tflops(tf, "triton"),
            cell(res, "dense"), fmt_tflops(tf, "dense"),
            fmt_speedup(r["speedup_vs_dense"]), fmt_speedup(r["speedup_vs_triton"]), checks_cell(res),
        ]
    head = ["case", "nnzb", "sparsek ms", "sparsek TFLOPS", "triton ms", "triton TFLOPS", "dense ms",
            "dense TFLOPS", "speedup vs dense", "speedup vs triton", "checks"]
    return record_table(section, head, row)


def table_layer(section: dict) -> str:
    def row(r: dict) -> list:
        res = r["results"]
        return [r["case"], cell(res, "sparsek"), cell(res, "triton"), cell(res, "dense"),
                fmt_speedup(r["speedup_vs_dense"]), fmt_speedup(r["speedup_vs_triton"]), checks_cell(res)]
    head = ["weight (out×in), density, tokens", "sparsek ms", "triton ms (yᵀ)", "dense ms", "speedup vs dense",
            "speedup vs triton", "checks"]
    return record_table(section, head, row)


def table_mlp(section: dict) -> str:
    def row(r: dict) -> list:
        res = r["results"]
        return [r["case"], "/".join(map(str, r["nnzb"])), cell(res, "sparsek"), cell(res, "dense"),
                fmt_speedup(r["speedup_vs_dense"]), checks_cell(res)]
    head = ["case", "nnzb (up/down)", "sparse MLP ms", "dense MLP ms", "speedup", "checks"]
    return record_table(section, head, row)


def us_cell(r: dict) -> str:
    if "us_per_call" not in r:
        return "error"
    return f"{r['us_per_call']:.1f}" + ("" if r["status"] == "pass" else "!")


def table_overhead(section: dict) -> str:
    modes = [m for m, _ in OVERHEAD_MODES if m in section["records"][0]]
    rows = [[f"({r['key']}) {r['call']}", *(us_cell(r[m]) for m in modes)] for r in section["records"]]
    table = md_table(["call", *(f"µs/call, {m}" for m in modes)], rows)
    by_key = {r["key"]: r for r in section["records"]}
    native = "native kernels registered" if section.get("native_ops") else (
        f"native kernels NOT registered ({section.get('native_ops_why_not')})")
    lines = [
        f"Wall clock per call: {section['calls_per_round']} calls between two synchronize, median of "
        f"{section['rounds']} rounds, interleaved; `!`: the output failed its check. sparsek::linear/bsr_mm: {native}."
        + (" DRY RUN (--overhead-dry-run): sparsek's product left out, outputs unchecked: host path only."
           if section.get("dry_run") else ""),
        "",
        table,
        "",
        "sparsek over dense (issue 43's target: each <= 1.25):",
    ]
    for a, b in OVERHEAD_RATIOS:
        if a in by_key and b in by_key:
            cells = []
            for m in modes:
                ra, rb = by_key[a][m], by_key[b][m]
                ok = "us_per_call" in ra and "us_per_call" in rb
                cells.append(f"{m} {ra['us_per_call'] / rb['us_per_call']:.2f}" if ok else f"{m} n/a")
            lines.append(f"- ({a}) / ({b}): " + ", ".join(cells))
    lines.append("")
    lines.append("Library define/impl (b) vs custom_op (d), µs per call:")
    for mode in modes:
        lines.append(f"- {mode}: {us_cell(by_key['b'][mode])} vs {us_cell(by_key['d'][mode])}")
    return "\n".join(lines)


TABLES = {"grid": table_grid, "layer": table_layer, "mlp": table_mlp, "overhead": table_overhead}

SECTION_TITLES = {
    "grid": "BSR × dense (`sparsek.bsr_mm` vs Triton `bsr_dense_mm` vs dense `torch.matmul`)",
    "layer": "LLM layer `y = x @ Wᵀ` (`sparsek.linear` vs Triton `bsr_dense_mm(W, x.t())` vs `F.linear` on W "
             "expanded to dense)",
    "mlp": "MLP block, sparse (BlockSparseLinear, SiLU fused) vs the dense original (unpruned), inference_mode",
    "overhead": "Per-call host overhead (256×256 bs64 50%, 16 tokens)",
}


def header_lines(h: dict) -> list:
    if h["device"] == "cuda":
        g = h["gpu"]
        dev = (f"{g['name']} (sm_{g['compute_capability'].replace('.', '')}, {g['sms']} SMs, "
               f"{g['l2_bytes'] / 2**20:.0f} MiB L2), driver {h['driver']} (CUDA {h['cuda_driver_api']}); "
               f"sparsek kernels: {h['sparsek_device_info'].get('module', 'unknown')}"
               + (f" + {h['sparsek_device_info']['hopper_module']}" if h['sparsek_device_info'].get('hopper_module') else ""))
        method = ("interleaved launch by launch, each between its own CUDA events, L2 flushed and the GPU kept "
                  "busy before each (outside its events)")
        dense = "the dense contenders run cuBLAS (torch.matmul, F.linear, nn.Linear)"
    else:
        dev = f"CPU {h['cpu']} ({h['cpu_threads']} torch threads): smoke test, not a benchmark"
        method = "interleaved call by call, time.perf_counter"
        dense = "the dense contenders run torch's CPU f16 matmul"
    return [
        f"{dev}; torch {h['torch']} (CUDA {h['torch_cuda']}), triton {h['triton']}, sparsek {h['sparsek']}; "
        f"{h['date_utc']}; commit {h['commit']}.",
        f"Median of {h['iters']} timed runs per contender after {h['warmup']} warm-up, {method}; {dense}. "
        "Every output checked against float64 first: `!` marks a time whose output failed its check; speedup = "
        "the other's time / sparsek's.",
    ]


def render(result: dict) -> str:
    parts = ["# sparsek vs PyTorch", "", *header_lines(result["header"])]
    for name, section in result["sections"].items():
        parts += ["", f"## {name}: {SECTION_TITLES[name]}", ""]
        if "error" in section:
            parts.append(f"section failed: {section['error']}")
            continue
        parts.append(TABLES[name](section))
        notes = error_notes(section["records"]) if name != "overhead" else []
        if notes:
            parts += [""] + notes
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# Main.


def parse_args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a few small cases per section (smoke test)")
    p.add_argument("--only", default=",".join(SECTIONS), help=f"comma list of sections ({','.join(SECTIONS)})")
    p.add_argument("--json", metavar="OUT.json", help="write every number and the run's header here")
    p.add_argument("--md", metavar="OUT.md", help="write the tables here")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--iters", type=int, default=30, help="timed launches per contender (default 30)")
    p.add_argument("--warmup", type=int, default=5, help="untimed launches per contender first (default 5)")
    p.add_argument("--overhead-calls", type=int, help="calls per round in the overhead section (2000; --quick 500)")
    p.add_argument("--overhead-dry-run", action="store_true",
                   help="overhead section without sparsek's product (native kernels' dry run, the Python kernels' "
                        "cpu_spmm a no-op): the host path alone, outputs unchecked; for --device cpu")
    args = p.parse_args(argv)
    args.sections = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown or not args.sections:
        p.error(f"--only: unknown or no section {unknown}; choose from {','.join(SECTIONS)}")
    if args.iters < 1 or args.warmup < 0 or (args.overhead_calls is not None and args.overhead_calls < 1):
        p.error("--iters and --overhead-calls must be >= 1, --warmup >= 0")
    return args


def quiet_bsr_notices() -> None:
    """Silences torch's notices about BSR tensors (random_bsr validates every matrix it builds)."""
    warnings.filterwarnings("ignore", message="Sparse BSR tensor support is in beta state")
    warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")


def no_cuda(args, name: str) -> bool:
    """Whether ``--device cuda`` was asked for where torch sees no CUDA device (said on stderr)."""
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"{name}: no CUDA device visible to torch (use --device cpu for a smoke test)", file=sys.stderr)
        return True
    return False


def main(argv=None) -> int:
    args = parse_args(argv)
    quiet_bsr_notices()
    if no_cuda(args, "bench_torch"):
        return 2
    run = Run(args, torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu"))
    result = {"header": run_header(run), "sections": {}}
    for name in args.sections:
        print(f"== {name}", file=sys.stderr, flush=True)
        try:
            result["sections"][name] = SECTION_FUNCS[name](run)
        except Exception as e:  # noqa: BLE001 (one section's failure must not stop the others)
            traceback.print_exc()
            result["sections"][name] = {"error": describe(e)}
            run.failures.append(f"section {name} failed: {describe(e, 300)}")
        free_memory()
    result["failures"] = run.failures
    markdown = render(result)
    print(markdown)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, allow_nan=False)
            f.write("\n")
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown)
    for failure in run.failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
