"""The two strategies of GELU's and SiLU's backward in ``sparsek.linear`` and ``BlockSparseLinear`` (issue 44,
``sparsek.set_activation_backward``): ``"recompute"`` (one fused kernel; the backward recomputes the pre-activation
z with one more block-sparse product) and ``"save"`` (a recording forward runs the kernel without the activation
and torch's activation on its result, which keeps z). Both against torch's autograd on the float64 dense
computation of the same low-precision inputs, against each other, ``gradcheck`` in float64; inference stays the
fused kernel bit for bit; what each keeps alive; torch.compile of a training step under each (and a change of the
setting recompiles). CPU here, CUDA twins where a GPU is visible."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import sparsek
from sparsek import _ops
from conftest import (
    DEVICES, DTYPES, HAVE_CUDA, NO_GPU_REASON, UNIT_ROUNDOFF, activation64, assert_close, blocks_of, random_bsr, randn,
    seed_for,
)

SMOOTH = ["gelu_tanh", "silu"]
STRATEGIES = ["recompute", "save"]
_BACKWARD_NAMES = {"gelu_tanh": "GeluBackward0", "silu": "SiluBackward0"}


@pytest.fixture(autouse=True)
def _restore_strategy():
    before = sparsek.activation_backward()
    yield
    sparsek.set_activation_backward(before)



def _case(device, dtype, activation, with_bias, tag):
    gen = torch.Generator().manual_seed(seed_for(tag, device, dtype, activation, with_bias))
    bs = 16 if with_bias else 32
    w, w64 = random_bsr(96, 64, bs, 0.5, dtype, torch.int32, device, gen)
    x = randn(2, 5, 64, dtype=dtype, device=device, gen=gen)
    bias = randn(96, dtype=dtype, device=device, gen=gen) if with_bias else None
    r = randn(2, 5, 96, dtype=dtype, device=device, gen=gen)  # the upstream gradient
    return w, w64, x, bias, r


def _train(strategy, w, x, bias, r, activation, module=False):
    """Forward + backward under ``strategy``: ``(y, x.grad, values.grad, bias.grad)``."""
    sparsek.set_activation_backward(strategy)
    values = w.values().detach().clone().requires_grad_(True)
    xg = x.clone().requires_grad_(True)
    bg = bias.clone().requires_grad_(True) if bias is not None else None
    if module:
        layer = sparsek.BlockSparseLinear(w.shape[1], w.shape[0], values.shape[-1], values, w.crow_indices(),
                                          w.col_indices(), bias, activation).to(x.device)
        layer.values.requires_grad_(True)
        if bias is not None:
            layer.bias.requires_grad_(True)
        values, bg = layer.values, layer.bias
        y = layer(xg)
    else:
        y = sparsek.linear(xg, torch.sparse_bsr_tensor(w.crow_indices(), w.col_indices(), values, w.shape), bg,
                           activation)
    name = type(y.grad_fn).__name__
    # The strategy is in effect: "save" ends in torch's activation, "recompute" in sparsek's op.
    assert (name == _BACKWARD_NAMES[activation]) == (strategy == "save"), name
    y.backward(r)
    return y.detach(), xg.grad, values.grad, (bg.grad if bg is not None else None)


def _reference(w, w64, x, bias, r, activation):
    v64 = w.values().detach().cpu().double().requires_grad_(True)
    x64 = x.cpu().double().requires_grad_(True)
    b64 = bias.cpu().double().requires_grad_(True) if bias is not None else None
    dense = torch.sparse_bsr_tensor(w.crow_indices().cpu(), w.col_indices().cpu(), v64, w.shape).to_dense()
    z64 = x64 @ dense.t() + (b64 if b64 is not None else 0.0)
    y64 = activation64(z64, activation)
    y64.backward(r.cpu().double())
    z_abs = x64.detach().abs() @ w64.abs().t() + (b64.detach().abs() if b64 is not None else 0.0)
    return y64.detach(), x64.grad, v64.grad, (b64.grad if b64 is not None else None), z_abs


def test_default_is_the_one_constant():
    assert _ops.ACTIVATION_BACKWARD_DEFAULT in _ops.ACTIVATION_BACKWARDS
    import subprocess
    import sys
    # A fresh interpreter (this one's setting may have been changed by a test) starts at the constant.
    code = "import sparsek; print(sparsek.activation_backward())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == _ops.ACTIVATION_BACKWARD_DEFAULT


def test_unknown_strategy_is_refused_and_changes_nothing():
    sparsek.set_activation_backward("save")
    for bad in ("saved", "", None, 1):
        with pytest.raises(ValueError, match="activation backward"):
            sparsek.set_activation_backward(bad)
        assert sparsek.activation_backward() == "save"
    sparsek.set_activation_backward("recompute")
    assert sparsek.activation_backward() == "recompute"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", SMOOTH)
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_gradients_against_float64(device, dtype, activation, with_bias, strategy):
    """Each strategy's output and three gradients against the float64 dense computation of the same inputs."""
    w, w64, x, bias, r = _case(device, dtype, activation, with_bias, "act-bwd-ref")
    y, gx, gv, gb = _train(strategy, w, x, bias, r, activation, module=with_bias)
    y64, gx64, gv64, gb64, z_abs = _reference(w, w64, x, bias, r, activation)
    u = UNIT_ROUNDOFF[dtype]
    # "save" rounds z to the dtype before the activation (|act'| <= 1.13): that much of |z| more on y, and act'(z)
    # taken at the rounded z (|z act''(z)| < 0.6) adds up to one more rounding of dZ to the gradients.
    assert_close(y, y64, z_abs.reshape(y64.shape), 64, activation, 1.15 * u if strategy == "save" else 0.0)
    rounded = (2.0 if strategy == "save" else 1.0) * u
    g_abs = r.cpu().double().abs().reshape(-1, 96) * 1.2
    assert_close(gx, gx64, (g_abs @ w64.abs()).reshape(x.shape), 96, activation, rounded)
    assert_close(gv, gv64, blocks_of(g_abs.t() @ x.cpu().double().abs().reshape(-1, 64), w), 10, activation,
                 rounded)
    if with_bias:
        # "recompute" sums dZ in float32 before its rounding; "save" sums torch's activation gradient, rounded.
        assert_close(gb, gb64, g_abs.sum(0), 10, activation, rounded if strategy == "save" else 0.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", SMOOTH)
def test_strategies_agree(device, dtype, activation):
    """The two strategies' gradients agree within the roundings that separate them (z's and dZ's), through the
    module with a bias."""
    w, w64, x, bias, r = _case(device, dtype, activation, True, "act-bwd-agree")
    rec = _train("recompute", w, x, bias, r, activation, module=True)
    sav = _train("save", w, x, bias, r, activation, module=True)
    u = UNIT_ROUNDOFF[dtype]
    g_abs = r.cpu().double().abs().reshape(-1, 96) * 1.2
    mags = [None, (g_abs @ w64.abs()).reshape(x.shape), blocks_of(g_abs.t() @ x.cpu().double().abs().reshape(-1, 64),
                                                                    w), g_abs.sum(0)]
    for got, want, mag, k in zip(sav[1:], rec[1:], mags[1:], (96, 10, 10)):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert_close(got, want.cpu().double(), mag, 2 * k, activation, 4.0 * u)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", SMOOTH)
def test_inference_is_the_fused_kernel_bit_for_bit(device, activation):
    """Under "save", no_grad, inference_mode and a grad-enabled call whose inputs need no grad all give the fused
    kernel's output bit for bit, through the function and the module; a recording call does not (which shows the
    comparison can tell the paths apart)."""
    w, _, x, bias, _ = _case(device, torch.bfloat16, activation, True, "act-bwd-infer")
    code = sparsek.ACTIVATIONS[activation]
    fused = torch.ops.sparsek.linear(x, w.values(), w.crow_indices(), w.col_indices(), 64, bias, code)
    sparsek.set_activation_backward("save")
    layer = sparsek.BlockSparseLinear.from_bsr(w, bias, activation).to(device)
    for f in (lambda x: sparsek.linear(x, w, bias, activation), layer):
        with torch.no_grad():
            assert torch.equal(f(x), fused)
        with torch.inference_mode():
            assert torch.equal(f(x), fused)
        y = f(x)
        assert y.grad_fn is None and torch.equal(y, fused)
    if device == "cpu":  # compiled (aot_eager), inputs needing no grad: the fused kernel's bits too
        torch._dynamo.reset()
        compiled = torch.compile(lambda x: layer(x), fullgraph=True, backend="aot_eager")
        assert torch.equal(compiled(x), fused)
        with torch.no_grad():
            assert torch.equal(compiled(x), fused)
    layer.values.requires_grad_(True)
    y = layer(x)
    assert type(y.grad_fn).__name__ == _BACKWARD_NAMES[activation]
    assert not torch.equal(y.detach(), fused)
    with torch.no_grad():
        assert torch.equal(layer(x), fused)


@pytest.mark.parametrize("activation", SMOOTH)
def test_io_dtype_float32_layer(activation):
    """A layer of bfloat16 values taking float32 (``io_dtype``) follows the setting too, with the same gradients
    as the recompute path within the roundings between them."""
    w, w64, x, bias, r = _case("cpu", torch.bfloat16, activation, True, "act-bwd-io")
    grads = {}
    for strategy in STRATEGIES:
        sparsek.set_activation_backward(strategy)
        layer = sparsek.BlockSparseLinear.from_bsr(w, bias, activation).float()
        assert layer.io_dtype == torch.float32 and layer.values.dtype == torch.bfloat16
        layer.values.requires_grad_(True)
        xg = x.float().requires_grad_(True)
        y = layer(xg)
        assert y.dtype == torch.float32
        inner = type(y.grad_fn.next_functions[0][0]).__name__
        assert (inner == _BACKWARD_NAMES[activation]) == (strategy == "save"), inner
        y.backward(r.float())
        grads[strategy] = (xg.grad, layer.values.grad)
    u = UNIT_ROUNDOFF[torch.bfloat16]
    g_abs = r.double().abs().reshape(-1, 96) * 1.2
    assert_close(grads["save"][0].to(torch.bfloat16), grads["recompute"][0].double(),
                 (g_abs @ w64.abs()).reshape(x.shape), 192, activation, 4.0 * u)
    assert_close(grads["save"][1], grads["recompute"][1].double(),
                 blocks_of(g_abs.t() @ x.double().abs().reshape(-1, 64), w), 20, activation, 4.0 * u)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("activation", SMOOTH)
def test_what_is_kept_for_the_backward(strategy, activation):
    """"save" keeps z (tokens x out_features of x's dtype) from the forward to the backward, "recompute" keeps
    nothing of that shape (only the inputs): the memory cost the docs state."""
    w, _, x, bias, _ = _case("cpu", torch.bfloat16, activation, True, "act-bwd-saved")
    sparsek.set_activation_backward(strategy)
    layer = sparsek.BlockSparseLinear.from_bsr(w, bias, activation)
    layer.values.requires_grad_(True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: (saved.append(t), t)[1], lambda t: t):
        layer(x.clone().requires_grad_(True))
    outs = [t for t in saved if tuple(t.shape) == (2, 5, 96)]
    if strategy == "save":
        assert len(outs) == 1 and outs[0].dtype == torch.bfloat16
    else:
        assert outs == []


@pytest.mark.parametrize("activation", SMOOTH)
@pytest.mark.parametrize("with_bias", [False, True])
def test_gradcheck_save_float64(activation, with_bias):
    """gradcheck of the "save" path (the op without the activation, then torch's) in float64 on the CPU."""
    sparsek.set_activation_backward("save")
    gen = torch.Generator().manual_seed(seed_for("gradcheck-save", activation, with_bias))
    bs = 16
    w, _ = random_bsr(3 * bs, 4 * bs, bs, 0.5, torch.float64, torch.int64, "cpu", gen)
    crow, col = w.crow_indices(), w.col_indices()
    x = torch.randn(2, 3, 4 * bs, generator=gen, dtype=torch.float64).requires_grad_(True)
    values = w.values().detach().clone().requires_grad_(True)
    bias = torch.randn(3 * bs, generator=gen, dtype=torch.float64).requires_grad_(True) if with_bias else None

    def fn(x, v, *b):
        y = sparsek.linear(x, torch.sparse_bsr_tensor(crow, col, v, w.shape), b[0] if b else None, activation)
        assert type(y.grad_fn).__name__ == _BACKWARD_NAMES[activation]
        return y

    inputs = (x, values) + ((bias,) if with_bias else ())
    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)
    # gradcheck checks the composition against itself: the activation's formula (GELU's tanh form, not erf's) is
    # checked against the float64 dense computation, output and gradients, to float64's precision.
    r = torch.randn(2, 3, 3 * bs, generator=gen, dtype=torch.float64)
    got = torch.autograd.grad(fn(*inputs), inputs, r)
    dense = torch.sparse_bsr_tensor(crow, col, values, w.shape).to_dense()
    want_y = activation64(x @ dense.t() + (bias if with_bias else 0.0), activation)
    want = torch.autograd.grad(want_y, inputs, r)
    torch.testing.assert_close(fn(*inputs), want_y, rtol=1e-12, atol=1e-12)
    for g, h in zip(got, want):
        torch.testing.assert_close(g, h, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------------------------------------------
# torch.compile of a training step under each strategy.


def _model(device, seed):
    torch.manual_seed(seed)
    layers = [
        sparsek.BlockSparseLinear.from_dense(torch.nn.Linear(64, 128), 16, density=0.5, dtype=torch.bfloat16,
                                             activation="gelu_tanh"),
        sparsek.BlockSparseLinear.from_dense(torch.nn.Linear(128, 64), 32, density=0.5, dtype=torch.bfloat16,
                                             activation="silu"),
    ]
    model = torch.nn.Sequential(*layers).to(device)
    for p in model.parameters():
        p.requires_grad_(True)
    return model


def _recording_backend(inner: str, seen: list):
    """A torch.compile backend that records the aten-free Dynamo graph's call targets, then compiles with ``inner``."""
    from torch._dynamo.backends.registry import lookup_backend

    def backend(gm, example_inputs):
        seen.append({str(n.target) for n in gm.graph.nodes if n.op in ("call_function", "call_method")})
        return lookup_backend(inner)(gm, example_inputs)

    return backend


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_compiled_training_step(device, strategy):
    """Forward, backward and AdamW under torch.compile(fullgraph=True) (aot_eager on the CPU, inductor on CUDA) give
    eager's parameters under each strategy, and the compiled graph is the strategy's (torch's GELU and SiLU in it
    for "save" only)."""
    torch._dynamo.reset()
    sparsek.set_activation_backward(strategy)
    eager, compiled_model = _model(device, 11), _model(device, 11)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    opt_c = torch.optim.AdamW(compiled_model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed_for("act-bwd-compile", device, strategy))
    xs = [randn(9, 64, dtype=torch.bfloat16, device=device, gen=gen) for _ in range(3)]
    seen = []

    def loss_of(model, x):
        return model(x).float().square().mean()

    compiled_loss = torch.compile(loss_of, fullgraph=True,
                                  backend=_recording_backend("inductor" if device == "cuda" else "aot_eager", seen))
    first_grads = []
    for i, x in enumerate(xs):
        for model, opt, f in ((eager, opt_e, loss_of), (compiled_model, opt_c, compiled_loss)):
            opt.zero_grad()
            f(model, x).backward()
            if i == 0:
                first_grads.append([p.grad.clone() for p in model.parameters()])
            opt.step()
    if device == "cpu":
        for pe, pc in zip(eager.parameters(), compiled_model.parameters()):
            assert torch.equal(pe, pc), (pe - pc).abs().max()
    else:
        # Inductor fuses the bf16 activations differently: the first step's gradients agree to bf16 rounding, and
        # after AdamW (each step moves a parameter by at most ~lr, whatever the gradient's size, so a gradient near
        # zero whose sign differs moves it 2 lr apart) the parameters within 2 lr per step.
        for ge, gc in zip(*first_grads):
            scale = ge.float().abs().max().item()
            assert torch.allclose(ge.float(), gc.float(), rtol=2e-2, atol=2e-2 * scale), (ge - gc).abs().max()
        for pe, pc in zip(eager.parameters(), compiled_model.parameters()):
            assert (pe.float() - pc.float()).abs().max().item() <= 2 * 1e-3 * len(xs) + 1e-2 * pe.float().abs().max().item()
    assert len(seen) == 1
    torch_acts = any("gelu" in t for t in seen[0]) and any("silu" in t for t in seen[0])
    assert torch_acts == (strategy == "save"), seen[0]
    # Changing the setting recompiles (Dynamo guards on it), to the other strategy's graph.
    sparsek.set_activation_backward("recompute" if strategy == "save" else "save")
    compiled_loss(compiled_model, xs[0]).backward()
    assert len(seen) == 2
    assert (any("gelu" in t for t in seen[1])) == (strategy != "save"), seen[1]


@pytest.mark.skipif(not HAVE_CUDA, reason=NO_GPU_REASON)
def test_cuda_graph_training_step_save():
    """A training step of a "save" layer captured in a CUDA graph replays eager's gradients."""
    sparsek.set_activation_backward("save")
    model = _model("cuda", 12)
    x = torch.randn(16, 64, device="cuda").to(torch.bfloat16)

    def step():
        for p in model.parameters():
            p.grad = None
        model(x).float().square().mean().backward()
        return [p.grad for p in model.parameters()]

    want = [g.clone() for g in step()]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(s)
    for p in model.parameters():
        p.grad = None
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        model(x).float().square().mean().backward()
    g.replay()
    torch.cuda.synchronize()
    for p, w in zip(model.parameters(), want):
        assert torch.allclose(p.grad.float(), w.float(), rtol=1e-2, atol=1e-3 * w.float().abs().max().item())


def test_relu_and_identity_ignore_the_setting():
    """Only GELU and SiLU change: ReLU keeps its output-based backward, no activation its plain formula (the same
    autograd node and the same gradients under both settings)."""
    w, _, x, bias, r = _case("cpu", torch.float16, "relu", True, "act-bwd-relu")
    for activation in (None, "relu"):
        got = []
        for strategy in STRATEGIES:
            sparsek.set_activation_backward(strategy)
            xg = x.clone().requires_grad_(True)
            y = sparsek.linear(xg, w, bias, activation)
            y.backward(r)
            got.append((type(y.grad_fn).__name__, y.detach(), xg.grad))
        assert got[0][0] == got[1][0] and torch.equal(got[0][1], got[1][1]) and torch.equal(got[0][2], got[1][2])
