"""Gradients through ``sparsek.linear``, ``sparsek.bsr_mm`` and ``BlockSparseLinear`` (issue 44, first stage: the
formulas registered with ``torch.library.register_autograd``) against torch's autograd on the float64 dense masked
computation of the same low-precision inputs: the input's, the stored blocks' and the bias's gradients, every
activation, both dtypes, CPU and CUDA. Only stored blocks get gradients; the structure stays fixed."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import sparsek
from conftest import DEVICES, DTYPES, activation64, assert_close, random_bsr, randn, seed_for


def _blocks_of(dense: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The entries of a dense float64 matrix at ``w``'s stored blocks, in its value layout."""
    bs = w.values().shape[-1]
    crow, col = w.crow_indices().cpu().long(), w.col_indices().cpu().long()
    rows = torch.repeat_interleave(torch.arange(crow.numel() - 1), crow[1:] - crow[:-1])
    m, k = dense.shape
    return dense.reshape(m // bs, bs, k // bs, bs).permute(0, 2, 1, 3)[rows, col]


def _dense64(w: torch.Tensor, values64: torch.Tensor) -> torch.Tensor:
    """``w``'s structure with ``values64`` (a float64 leaf that requires grad) as a dense float64 matrix."""
    return torch.sparse_bsr_tensor(w.crow_indices().cpu(), w.col_indices().cpu(), values64, w.shape).to_dense()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", [None, "relu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_gradients(device, dtype, activation, with_bias):
    gen = torch.Generator().manual_seed(seed_for("grad-linear", device, dtype, activation, with_bias))
    bs = 16 if with_bias else 32
    w, _ = random_bsr(96, 64, bs, 0.5, dtype, torch.int32, device, gen)
    x = randn(2, 3, 64, dtype=dtype, device=device, gen=gen)
    bias = randn(96, dtype=dtype, device=device, gen=gen) if with_bias else None
    r = randn(2, 3, 96, dtype=dtype, device=device, gen=gen)  # the upstream gradient
    values = w.values().detach().clone().requires_grad_(True)
    xg = x.clone().requires_grad_(True)
    bg = bias.clone().requires_grad_(True) if with_bias else None
    wg = torch.sparse_bsr_tensor(w.crow_indices(), w.col_indices(), values, w.shape)
    y = sparsek.linear(xg, wg, bg, activation)
    y.backward(r)

    # The float64 reference from the same low-precision inputs.
    v64 = w.values().detach().cpu().double().requires_grad_(True)
    x64 = x.cpu().double().requires_grad_(True)
    b64 = bias.cpu().double().requires_grad_(True) if with_bias else None
    w64 = _dense64(w, v64)
    z64 = x64 @ w64.t() + (b64 if with_bias else 0.0)
    y64 = activation64(z64, activation)
    y64.backward(r.cpu().double())

    # Magnitudes of each gradient's dot products: |g| @ |W|, |g|^T @ |x|, sum |g| (g bounded by |r| * max act').
    g_abs = r.cpu().double().abs().reshape(-1, 96) * (1.2 if activation else 1.0)
    assert_close(xg.grad, x64.grad, (g_abs @ w64.detach().abs()).reshape(x.shape), 96, activation)
    blocks_abs = _blocks_of(g_abs.t() @ x64.detach().abs().reshape(-1, 64), w)
    assert_close(values.grad, v64.grad, blocks_abs, 6, activation)
    if with_bias:
        assert_close(bg.grad, b64.grad, g_abs.sum(0), 6, activation)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_bsr_mm_gradients(device, dtype):
    gen = torch.Generator().manual_seed(seed_for("grad-mm", device, dtype))
    w, _ = random_bsr(64, 96, 32, 0.5, dtype, torch.int64, device, gen)
    b = randn(96, 5, dtype=dtype, device=device, gen=gen)
    r = randn(64, 5, dtype=torch.float32, device=device, gen=gen)
    values = w.values().detach().clone().requires_grad_(True)
    bg = b.clone().requires_grad_(True)
    wg = torch.sparse_bsr_tensor(w.crow_indices(), w.col_indices(), values, w.shape)
    sparsek.bsr_mm(wg, bg, alpha=0.5, out_dtype=torch.float32).backward(r)

    v64 = w.values().detach().cpu().double().requires_grad_(True)
    b64 = b.cpu().double().requires_grad_(True)
    (0.5 * (_dense64(w, v64) @ b64)).backward(r.cpu().double())
    r_abs = 0.5 * r.cpu().double().abs()
    assert_close(bg.grad, b64.grad, _dense64(w, v64).detach().abs().t() @ r_abs, 64)
    assert_close(values.grad, v64.grad, _blocks_of(r_abs @ b64.detach().abs().t(), w), 5)


@pytest.mark.parametrize("device", DEVICES)
def test_block_sparse_linear_trains(device):
    """A BlockSparseLinear whose values and bias require grad learns a target layer of its own structure with
    torch.optim.SGD; the structure (indices) never changes and no gradient lands outside the stored blocks."""
    torch.manual_seed(seed_for("train", device))
    teacher = torch.nn.Linear(64, 64).to(device)
    layer = sparsek.BlockSparseLinear.from_dense(teacher, 16, density=0.5, dtype=torch.bfloat16).to(device)
    target = sparsek.BlockSparseLinear.from_dense(teacher, 16, density=0.5, dtype=torch.bfloat16).to(device)
    with torch.no_grad():
        layer.values.mul_(0.0)
    layer.values.requires_grad_(True)
    layer.bias.requires_grad_(True)
    crow, col = layer.crow_indices.clone(), layer.col_indices.clone()
    opt = torch.optim.SGD([layer.values, layer.bias], lr=2.0)
    losses = []
    for step in range(60):
        x = torch.randn(32, 64, device=device).to(torch.bfloat16)
        with torch.no_grad():
            want = target(x).float()
        loss = F.mse_loss(layer(x).float(), want)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert torch.equal(layer.crow_indices, crow) and torch.equal(layer.col_indices, col)
    assert losses[-1] < 1e-2 * losses[0], losses[::10]


def test_no_grad_needed_means_no_graph():
    """Inference stays as it was: no input needs grad, no autograd graph (the wrappers skip the formula)."""
    gen = torch.Generator().manual_seed(seed_for("no-graph"))
    w, _ = random_bsr(32, 32, 16, 1.0, torch.float16, torch.int32, "cpu", gen)
    x = randn(2, 32, dtype=torch.float16, device="cpu", gen=gen)
    y = sparsek.linear(x, w)
    assert y.grad_fn is None and not y.requires_grad
