"""sparsek.distributed: column- and row-parallel BlockSparseLinear shards balanced by stored blocks, the MLP pairing,
parallelize_module styles, state dicts and errors, on two ranks.

The CPU variant runs everywhere: two processes (torch.multiprocessing.spawn), gloo, a file:// rendezvous, sparsek's
CPU backend computing the products. The CUDA variant (NCCL, one GPU per rank) runs the same cases where torch sees
two GPUs and is skipped otherwise; ``SPARSEK_REQUIRE_GPU=2`` turns that skip into a failure. To save start-up time
each variant spawns its two ranks once and runs every case in them (each case's outcome is recorded per rank and
reported by its own test below). The same cases run under torchrun::

    torchrun --nproc-per-node 2 python/tests/test_distributed.py --backend nccl

Every output is checked against the f64 product of the whole layer (test_nn's tolerance model: f32 accumulation
over the whole K, one rounding to the output type) and against the single-process layer on the same, fresh random
input.
"""

from __future__ import annotations

import io
import os
import sys

import pytest
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dist_runner  # noqa: E402
from conftest import UNIT_ROUNDOFF, activation64, assert_close, seed_for  # noqa: E402

from sparsek import distributed as sd  # noqa: E402
from sparsek.nn import BlockSparseLinear  # noqa: E402

WORLD = dist_runner.WORLD
ACTS = [None, "relu", "silu", "gelu_tanh"]
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
               "broadcast_object_list", "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
               "send", "recv", "isend", "irecv", "barrier", "reduce", "gather", "scatter")


# -----------------------------------------------------------------------------------------------------------------
# Helpers (run in each rank).


def make_layer(in_f, out_f, bs, dtype, gen, *, skew=None, bias=True, activation=None, density=0.5, device="cpu"):
    """A layer with normal values; ``skew="rows"``: block rows 0 and 1 full, every other row one block;
    ``skew="cols"``: the same for block columns; ``"even"``: every block row the same count."""
    r, c = out_f // bs, in_f // bs
    mask = torch.rand(r, c, generator=gen) < density
    if skew == "rows":
        mask[:] = False
        mask[:2, :] = True
        mask[torch.arange(2, r), torch.randint(0, c, (max(r - 2, 0),), generator=gen)] = True
    elif skew == "cols":
        mask[:] = False
        mask[:, :2] = True
        mask[torch.randint(0, r, (max(c - 2, 0),), generator=gen), torch.arange(2, c)] = True
    elif skew == "even":
        keep = max(1, c // 2)
        mask = torch.rand(r, c, generator=gen).argsort(dim=1) < keep
    crow = torch.zeros(r + 1, dtype=torch.int64)
    crow[1:] = mask.sum(1).cumsum(0)
    col = mask.nonzero()[:, 1]
    values = torch.randn(int(mask.sum()), bs, bs, generator=gen).to(dtype)
    b = (torch.randn(out_f, generator=gen) * 0.5).to(dtype) if bias else None
    layer = BlockSparseLinear(in_f, out_f, bs, values, crow, col, b, activation)
    return layer.to(device)


def small_pair(name, device):
    """(generator, up 64 -> 128 with SiLU, down 128 -> 64): bf16 16-blocks, seeded by ``name``; the generator goes
    on for the case's own draws."""
    gen = torch.Generator().manual_seed(seed_for(name))
    up = make_layer(64, 128, 16, torch.bfloat16, gen, activation="silu", device=device)
    down = make_layer(128, 64, 16, torch.bfloat16, gen, device=device)
    return gen, up, down


def reference(layer, x):
    """(f64 result, |x| @ |W|^T + |b|) of the whole layer on x."""
    x64 = x.detach().cpu().double().reshape(-1, layer.in_features)
    w64 = layer.to_dense().detach().cpu().double()
    b64 = torch.zeros(layer.out_features, dtype=torch.float64) if layer.bias is None else layer.bias.cpu().double()
    ref = activation64(x64 @ w64.t() + b64, layer.activation)
    return ref, x64.abs() @ w64.abs().t() + b64.abs()


def check(got, layer, x):
    """``got`` (the sharded result) within tolerance of the f64 whole-layer result, and so is the single-process
    layer's output on the same input."""
    ref, absp = reference(layer, x)
    with torch.no_grad():
        single = layer(x)
    assert got.shape == single.shape and got.dtype == single.dtype, (got.shape, single.shape, got.dtype)
    assert_close(got.reshape(-1, layer.out_features), ref, absp, layer.in_features, layer.activation)
    assert_close(single.reshape(-1, layer.out_features), ref, absp, layer.in_features, layer.activation)


class Counter:
    """Counts calls of torch.distributed's collectives (patched on the module, where sparsek.distributed looks them
    up) while active."""

    def __init__(self):
        self.calls: list[str] = []
        self._saved = {}

    def __enter__(self):
        for name in COLLECTIVES:
            fn = getattr(dist, name, None)
            if fn is None:
                continue
            self._saved[name] = fn

            def wrapped(*a, _fn=fn, _name=name, **k):
                self.calls.append(_name)
                return _fn(*a, **k)

            setattr(dist, name, wrapped)
        return self

    def __exit__(self, *exc):
        for name, fn in self._saved.items():
            setattr(dist, name, fn)


def gathered_nnzb(shard):
    parts = [None] * WORLD
    dist.all_gather_object(parts, shard.nnzb)
    return parts


# -----------------------------------------------------------------------------------------------------------------
# Cases: each takes (rank, device) and raises on failure.

CASES, case = dist_runner.registry()


def _layout_case(layout, bs, dtype, pattern, k):
    def run(rank, device):
        gen = torch.Generator().manual_seed(seed_for("dist", layout, bs, dtype, pattern))
        bias, act = (k % 2 == 0), ACTS[k % 4]
        feats = 8 * bs if bs <= 32 else 4 * bs
        skew = None if pattern == "uniform" else ("rows" if layout == "column" else "cols")
        layer = make_layer(feats, feats, bs, dtype, gen, skew=skew, bias=bias, activation=act, device=device)
        x = torch.randn(3, 5, feats, generator=gen).to(dtype).to(device)
        if layout == "column":
            shard = sd.column_parallel(layer)
            with torch.no_grad():
                got = shard(x)
                local = sd.column_parallel(layer, gather_output=False)(x)
                full = layer(x)
            check(got, layer, x)
            # This rank's features: bit for bit the single-process layer's (same blocks, same order per row).
            feats_r = shard.partition.features(rank).to(device)
            assert torch.equal(local, full.index_select(-1, feats_r))
            assert torch.equal(got, full)
        else:
            shard = sd.row_parallel(layer)
            feats_r = shard.partition.features(rank).to(device)
            with torch.no_grad():
                got = shard(x.index_select(-1, feats_r))
                whole_in = sd.row_parallel(layer, input_is_parallel=False)(x)
            check(got, layer, x)
            assert torch.equal(whole_in, got)
        # Reports: this rank's blocks, all ranks' add up, max / mean as reported.
        parts = gathered_nnzb(shard)
        assert sum(parts) == layer.nnzb and parts[rank] == shard.nnzb
        assert list(shard.partition.loads) == parts
        assert abs(shard.imbalance - max(parts) * WORLD / max(sum(parts), 1)) < 1e-12 or sum(parts) == 0
    return run


_k = 0
for _layout in ("column", "row"):
    for _bs in (16, 32, 64, 128):
        for _dtype in (torch.float16, torch.bfloat16):
            for _pattern in ("uniform", "skewed"):
                case(f"{_layout}-bs{_bs}-{str(_dtype)[6:]}-{_pattern}")(_layout_case(_layout, _bs, _dtype, _pattern,
                                                                                    _k))
                _k += 1


def _reduce_in_io_dtype(bs, dtype):
    def run(rank, device):
        # reduce_dtype = the layer's 16-bit type: each rank's partial rounded to it, the sum, bias and SiLU in it
        # (three more roundings than the float32 reduction: rounded_inputs), the output row-major as ever.
        gen = torch.Generator().manual_seed(seed_for("reduce16", bs, dtype))
        feats = 8 * bs if bs <= 32 else 4 * bs
        layer = make_layer(feats, 2 * feats, bs, dtype, gen, skew="cols", bias=True, activation="silu",
                           device=device)
        x = torch.randn(3, 5, feats, generator=gen).to(dtype).to(device)
        shard = sd.row_parallel(layer, input_is_parallel=False, reduce_dtype=dtype)
        assert shard.reduce_dtype == dtype
        with torch.no_grad():
            got = shard(x)
        assert got.dtype == dtype and got.shape == (3, 5, 2 * feats) and got.is_contiguous()
        ref, absp = reference(layer, x)
        assert_close(got.reshape(-1, 2 * feats), ref, absp, feats, "silu",
                     rounded_inputs=3 * UNIT_ROUNDOFF[dtype])
        # The pair: down's reduction in the 16-bit type through shard_mlp too, and a float32 layer refuses it.
        up = BlockSparseLinear(feats, 2 * feats, bs, 0.5, seed=1, dtype=dtype, device=device)
        down = BlockSparseLinear(2 * feats, feats, bs, 0.5, seed=2, dtype=dtype, device=device)
        u, d = sd.shard_mlp(up, down, reduce_dtype=dtype)
        assert d.reduce_dtype == dtype and u.out_features == d.in_features
        with torch.no_grad():
            got = d(u(x))
        ref, absp = reference(down, up(x).detach())
        assert_close(got.reshape(-1, feats), ref, absp, 2 * feats, None, rounded_inputs=3 * UNIT_ROUNDOFF[dtype])
        wide = BlockSparseLinear(feats, feats, bs, 0.5, seed=3, dtype=dtype, device=device).float()
        with pytest.raises(ValueError, match="reduce_dtype"):
            sd.row_parallel(wide, reduce_dtype=dtype)
    return run


for _bs in (16, 64):
    for _dtype in (torch.float16, torch.bfloat16):
        case(f"row-reduce-in-{str(_dtype)[6:]}-bs{_bs}")(_reduce_in_io_dtype(_bs, _dtype))


def _seqpar_case(bs, dtype, comm, reduce16):
    def run(rank, device):
        # The sequence-parallel pair: this rank's tokens in, this rank's tokens out, against the f64 product of the
        # whole down layer on the single-process hidden features (the partials in float32, or rounded to the
        # 16-bit type: three more roundings, as the row-parallel reduction in it).
        gen = torch.Generator().manual_seed(seed_for("seqpar", bs, dtype, comm, reduce16))
        feats = 8 * bs if bs <= 32 else 4 * bs
        up = make_layer(feats, 2 * feats, bs, dtype, gen, skew="rows", activation="silu", device=device)
        down = make_layer(2 * feats, feats, bs, dtype, gen, bias=True, activation="gelu_tanh" if bs == 16 else None,
                          device=device)
        mlp = sd.sequence_parallel_mlp(up, down, reduce_dtype=dtype if reduce16 else None, comm=comm)
        assert mlp.up.partition.ranks == mlp.down.partition.ranks and mlp.world_size == WORLD
        nccl = torch.device(device).type == "cuda"
        if comm == "symmetric" and not nccl:
            # Symmetric memory is CUDA's: asked for on the CPU, a clear error.
            with torch.no_grad(), pytest.raises(RuntimeError, match="symmetric"):
                mlp(torch.randn(4, feats).to(dtype))
            return
        for lead in ((WORLD * 3, 5), (WORLD * 8,), (WORLD * 3, 5)):
            x = torch.randn(*lead, feats, generator=gen).to(dtype).to(device)
            n0 = lead[0] // WORLD
            with torch.no_grad(), Counter() as c:
                got = mlp(x[rank * n0:(rank + 1) * n0])
                h = up(x)
            rows = got.numel() // feats
            assert got.shape == (n0, *lead[1:], feats) and got.dtype == dtype and got.is_contiguous()
            ref, absp = reference(down, h)
            mine = slice(rank * rows, (rank + 1) * rows)
            assert_close(got.reshape(-1, feats), ref[mine], absp[mine], 2 * feats, down.activation,
                         rounded_inputs=3 * UNIT_ROUNDOFF[dtype] if reduce16 else 0.0)
            if comm == "symmetric":
                # Symmetric memory: no collective at all (the first call of a new, larger shape agrees on the
                # buffers with one all-reduce).
                assert mlp._symm.failed is None, mlp._symm.failed
                assert mlp._symm.exchange is not None and c.calls in ([], ["all_reduce"]), c.calls
            elif nccl:
                assert c.calls == ["all_gather_into_tensor", "reduce_scatter_tensor"], c.calls
            else:
                assert mlp._symm.exchange is None and c.calls == ["all_gather", "all_reduce"], c.calls
        # "auto" takes the collectives below SYMMETRIC_MIN_TOKENS_SEQPAR tokens (these cases' 16-30).
        auto = sd.sequence_parallel_mlp(up, down, reduce_dtype=dtype if reduce16 else None)
        with torch.no_grad(), Counter() as c:
            auto(x[rank * n0:(rank + 1) * n0])
        assert c.calls == (["all_gather_into_tensor", "reduce_scatter_tensor"] if nccl
                           else ["all_gather", "all_reduce"]), c.calls
    return run


for _bs in (16, 64):
    for _dtype in (torch.float16, torch.bfloat16):
        for _comm in ("symmetric", "nccl"):
            for _r16 in (False, True):
                case(f"seqpar-mlp-bs{_bs}-{str(_dtype)[6:]}-{_comm}-reduce{'16' if _r16 else '32'}")(
                    _seqpar_case(_bs, _dtype, _comm, _r16))


def _row_symmetric_case(bs, dtype, reduce16):
    def run(rank, device):
        # The row-parallel shard summing through symmetric memory (reduce-scatter by the kernel's stores into the
        # peer, all-gather by the copy engines): token counts that split unevenly and leave a rank no rows.
        gen = torch.Generator().manual_seed(seed_for("row-symmetric", bs, dtype, reduce16))
        feats = 8 * bs if bs <= 32 else 4 * bs
        layer = make_layer(feats, 2 * feats, bs, dtype, gen, skew="cols", bias=True, activation="silu",
                           device=device)
        rdt = dtype if reduce16 else None
        shard = sd.row_parallel(layer, input_is_parallel=False, reduce_dtype=rdt, comm="symmetric")
        if torch.device(device).type != "cuda":
            with torch.no_grad(), pytest.raises(RuntimeError, match="symmetric"):
                shard(torch.randn(3, feats).to(dtype))
            return
        for lead in ((3, 5), (1,), (32,), (7, 1)):
            x = torch.randn(*lead, feats, generator=gen).to(dtype).to(device)
            with torch.no_grad(), Counter() as c:
                got = shard(x)
            assert got.shape == (*lead, 2 * feats) and got.dtype == dtype and got.is_contiguous()
            ref, absp = reference(layer, x)
            assert_close(got.reshape(-1, 2 * feats), ref, absp, feats, "silu",
                         rounded_inputs=3 * UNIT_ROUNDOFF[dtype] if reduce16 else 0.0)
            assert shard._symm.failed is None and c.calls in ([], ["all_reduce"]), (c.calls, shard._symm.failed)
        # Every rank holds the same output (the all-gather put each rank's chunk everywhere).
        parts = [torch.empty_like(got) for _ in range(WORLD)]
        dist.all_gather(parts, got.contiguous())
        assert all(torch.equal(p, got) for p in parts)
        # 32 tokens outgrew the first buffers (8 rows a slot): the old ones are kept (a graph may hold them).
        assert shard._symm.exchange.cap == 16 and len(shard._symm.retired) == 1
        # "auto" takes NCCL's all-reduce below SYMMETRIC_MIN_TOKENS tokens.
        auto = sd.row_parallel(layer, input_is_parallel=False, reduce_dtype=rdt)
        with torch.no_grad(), Counter() as c:
            auto(x)
        assert c.calls == ["all_reduce"] and auto._symm.exchange is None, c.calls
    return run


for _bs in (16, 64):
    for _dtype in (torch.float16, torch.bfloat16):
        for _r16 in (False, True):
            case(f"row-symmetric-bs{_bs}-{str(_dtype)[6:]}-reduce{'16' if _r16 else '32'}")(
                _row_symmetric_case(_bs, _dtype, _r16))


def _sp_shards_case(dtype, reduce16):
    def run(rank, device):
        """Sequence parallelism through the shards' ``sequence_dim`` (NCCL's, or gloo's, collectives): up takes
        this rank's tokens of a (batch, sequence, features) input and all-gathers them along the sequence, down
        reduce-scatters its partials back along it; then the same through ``paired_styles`` with DTensors in and
        out, as torch's ``PrepareModuleInput`` and ``use_local_output=False`` make them."""
        import copy

        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Replicate, Shard
        from torch.distributed.tensor.parallel import parallelize_module

        gen = torch.Generator().manual_seed(seed_for("sp-shards", dtype, reduce16))
        up = make_layer(64, 128, 16, dtype, gen, skew="rows", activation="silu", device=device)
        down = make_layer(128, 64, 16, dtype, gen, activation="relu", device=device)
        rdt = dtype if reduce16 else None
        rounded = 3 * UNIT_ROUNDOFF[dtype] if reduce16 else 0.0
        nccl = torch.device(device).type == "cuda"
        gather, scatter = ("all_gather_into_tensor", "reduce_scatter_tensor") if nccl else ("all_gather", "all_reduce")
        seq = 3
        x = torch.randn(2, WORLD * seq, 64, generator=gen).to(dtype).to(device)
        mine = slice(rank * seq, (rank + 1) * seq)
        with torch.no_grad():
            h = up(x)  # the single process's hidden, every token
        ref, absp = reference(down, h)

        def rows(t):  # this rank's tokens of a (2 * WORLD * seq, 64) reference, as (2 * seq, 64)
            return t.reshape(2, WORLD * seq, 64)[:, mine].reshape(-1, 64)

        ref, absp = rows(ref), rows(absp)
        p = sd.shard_mlp(up, down, strategy="greedy")[0].pair_partition
        assert not p.contiguous
        up_s = sd.column_parallel(up, gather_output=False, partition=p, sequence_dim=1)
        down_s = sd.row_parallel(down, partition=p, reduce_dtype=rdt, sequence_dim=-2)
        assert "sequence_dim=1" in repr(up_s) and "sequence_dim=-2" in repr(down_s)
        with torch.no_grad(), Counter() as c:
            got = down_s(up_s(x[:, mine]))
        assert got.shape == (2, seq, 64) and got.dtype == dtype and got.is_contiguous(), (got.shape, got.dtype)
        assert c.calls == [gather, scatter], c.calls
        assert_close(got.reshape(-1, 64), ref, absp, 128, "relu", rounded_inputs=rounded)
        # Two-dimensional tokens (tokens, features), split along dim 0.
        up0 = sd.column_parallel(up, gather_output=False, partition=p, sequence_dim=0)
        down0 = sd.row_parallel(down, partition=p, reduce_dtype=rdt, sequence_dim=0)
        x2 = x.transpose(0, 1).reshape(-1, 64)  # sequence-major: rank r's tokens are rows r * 2 * seq onwards
        with torch.no_grad():
            got0 = down0(up0(x2[rank * 2 * seq:(rank + 1) * 2 * seq]))
        assert torch.equal(got0, got.transpose(0, 1).reshape(-1, 64)), "dims 0 and 1 give the same sums"

        # The styles: a replicated DTensor in (PrepareModuleInput's), a DTensor sharded along the sequence out.
        mesh = init_device_mesh(device, (WORLD,))
        m = torch.nn.Module()
        m.up, m.down = copy.deepcopy(up), copy.deepcopy(down)
        up_style, down_style = sd.paired_styles(output_layouts=Shard(1), use_local_output=False, strategy="greedy")
        parallelize_module(m, mesh, {"up": up_style, "down": down_style})
        assert m.up.partition.ranks == up_s.partition.ranks
        xd = DTensor.from_local(x[:, mine], mesh, [Shard(1)], run_check=False)
        with torch.no_grad():
            yd = m.down(m.up(xd.redistribute(mesh, [Replicate()])))
            yd2 = m.down(m.up(xd))  # sharded along the sequence: up gathers it (DTensor's collective) first
        assert isinstance(yd, DTensor) and tuple(yd.placements) == (Shard(1),), type(yd)
        assert yd.shape == (2, WORLD * seq, 64) and yd.to_local().shape == (2, seq, 64)
        assert_close(yd.to_local().reshape(-1, 64), ref, absp, 128, "relu")
        assert torch.equal(yd2.to_local(), yd.to_local())
        with torch.no_grad():
            whole = yd.full_tensor()
        assert torch.equal(whole[:, mine], yd.to_local())
        # And up given the sequence itself (input_layouts=Shard(1)): a DTensor sharded so is taken as it is.
        m2 = torch.nn.Module()
        m2.up, m2.down = copy.deepcopy(up), copy.deepcopy(down)
        up_style, down_style = sd.paired_styles(input_layouts=Shard(1), output_layouts=Shard(1), strategy="greedy")
        parallelize_module(m2, mesh, {"up": up_style, "down": down_style})
        with torch.no_grad(), Counter() as c:
            y_local = m2.down(m2.up(xd))
        assert type(y_local) is torch.Tensor and c.calls == [gather, scatter], (type(y_local), c.calls)
        assert torch.equal(y_local, yd.to_local())
        # The single-layer styles: up gathering the tokens and its features (a whole hidden on every rank), down
        # taking that whole input and returning a replicated DTensor.
        m3 = torch.nn.Module()
        m3.up, m3.down = copy.deepcopy(up), copy.deepcopy(down)
        parallelize_module(m3, mesh, {"up": sd.ColwiseBlockSparse(input_layouts=Shard(1), gather_output=True),
                                      "down": sd.RowwiseBlockSparse(input_is_parallel=False, use_local_output=False)})
        with torch.no_grad():
            h_all = m3.up(x[:, mine])
            y_rep = m3.down(h_all)
        assert h_all.shape == (2, WORLD * seq, 128) and torch.equal(h_all, h), "gathered tokens and features"
        assert isinstance(y_rep, DTensor) and tuple(y_rep.placements) == (Replicate(),), type(y_rep)
        ref_all, absp_all = reference(down, h)
        assert_close(y_rep.to_local().reshape(-1, 64), ref_all, absp_all, 128, "relu")
    return run


for _dtype in (torch.float16, torch.bfloat16):
    for _r16 in (False, True):
        case(f"sp-shards-{str(_dtype)[6:]}-reduce{'16' if _r16 else '32'}")(_sp_shards_case(_dtype, _r16))


@case("sp-errors")
def _sp_errors(rank, device):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

    gen, up, down = small_pair("sp-errors", device)
    with pytest.raises(ValueError, match="features' dimension"):
        sd.column_parallel(up, sequence_dim=-1)
    with pytest.raises(TypeError, match="sequence_dim"):
        sd.row_parallel(down, input_is_parallel=False, sequence_dim="1")
    with pytest.raises(ValueError, match="splits the features"):
        sd.RowwiseBlockSparse(output_layouts=Shard(-1))
    with pytest.raises(ValueError, match="Replicate"):
        sd.ColwiseBlockSparse(input_layouts=Partial())
    with pytest.raises(ValueError, match="splits the features"):
        sd.paired_styles(input_layouts=Shard(-1))
    # Refused before any collective, on every rank alike (no rank waits in a collective the other skipped).
    row = sd.row_parallel(down, input_is_parallel=False, sequence_dim=0)
    with torch.no_grad(), Counter() as c:
        with pytest.raises(ValueError, match="split evenly"):
            row(torch.randn(5, 128, device=device).bfloat16())
        with pytest.raises(ValueError, match="not a token dimension"):
            sd.column_parallel(up, sequence_dim=2)(torch.randn(4, 64, device=device).bfloat16())
        with pytest.raises(ValueError, match="not a token dimension"):
            row1 = sd.row_parallel(down, input_is_parallel=False, sequence_dim=1)
            row1(torch.randn(4, 128, device=device).bfloat16())
    assert c.calls == [], c.calls
    mesh = init_device_mesh(device, (WORLD,))
    h = torch.randn(4, 128, generator=gen).bfloat16().to(device)
    parallel = sd.row_parallel(down, partition=sd.shard_mlp(up, down)[0].pair_partition)
    with torch.no_grad():
        with pytest.raises(ValueError, match="input_is_parallel=False"):
            parallel(DTensor.from_local(h, mesh, [Replicate()], run_check=False))
        with pytest.raises(ValueError, match="not a DTensor placed"):
            parallel(DTensor.from_local(h[:, :64], mesh, [Shard(1)], run_check=False))
        # The whole input as a DTensor is what input_is_parallel=False takes, however it is placed.
        whole = sd.row_parallel(down, input_is_parallel=False)
        want = whole(h)
        assert torch.equal(whole(DTensor.from_local(h, mesh, [Replicate()], run_check=False)), want)
        split = DTensor.from_local(h[:, rank * 64:(rank + 1) * 64], mesh, [Shard(1)], run_check=False)
        assert torch.equal(whole(split), want)
        # A sequence split unevenly (7 tokens: DTensor's 4 + 3) cannot be all-gathered in equal shares.
        up_seq = sd.column_parallel(up, sequence_dim=0)
        x7 = torch.randn(7, 64, generator=torch.Generator().manual_seed(7)).bfloat16().to(device)
        with pytest.raises(ValueError, match="not split evenly"):
            up_seq(DTensor.from_local(x7[:4] if rank == 0 else x7[4:], mesh, [Shard(0)], run_check=False,
                                      shape=(7, 64), stride=(64, 1)))


class GatedMLP(torch.nn.Module):
    """LLaMA's MLP: ``down_proj(silu(gate_proj(x)) * up_proj(x))``, the activation applied between (not fused)."""

    def __init__(self, gate, up, down):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = gate, up, down

    def hidden(self, x):
        return torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x)

    def forward(self, x):
        return self.down_proj(self.hidden(x))


def gated_layers(dtype, gen, device):
    """gate 64 -> 128 (skewed block rows), up 64 -> 128 (its own pattern), down 128 -> 64: 16-blocks."""
    return (make_layer(64, 128, 16, dtype, gen, skew="rows", device=device),
            make_layer(64, 128, 16, dtype, gen, device=device),
            make_layer(128, 64, 16, dtype, gen, device=device))


@case("gated-mlp")
def _gated_mlp(rank, device):
    """shard_gated_mlp and gated_styles: one partition of the hidden dimension balanced on the three layers' blocks;
    each rank's gated hidden is its features of the single process's, the sharded output the whole product's
    (f64), with and without sequence parallelism through parallelize_module."""
    import copy

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleInput, parallelize_module

    nccl = torch.device(device).type == "cuda"
    for dtype in (torch.float16, torch.bfloat16):
        gen = torch.Generator().manual_seed(seed_for("gated-mlp", dtype))
        gate, up, down = gated_layers(dtype, gen, device)
        single = GatedMLP(gate, up, down)
        x = torch.randn(2, 6, 64, generator=gen).to(dtype).to(device)
        with torch.no_grad():
            h_single = single.hidden(x)
        g_s, u_s, d_s = sd.shard_gated_mlp(gate, up, down, strategy="greedy")
        p = g_s.pair_partition
        assert not p.contiguous and p is u_s.pair_partition is d_s.pair_partition
        assert u_s.partition.ranks == g_s.partition.ranks == d_s.partition.ranks == p.ranks
        # The joint loads: each hidden block's gate row, up row and down column.
        loads = sd.block_row_loads(gate) + sd.block_row_loads(up) + sd.block_col_loads(down)
        assert tuple(p.loads) == tuple(int(loads[list(r)].sum()) for r in p.ranks), (p.loads, loads)
        feats = p.features(rank).to(device)
        with torch.no_grad(), Counter() as c:
            h = GatedMLP(g_s, u_s, d_s).hidden(x)
            y = d_s(h)
        assert c.calls == ["all_reduce"], c.calls
        assert torch.equal(h, h_single.index_select(-1, feats)), "each rank's hidden is its features of the whole"
        check(y, down, h_single)
        # parallelize_module with gated_styles, as a plan names a LLaMA block's MLP.
        mesh = init_device_mesh(device, (WORLD,))
        block = torch.nn.Module()
        block.mlp = GatedMLP(*(copy.deepcopy(m) for m in (gate, up, down)))
        g_style, u_style, d_style = sd.gated_styles(strategy="greedy")
        parallelize_module(block, mesh, {"mlp.gate_proj": g_style, "mlp.up_proj": u_style, "mlp.down_proj": d_style})
        assert isinstance(block.mlp.gate_proj, sd.ColumnParallelBlockSparseLinear)
        assert isinstance(block.mlp.down_proj, sd.RowParallelBlockSparseLinear)
        assert block.mlp.up_proj.partition.ranks == p.ranks
        with torch.no_grad():
            assert torch.equal(block.mlp(x), y)
        # Sequence parallel: torch's PrepareModuleInput gathers the tokens once; down reduce-scatters them.
        block = torch.nn.Module()
        block.mlp = GatedMLP(*(copy.deepcopy(m) for m in (gate, up, down)))
        g_style, u_style, d_style = sd.gated_styles(strategy="greedy", output_layouts=Shard(1))
        parallelize_module(block, mesh, {
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.gate_proj": g_style, "mlp.up_proj": u_style, "mlp.down_proj": d_style})
        with torch.no_grad(), Counter() as c:
            y_seq = block.mlp(x[:, rank * 3:(rank + 1) * 3])
        assert y_seq.shape == (2, 3, 64)
        assert c.calls.count("reduce_scatter_tensor" if nccl else "all_reduce") == 1, c.calls
        ref, absp = reference(down, h_single)
        mine = torch.arange(6).reshape(1, 6).expand(2, 6)[:, rank * 3:(rank + 1) * 3] + torch.arange(2)[:, None] * 6
        assert_close(y_seq.reshape(-1, 64), ref[mine.reshape(-1)], absp[mine.reshape(-1)], 128, None)
    # A gate that cannot be multiplied with up feature by feature is refused before anything is built.
    gen = torch.Generator().manual_seed(seed_for("gated-mlp-errors"))
    gate, up, down = gated_layers(torch.bfloat16, gen, device)
    with pytest.raises(ValueError, match="gate"):
        sd.shard_gated_mlp(make_layer(64, 256, 16, torch.bfloat16, gen, device=device), up, down)
    with pytest.raises(ValueError, match="gate"):
        sd.shard_gated_mlp(make_layer(64, 128, 32, torch.bfloat16, gen, device=device), up, down)


@case("dcp-checkpoint")
def _dcp(rank, device):
    """torch.distributed.checkpoint: a sharded MLP saved through dcp_state_dict and loaded into another model on
    the same partition gives every rank its own shards back; saved as model.state_dict() (plain tensors under one
    name on every rank, of which the checkpoint keeps one copy), the load is refused wherever a rank would get
    another's shard, never silently wrong."""
    import copy
    import shutil
    import tempfile

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    gen = torch.Generator().manual_seed(seed_for("dcp"))
    up = make_layer(64, 256, 16, torch.bfloat16, gen, skew="rows", activation="relu", device=device)
    down = make_layer(256, 64, 16, torch.bfloat16, gen, device=device)
    # The checkpoint fills tensors in place: the model loaded into has the same structure, other values.
    other_up, other_down = copy.deepcopy(up), copy.deepcopy(down)
    with torch.no_grad():
        for layer in (other_up, other_down):
            layer.values.copy_(torch.randn(layer.values.shape, generator=gen))
            layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen))

    def model(u, d, p=None):
        m = torch.nn.Module()
        m.norm = torch.nn.LayerNorm(64).to(device)  # a replicated module beside the shards
        m.mlp = torch.nn.Module()
        m.mlp.up, m.mlp.down = sd.shard_mlp(u, d, strategy="greedy", partition=p)
        return m

    src = model(up, down)
    p = src.mlp.up.pair_partition
    assert not p.contiguous
    with torch.no_grad():
        src.norm.weight.add_(1.0)
    dirs = [tempfile.mkdtemp() if rank == 0 else None]
    dist.broadcast_object_list(dirs, src=0)
    root = dirs[0]
    try:
        state = sd.dcp_state_dict(src)
        assert any(k.endswith(f"values@rank{rank}of{WORLD}") for k in state), sorted(state)
        dcp.save(state, checkpoint_id=os.path.join(root, "tagged"))
        dst = model(other_up, other_down, p)
        state = sd.dcp_state_dict(dst)
        dcp.load(state, checkpoint_id=os.path.join(root, "tagged"))
        sd.load_dcp_state_dict(dst, state)
        for k, v in src.state_dict().items():
            if isinstance(v, torch.Tensor):
                assert torch.equal(dst.state_dict()[k], v), k
        # Another rank's entries are refused by name.
        wrong = {k.replace(f"@rank{rank}of", f"@rank{1 - rank}of"): v for k, v in sd.dcp_state_dict(src).items()}
        with pytest.raises(ValueError, match="rank"):
            sd.load_dcp_state_dict(dst, wrong)
        # The plain state dict through the checkpoint, which keeps one copy of each shard entry: on the skewed
        # pair the checkpoint's own shape check may refuse it; on layers whose shards have the same shapes on every
        # rank only the shards' _extra_state can.
        gen_even = torch.Generator().manual_seed(seed_for("dcp-even"))
        even = [make_layer(64, 256, 16, torch.bfloat16, gen_even, skew="even", device=device),
                make_layer(256, 64, 16, torch.bfloat16, gen_even, skew="even", device=device)]
        even_other = [copy.deepcopy(layer) for layer in even]
        with torch.no_grad():
            for layer in even_other:
                layer.values.copy_(torch.randn(layer.values.shape, generator=gen_even))
        for tag, (s_up, s_down), (d_up, d_down) in (("skewed", (up, down), (other_up, other_down)),
                                                    ("even", even, even_other)):
            src_t = model(s_up, s_down)
            part = src_t.mlp.up.pair_partition
            if tag == "even":
                shapes = [None] * WORLD
                dist.all_gather_object(shapes, [tuple(t.shape) for t in src_t.state_dict().values()
                                                if isinstance(t, torch.Tensor)])
                assert shapes[0] == shapes[1], shapes  # the checkpoint's shape check cannot tell the ranks apart
            dcp.save(src_t.state_dict(), checkpoint_id=os.path.join(root, f"plain-{tag}"))
            dst = model(d_up, d_down, part)
            state = dst.state_dict()
            try:
                dcp.load(state, checkpoint_id=os.path.join(root, f"plain-{tag}"))
            except CheckpointException as e:  # the checkpoint refuses another rank's shape (on every rank)
                assert "Size mismatch" in str(e), e
                outcome = "refused by the checkpoint"
            else:
                try:
                    dst.load_state_dict(state)
                    same = all(torch.equal(dst.state_dict()[k], v) for k, v in src_t.state_dict().items()
                               if isinstance(v, torch.Tensor))
                    outcome = "own" if same else "SILENTLY WRONG"
                except RuntimeError as e:
                    assert "another rank's shard" in str(e) or "mismatched shard state dict" in str(e), e
                    outcome = "refused"
            outcomes = [None] * WORLD
            dist.all_gather_object(outcomes, outcome)
            assert "SILENTLY WRONG" not in outcomes and outcomes != ["own"] * WORLD, (tag, outcomes)
            if tag == "even":
                assert "refused" in outcomes, outcomes
                # What the checkpoint's choice of copies can hand a rank: its own _extra_state with the other
                # rank's tensors, of the same shapes here; only the fingerprint tells them apart.
                parts = [None] * WORLD
                dist.all_gather_object(parts, {k: v.cpu() for k, v in src_t.mlp.up.state_dict().items()
                                               if isinstance(v, torch.Tensor)})
                mixed = parts[1 - rank] | {"_extra_state": src_t.mlp.up.get_extra_state()}
                before = dst.mlp.up.values.clone()
                with pytest.raises(RuntimeError, match="another rank's shard"):
                    dst.mlp.up.load_state_dict(mixed)
                assert torch.equal(dst.mlp.up.values, before), "a refused load changes nothing"
                dst.mlp.up.load_state_dict(parts[rank] | {"_extra_state": src_t.mlp.up.get_extra_state()})
    finally:
        dist.barrier()
        if rank == 0:
            shutil.rmtree(root, ignore_errors=True)


@case("seqpar-mlp-state-dicts")
def _seqpar_state(rank, device):
    # Per rank (the shards' own state) and whole (the layers'), saved and loaded back.
    gen = torch.Generator().manual_seed(seed_for("seqpar-state"))
    up = make_layer(64, 128, 16, torch.bfloat16, gen, skew="rows", activation="silu", device=device)
    down = make_layer(128, 64, 16, torch.bfloat16, gen, device=device)
    mlp = sd.sequence_parallel_mlp(up, down, comm="nccl")
    x = torch.randn(WORLD * 3, 64, generator=gen).bfloat16().to(device)
    mine = x[rank * 3:(rank + 1) * 3]
    with torch.no_grad():
        before = mlp(mine)
    whole = mlp.full_state_dict()
    assert set(whole) == {f"{p}.{k}" for p in ("up", "down") for k in up.state_dict()}
    for k, v in up.state_dict().items():
        assert torch.equal(whole[f"up.{k}"].cpu(), v.cpu()), k
    for k, v in down.state_dict().items():
        assert torch.equal(whole[f"down.{k}"].cpu(), v.cpu()), k
    mine_state = {k: v.clone() if torch.is_tensor(v) else v for k, v in mlp.state_dict().items()}
    # Other weights of the same shapes, then each way back.
    other_up = make_layer(64, 128, 16, torch.bfloat16, gen, activation="silu", device=device)
    other_down = make_layer(128, 64, 16, torch.bfloat16, gen, device=device)
    mlp.load_full_state_dict({f"up.{k}": v for k, v in other_up.state_dict().items()}
                             | {f"down.{k}": v for k, v in other_down.state_dict().items()})
    with torch.no_grad():
        ref, absp = reference(other_down, other_up(x))
        got = mlp(mine)
    assert_close(got.reshape(-1, 64), ref[rank * 3:(rank + 1) * 3], absp[rank * 3:(rank + 1) * 3], 128, None)
    mlp.load_full_state_dict(whole)
    with torch.no_grad():
        assert torch.equal(mlp(mine), before)
    mlp.load_full_state_dict({f"up.{k}": v for k, v in other_up.state_dict().items()}
                             | {f"down.{k}": v for k, v in other_down.state_dict().items()})
    mlp.load_state_dict(mine_state)
    with torch.no_grad():
        assert torch.equal(mlp(mine), before)
    with pytest.raises(ValueError, match="unexpected key"):
        mlp.load_full_state_dict({"mid.values": whole["up.values"]})


@case("seqpar-mlp-errors")
def _seqpar_errors(rank, device):
    gen, up, down = small_pair("seqpar-errors", device)
    with pytest.raises(ValueError, match="comm"):
        sd.sequence_parallel_mlp(up, down, comm="mpi")
    mlp = sd.sequence_parallel_mlp(up, down)
    with pytest.raises(ValueError, match="features"):
        mlp(torch.randn(4, 32, device=device).bfloat16())
    _, d2 = sd.shard_mlp(up, down)
    wide = make_layer(64, 256, 16, torch.bfloat16, gen, device=device)
    with pytest.raises(ValueError, match="one partition"):
        sd.SequenceParallelMLP(sd.column_parallel(wide, gather_output=False), d2)
    with pytest.raises(ValueError, match="comm"):
        sd.row_parallel(down, comm="gloo")


@case("io-dtype-float32")
def _io_dtype(rank, device):
    gen = torch.Generator().manual_seed(seed_for("io32"))
    layer = make_layer(128, 64, 16, torch.float16, gen, activation="relu", device=device).float()
    x = torch.randn(4, 128, generator=gen).to(device)
    with torch.no_grad():
        for shard in (sd.column_parallel(layer), sd.row_parallel(layer, input_is_parallel=False)):
            got = shard(x)
            assert got.dtype == torch.float32
            ref, absp = reference(layer, x.half())
            assert_close(got.half(), ref, absp, 128, "relu")


@case("imbalance-skewed-contiguous-vs-permuted")
def _imbalance(rank, device):
    gen = torch.Generator().manual_seed(seed_for("imbalance"))
    # 16 block rows: rows 0 and 1 full (16 blocks each), the others one block each.
    layer = make_layer(256, 256, 16, torch.float16, gen, skew="rows", bias=True, device=device)
    loads = sd.block_row_loads(layer).tolist()
    assert loads[:2] == [16, 16] and loads[2:] == [1] * 14
    equal = sd.column_parallel(layer, strategy="equal")
    contiguous = sd.column_parallel(layer, strategy="contiguous")
    auto = sd.column_parallel(layer)
    # equal ranges: 32 + 6 vs 8 blocks; the best contiguous split: [0] | [1..15] = 16 vs 30; permuted: 23 vs 23.
    assert equal.partition.loads == (38, 8) and abs(equal.imbalance - 38 / 23) < 1e-12
    assert contiguous.partition.loads == (16, 30) and abs(contiguous.imbalance - 30 / 23) < 1e-12
    assert auto.partition.strategy == "greedy" and not auto.partition.contiguous
    assert auto.partition.loads == (23, 23) and auto.imbalance == 1.0
    assert gathered_nnzb(auto) == [23, 23]
    # The permuted shard's gathered output is in feature order.
    x = torch.randn(6, 256, generator=gen).half().to(device)
    with torch.no_grad():
        check(auto(x), layer, x)
        assert torch.equal(auto(x), layer(x))
    # An even pattern stays contiguous (max / mean within the threshold).
    even = make_layer(256, 256, 16, torch.float16, gen, skew="even", device=device)
    s = sd.column_parallel(even)
    assert s.partition.contiguous and s.partition.strategy == "contiguous" and s.imbalance <= sd.DEFAULT_THRESHOLD
    # The same for block columns (row layout).
    cl = make_layer(256, 128, 16, torch.bfloat16, gen, skew="cols", device=device)
    rs = sd.row_parallel(cl)
    eq = sd.row_parallel(cl, strategy="equal")
    assert rs.imbalance < eq.imbalance and rs.imbalance <= 1.1, (rs.imbalance, eq.imbalance)
    xr = torch.randn(6, 256, generator=gen).bfloat16().to(device)
    with torch.no_grad():
        check(rs(xr.index_select(-1, rs.partition.features(rank).to(device))), cl, xr)


@case("pair-no-communication-between")
def _pair(rank, device):
    for skew in (None, "rows"):
        gen = torch.Generator().manual_seed(seed_for("pair", skew))
        up = make_layer(128, 512, 32, torch.bfloat16, gen, skew=skew, activation="silu", device=device)
        down = make_layer(512, 128, 32, torch.bfloat16, gen, bias=True, device=device)
        up_s, down_s = sd.shard_mlp(up, down)
        assert up_s.partition.ranks == down_s.partition.ranks == up_s.pair_partition.ranks
        joint = (sd.block_row_loads(up) + sd.block_col_loads(down)).tolist()
        assert up_s.pair_partition.loads == tuple(sum(joint[i] for i in r) for r in up_s.partition.ranks)
        if skew:
            assert not up_s.pair_partition.contiguous
        x = torch.randn(2, 7, 128, generator=gen).bfloat16().to(device)
        with torch.no_grad(), Counter() as c_up:
            h = up_s(x)
        assert c_up.calls == [], c_up.calls
        with torch.no_grad(), Counter() as c_down:
            y = down_s(h)
        assert c_down.calls == ["all_reduce"], c_down.calls
        with torch.no_grad():
            h_single = up(x)
            assert torch.equal(h, h_single.index_select(-1, up_s.partition.features(rank).to(device)))
        check(y, down, h_single)


@case("parallelize-module")
def _parallelize(rank, device):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh(device, (WORLD,))
    gen = torch.Generator().manual_seed(seed_for("parallelize"))

    def model():
        m = torch.nn.Module()
        m.up = make_layer(64, 256, 16, torch.float16, gen, skew="rows", activation="relu", device=device)
        m.down = make_layer(256, 64, 16, torch.float16, gen, device=device)
        return m

    m = model()
    if rank == 1:  # the styles broadcast rank 0's layers (src_data_rank=0): rank 1's own are different
        m2 = model()
        m.up.load_state_dict(m2.up.state_dict())
    st = [None]
    if rank == 0:
        st[0] = {k: {n: t.cpu() for n, t in getattr(m, k).state_dict().items()} for k in ("up", "down")}
    dist.broadcast_object_list(st, src=0)
    single_up = sd.layer_from_state_dict(st[0]["up"], 64, 256, "relu").to(device)
    single_down = sd.layer_from_state_dict(st[0]["down"], 256, 64).to(device)
    up_id = id(m.up)
    hooked = []
    m.up.register_forward_hook(lambda *a: hooked.append(1))
    up_style, down_style = sd.paired_styles()
    parallelize_module(m, mesh, {"up": up_style, "down": down_style})
    assert id(m.up) == up_id and isinstance(m.up, sd.ColumnParallelBlockSparseLinear)
    assert isinstance(m.down, sd.RowParallelBlockSparseLinear)
    assert m.up.partition.ranks == m.down.partition.ranks and not m.up.gather_output
    # rank 1 drew more from gen (its own second model): the input comes from a generator of its own.
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(seed_for("parallelize-x"))).half().to(device)
    with torch.no_grad():
        h_single = single_up(x)
        y = m.down(m.up(x))
    assert hooked == [1], "the module's hooks survive the conversion"
    check(y, single_down, h_single)
    # The standalone styles: column with gather; row without a partition is refused.
    m = model()
    parallelize_module(m, mesh, {"up": sd.ColwiseBlockSparse(gather_output=True)})
    with torch.no_grad():
        assert m.up(x).shape == (5, 256)
    try:
        parallelize_module(m, mesh, {"down": sd.RowwiseBlockSparse()})
    except ValueError as e:
        assert "partition" in str(e)
    else:
        raise AssertionError("RowwiseBlockSparse without a partition was accepted")
    parallelize_module(m, mesh, {"down": sd.RowwiseBlockSparse(input_is_parallel=False)})
    assert isinstance(m.down, sd.RowParallelBlockSparseLinear)


@case("state-dict-per-shard-and-whole")
def _state(rank, device):
    gen = torch.Generator().manual_seed(seed_for("state"))
    for layout, skew in (("column", "rows"), ("row", "cols")):
        make = sd.column_parallel if layout == "column" else sd.row_parallel
        layer = make_layer(256, 256, 16, torch.float16, gen, skew=skew, activation="relu", device=device)
        other = make_layer(256, 256, 16, torch.float16, gen, skew=skew, activation="relu", device=device)
        shard = make(layer)
        assert not shard.partition.contiguous
        x = torch.randn(4, 256, generator=gen).half().to(device)
        xin = x if layout == "column" else x.index_select(-1, shard.partition.features(rank).to(device))
        with torch.no_grad():
            y = shard(xin)
        # Per shard: torch.save / torch.load into the same rank's shard of another layer on the same partition.
        buf = io.BytesIO()
        torch.save(shard.state_dict(), buf)
        buf.seek(0)
        dst = make(other, partition=shard.partition)
        dst.load_state_dict(torch.load(buf))
        with torch.no_grad():
            assert torch.equal(dst(xin), y)
        # Another rank's shard state is refused and changes nothing.
        parts = [None] * WORLD
        dist.all_gather_object(parts, {k: v.cpu() for k, v in shard.state_dict().items()
                                       if isinstance(v, torch.Tensor)} | {"_extra_state": shard.get_extra_state()})
        before = {k: v.clone() for k, v in dst.state_dict().items() if isinstance(v, torch.Tensor)}
        try:
            dst.load_state_dict(parts[1 - rank])
        except RuntimeError as e:
            assert "mismatched" in str(e), e
        else:
            raise AssertionError("another rank's shard state was accepted")
        for k, v in dst.state_dict().items():
            if isinstance(v, torch.Tensor):
                assert torch.equal(v, before[k]), k
        # Whole: the gathered state dict is the layer's own, tensor for tensor.
        whole = shard.full_state_dict()
        assert set(whole) == set(layer.state_dict())
        for k, v in layer.state_dict().items():
            assert torch.equal(whole[k].cpu(), v.cpu()), k
        # Whole -> shards: load another layer's whole state dict, keeping the partition.
        shard.load_full_state_dict(other.state_dict())
        ref_shard = make(other, partition=shard.partition)
        with torch.no_grad():
            assert torch.equal(shard(xin), ref_shard(xin))
            if layout == "column":
                check(shard(x), other, x)


@case("errors")
def _errors(rank, device):
    gen = torch.Generator().manual_seed(seed_for("errors"))

    def raises(exc, text, fn):
        try:
            fn()
        except exc as e:
            assert text in str(e), (text, str(e))
        else:
            raise AssertionError(f"no {exc.__name__} ({text})")

    one_row = make_layer(64, 32, 32, torch.float16, gen, device=device)  # 1 block row, 2 block columns
    raises(ValueError, "cannot be split over 2 ranks", lambda: sd.column_parallel(one_row))
    sd.row_parallel(one_row)  # 2 block columns: fine
    layer = make_layer(128, 128, 32, torch.float16, gen, device=device)
    wrong = sd.partition_blocks([1] * 8, WORLD, 32)
    raises(ValueError, "mismatched partition", lambda: sd.column_parallel(layer, partition=wrong))
    raises(ValueError, "mismatched partition", lambda: sd.row_parallel(layer, partition=wrong))
    three = sd.partition_blocks([1] * 8, WORLD + 1, 16)  # for 3 ranks
    narrow = make_layer(128, 64, 16, torch.float16, gen, device=device)
    raises(ValueError, "mismatched partition", lambda: sd.row_parallel(narrow, partition=three))
    up = make_layer(128, 256, 32, torch.float16, gen, device=device)
    raises(ValueError, "must be down's inputs", lambda: sd.shard_mlp(up, layer))
    shard = sd.row_parallel(layer)
    raises(ValueError, "this rank's shard takes", lambda: shard(torch.randn(2, 128).half().to(device)))
    raises(TypeError, "this layer takes", lambda: shard(torch.randn(2, shard.in_features).to(device)))
    raises(TypeError, "whole BlockSparseLinear", lambda: sd.column_parallel(shard))
    raises(TypeError, "whole BlockSparseLinear", lambda: sd.column_parallel(torch.nn.Linear(4, 4)))


# -----------------------------------------------------------------------------------------------------------------
# The pytest tests: every case on 2 ranks, gloo on the CPU and NCCL on two GPUs (dist_runner.py).

dist_runner.add_pytest_tests(globals())


# -----------------------------------------------------------------------------------------------------------------
# Single-process: the partition algorithm.


def test_partition_blocks():
    p = sd.partition_blocks([5, 5, 5, 5], 2, 16)
    assert p.ranks == ((0, 1), (2, 3)) and p.strategy == "contiguous" and p.imbalance == 1.0 and p.contiguous
    # The best contiguous split is [0, 1] | [2] (7 vs 6); no permutation does better.
    p = sd.partition_blocks([3, 4, 6], 2, 16)
    assert max(p.loads) == 7
    p = sd.partition_blocks([10, 1, 1, 1, 1, 1, 1, 1, 1, 10], 2, 16)
    assert p.strategy == "contiguous" and p.loads == (14, 14) and p.contiguous  # ranges balance: no permutation
    p = sd.partition_blocks([9, 9, 1, 1, 1, 1], 2, 16)
    assert p.loads == (11, 11) and p.strategy == "greedy" and p.ranks == ((0, 2, 4), (1, 3, 5))
    p = sd.partition_blocks([9, 9, 1, 1, 1, 1], 2, 16, strategy="equal")
    assert p.ranks == ((0, 1, 2), (3, 4, 5)) and p.loads == (19, 3)
    assert sd.partition_blocks([0, 0, 0], 3, 16).imbalance == 1.0
    assert torch.equal(p.features(1), torch.arange(48, 96))
    with pytest.raises(ValueError, match="cannot be split over 4 ranks"):
        sd.partition_blocks([1, 1, 1], 4, 16)
    with pytest.raises(ValueError, match="strategy"):
        sd.partition_blocks([1, 1], 2, 16, strategy="best")
    with pytest.raises(ValueError, match="threshold"):
        sd.partition_blocks([1, 1], 2, 16, threshold=0.5)
    with pytest.raises(ValueError, match="exactly once"):
        sd.BlockPartition(16, ((0,), (0,)), (1, 1), "given")
    with pytest.raises(ValueError, match="at least one"):
        sd.BlockPartition(16, ((0, 1), ()), (1, 1), "given")


def test_contiguous_split_is_optimal():
    """The binary-searched contiguous split has the smallest maximum of every contiguous split (brute force)."""
    import itertools

    gen = torch.Generator().manual_seed(seed_for("optimal"))
    for trial in range(30):
        n, world = int(torch.randint(3, 9, (1,), generator=gen)), int(torch.randint(2, 4, (1,), generator=gen))
        if n < world:
            continue
        loads = torch.randint(0, 20, (n,), generator=gen).tolist()
        p = sd.partition_blocks(loads, world, 16, strategy="contiguous")
        best = min(max(sum(loads[a:b]) for a, b in zip((0,) + cuts, cuts + (n,)))
                   for cuts in itertools.combinations(range(1, n), world - 1))
        assert max(p.loads) == best and p.contiguous, (loads, world, p)


# -----------------------------------------------------------------------------------------------------------------
# torchrun entry point: every case, this process one rank.

if __name__ == "__main__":
    dist_runner.torchrun_main(CASES, __doc__)
