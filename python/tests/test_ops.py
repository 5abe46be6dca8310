"""sparsek.bsr_mm and sparsek.linear against torch's own dense result, on CPU (always) and CUDA (with a GPU):
every block size, dtype and index type, odd N, batch dimensions, bias, activations, alpha/beta, layouts, empty
operands, exact integers, and the errors of bad input (which change no tensor)."""

from __future__ import annotations

import random

import pytest
import torch

import sparsek
from conftest import (
    BLOCK_SIZES,
    DEVICES,
    DTYPES,
    INDEX_TYPES,
    activation64,
    assert_close,
    random_bsr,
    randn,
    seed_for,
)

ACTIVATIONS = [None, "relu", "gelu_tanh", "silu"]


def poisoned(shape, dtype, device):
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_TYPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bs", BLOCK_SIZES)
def test_bsr_mm_matches_dense(device, bs, dtype, index_dtype):
    seed = seed_for("bsr_mm", device, bs, dtype, index_dtype)
    gen, rng = torch.Generator().manual_seed(seed), random.Random(seed)
    for case in range(3):
        m, k = bs * rng.randint(1, 4), bs * rng.randint(1, 4)
        n = rng.choice([1, 3, 7, 8, 17, 33, 64, 100])
        a, a64 = random_bsr(m, k, bs, rng.choice([0.3, 0.6, 1.0]), dtype, index_dtype, device, gen,
                            skew=case == 1, empty_rows=case == 2)
        b = randn(k, n, dtype=dtype, device=device, gen=gen)
        ref = a64 @ b.cpu().double()
        abs_prod = a64.abs() @ b.cpu().double().abs()
        y = sparsek.bsr_mm(a, b)
        assert y.dtype == dtype and y.shape == (m, n) and y.device.type == device and y.is_contiguous()
        assert_close(y, ref, abs_prod, k)
        y32 = sparsek.bsr_mm(a, b, out_dtype=torch.float32)
        assert y32.dtype == torch.float32
        assert_close(y32, ref, abs_prod, k)
        # B column-major (the transpose of a contiguous N x K tensor) is read as it is.
        bt = b.t().contiguous().t()
        assert_close(sparsek.bsr_mm(a, bt), ref, abs_prod, k)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_bsr_mm_out_alpha_beta(device, out_dtype):
    gen = torch.Generator().manual_seed(seed_for("out", device, out_dtype))
    m, k, n, bs = 128, 192, 40, 32
    a, a64 = random_bsr(m, k, bs, 0.5, torch.float16, torch.int64, device, gen)
    b = randn(k, n, dtype=torch.float16, device=device, gen=gen)
    abs_prod = a64.abs() @ b.cpu().double().abs()
    old = randn(m, n, dtype=out_dtype, device=device, gen=gen)
    out = old.clone()
    r = sparsek.bsr_mm(a, b, out=out, alpha=2.0, beta=0.5)
    assert r is out
    ref = 2.0 * (a64 @ b.cpu().double()) + 0.5 * old.cpu().double()
    assert_close(out, ref, 2.0 * abs_prod + 0.5 * old.cpu().double().abs(), k)
    # beta == 0: out's old values are never read, NaN included.
    out = poisoned((m, n), out_dtype, device)
    sparsek.bsr_mm(a, b, out=out, alpha=-1.5)
    assert_close(out, -1.5 * (a64 @ b.cpu().double()), 1.5 * abs_prod, k)
    # An out= whose rows are not 16-byte aligned (a column slice) is staged and written back.
    wide = poisoned((m, n + 3), out_dtype, device)
    sparsek.bsr_mm(a, b, out=wide[:, 1:n + 1])
    assert_close(wide[:, 1:n + 1], a64 @ b.cpu().double(), abs_prod, k)
    assert torch.isnan(wide[:, 0].float()).all() and torch.isnan(wide[:, n + 1:].float()).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bs", BLOCK_SIZES)
def test_linear_matches_dense(device, dtype, bs):
    seed = seed_for("linear", device, dtype, bs)
    gen, rng = torch.Generator().manual_seed(seed), random.Random(seed)
    for activation in ACTIVATIONS:
        out_f, in_f = bs * rng.randint(1, 4), bs * rng.randint(1, 4)
        lead = rng.choice([(1,), (5,), (2, 3), (3, 1, 7)])
        w, w64 = random_bsr(out_f, in_f, bs, 0.5, dtype, rng.choice([torch.int32, torch.int64]), device, gen)
        x = randn(*lead, in_f, dtype=dtype, device=device, gen=gen)
        bias = randn(out_f, dtype=dtype, device=device, gen=gen) if rng.random() < 0.7 else None
        y = sparsek.linear(x, w, bias, activation)
        assert y.shape == (*lead, out_f) and y.dtype == dtype and y.is_contiguous()
        x64 = x.cpu().double().reshape(-1, in_f)
        pre = x64 @ w64.t() + (0.0 if bias is None else bias.cpu().double())
        abs_prod = x64.abs() @ w64.abs().t() + (0.0 if bias is None else bias.cpu().double().abs())
        assert_close(y.reshape(-1, out_f), activation64(pre, activation), abs_prod, in_f, activation)


@pytest.mark.parametrize("device", DEVICES)
def test_linear_strided_input(device):
    """x as a slice of a wider tensor (rows not contiguous with each other) and as a transposed view."""
    gen = torch.Generator().manual_seed(seed_for("strided", device))
    w, w64 = random_bsr(64, 128, 64, 1.0, torch.float16, torch.int64, device, gen)
    wide = randn(9, 200, dtype=torch.float16, device=device, gen=gen)
    for x in (wide[:, 8:136], wide[:, :128].t().contiguous().t(), wide[:, 1:129]):
        ref = x.cpu().double() @ w64.t()
        assert_close(sparsek.linear(x, w), ref, x.cpu().double().abs() @ w64.abs().t(), 128)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_exact_integers(device, dtype):
    """Small integers: every product and partial sum is exact in f32, so the result equals the reference bit
    for bit (f32 output) and so does its rounding to the 16-bit type (the values stay below 256)."""
    gen = torch.Generator().manual_seed(seed_for("exact", device, dtype))
    m, k, n, bs = 256, 512, 24, 64
    a, _ = random_bsr(m, k, bs, 0.5, dtype, torch.int32, device, gen)
    vals = torch.randint(-2, 3, a.values().shape, generator=gen).to(dtype).to(device)
    a = torch.sparse_bsr_tensor(a.crow_indices(), a.col_indices(), vals, (m, k))
    b = torch.randint(-2, 3, (k, n), generator=gen).to(dtype).to(device)
    from conftest import bsr_to_dense64

    ref = bsr_to_dense64(a) @ b.cpu().double()
    assert ref.abs().max() < 256
    got = sparsek.bsr_mm(a, b, out_dtype=torch.float32)
    assert torch.equal(got.cpu().double(), ref)
    assert torch.equal(sparsek.bsr_mm(a, b).cpu().double(), ref)
    x = b.t().contiguous()
    bias = torch.randint(-3, 4, (m,), generator=gen).to(dtype).to(device)
    y = sparsek.linear(x, a, bias, "relu")
    assert torch.equal(y.cpu().double(), torch.relu(ref.t() + bias.cpu().double()))


@pytest.mark.parametrize("device", DEVICES)
def test_empty_operands(device):
    gen = torch.Generator().manual_seed(seed_for("empty", device))
    # A without blocks: the product is zero; with a bias and an activation, act(bias).
    a = torch.sparse_bsr_tensor(torch.zeros(3, dtype=torch.int64), torch.zeros(0, dtype=torch.int64),
                                torch.zeros(0, 32, 32, dtype=torch.float16), (64, 96)).to(device)
    b = randn(96, 5, dtype=torch.float16, device=device, gen=gen)
    assert torch.equal(sparsek.bsr_mm(a, b).cpu(), torch.zeros(64, 5, dtype=torch.float16))
    bias = randn(64, dtype=torch.float16, device=device, gen=gen)
    y = sparsek.linear(b.t(), a, bias, "relu")
    assert torch.equal(y.cpu(), torch.relu(bias.cpu()).expand(5, 64))
    # No tokens, no columns.
    w, _ = random_bsr(64, 96, 32, 0.5, torch.float16, torch.int64, device, gen)
    assert sparsek.linear(torch.empty(0, 96, dtype=torch.float16, device=device), w).shape == (0, 64)
    assert sparsek.linear(torch.empty(2, 0, 96, dtype=torch.float16, device=device), w).shape == (2, 0, 64)
    assert sparsek.bsr_mm(w, torch.empty(96, 0, dtype=torch.float16, device=device)).shape == (64, 0)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_input_raises_and_changes_nothing(device):
    gen = torch.Generator().manual_seed(seed_for("bad", device))
    a, _ = random_bsr(128, 128, 64, 1.0, torch.float16, torch.int64, device, gen)
    b = randn(128, 16, dtype=torch.float16, device=device, gen=gen)
    out = randn(128, 16, dtype=torch.float32, device=device, gen=gen)
    before = out.clone()

    def unchanged():
        assert torch.equal(out, before)

    with pytest.raises(TypeError, match="sparse_bsr"):
        sparsek.bsr_mm(a.to_dense(), b)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        sparsek.bsr_mm(a.to(torch.float32), b.float())
    with pytest.raises(TypeError, match="dtype"):
        sparsek.bsr_mm(a, b.to(torch.bfloat16), out=out)
    unchanged()
    with pytest.raises(ValueError, match="shape mismatch"):
        sparsek.bsr_mm(a, randn(64, 16, dtype=torch.float16, device=device, gen=gen), out=out)
    unchanged()
    with pytest.raises(ValueError, match="out has shape"):
        sparsek.bsr_mm(a, b, out=out[:, :8])
    unchanged()
    with pytest.raises(TypeError, match="output must be float32"):
        sparsek.bsr_mm(a, b, out_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="beta"):
        sparsek.bsr_mm(a, b, beta=1.0)
    with pytest.raises(ValueError, match="block size 8"):
        sparsek.bsr_mm(torch.ones(16, 16, dtype=torch.float16, device=device).to_sparse_bsr(8),
                       randn(16, 4, dtype=torch.float16, device=device, gen=gen))
    with pytest.raises(ValueError, match="bias"):
        sparsek.linear(b.t(), a, bias=torch.zeros(64, dtype=torch.float16, device=device))
    with pytest.raises(ValueError, match="last dimension"):
        sparsek.linear(b, a)
    with pytest.raises(ValueError, match="gelu_tanh"):
        sparsek.linear(b.t(), a, activation="gelu")
    # Invalid structures (torch does not check them by default): refused with the block row, out untouched.
    crow, col, vals = a.crow_indices(), a.col_indices(), a.values()
    for bad_crow, bad_col, what in [
        (crow, torch.tensor([0, 2, 0, 1], device=device), "col"),  # column 2 of 2
        (crow, torch.tensor([1, 0, 0, 1], device=device), "col"),  # not increasing
        (torch.tensor([0, 3, 4], device=device), col, "row"),       # row 0 takes 3 blocks
    ]:
        bad = torch.sparse_bsr_tensor(bad_crow, bad_col, vals, (128, 128))
        with pytest.raises(ValueError, match="sparsek"):
            sparsek.bsr_mm(bad, b, out=out, beta=1.0)
        unchanged()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("target", ["crow_indices", "col_indices", "the BSR values", "b"])
def test_out_over_an_input_is_refused_and_changes_nothing(device, target):
    """``out`` sharing memory with an input, an index tensor above all (a float32 view of the int64 indices: the
    kernel would follow indices it is overwriting), is refused before anything runs, and no tensor changes."""
    gen = torch.Generator().manual_seed(seed_for("out-alias", device, target))
    m, k, n, bs = 64, 64, 16, 32
    a, _ = random_bsr(m, k, bs, 1.0, torch.float16, torch.int64, device, gen)
    operands = {
        "crow_indices": a.crow_indices(),
        "col_indices": a.col_indices(),
        "the BSR values": a.values(),
        "b": randn(k, n, dtype=torch.float16, device=device, gen=gen),
    }
    # The target at the start of a buffer that also holds out (m x n float32), which is a view of that buffer.
    t = operands[target]
    store = torch.zeros(t.nbytes + m * n * 4, dtype=torch.uint8, device=device)
    store[: t.nbytes].copy_(t.reshape(-1).view(torch.uint8))
    operands[target] = store[: t.nbytes].view(t.dtype).view(t.shape)
    out = store.view(torch.float32)[: m * n].view(m, n)
    before = store.clone()
    crow, col, values, b = (operands[x] for x in ("crow_indices", "col_indices", "the BSR values", "b"))
    with pytest.raises(ValueError, match=f"out overlaps {target}"):
        torch.ops.sparsek.bsr_mm_out(values, crow, col, m, k, b, 1.0, 0.0, out)
    assert torch.equal(store, before)
    # The same operands with an output of its own: accepted.
    fine = torch.empty(m, n, dtype=torch.float32, device=device)
    torch.ops.sparsek.bsr_mm_out(values, crow, col, m, k, b, 1.0, 0.0, fine)
    assert torch.equal(store, before)


@pytest.mark.parametrize("device", DEVICES)
def test_backward_runs(device):
    """The forward works in grad mode and the backward gives the input's gradient (test_autograd.py checks every
    gradient against float64); under no_grad there is no graph."""
    gen = torch.Generator().manual_seed(seed_for("grad", device))
    w, w64 = random_bsr(64, 64, 32, 1.0, torch.float16, torch.int64, device, gen)
    x = randn(4, 64, dtype=torch.float16, device=device, gen=gen).requires_grad_()
    y = sparsek.linear(x, w)
    assert_close(y.detach(), x.detach().cpu().double() @ w64.t(), x.detach().cpu().double().abs() @ w64.abs().t(), 64)
    y.sum().backward()
    ones = torch.ones(4, 64, dtype=torch.float64)
    assert_close(x.grad, ones @ w64, ones @ w64.abs(), 64)
    b = randn(64, 8, dtype=torch.float16, device=device, gen=gen).requires_grad_()
    sparsek.bsr_mm(w, b).sum().backward()
    assert_close(b.grad, w64.t() @ torch.ones(64, 8, dtype=torch.float64), w64.abs().t() @ torch.ones(64, 8,
                 dtype=torch.float64), 64)
    with torch.no_grad():
        assert sparsek.linear(x, w).grad_fn is None


def test_ops_are_registered_with_fake_kernels():
    """The ops are registered for CPU and CUDA with a fake kernel (torch.compile traces them)."""
    for op in ("bsr_mm", "bsr_mm_out", "linear"):
        assert hasattr(torch.ops.sparsek, op)
    x = torch.empty(2, 3, 64, dtype=torch.float16, device="meta")
    v = torch.empty(4, 32, 32, dtype=torch.float16, device="meta")
    crow = torch.empty(3, dtype=torch.int64, device="meta")
    col = torch.empty(4, dtype=torch.int64, device="meta")
    y = torch.ops.sparsek.linear(x, v, crow, col, 64, None, 1)  # meta tensors: the fake kernel
    assert y.shape == (2, 3, 64) and y.dtype == torch.float16


def test_sm_limit_setting():
    """The SM limit round-trips, is off by default, refuses 0, negatives and non-integers (changing nothing), and
    limit_sms restores the previous setting on exit, also after an exception; on CPU tensors it changes nothing."""
    assert sparsek.sm_limit() is None
    try:
        sparsek.set_sm_limit(100)
        assert sparsek.sm_limit() == 100
        for bad, err in ((0, ValueError), (-3, ValueError), (True, TypeError), (2.5, TypeError), ("8", TypeError)):
            with pytest.raises(err, match="sms|SM limit"):
                sparsek.set_sm_limit(bad)
            assert sparsek.sm_limit() == 100
        with sparsek.limit_sms(7):
            assert sparsek.sm_limit() == 7
            with sparsek.limit_sms(None):
                assert sparsek.sm_limit() is None
            assert sparsek.sm_limit() == 7
        assert sparsek.sm_limit() == 100
        with pytest.raises(RuntimeError, match="inside"):
            with sparsek.limit_sms(5):
                raise RuntimeError("inside")
        assert sparsek.sm_limit() == 100
        with pytest.raises(ValueError):
            with sparsek.limit_sms(0):
                pass
        assert sparsek.sm_limit() == 100
        sparsek.set_sm_limit(2**40)  # beyond any GPU: the GPU's SMs
        assert sparsek.sm_limit() == 2**32 - 1
        sparsek.set_sm_limit(100)
        gen = torch.Generator().manual_seed(seed_for("sm-limit-cpu"))
        a, dense = random_bsr(64, 32, 16, 0.5, torch.float16, torch.int64, "cpu", gen)
        b = randn(32, 5, dtype=torch.float16, device="cpu", gen=gen)
        got = sparsek.bsr_mm(a, b, out_dtype=torch.float32)
        assert_close(got, dense.double() @ b.double(), dense.double().abs() @ b.double().abs(), 32)
        if not torch.cuda.is_available():
            assert sparsek.last_plan() is None  # no CUDA product was queued
    finally:
        sparsek.set_sm_limit(None)
    assert sparsek.sm_limit() is None


def test_programmatic_launch_setting():
    """The setting round-trips and is off by default; without a GPU (or on CPU tensors) it changes nothing."""
    assert sparsek.programmatic_launch() is False
    try:
        sparsek.set_programmatic_launch(True)
        assert sparsek.programmatic_launch() is True
        gen = torch.Generator().manual_seed(seed_for("programmatic-cpu"))
        a, dense = random_bsr(64, 32, 16, 0.5, torch.float16, torch.int64, "cpu", gen)
        b = randn(32, 5, dtype=torch.float16, device="cpu", gen=gen)
        got = sparsek.bsr_mm(a, b, out_dtype=torch.float32)
        ref = dense.double() @ b.double()
        assert_close(got, ref, dense.double().abs() @ b.double().abs(), 32)
    finally:
        sparsek.set_programmatic_launch(False)
    assert sparsek.programmatic_launch() is False
