"""The whole-model workflow (issue 41): sparsek.nn.sparsify (what it converts, what it skips and why, copy or in
place), the random-pattern BlockSparseLinear(in, out, bs, density, seed=...), to_linear() and the state_dict round
trip to nn.Linear, dtype conversions (.float(), .half(), .to(dtype), ...), and no torch warning from sparsek's
own calls."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import sparsek
from conftest import DEVICES, DTYPES, HAVE_CUDA, NO_GPU_REASON, activation64, assert_close, seed_for
from sparsek.nn import BlockSparseLinear, LayerRecord, SparsifyReport, sparsify


def seeded_model(seed, device="cpu", dtype=torch.float32):
    """A small MLP-like model with eligible and ineligible layers, weights from ``seed``."""
    torch.manual_seed(seed)
    model = torch.nn.Module()
    model.up = torch.nn.Linear(128, 256)
    model.act = torch.nn.GELU(approximate="tanh")
    model.down = torch.nn.Linear(256, 128, bias=False)
    model.odd = torch.nn.Linear(128, 100)  # not a multiple of any block size
    model.blocks = torch.nn.ModuleList([torch.nn.Linear(128, 128) for _ in range(2)])
    return model.to(device=device, dtype=dtype)


def forward(model, x):
    h = model.down(model.act(model.up(x)))
    for b in model.blocks:
        h = b(h)
    return h, model.odd(h)


def block_mask(layer: BlockSparseLinear) -> torch.Tensor:
    """The kept blocks as an elementwise mask of the dense weight."""
    bs = layer.block_size
    r, c = layer.out_features // bs, layer.in_features // bs
    mask = torch.zeros(r, c, dtype=torch.bool)
    rows = torch.repeat_interleave(torch.arange(r), (layer.crow_indices[1:] - layer.crow_indices[:-1]).cpu().long())
    mask[rows, layer.col_indices.cpu().long()] = True
    return mask.repeat_interleave(bs, 0).repeat_interleave(bs, 1)


def check_layer_against_dense(layer: BlockSparseLinear, dense_weight, dense_bias, gen, activation=None):
    """The layer keeps ``dense_weight``'s values (rounded to its values' dtype) in its kept blocks, zeros
    elsewhere, and its forward on fresh random inputs of its io dtype matches the float64 product."""
    w = layer.to_dense().cpu()
    mask = block_mask(layer)
    assert torch.equal(w[mask], dense_weight.detach().cpu().to(layer.values.dtype)[mask])
    assert (w[~mask] == 0).all()
    x = torch.randn(2, 3, layer.in_features, generator=gen).to(layer.io_dtype).to(layer.values.device)
    with torch.no_grad():
        y = layer(x)
    assert y.dtype == layer.io_dtype and y.shape == (2, 3, layer.out_features)
    x64 = x.reshape(-1, layer.in_features).to(layer.values.dtype).cpu().double()  # the rounding forward makes
    w64 = w.double()
    b64 = torch.zeros(layer.out_features, dtype=torch.float64) if dense_bias is None else \
        dense_bias.detach().cpu().to(layer.values.dtype).double()
    ref = activation64(x64 @ w64.t() + b64, activation)
    # The product is rounded once to the values' dtype (then widened exactly to the io dtype).
    got = y.reshape(-1, layer.out_features).to(layer.values.dtype)
    assert torch.equal(got.to(y.dtype), y.reshape(-1, layer.out_features))
    assert_close(got, ref, x64.abs() @ w64.abs().t() + b64.abs(), layer.in_features, activation)


# ---------------------------------------------------------------------------------------------------------------
# sparsify


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_sparsify_copy_converts_eligible_layers_and_matches_masked_dense(device, dtype):
    seed = seed_for("sparsify", device, dtype)
    model = seeded_model(seed, device, dtype)
    original = copy.deepcopy(model)
    report = sparsify(model, 32, density=0.5, inplace=False)
    assert isinstance(report, SparsifyReport) and report.model is not model
    # The original is untouched: same types, same weights.
    for (name, a), (_, b) in zip(model.named_modules(), original.named_modules()):
        assert type(a) is type(b), name
    for (name, a), (_, b) in zip(model.state_dict().items(), original.state_dict().items()):
        assert torch.equal(a, b), name
    sparse = report.model
    converted = {r.name for r in report.converted}
    assert converted == {"up", "down", "blocks.0", "blocks.1"}
    assert [r.name for r in report.skipped] == ["odd"]
    assert "not a multiple of the block size 32" in report.skipped[0].reason
    assert type(sparse.odd) is torch.nn.Linear
    values_dtype = torch.float16 if dtype == torch.float32 else dtype
    gen = torch.Generator().manual_seed(seed)
    for name in converted:
        layer, dense = sparse.get_submodule(name), original.get_submodule(name)
        assert isinstance(layer, BlockSparseLinear)
        assert layer.values.dtype == values_dtype and layer.io_dtype == dtype
        assert layer.values.device.type == device
        record = next(r for r in report.records if r.name == name)
        total = (dense.out_features // 32) * (dense.in_features // 32)
        assert record.nnzb == layer.nnzb == round(0.5 * total) and record.total_blocks == total
        assert record.density == layer.density and record.values_dtype == values_dtype and record.dtype == dtype
        check_layer_against_dense(layer, dense.weight, dense.bias, gen)
    # The model's forward is the composition of the converted layers (the model really uses them).
    x = torch.randn(4, 128, generator=gen).to(dtype).to(device)
    with torch.no_grad():
        h, tail = forward(sparse, x)
        h_ref = sparse.up(x)
        h_ref = sparse.down(sparse.act(h_ref))
        for b in sparse.blocks:
            h_ref = b(h_ref)
    assert h.dtype == dtype and torch.equal(h, h_ref) and torch.equal(tail, sparse.odd(h_ref))
    assert report.kept_weights == sum(r.nnzb for r in report.converted) * 32 * 32
    assert report.dense_weights == 128 * 256 * 2 + 128 * 128 * 2
    assert report.overall_density == report.kept_weights / report.dense_weights


def test_sparsify_in_place_and_threshold():
    model = seeded_model(11)
    before = {n: m.weight.detach().clone() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    model.eval()
    t = 0.8  # near the median block norm of the layers of 128 inputs (16 x 16 entries of U(-128**-0.5, ...))
    report = sparsify(model, 16, threshold=t, dtype=torch.bfloat16)
    assert report.model is model and report.threshold == t and report.density is None
    assert any(0 < r.nnzb < r.total_blocks for r in report.converted)  # the threshold cuts inside a layer
    for r in report.converted:
        layer = model.get_submodule(r.name)
        w = before[r.name]
        bs = 16
        norms = w.float().reshape(w.shape[0] // bs, bs, w.shape[1] // bs, bs).pow(2).sum(dim=(1, 3)).sqrt()
        assert layer.nnzb == int((norms > t).sum()) == r.nnzb
        assert layer.values.dtype == torch.bfloat16 and layer.io_dtype == torch.float32
        assert not layer.training  # the mode carries over
    assert {r.name for r in report.skipped} == {"odd"}  # 100 is not a multiple of 16 either


def test_sparsify_include_exclude_and_reasons():
    torch.manual_seed(3)
    model = torch.nn.Module()
    model.enc = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    model.attn = torch.nn.MultiheadAttention(64, 4, batch_first=True)  # its out_proj is a Linear subclass
    model.emb = torch.nn.Embedding(10, 64)
    model.head = torch.nn.Linear(64, 10, bias=False)
    model.lm = torch.nn.Linear(64, 64, bias=False)
    model.tied = torch.nn.Linear(64, 64, bias=False)
    model.tied.weight = model.lm.weight  # the same Parameter in two layers
    model.hooked = torch.nn.Linear(64, 64)
    model.hooked.register_forward_hook(lambda m, i, o: o)
    model.cplx = torch.nn.Linear(64, 64, dtype=torch.complex64)
    model.meta = torch.nn.Linear(64, 64, device="meta")
    model.alias = model.enc[0]  # one module under two names
    report = sparsify(model, 32, density=0.25, include=["enc.*", "attn.*", "head", "lm", "tied", "hooked", "cplx",
                                                         "meta"], exclude="enc.1")
    by_name = {r.name: r for r in report.records}
    # Every Linear (and subclass) is reported once, in the model's order; the alias is named on its record.
    assert list(by_name) == ["enc.0", "enc.1", "attn.out_proj", "head", "lm", "tied", "hooked", "cplx", "meta"]
    assert by_name["enc.0"].converted and by_name["enc.0"].aliases == ("alias",)
    assert isinstance(model.enc[0], BlockSparseLinear) and model.alias is model.enc[0]
    assert by_name["enc.1"].reason == "excluded by name (pattern 'enc.1')"
    assert "subclass of nn.Linear (NonDynamicallyQuantizableLinear)" in by_name["attn.out_proj"].reason
    assert "not a multiple of the block size 32" in by_name["head"].reason
    assert "shared with tied.weight" in by_name["lm"].reason and "shared with lm.weight" in by_name["tied"].reason
    assert "hooks" in by_name["hooked"].reason
    assert "unsupported dtype complex64" in by_name["cplx"].reason
    assert "on meta" in by_name["meta"].reason
    assert [r.name for r in report.converted] == ["enc.0"]
    for r in report.skipped:
        assert type(model.get_submodule(r.name)) is not BlockSparseLinear and r.nnzb is None
    # The report says all of it.
    text = str(report)
    assert "1 of 9 Linear layers converted (block size 32, density 0.25)" in text
    for r in report.records:
        assert r.name in text
        if r.reason:
            assert r.reason in text
    assert "also alias" in text
    # A layer whose name matches no include pattern.
    report = sparsify(torch.nn.Sequential(torch.nn.Linear(64, 64)), 32, density=0.5, include="enc.*")
    assert report.records[0].reason == "not included (matches no include pattern)"


def test_sparsify_bad_arguments_change_nothing():
    model = seeded_model(5)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="block size 48"):
        sparsify(model, 48, density=0.5)
    with pytest.raises(ValueError, match="exactly one"):
        sparsify(model, 32)
    with pytest.raises(ValueError, match="exactly one"):
        sparsify(model, 32, density=0.5, threshold=0.1)
    with pytest.raises(ValueError, match="outside"):
        sparsify(model, 32, density=-0.1)
    with pytest.raises(ValueError, match="threshold"):
        sparsify(model, 32, threshold=float("nan"))
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        sparsify(model, 32, density=0.5, dtype=torch.float32)
    with pytest.raises(TypeError, match="patterns"):
        sparsify(model, 32, density=0.5, include=[1])
    with pytest.raises(TypeError, match="torch.nn.Module"):
        sparsify(torch.zeros(3), 32, density=0.5)
    assert all(type(m) is not BlockSparseLinear for m in model.modules())
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    # A bare Linear: only as a copy.
    lin = torch.nn.Linear(64, 64)
    with pytest.raises(ValueError, match="inplace=False"):
        sparsify(lin, 32, density=0.5)
    report = sparsify(lin, 32, density=0.5, inplace=False)
    assert isinstance(report.model, BlockSparseLinear) and report.model.nnzb == 2 and type(lin) is torch.nn.Linear


def test_sparsify_verbose_prints_the_table(capsys):
    report = sparsify(seeded_model(6), 64, density=0.5, verbose=True)
    out = capsys.readouterr().out
    assert out.strip() == str(report) == repr(report)
    assert "4 of 5 Linear layers converted" in out and "skipped: shape 100 x 128" in out
    assert isinstance(report.records[0], LayerRecord)


# ---------------------------------------------------------------------------------------------------------------
# BlockSparseLinear(in, out, bs, density): random pattern and init


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_random_layer_pattern_init_and_forward(device, dtype):
    layer = BlockSparseLinear(1024, 256, 32, 0.3, seed=7, dtype=dtype, device=device)
    r, c = 256 // 32, 1024 // 32
    assert layer.nnzb == round(0.3 * r * c) and layer.values.dtype == dtype and layer.io_dtype == dtype
    assert layer.values.device.type == device and layer.crow_indices.dtype == torch.int32
    counts = (layer.crow_indices[1:] - layer.crow_indices[:-1]).cpu()
    assert int(counts.max() - counts.min()) <= 1  # spread evenly over the block rows
    # U(-1/sqrt(fan_in), 1/sqrt(fan_in)) per block row, fan_in = its kept blocks x bs; the bias alike.
    values, bias = layer.values.cpu().double(), layer.bias.cpu().double()
    bounds = (counts.double() * 32).rsqrt()
    rows = torch.repeat_interleave(torch.arange(r), counts)
    scaled = values / bounds[rows, None, None]
    assert scaled.abs().max() <= 1.0 + 2.0**-7
    assert abs(scaled.std().item() - 3**-0.5) < 0.02 and abs(scaled.mean().item()) < 0.02
    scaled_bias = bias / bounds.repeat_interleave(32)
    assert scaled_bias.abs().max() <= 1.0 + 2.0**-7 and scaled_bias.std() > 0.4
    check_layer_against_dense(layer, layer.to_dense(), layer.bias, torch.Generator().manual_seed(7))


def test_random_layer_seed_determinism_and_options():
    a = BlockSparseLinear(256, 512, 64, 0.4, seed=123)
    b = BlockSparseLinear(256, 512, 64, 0.4, seed=123)
    c = BlockSparseLinear(256, 512, 64, 0.4, seed=124)
    for k in a.state_dict():
        assert torch.equal(a.state_dict()[k], b.state_dict()[k]), k
    assert not torch.equal(a.to_dense(), c.to_dense())
    # Without a seed, torch.manual_seed decides.
    torch.manual_seed(99)
    d = BlockSparseLinear(256, 512, 64, 0.4)
    torch.manual_seed(99)
    e = BlockSparseLinear(256, 512, 64, 0.4)
    assert torch.equal(d.to_dense(), e.to_dense()) and torch.equal(d.bias, e.bias)
    f = BlockSparseLinear(256, 512, 64, density=0.4, bias=False, seed=1, index_dtype=torch.int64,
                          io_dtype=torch.float32, activation="relu")
    assert f.bias is None and f.crow_indices.dtype == torch.int64 and f.io_dtype == torch.float32
    x = torch.randn(3, 256)
    with torch.no_grad():
        assert torch.equal(f(x), f(x.half()).float())
    # Fewer blocks than block rows: one block in each of four rows, the others empty with a zero bias.
    sparse_rows = BlockSparseLinear(128, 256, 32, 4 / 32, seed=5)
    counts = sparse_rows.crow_indices[1:] - sparse_rows.crow_indices[:-1]
    assert sorted(counts.tolist()) == [0] * 4 + [1] * 4
    bias_rows = sparse_rows.bias.reshape(8, 32)
    assert (bias_rows[counts == 0] == 0).all() and (bias_rows[counts == 1] != 0).all()
    # Extremes: nothing kept and everything kept.
    assert BlockSparseLinear(128, 128, 32, 0.0, seed=1).nnzb == 0
    full = BlockSparseLinear(128, 128, 32, 1.0, seed=1)
    assert full.nnzb == 16 and full.density == 1.0


def test_random_layer_errors_and_component_form_unchanged():
    with pytest.raises(TypeError, match="io_dtype=torch.float32"):
        BlockSparseLinear(128, 128, 32, 0.5, dtype=torch.float32)
    with pytest.raises(ValueError, match="multiple of the block size"):
        BlockSparseLinear(100, 128, 32, 0.5)
    with pytest.raises(ValueError, match="block size 48"):
        BlockSparseLinear(96, 96, 48, 0.5)
    with pytest.raises(ValueError, match="outside"):
        BlockSparseLinear(128, 128, 32, 1.5)
    with pytest.raises(TypeError, match="True or False"):
        BlockSparseLinear(128, 128, 32, 0.5, bias=torch.zeros(128))
    with pytest.raises(TypeError, match="give a density"):
        BlockSparseLinear(128, 128, 32)
    with pytest.raises(TypeError, match="index_dtype"):
        BlockSparseLinear(128, 128, 32, 0.5, index_dtype=torch.int16)
    with pytest.raises(TypeError, match="io_dtype"):
        BlockSparseLinear(128, 128, 32, 0.5, dtype=torch.float16, io_dtype=torch.bfloat16)
    # The component form, positional (as before) and by keyword; its bias defaults to None.
    src = BlockSparseLinear(128, 64, 32, 0.5, seed=2)
    v, crow, col = src.values, src.crow_indices.long(), src.col_indices.long()
    pos = BlockSparseLinear(128, 64, 32, v, crow, col)
    kw = BlockSparseLinear(128, 64, 32, values=v, crow_indices=crow, col_indices=col, bias=src.bias)
    assert pos.bias is None and pos.crow_indices.dtype == torch.int32 and torch.equal(pos.to_dense(), src.to_dense())
    assert torch.equal(kw.bias, src.bias)
    with pytest.raises(TypeError, match="no density"):
        BlockSparseLinear(128, 64, 32, values=v, crow_indices=crow, col_indices=col, seed=3)
    with pytest.raises(TypeError, match="tensor or None"):
        BlockSparseLinear(128, 64, 32, v, crow, col, True)


# ---------------------------------------------------------------------------------------------------------------
# to_linear and the state_dict round trip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("io_dtype", [None, torch.float32])
def test_to_linear_round_trip(device, io_dtype):
    seed = seed_for("to_linear", device, io_dtype)
    layer = BlockSparseLinear(256, 128, 32, 0.25, seed=seed, device=device, io_dtype=io_dtype)
    lin = layer.to_linear()
    assert type(lin) is torch.nn.Linear and lin.weight.dtype == layer.io_dtype
    assert lin.weight.device.type == device
    assert torch.equal(lin.weight.detach(), layer.to_dense().to(layer.io_dtype))
    assert torch.equal(lin.bias.detach(), layer.bias.to(layer.io_dtype))
    # The dense layer computes the same product (its own rounding: compare both with float64).
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(5, 256, generator=gen).to(torch.float16).to(device)
    with torch.no_grad():
        y_dense = lin(x.to(layer.io_dtype)).to(torch.float16)
    x64, w64, b64 = x.cpu().double(), layer.to_dense().cpu().double(), layer.bias.cpu().double()
    assert_close(y_dense, x64 @ w64.t() + b64, x64.abs() @ w64.abs().t() + b64.abs(), 256)
    # Back: from_dense of the exported layer keeps exactly the same blocks, so the forward is bit-equal.
    again = BlockSparseLinear.from_dense(lin, 32, density=layer.density, dtype=torch.float16, io_dtype=io_dtype)
    assert torch.equal(again.crow_indices, layer.crow_indices) and torch.equal(again.col_indices, layer.col_indices)
    with torch.no_grad():
        assert torch.equal(again(x.to(layer.io_dtype)), layer(x.to(layer.io_dtype)))
    # state_dict: a saved BlockSparseLinear becomes a plain nn.Linear's state dict through to_linear.
    restored = BlockSparseLinear(256, 128, 32, 0.5, seed=seed + 1, device=device, io_dtype=io_dtype)
    restored.load_state_dict(layer.state_dict())
    plain = torch.nn.Linear(256, 128, device=device, dtype=layer.io_dtype)
    plain.load_state_dict(restored.to_linear().state_dict())
    assert torch.equal(plain.weight, lin.weight) and torch.equal(plain.bias, lin.bias)


def test_to_linear_keeps_the_activation():
    layer = BlockSparseLinear(128, 64, 32, 0.5, seed=4, activation="gelu_tanh")
    exported = layer.to_linear()
    assert isinstance(exported, torch.nn.Sequential) and type(exported[0]) is torch.nn.Linear
    assert isinstance(exported[1], torch.nn.GELU) and exported[1].approximate == "tanh"
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(4)).half()
    x64, w64, b64 = x.double(), layer.to_dense().double(), layer.bias.double()
    with torch.no_grad():
        assert_close(exported.float()(x.float()), activation64(x64 @ w64.t() + b64, "gelu_tanh"),
                     x64.abs() @ w64.abs().t() + b64.abs(), 128, "gelu_tanh")
    assert type(BlockSparseLinear(128, 64, 32, 0.5, seed=4, activation="relu").to_linear()[1]) is torch.nn.ReLU
    assert type(BlockSparseLinear(128, 64, 32, 0.5, seed=4, activation="silu").to_linear()[1]) is torch.nn.SiLU


# ---------------------------------------------------------------------------------------------------------------
# dtype conversions


def fresh(seed, dtype=torch.float16):
    return BlockSparseLinear(128, 64, 32, 0.5, seed=seed, dtype=dtype)


@pytest.mark.parametrize("convert,io", [
    (lambda m: m.float(), torch.float32),
    (lambda m: m.double(), torch.float64),
    (lambda m: m.to(torch.float32), torch.float32),
    (lambda m: m.to("cpu", torch.float64), torch.float64),
    (lambda m: m.type(torch.float32), torch.float32),
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_wide_conversions_keep_16_bit_values(convert, io, dtype):
    layer = fresh(seed_for("wide", io, dtype), dtype)
    values, bias = layer.values.detach().clone(), layer.bias.detach().clone()
    assert convert(layer) is layer
    assert layer.io_dtype == io and torch.equal(layer.values, values) and torch.equal(layer.bias, bias)
    assert layer.values.dtype == dtype and not layer.values.requires_grad
    x = torch.randn(4, 128, generator=torch.Generator().manual_seed(1)).to(io)
    with torch.no_grad():
        y = layer(x)
        assert y.dtype == io and torch.equal(y, layer(x.to(dtype)).to(io))  # the 16-bit input still works too
    assert f"io_dtype={io}" in repr(layer)
    check_layer_against_dense(layer, layer.to_dense(), layer.bias, torch.Generator().manual_seed(2))
    # Another dtype is refused in forward with a message that names the layer's dtypes.
    other = torch.bfloat16 if dtype == torch.float16 else torch.float16
    with pytest.raises(TypeError, match=f"takes {io} or its values' {dtype}"):
        layer(x.to(other))


@pytest.mark.parametrize("target", DTYPES)
@pytest.mark.parametrize("how", ["method", "to"])
def test_16_bit_conversions_convert_the_values(target, how):
    layer = fresh(seed_for("narrow", target, how)).float()  # io float32 first: a 16-bit conversion resets it
    values, bias = layer.values.detach().clone(), layer.bias.detach().clone()
    if how == "to":
        layer.to(target)
    else:
        (layer.half if target == torch.float16 else layer.bfloat16)()
    assert layer.values.dtype == target and layer.bias.dtype == target and layer.io_dtype == target
    assert torch.equal(layer.values, values.to(target)) and torch.equal(layer.bias, bias.to(target))
    check_layer_against_dense(layer, layer.to_dense(), layer.bias, torch.Generator().manual_seed(3))
    with pytest.raises(TypeError, match="takes"):
        layer(torch.randn(2, 128))  # float32 no longer: the layer is 16-bit now, like a .half() nn.Linear


def test_unsupported_conversion_fails_at_conversion_and_changes_nothing():
    layer = fresh(8).float()
    state = {k: v.clone() for k, v in layer.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's notice about complex modules
        with pytest.raises(TypeError, match="cannot be converted to torch.complex64"):
            layer.to(torch.complex64)
    with pytest.raises(TypeError, match="cannot be converted to torch.float8_e4m3fn"):
        layer.to(torch.float8_e4m3fn)
    assert layer.io_dtype == torch.float32
    for k, v in layer.state_dict().items():
        assert v.dtype == state[k].dtype and torch.equal(v, state[k]), k
    # A device move keeps the dtypes.
    layer.to("cpu")
    assert layer.io_dtype == torch.float32 and layer.values.dtype == torch.float16


@pytest.mark.skipif(not HAVE_CUDA, reason=NO_GPU_REASON)
def test_device_moves_keep_the_dtypes_cuda():
    layer = fresh(10).float()
    x = torch.randn(4, 128, generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        y_cpu = layer(x)
        layer.cuda()
        assert layer.io_dtype == torch.float32 and layer.values.dtype == torch.float16
        assert layer.values.is_cuda and layer.crow_indices.is_cuda and layer.crow_indices.dtype == torch.int32
        y = layer(x.cuda())
        assert y.dtype == torch.float32
        check_layer_against_dense(layer, layer.to_dense(), layer.bias, torch.Generator().manual_seed(11))
        layer.to("cpu", torch.bfloat16)
        assert layer.values.device.type == "cpu" and layer.io_dtype == torch.bfloat16
    assert y_cpu.shape == y.shape


def test_model_conversions():
    """A model holding a converted layer beside a dense one: the whole-model conversions a user makes."""
    model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.SiLU(), torch.nn.Linear(128, 64))
    sparsify(model, 32, density=0.5, include="0")
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert model(x).dtype == torch.float32
        model.half()
        assert model[0].io_dtype == torch.float16 and model(x.half()).dtype == torch.float16
        model.bfloat16()
        assert model[0].values.dtype == torch.bfloat16 and model(x.bfloat16()).dtype == torch.bfloat16
        model.to(torch.float32)
        assert model[0].values.dtype == torch.bfloat16 and model[0].io_dtype == torch.float32
        y = model(x)
        assert y.dtype == torch.float32
        assert torch.equal(y, model[2](model[1](model[0](x.bfloat16()).float())))
        model.double()
        assert model(x.double()).dtype == torch.float64


def test_state_dict_of_a_float32_io_model_and_old_pickles():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    sparsify(model, 32, density=0.5)
    sd = model.state_dict()
    assert sd["0.values"].dtype == torch.float16
    other = torch.nn.Sequential(torch.nn.Linear(64, 64))
    sparsify(other, 32, density=1.0)
    other.load_state_dict(sd)
    x = torch.randn(2, 64)
    with torch.no_grad():
        assert torch.equal(other(x), model(x))
    # A layer pickled before io_dtype existed takes its values' dtype.
    layer = fresh(9)
    del layer.__dict__["io_dtype"]
    state = layer.__getstate__()
    again = BlockSparseLinear.__new__(BlockSparseLinear)
    again.__setstate__(state)
    assert again.io_dtype == torch.float16


def test_float32_model_compiles_without_graph_breaks():
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 128))
    sparsify(model, 32, density=0.5)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    x = torch.randn(5, 128, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        assert torch.equal(compiled(x), model(x))


# ---------------------------------------------------------------------------------------------------------------
# No torch warning from sparsek's own calls


NO_WARNINGS_SCRIPT = textwrap.dedent("""
    import warnings
    import torch  # outside: torch's own import notices (e.g. numpy missing) are not sparsek's
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import sparsek
        from sparsek.nn import BlockSparseLinear, sparsify
        layer = BlockSparseLinear.from_dense(torch.nn.Linear(128, 64), 32, density=0.5, dtype=torch.float16)
        w = layer.to_bsr()  # the process's first BSR tensor: torch's once-per-process notices would come here
        x = torch.randn(3, 128).half()
        sparsek.linear(x, w, layer.bias)
        sparsek.bsr_mm(w, x.t().contiguous())
        BlockSparseLinear.from_bsr(w, layer.bias)
        rnd = BlockSparseLinear(128, 64, 32, 0.5, seed=1).float()
        rnd(torch.randn(2, 128))
        rnd.to_linear()
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 10))
        sparsify(model, 32, density=0.5)
        model(torch.randn(2, 64))
        model.half().float()
    for w in caught:
        print(f"WARNING {w.category.__name__}: {w.message} ({w.filename}:{w.lineno})")
    print("done", len(caught))
""")


def test_no_torch_warnings_from_sparsek_calls():
    """In a fresh interpreter (torch's BSR notices are once per process, so earlier tests may have used them up)
    with every warning shown and recorded: sparsek's calls, the first BSR tensor included, emit none. Does not rely
    on pyproject's filterwarnings (a subprocess does not read it)."""
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    out = subprocess.run([sys.executable, "-c", NO_WARNINGS_SCRIPT], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("done 0"), out.stdout + out.stderr
    assert "WARNING" not in out.stdout and "Warning" not in out.stderr, out.stdout + out.stderr


def test_no_warnings_in_process():
    """The same in this process, without pyproject's filters (``simplefilter("always")`` overrides them)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layer = BlockSparseLinear(128, 64, 32, 0.5, seed=1)
        w = layer.to_bsr()
        sparsek.linear(torch.randn(2, 128).half(), w, layer.bias)
        sparsify(torch.nn.Sequential(torch.nn.Linear(64, 64)), 32, density=0.5)
    assert not caught, [str(w.message) for w in caught]
