"""The two-rank runner that test_distributed.py and test_distributed_train.py share (not a test file itself).

A test file registers its cases in a ``CASES`` dict (name -> ``fn(rank, device)``, raising on failure; ``CASES, case =
registry()`` gives the dict and its decorator) and gets:

- :func:`results`: every case run once per backend in ``WORLD`` processes (``torch.multiprocessing.spawn``, a file
  rendezvous, a 60 s collective timeout so that a case failing on one rank only errors instead of hanging), each
  rank's ``{name: None or its traceback}``;
- :func:`add_pytest_tests`: ``test_two_gpus_present_when_required`` and ``test_case[backend-name]`` in the test
  file's namespace, gloo on the CPU always, NCCL where two GPUs are present (required with
  ``SPARSEK_REQUIRE_GPU=2``);
- :func:`torchrun_main`: the same cases with this process one rank of ``torchrun --nproc-per-node 2``.

Every rank leaves without the interpreter's teardown (``os._exit``), its results written and its streams flushed:
after backward has run, a rank's exit aborted in about one run in three on the CI machine ("terminate called
without an active exception" from a C++ thread still joinable when torch's static objects are destroyed, after
``destroy_process_group``; 7 of 20 runs here, 0 of 20 with this exit).
"""

from __future__ import annotations

import datetime
import importlib
import os
import sys
import tempfile
import traceback

import pytest
import torch
import torch.distributed as dist

WORLD = 2
REQUIRE_GPU2 = os.environ.get("SPARSEK_REQUIRE_GPU") == "2"


def registry():
    """``(CASES, case)``: a test file's dict of cases and the decorator ``@case(name)`` that registers one."""
    cases: dict[str, object] = {}

    def case(name):
        def deco(fn):
            cases[name] = fn
            return fn
        return deco

    return cases, case


def run_cases(cases, rank, device) -> dict[str, str | None]:
    """Every case of ``cases`` on this rank, in order, each followed by a barrier (a failed case must not leave the
    ranks out of step): ``{name: None or the traceback}``."""
    results = {}
    for name, fn in cases.items():
        try:
            fn(rank, device)
            results[name] = None
        except Exception:  # noqa: BLE001 - reported per case
            results[name] = traceback.format_exc()
            print(f"rank {rank} {name}: {results[name]}", file=sys.stderr, flush=True)
        dist.barrier()
    return results


def _exit(code):
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _worker(rank, module, backend, init_file, out_dir):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    cases = importlib.import_module(module).CASES
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    try:
        results = run_cases(cases, rank, "cuda" if backend == "nccl" else "cpu")
    finally:
        dist.destroy_process_group()
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    _exit(0)


_RESULTS: dict[tuple[str, str], list] = {}


def results(module, cases, backend) -> list[dict[str, str | None]]:
    """Each rank's results of the cases of test module ``module`` (its import name; ``cases`` its ``CASES``) on
    ``backend``, run once per module and backend; ranks that did not finish fail every case with the reason."""
    key = (module, backend)
    if key not in _RESULTS:
        with tempfile.TemporaryDirectory() as tmp:
            init = os.path.join(tmp, "rendezvous")
            try:
                torch.multiprocessing.spawn(_worker, args=(module, backend, init, tmp), nprocs=WORLD, join=True)
                _RESULTS[key] = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(WORLD)]
            except Exception:  # noqa: BLE001 - every case fails with it, without spawning again
                crash = f"the ranks did not finish:\n{traceback.format_exc()}"
                _RESULTS[key] = [dict.fromkeys(cases, crash) for _ in range(WORLD)]
    return _RESULTS[key]


def two_gpus() -> bool:
    return torch.cuda.is_available() and torch.cuda.device_count() >= 2 and dist.is_nccl_available()


def add_pytest_tests(namespace) -> None:
    """Defines ``test_two_gpus_present_when_required`` and the parametrized ``test_case`` in the test module whose
    globals are ``namespace`` (its ``CASES`` and ``__name__``)."""
    cases, module = namespace["CASES"], namespace["__name__"]
    backends = [
        "gloo",
        pytest.param("nccl", marks=pytest.mark.skipif(
            not two_gpus() and not REQUIRE_GPU2,
            reason="needs 2 CUDA GPUs and NCCL (set SPARSEK_REQUIRE_GPU=2 to make this a failure)")),
    ]

    def test_two_gpus_present_when_required():
        if REQUIRE_GPU2:
            assert two_gpus(), "SPARSEK_REQUIRE_GPU=2 but torch does not see 2 CUDA GPUs with NCCL"
        else:
            pytest.skip("SPARSEK_REQUIRE_GPU=2 not set")

    @pytest.mark.parametrize("backend", backends)
    @pytest.mark.parametrize("name", list(cases))
    def test_case(backend, name):
        if backend == "nccl" and not two_gpus():
            pytest.fail("SPARSEK_REQUIRE_GPU=2 but torch does not see 2 CUDA GPUs with NCCL")
        failures = [f"rank {r}:\n{res[name]}" for r, res in enumerate(results(module, cases, backend))
                    if res[name] is not None]
        assert not failures, "\n".join(failures)

    namespace["test_two_gpus_present_when_required"] = test_two_gpus_present_when_required
    namespace["test_case"] = test_case


def torchrun_main(cases, doc) -> None:
    """Every case with this process one rank of ``torchrun --nproc-per-node 2 FILE [--backend nccl|gloo]``; rank 0
    prints the failures and a count; the exit status is 1 if any case failed on any rank."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    args = parser.parse_args()
    if args.backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=60))
    if dist.get_world_size() != WORLD:
        raise SystemExit(f"run with --nproc-per-node {WORLD}")
    res = run_cases(cases, dist.get_rank(), "cuda" if args.backend == "nccl" else "cpu")
    every = [None] * WORLD
    dist.all_gather_object(every, res)
    dist.destroy_process_group()
    failed = sorted({n for r in every for n, e in r.items() if e is not None})
    if int(os.environ.get("RANK", "0")) == 0:  # the group is gone: the rank from torchrun's environment
        for r, rr in enumerate(every):
            for n in failed:
                if rr[n] is not None:
                    print(f"FAILED {n} (rank {r}):\n{rr[n]}")
        print(f"{len(res) - len(failed)} of {len(res)} cases passed on {WORLD} ranks ({args.backend})")
    _exit(1 if failed else 0)
