"""Gradients through ``sparsek.linear``, ``sparsek.bsr_mm`` and ``BlockSparseLinear`` (issue 44: the formulas
registered with ``torch.library.register_autograd``, computed by the backward ops ``sparsek::bsr_mm_t`` and
``sparsek::sddmm``) against torch's autograd on the float64 dense masked computation of the same low-precision
inputs: the input's, the stored blocks' and the bias's gradients, every activation, both dtypes, CPU and CUDA;
``torch.autograd.gradcheck`` in float64 on the CPU; the backward ops and the transposed index against dense
computations; torch.compile of a training step, gradient accumulation, optimizer steps. Only stored blocks get
gradients; the structure stays fixed."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.autograd.gradcheck import GradcheckError

import sparsek
from conftest import (
    BLOCK_SIZES, DEVICES, DTYPES, HAVE_CUDA, INDEX_TYPES, NO_GPU_REASON, UNIT_ROUNDOFF, activation64, assert_close,
    blocks_of, bsr_to_dense64, random_bsr, randn, seed_for,
)

ACTS = [None, "relu", "gelu_tanh", "silu"]



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
    # GELU and SiLU: dZ = act'(z) dY is rounded to the inputs' dtype before the two products; under the "save"
    # activation backward (sparsek.set_activation_backward) act' is taken at z rounded to that dtype too (up to one
    # more rounding of dZ), and the bias gradient sums the rounded dZ.
    smooth = activation in ("gelu_tanh", "silu")
    saved = smooth and sparsek.activation_backward() == "save"
    rounded = UNIT_ROUNDOFF[dtype] * (2.0 if saved else 1.0) if smooth else 0.0
    assert_close(xg.grad, x64.grad, (g_abs @ w64.detach().abs()).reshape(x.shape), 96, activation, rounded)
    blocks_abs = blocks_of(g_abs.t() @ x64.detach().abs().reshape(-1, 64), w)
    assert_close(values.grad, v64.grad, blocks_abs, 6, activation, rounded)
    if with_bias:
        assert_close(bg.grad, b64.grad, g_abs.sum(0), 6, activation, rounded if saved else 0.0)


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
    # The float32 output's gradient is rounded to the inputs' dtype before the products.
    u = UNIT_ROUNDOFF[dtype]
    assert_close(bg.grad, b64.grad, _dense64(w, v64).detach().abs().t() @ r_abs, 64, rounded_inputs=u)
    assert_close(values.grad, v64.grad, blocks_of(r_abs @ b64.detach().abs().t(), w), 5, rounded_inputs=u)


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


# ---------------------------------------------------------------------------------------------------------------
# float64 gradcheck on the CPU (the ops' float64 path: the same formulas and ops, block-wise torch products).


def _pattern(m, k, bs, index_dtype, gen, *, dtype=torch.float64, device="cpu", density=0.5, skew=False):
    """Components of a random ``m x k`` BSR matrix with block row 1 and block column 0 empty (and, ``skew``, most
    blocks in block row 0): ``(values, crow, col)``, values normal."""
    r, c = m // bs, k // bs
    mask = torch.rand(r, c, generator=gen) < density
    if skew:
        mask[0, :] = True
        mask[2:, :] &= torch.rand(max(r - 2, 0), c, generator=gen) < 0.3
    mask[0, c - 1] = True  # never empty
    if r > 1:
        mask[1, :] = False
    if c > 1:
        mask[:, 0] = False
    crow = torch.zeros(r + 1, dtype=torch.int64)
    crow[1:] = mask.sum(1).cumsum(0)
    col = mask.nonzero()[:, 1]
    values = torch.randn(int(mask.sum()), bs, bs, generator=gen).to(dtype)
    return values.to(device), crow.to(index_dtype).to(device), col.to(index_dtype).to(device)


def _dense_of(values, crow, col, m, k):
    return bsr_to_dense64(torch.sparse_bsr_tensor(crow.cpu(), col.cpu(), values.detach().cpu(), (m, k)))


@pytest.mark.parametrize("index_dtype", INDEX_TYPES)
@pytest.mark.parametrize("bs", [16, 32])
@pytest.mark.parametrize("activation", ACTS)
def test_gradcheck_linear_float64(activation, bs, index_dtype):
    """x, the stored values and the bias all require grad; empty block rows and columns; fast mode keeps it cheap."""
    gen = torch.Generator().manual_seed(seed_for("gradcheck-linear", activation, bs, index_dtype))
    m, k = 3 * bs, 3 * bs
    values, crow, col = _pattern(m, k, bs, index_dtype, gen)
    x = torch.randn(2, 3, k, generator=gen, dtype=torch.float64)
    bias = torch.randn(m, generator=gen, dtype=torch.float64)
    code = sparsek.ACTIVATIONS[activation]
    inputs = tuple(t.requires_grad_(True) for t in (x, values, bias))
    fn = lambda x, v, b: torch.ops.sparsek.linear(x, v, crow, col, k, b, code)  # noqa: E731
    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)
    # Without a bias, through the public function and a BSR weight.
    fn2 = lambda x, v: sparsek.linear(x, torch.sparse_bsr_tensor(crow, col, v, (m, k)), None, activation)  # noqa: E731
    assert torch.autograd.gradcheck(fn2, (x, values), fast_mode=True)


@pytest.mark.parametrize("index_dtype", INDEX_TYPES)
@pytest.mark.parametrize("bs", [16, 32])
def test_gradcheck_bsr_mm_float64(bs, index_dtype):
    gen = torch.Generator().manual_seed(seed_for("gradcheck-mm", bs, index_dtype))
    m, k = 3 * bs, 2 * bs
    values, crow, col = _pattern(m, k, bs, index_dtype, gen)
    b = torch.randn(k, 5, generator=gen, dtype=torch.float64)
    inputs = (values.requires_grad_(True), b.requires_grad_(True))
    fn = lambda v, b: torch.ops.sparsek.bsr_mm(v, crow, col, m, k, b, -0.75)  # noqa: E731
    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)
    # b column-major (a transposed view), as a linear layer's backward passes it.
    bt = torch.randn(5, k, generator=gen, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v, bt: fn(v, bt.t()), (values, bt), fast_mode=True)


def test_gradcheck_catches_a_wrong_formula(monkeypatch):
    """The gradchecks above can fail: with alpha dropped from the input gradient's product, this one does."""
    from sparsek import _ops

    real = _ops._torch_mm_t
    monkeypatch.setattr(_ops, "_torch_mm_t", lambda v, i, r, c, b, alpha: real(v, i, r, c, b, 1.0))
    gen = torch.Generator().manual_seed(seed_for("gradcheck-wrong"))
    values, crow, col = _pattern(32, 32, 16, torch.int32, gen)
    b = torch.randn(32, 1, generator=gen, dtype=torch.float64).requires_grad_(True)
    fn = lambda b: torch.ops.sparsek.bsr_mm(values, crow, col, 32, 32, b, 0.5)  # noqa: E731
    with pytest.raises(GradcheckError):
        torch.autograd.gradcheck(fn, (b,))


# ---------------------------------------------------------------------------------------------------------------
# The backward ops against dense computations (random inputs, float64 references, tolerances scaled with K).

_CPU_BS = [16, 32]


def _op_cases():
    """CPU: bs 16 and 32 (CI has 2 cores); CUDA: every block size. Both dtypes and index types on each."""
    cases = []
    for device in ("cpu", "cuda"):
        marks = () if device == "cpu" or HAVE_CUDA else (pytest.mark.skipif(True, reason=NO_GPU_REASON),)
        for bs in (_CPU_BS if device == "cpu" else BLOCK_SIZES):
            for dtype in DTYPES:
                for index_dtype in INDEX_TYPES:
                    cases.append(pytest.param(device, bs, dtype, index_dtype, marks=marks,
                                              id=f"{device}-bs{bs}-{str(dtype)[6:]}-{str(index_dtype)[6:]}"))
    return cases


@pytest.mark.parametrize("device,bs,dtype,index_dtype", _op_cases())
@pytest.mark.parametrize("out_float32", [False, True])
def test_bsr_mm_t_random(device, bs, dtype, index_dtype, out_float32):
    gen = torch.Generator().manual_seed(seed_for("mm_t", device, bs, dtype, index_dtype, out_float32))
    m, k, n = 4 * bs, 3 * bs, 37
    values, crow, col = _pattern(m, k, bs, index_dtype, gen, dtype=dtype, device=device, skew=True)
    a64 = _dense_of(values, crow, col, m, k)
    out_dtype = torch.float32 if out_float32 else None
    for transposed_b in (False, True):
        b = randn(n, m, dtype=dtype, device=device, gen=gen).t() if transposed_b else randn(m, n, dtype=dtype,
                                                                                             device=device, gen=gen)
        ref = -1.5 * a64.t() @ b.cpu().double()
        abs_prod = 1.5 * a64.abs().t() @ b.cpu().double().abs()
        got = torch.ops.sparsek.bsr_mm_t(values, crow, col, m, k, b, -1.5, out_dtype)
        assert got.shape == (k, n) and got.is_contiguous() and got.dtype == (out_dtype or dtype)
        assert_close(got, ref, abs_prod, m)
        got_t = torch.ops.sparsek.bsr_mm_t(values, crow, col, m, k, b, -1.5, out_dtype, True)
        assert got_t.shape == (n, k) and got_t.is_contiguous()
        assert_close(got_t.t(), ref, abs_prod, m)
    assert not got[:bs].any()  # block column 0 is empty: exact zeros


@pytest.mark.parametrize("device,bs,dtype,index_dtype", _op_cases())
@pytest.mark.parametrize("out_float32", [False, True])
def test_sddmm_random(device, bs, dtype, index_dtype, out_float32):
    gen = torch.Generator().manual_seed(seed_for("sddmm", device, bs, dtype, index_dtype, out_float32))
    m, k = 3 * bs, 4 * bs
    values, crow, col = _pattern(m, k, bs, index_dtype, gen, dtype=dtype, device=device)
    out_dtype = torch.float32 if out_float32 else None
    for tokens, layouts in ((1, (False, False)), (203, (True, True)), (96, (False, True))):
        x = randn(tokens, m, dtype=dtype, device=device, gen=gen).t() if layouts[0] else \
            randn(m, tokens, dtype=dtype, device=device, gen=gen)
        y = randn(tokens, k, dtype=dtype, device=device, gen=gen).t() if layouts[1] else \
            randn(k, tokens, dtype=dtype, device=device, gen=gen)
        x64, y64 = x.cpu().double(), y.cpu().double()
        w = torch.sparse_bsr_tensor(crow.cpu(), col.cpu(), values.cpu(), (m, k))
        ref = blocks_of(0.25 * x64 @ y64.t(), w)
        abs_prod = blocks_of(0.25 * x64.abs() @ y64.abs().t(), w)
        got = torch.ops.sparsek.sddmm(x, y, crow, col, m, k, bs, 0.25, out_dtype)
        assert got.shape == values.shape and got.dtype == (out_dtype or dtype) and got.device == values.device
        assert_close(got, ref, abs_prod, tokens)


def test_backward_ops_refuse_bad_input():
    gen = torch.Generator().manual_seed(seed_for("bad"))
    values, crow, col = _pattern(32, 32, 16, torch.int32, gen, dtype=torch.float16)
    b = torch.randn(32, 4).half()
    with pytest.raises(ValueError, match="shape mismatch"):
        torch.ops.sparsek.bsr_mm_t(values, crow, col, 32, 32, b[:16])
    with pytest.raises(TypeError):
        torch.ops.sparsek.bsr_mm_t(values, crow, col, 32, 32, b.float())
    with pytest.raises(TypeError):
        torch.ops.sparsek.bsr_mm_t(values, crow, col, 32, 32, b, 1.0, torch.bfloat16)
    with pytest.raises(ValueError, match="shape mismatch"):
        torch.ops.sparsek.sddmm(b, b[:16], crow, col, 32, 32, 16)
    with pytest.raises(TypeError):
        torch.ops.sparsek.sddmm(b, b.bfloat16(), crow, col, 32, 32, 16)
    with pytest.raises(ValueError):
        torch.ops.sparsek.sddmm(b, b, crow, col, 32, 32, 8)
    # An invalid structure (a column out of range) is refused by the CPU backend, typed.
    bad = col.clone()
    bad[0] = 7
    with pytest.raises(ValueError):
        torch.ops.sparsek.bsr_mm_t(values, crow, bad, 32, 32, b)
    with pytest.raises(ValueError):
        torch.ops.sparsek.sddmm(b, b, crow, bad, 32, 32, 16)
    with pytest.raises(ValueError):
        sparsek.bsr_transpose_index(crow, bad, 32, 32, 16)


# ---------------------------------------------------------------------------------------------------------------
# The transposed index.


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_TYPES)
@pytest.mark.parametrize("skew", [False, True])
def test_transpose_index_against_a_dense_transpose(device, index_dtype, skew):
    gen = torch.Generator().manual_seed(seed_for("tindex", device, index_dtype, skew))
    bs, m, k = 16, 16 * 7, 16 * 5
    values, crow, col = _pattern(m, k, bs, index_dtype, gen, dtype=torch.float16, device=device, skew=skew)
    col_ptr, row_idx, perm = sparsek.bsr_transpose_index(crow, col, m, k, bs)
    for t, size in ((col_ptr, k // bs + 1), (row_idx, col.numel()), (perm, col.numel())):
        assert t.dtype == torch.int32 and t.device == values.device and t.shape == (size,)
    col_ptr, row_idx, perm = col_ptr.cpu().long(), row_idx.cpu().long(), perm.cpu().long()
    assert col_ptr[1] == 0  # block column 0 is empty
    assert sorted(perm.tolist()) == list(range(col.numel()))
    # A^T from the index: block (bc, row_idx[j]) of A^T is A's block perm[j] transposed.
    vals64 = values.cpu().double()
    at = torch.zeros(k, m, dtype=torch.float64)
    for bc in range(k // bs):
        rows_here = row_idx[col_ptr[bc]:col_ptr[bc + 1]]
        assert torch.all(rows_here[1:] > rows_here[:-1])  # ascending within a column
        for j in range(int(col_ptr[bc]), int(col_ptr[bc + 1])):
            br = int(row_idx[j])
            at[bc * bs:(bc + 1) * bs, br * bs:(br + 1) * bs] = vals64[perm[j]].t()
    assert torch.equal(at, _dense_of(values, crow, col, m, k).t())


@pytest.mark.parametrize("device", DEVICES)
def test_transpose_index_is_cached_per_structure(device):
    gen = torch.Generator().manual_seed(seed_for("tindex-cache", device))
    _, crow, col = _pattern(64, 64, 16, torch.int64, gen, dtype=torch.float16, device=device)
    first = sparsek.bsr_transpose_index(crow, col, 64, 64, 16)
    assert sparsek.bsr_transpose_index(crow, col, 64, 64, 16) is first
    # An in-place write moves the version counter: the index is built again (here the same structure).
    col.add_(0)
    again = sparsek.bsr_transpose_index(crow, col, 64, 64, 16)
    assert again is not first and all(torch.equal(a, b) for a, b in zip(again, first))
    assert sparsek.bsr_transpose_index(crow, col, 64, 64, 16) is again


def test_transpose_index_same_on_cuda_and_cpu():
    if not HAVE_CUDA:
        pytest.skip(NO_GPU_REASON)
    gen = torch.Generator().manual_seed(seed_for("tindex-devices"))
    _, crow, col = _pattern(16 * 9, 16 * 6, 16, torch.int32, gen, dtype=torch.float16, skew=True)
    cpu = sparsek.bsr_transpose_index(crow, col, 16 * 9, 16 * 6, 16)
    gpu = sparsek.bsr_transpose_index(crow.cuda(), col.cuda(), 16 * 9, 16 * 6, 16)
    for a, b in zip(cpu, gpu):
        assert torch.equal(a, b.cpu())


# ---------------------------------------------------------------------------------------------------------------
# Training: compile, accumulation, optimizers.


def _trainable(device, seed, activation="gelu_tanh", dtype=torch.bfloat16):
    torch.manual_seed(seed)
    layers = [
        sparsek.BlockSparseLinear.from_dense(torch.nn.Linear(64, 128), 16, density=0.5, dtype=dtype,
                                             activation=activation),
        sparsek.BlockSparseLinear.from_dense(torch.nn.Linear(128, 64), 32, density=0.5, dtype=dtype),
    ]
    model = torch.nn.Sequential(*layers).to(device)
    for p in model.parameters():
        p.requires_grad_(True)
    return model


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_accumulation_over_two_backwards(device):
    model = _trainable(device, seed_for("accumulate", device))
    gen = torch.Generator().manual_seed(seed_for("accumulate-x", device))
    x1, x2 = (randn(7, 64, dtype=torch.bfloat16, device=device, gen=gen).requires_grad_(True) for _ in range(2))
    model(x1).float().square().sum().backward()
    g1 = [p.grad.clone() for p in model.parameters()]
    gx1 = x1.grad.clone()
    model.zero_grad(set_to_none=True)
    model(x2).float().square().sum().backward()
    g2 = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    model(x1).float().square().sum().backward()
    model(x2).float().square().sum().backward()
    for p, a, b in zip(model.parameters(), g1, g2):
        assert p.grad.dtype == p.dtype and torch.isfinite(p.grad.float()).all()
        assert torch.allclose(p.grad.float(), a.float() + b.float(), rtol=2e-2, atol=1e-2 * a.float().abs().max())
    assert torch.equal(x1.grad, 2 * gx1) or torch.allclose(x1.grad.float(), 2 * gx1.float(), rtol=1e-2)


def test_compiled_training_step_cpu():
    """A whole training step (forward, backward, AdamW) under torch.compile(fullgraph=True, aot_eager): the backward
    ops' fake kernels trace, and the compiled step gives the eager step's parameters."""
    torch._dynamo.reset()
    eager, compiled_model = _trainable("cpu", 5), _trainable("cpu", 5)
    crow = [m.crow_indices.clone() for m in compiled_model]
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    opt_c = torch.optim.AdamW(compiled_model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed_for("compile-step"))
    xs = [randn(9, 64, dtype=torch.bfloat16, device="cpu", gen=gen) for _ in range(3)]

    def loss_of(model, x):
        return model(x).float().square().mean()

    compiled_loss = torch.compile(loss_of, fullgraph=True, backend="aot_eager")
    for x in xs:
        for model, opt, f in ((eager, opt_e, loss_of), (compiled_model, opt_c, compiled_loss)):
            opt.zero_grad()
            f(model, x).backward()
            opt.step()
    for pe, pc in zip(eager.parameters(), compiled_model.parameters()):
        assert torch.equal(pe, pc), (pe - pc).abs().max()
    assert all(torch.equal(m.crow_indices, c) for m, c in zip(compiled_model, crow))


@pytest.mark.parametrize("device", DEVICES)
def test_adam_steps_keep_the_structure(device):
    """Adam on a BlockSparseLinear (bf16 values): the loss falls, the indices never change, and the values keep
    their shape (only stored blocks are trained)."""
    model = _trainable(device, seed_for("adam", device), activation="silu")
    teacher = _trainable(device, seed_for("adam-teacher", device), activation="silu")
    structure = [(m.crow_indices.clone(), m.col_indices.clone(), m.values.shape) for m in model]
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    gen = torch.Generator().manual_seed(seed_for("adam-x", device))
    for _ in range(25):
        x = randn(32, 64, dtype=torch.bfloat16, device=device, gen=gen)
        with torch.no_grad():
            want = teacher(x).float()
        loss = F.mse_loss(model(x).float(), want)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses[::5]
    for m, (crow, col, shape) in zip(model, structure):
        assert torch.equal(m.crow_indices, crow) and torch.equal(m.col_indices, col) and m.values.shape == shape


def test_only_the_asked_gradients_are_computed(monkeypatch):
    """needs_input_grad: the values alone need grad -> no A^T @ B product; x alone -> no SDDMM (CPU backend calls
    counted)."""
    from sparsek import _ops

    calls = []
    for name in ("cpu_spmm_t", "cpu_sddmm"):
        real = getattr(_ops._native, name)
        monkeypatch.setattr(_ops._native, name, (lambda real, name: lambda *a: (calls.append(name), real(*a))[1])(real,
                                                                                                                 name))
    gen = torch.Generator().manual_seed(seed_for("needs"))
    w, _ = random_bsr(32, 48, 16, 0.5, torch.float16, torch.int32, "cpu", gen)
    values = w.values().detach().clone().requires_grad_(True)
    wg = torch.sparse_bsr_tensor(w.crow_indices(), w.col_indices(), values, w.shape)
    x = randn(5, 48, dtype=torch.float16, device="cpu", gen=gen)
    sparsek.linear(x, wg).float().sum().backward()
    assert calls == ["cpu_sddmm"]
    calls.clear()
    xg = x.clone().requires_grad_(True)
    sparsek.linear(xg, w).float().sum().backward()
    assert calls == ["cpu_spmm_t"]


def test_torch_paths_on_cpu_tensors():
    """The paths made of torch's operations (the transposed index as CUDA builds it; the block-wise products that
    serve float64 on the CPU) run on CPU tensors too: checked here against the Rust index and the dense references,
    so that they are tested without a GPU (the CUDA twins above run the GPU kernels)."""
    from sparsek import _ops

    gen = torch.Generator().manual_seed(seed_for("cuda-bodies"))
    bs, m, k, n = 32, 32 * 5, 32 * 4, 19
    values, crow, col = _pattern(m, k, bs, torch.int64, gen, dtype=torch.bfloat16, skew=True)
    index = _ops._transpose_index_torch(crow, col, m, k, bs)
    for a, b in zip(index, _ops._build_transpose_index(crow, col, m, k, bs)):
        assert a.dtype == torch.int32 and torch.equal(a, b)
    a64 = _dense_of(values, crow, col, m, k)
    b = randn(n, m, dtype=torch.bfloat16, device="cpu", gen=gen).t()
    c = torch.full((n, k), float("nan")).t()  # column-major, poisoned
    c.copy_(_ops._torch_mm_t(values, index, m, k, b, 0.5))
    assert_close(c, 0.5 * a64.t() @ b.double(), 0.5 * a64.abs().t() @ b.double().abs(), m)
    x, y = randn(m, 77, dtype=torch.bfloat16, device="cpu", gen=gen), randn(77, k, dtype=torch.bfloat16, device="cpu",
                                                                             gen=gen).t()
    out = torch.full(values.shape, float("nan"))
    out.copy_(_ops._torch_sddmm(x, y, crow, col, m, k, bs, values.shape[0], -2.0))
    w = torch.sparse_bsr_tensor(crow, col, values, (m, k))
    assert_close(out, blocks_of(-2.0 * x.double() @ y.double().t(), w),
                 blocks_of(2.0 * x.double().abs() @ y.double().abs().t(), w), 77)


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_linear_backward_matches_eager(device):
    """torch.compile (fullgraph; aot_eager on the CPU, inductor on CUDA) of forward + backward of one layer gives
    eager's gradients."""
    torch._dynamo.reset()
    backend = "inductor" if device == "cuda" else "aot_eager"
    gen = torch.Generator().manual_seed(seed_for("compile-grad", device))
    w, _ = random_bsr(128, 64, 32, 0.5, torch.bfloat16, torch.int32, device, gen)
    bias = randn(128, dtype=torch.bfloat16, device=device, gen=gen)
    x = randn(2, 11, 64, dtype=torch.bfloat16, device=device, gen=gen)
    v, crow, col = w.values().detach(), w.crow_indices(), w.col_indices()

    def step(x, v, bias):
        y = torch.ops.sparsek.linear(x, v, crow, col, 64, bias, 2)
        return y.float().square().sum()

    grads = []
    for f in (step, torch.compile(step, fullgraph=True, backend=backend)):
        args = [t.clone().requires_grad_(True) for t in (x, v, bias)]
        f(*args).backward()
        grads.append([a.grad for a in args])
    for e, c in zip(*grads):
        assert torch.allclose(e.float(), c.float(), rtol=1e-2, atol=1e-2 * e.float().abs().max())


def test_autocast_bf16_training_step_on_the_cpu():
    """Mixed precision: under torch.autocast(bfloat16) a bfloat16 layer takes float32 input as nn.Linear would (cast
    to bfloat16, bfloat16 output), and the step's gradients equal those of the explicitly cast computation."""
    from sparsek.nn import BlockSparseLinear

    torch.manual_seed(0)
    layer = BlockSparseLinear.from_dense(torch.nn.Linear(128, 256), block_size=32, density=0.5,
                                         dtype=torch.bfloat16)
    layer.values.requires_grad_(True)
    layer.bias.requires_grad_(True)
    x = torch.randn(8, 128, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.bfloat16
    y.float().pow(2).mean().backward()
    grads = (layer.values.grad.clone(), layer.bias.grad.clone(), x.grad.clone())
    layer.values.grad, layer.bias.grad = None, None
    x2 = x.detach().clone().requires_grad_(True)
    layer(x2.to(torch.bfloat16)).float().pow(2).mean().backward()
    for got, want in zip(grads, (layer.values.grad, layer.bias.grad, x2.grad)):
        assert got.dtype == want.dtype and torch.equal(got, want)
    # Outside autocast a float32 input is still refused with the layer's dtype named.
    with pytest.raises(TypeError, match="bfloat16"):
        layer(x)
