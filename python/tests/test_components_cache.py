"""The public functions remember a BSR tensor's components (``values()``, ``crow_indices()``, ``col_indices()``) by
the tensor's identity, to spare three ATen calls per call: what they remember must never serve a stale or a wrong
tensor. In-place writes are seen, a freed tensor's entry leaves, a tensor that requires grad is never served from
the memory, and a new tensor at a reused address gets its own components."""

from __future__ import annotations

import gc

import pytest
import torch

import sparsek
from conftest import DEVICES, random_bsr, randn, seed_for

DTYPE = torch.float16


def _operands(device, *parts):
    gen = torch.Generator().manual_seed(seed_for("components", device, *parts))
    w, w64 = random_bsr(64, 96, 16, 0.5, DTYPE, torch.int32, device, gen)
    x = randn(5, 96, dtype=DTYPE, device=device, gen=gen)
    return w, w64, x, gen


def _check(y, x, w64):
    ref = x.double().cpu() @ w64.t()
    tol = 2e-2 * (1 + ref.abs())
    assert torch.all((y.double().cpu() - ref).abs() <= tol), "result differs from the float64 product"


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_writes_to_the_values_are_seen(device):
    w, w64, x, gen = _operands(device, "in-place")
    _check(sparsek.linear(x, w), x, w64)
    _check(sparsek.bsr_mm(w, x.t().contiguous()).t(), x, w64)
    scale = randn(*w.values().shape, dtype=DTYPE, device=device, gen=gen)
    w.values().mul_(scale)
    w64 = torch.sparse_bsr_tensor(
        w.crow_indices().cpu(), w.col_indices().cpu(), w.values().double().cpu(), w.shape
    ).to_dense()
    _check(sparsek.linear(x, w), x, w64)
    _check(sparsek.bsr_mm(w, x.t().contiguous()).t(), x, w64)


@pytest.mark.parametrize("device", DEVICES)
def test_a_freed_tensor_leaves_and_a_new_one_gets_its_own(device):
    before = len(sparsek._COMPONENTS)
    for i in range(6):
        # Each weight is freed before the next is made, so their addresses (and ids) are likely reused.
        w, w64, x, _ = _operands(device, "reuse", i)
        _check(sparsek.linear(x, w), x, w64)
        assert len(sparsek._COMPONENTS) == before + 1
        del w
        gc.collect()
        assert len(sparsek._COMPONENTS) == before


def test_a_tensor_that_requires_grad_is_not_served_from_memory():
    w, w64, x, _ = _operands("cpu", "grad")
    _check(sparsek.linear(x, w), x, w64)
    w.requires_grad_(True)
    y = sparsek.linear(x, w)
    _check(y.detach(), x, w64)
    assert y.requires_grad and y.grad_fn is not None, "the call must see that the weight now requires grad"


def test_not_a_bsr_tensor_still_raises():
    with pytest.raises(TypeError, match="torch.sparse_bsr"):
        sparsek.linear(torch.ones(2, 16, dtype=DTYPE), torch.ones(16, 16, dtype=DTYPE))

