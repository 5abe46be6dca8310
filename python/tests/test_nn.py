"""sparsek.nn.BlockSparseLinear: pruning, forward against the pruned dense layer, state_dict round trips, repr,
torch.compile without graph breaks (CPU: aot_eager; CUDA: test_cuda.py uses inductor)."""

from __future__ import annotations

import io

import pytest
import torch

from conftest import DEVICES, DTYPES, activation64, assert_close, seed_for
from sparsek.nn import BlockSparseLinear


def dense_linear(in_f, out_f, device, seed, bias=True):
    torch.manual_seed(seed)
    return torch.nn.Linear(in_f, out_f, bias=bias).to(device)


def block_norms(w, bs):
    r, c = w.shape[0] // bs, w.shape[1] // bs
    return w.detach().float().reshape(r, bs, c, bs).pow(2).sum(dim=(1, 3)).sqrt()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", [None, "relu", "silu"])
def test_from_dense_keeps_largest_blocks_and_matches(device, dtype, activation):
    lin = dense_linear(256, 192, device, seed_for("nn", device, dtype, activation))
    layer = BlockSparseLinear.from_dense(lin, 32, density=0.3, dtype=dtype, activation=activation)
    total = (192 // 32) * (256 // 32)
    assert layer.nnzb == round(0.3 * total)
    # Every kept block's norm is at least every dropped block's.
    norms = block_norms(lin.weight, 32)
    kept = block_norms(layer.to_dense(), 32) > 0
    assert norms[kept].min() >= norms[~kept].max()
    # The kept blocks are the layer's own, rounded to dtype; the rest are zero.
    w = layer.to_dense()
    mask = kept.repeat_interleave(32, 0).repeat_interleave(32, 1)
    assert torch.equal(w[mask], lin.weight.detach().to(dtype)[mask])
    assert (w[~mask] == 0).all()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, 256, generator=gen).to(dtype).to(device)
    with torch.no_grad():
        y = layer(x)
    x64, w64, b64 = x.cpu().double().reshape(-1, 256), w.cpu().double(), layer.bias.cpu().double()
    ref = activation64(x64 @ w64.t() + b64, activation)
    assert_close(y.reshape(-1, 192), ref, x64.abs() @ w64.abs().t() + b64.abs(), 256, activation)


@pytest.mark.parametrize("device", DEVICES)
def test_threshold_and_extremes(device):
    lin = dense_linear(128, 128, device, 7, bias=False)
    norms = block_norms(lin.weight, 64)
    t = norms.flatten().sort().values[1].item()  # keeps the blocks above the second smallest norm
    layer = BlockSparseLinear.from_dense(lin, 64, threshold=t, dtype=torch.float16)
    assert layer.nnzb == int((norms > t).sum()) and layer.bias is None
    empty = BlockSparseLinear.from_dense(lin, 64, density=0.0, dtype=torch.float16)
    assert empty.nnzb == 0
    x = torch.ones(2, 128, dtype=torch.float16, device=device)
    assert torch.equal(empty(x).cpu(), torch.zeros(2, 128, dtype=torch.float16))
    full = BlockSparseLinear.from_dense(lin, 64, density=1.0, dtype=torch.float16)
    assert full.nnzb == 4 and full.density == 1.0


def test_from_dense_errors():
    lin = torch.nn.Linear(100, 64)
    with pytest.raises(ValueError, match="multiple of the block size"):
        BlockSparseLinear.from_dense(lin, 32, density=0.5, dtype=torch.float16)
    lin = torch.nn.Linear(128, 64)
    with pytest.raises(TypeError, match="dtype=torch.float16"):
        BlockSparseLinear.from_dense(lin, 32, density=0.5)  # float32 weight, no dtype
    with pytest.raises(ValueError, match="exactly one"):
        BlockSparseLinear.from_dense(lin, 32, dtype=torch.float16)
    with pytest.raises(ValueError, match="exactly one"):
        BlockSparseLinear.from_dense(lin, 32, density=0.5, threshold=1.0, dtype=torch.float16)
    with pytest.raises(ValueError, match="outside"):
        BlockSparseLinear.from_dense(lin, 32, density=1.5, dtype=torch.float16)
    with pytest.raises(ValueError, match="block size 48"):
        BlockSparseLinear.from_dense(lin, 48, density=0.5, dtype=torch.float16)
    with pytest.raises(ValueError, match="gelu_tanh"):
        BlockSparseLinear.from_dense(lin, 32, density=0.5, dtype=torch.float16, activation="gelu")
    with pytest.raises(TypeError, match="torch.nn.Linear"):
        BlockSparseLinear.from_dense(torch.nn.ReLU(), 32, density=0.5)


@pytest.mark.parametrize("device", DEVICES)
def test_state_dict_round_trip(device):
    src = BlockSparseLinear.from_dense(dense_linear(256, 128, device, 3), 64, density=0.25, dtype=torch.bfloat16,
                                       activation="relu")
    # Load into a layer with another pattern and another nnzb: the pattern comes with the state dict.
    dst = BlockSparseLinear.from_dense(dense_linear(256, 128, device, 4), 64, density=0.75, dtype=torch.bfloat16,
                                       activation="relu")
    assert dst.nnzb != src.nnzb
    dst.load_state_dict(src.state_dict())
    x = torch.randn(7, 256).to(torch.bfloat16).to(device)
    with torch.no_grad():
        assert torch.equal(dst(x), src(x))
    assert dst.nnzb == src.nnzb and dst.values.device.type == device
    # torch.save / torch.load of the state dict and of the whole module.
    buf = io.BytesIO()
    torch.save(src.state_dict(), buf)
    buf.seek(0)
    dst.load_state_dict(torch.load(buf))
    buf = io.BytesIO()
    torch.save(src, buf)
    buf.seek(0)
    again = torch.load(buf, weights_only=False)
    with torch.no_grad():
        assert torch.equal(again(x), src(x))


def test_invalid_state_dict_is_refused_and_changes_nothing():
    layer = BlockSparseLinear.from_dense(dense_linear(128, 128, "cpu", 5), 64, density=0.5, dtype=torch.float16)
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    bad = {k: v.clone() for k, v in before.items()}
    bad["col_indices"] = torch.full_like(bad["col_indices"], 5)  # beyond the 2 block columns
    with pytest.raises(RuntimeError, match="col_indices"):
        layer.load_state_dict(bad)
    for k, v in layer.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_repr():
    layer = BlockSparseLinear.from_dense(dense_linear(512, 256, "cpu", 6), 64, density=0.25, dtype=torch.float16,
                                         activation="silu")
    text = repr(layer)
    for part in ("in_features=512", "out_features=256", "block_size=64", "density=0.250", "(8/32 blocks)",
                 "torch.float16", "activation=silu"):
        assert part in text, (part, text)


def test_from_bsr_and_to_bsr():
    lin = dense_linear(128, 64, "cpu", 8)
    w = lin.weight.detach().half()
    w[:32, 64:] = 0
    layer = BlockSparseLinear.from_bsr(w.to_sparse_bsr(32), lin.bias.detach().half())
    assert layer.nnzb == 6 and torch.equal(layer.to_dense(), w)
    assert torch.equal(layer.to_bsr().to_dense(), w)


def test_torch_compile_without_graph_breaks_cpu():
    """fullgraph=True fails on any graph break; aot_eager runs the fake kernels through AOT autograd without
    needing a C++ compiler (test_cuda.py compiles with inductor)."""
    torch._dynamo.reset()
    model = torch.nn.Sequential(
        BlockSparseLinear.from_dense(dense_linear(128, 256, "cpu", 9), 32, density=0.5, dtype=torch.float16,
                                     activation="silu"),
        BlockSparseLinear.from_dense(dense_linear(256, 128, "cpu", 10), 32, density=0.5, dtype=torch.float16),
    )
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    for tokens in (3, 5):
        x = torch.randn(tokens, 128).half()
        with torch.no_grad():
            assert torch.equal(compiled(x), model(x))


def test_forward_with_a_parametrized_bias():
    """forward reads the registered tensors from the module's dicts (fast path); a parametrization moves one out of
    them (``bias`` here: ``values`` cannot be parametrized, its name clashes with ``ModuleDict.values``), and the
    forward must then find it through the attribute lookup and use the parametrized tensor."""
    import torch.nn.utils.parametrize as parametrize

    class Double(torch.nn.Module):
        def forward(self, v):
            return 2 * v

    lin = dense_linear(64, 48, "cpu", seed_for("parametrized"))
    layer = BlockSparseLinear.from_dense(lin, 16, density=0.5, dtype=torch.float16)
    x = torch.randn(3, 64).to(torch.float16)
    w, b = layer.to_dense().double(), layer.bias.double()
    parametrize.register_parametrization(layer, "bias", Double())
    assert "bias" not in layer._parameters, "the parametrization must move bias out of the dict"
    with torch.no_grad():
        got = layer(x).double()
    ref = x.double() @ w.t() + 2 * b
    assert torch.allclose(got, ref, rtol=1e-2, atol=2e-2), (got - ref).abs().max()
