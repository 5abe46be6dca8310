"""Training BlockSparseLinear models across ranks (issue 45 item 3): DistributedDataParallel, FSDP2
(``torch.distributed.fsdp.fully_shard``) and sparsek.distributed's tensor-parallel shards, on two ranks.

Every case compares with the single-process run of the same model on the same data (each rank computes it too):
gradients after one backward, parameters after a few optimizer steps. The gradients are rounded to the values'
16-bit type (float16 or bfloat16, the only types the kernels take; both train on the CPU), so they are compared
within a tolerance built from that type's unit roundoff ``u``: each rank rounds the gradient of its half of the
batch, the all-reduce rounds their sum, the single process rounds the whole batch's, so elementwise
``|got - ref| <= 8 u (|g_0| + |g_1| + |ref|) + 4 u max|ref|`` (``g_r``: the single process's gradient on rank
``r``'s half). A missing or doubled reduction is off by about ``|g_0 - g_1| / 2`` or ``|ref|``, far outside it.

The runner is test_distributed.py's: the CPU variant (gloo, two spawned processes, sparsek's CPU backend) runs
everywhere; the CUDA variant (NCCL, one GPU per rank) where torch sees two GPUs, skipped otherwise
(``SPARSEK_REQUIRE_GPU=2`` makes the skip a failure). The same cases run under torchrun::

    torchrun --nproc-per-node 2 python/tests/test_distributed_train.py --backend nccl
"""

from __future__ import annotations

import copy
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dist_runner  # noqa: E402
from conftest import UNIT_ROUNDOFF, seed_for  # noqa: E402
from test_distributed import Counter, make_layer  # noqa: E402

from sparsek import distributed as sd  # noqa: E402
from sparsek.nn import BlockSparseLinear  # noqa: E402

WORLD = dist_runner.WORLD
DTYPES = (torch.float16, torch.bfloat16)
BATCH = 16  # the whole batch; each rank takes BATCH / WORLD rows
STEPS = 4


# -----------------------------------------------------------------------------------------------------------------
# Helpers (run in each rank).


def mlp(dtype, device, index_dtype=torch.int32, seed=0):
    """``64 -> 128`` (16-blocks, 17 of 32 kept, fused ReLU) then ``128 -> 64`` (32-blocks, 5 of 8 kept), float32
    in and out, values of ``dtype``, trainable; the same on every rank for the same seed. The odd block counts
    make FSDP2's shards uneven (9 + 8 and 3 + 2 blocks)."""
    m = torch.nn.Sequential(
        BlockSparseLinear(64, 128, 16, 17 / 32, activation="relu", seed=seed + 1, dtype=dtype,
                          index_dtype=index_dtype, io_dtype=torch.float32),
        BlockSparseLinear(128, 64, 32, 5 / 8, seed=seed + 2, dtype=dtype, index_dtype=index_dtype,
                          io_dtype=torch.float32),
    )
    for p in m.parameters():
        p.requires_grad_(True)
    return m.to(device)


def loss_fn(y, t):
    return (y - t).square().mean()


def batches(name, n, in_f, out_f, device, rows=BATCH):
    """``n`` fresh ``(x, target)`` batches, the same on every rank."""
    gen = torch.Generator().manual_seed(seed_for("train-data", name))
    return [(torch.randn(rows, in_f, generator=gen).to(device), torch.randn(rows, out_f, generator=gen).to(device))
            for _ in range(n)]


def mine(rank):
    per = BATCH // WORLD
    return slice(rank * per, (rank + 1) * per)


def grads(model, x, t):
    """The parameters' gradients of the mean loss on ``(x, t)`` (float32 copies)."""
    model.zero_grad(set_to_none=True)
    loss_fn(model(x), t).backward()
    out = {n: p.grad.detach().float().clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return out


def local(t):
    """A DTensor's whole value (a collective), a plain tensor as it is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def check_grads(got: dict, ref: dict, halves: list[dict] | None, dtype, what):
    """``got[n]`` within the module doc's tolerance of ``ref[n]`` for every parameter ``n``."""
    u = UNIT_ROUNDOFF[dtype]
    assert set(got) == set(ref), (what, sorted(got), sorted(ref))
    for n, r in ref.items():
        g = got[n].detach().float().cpu()
        r = r.cpu()
        spread = r.abs() + (sum(h[n].abs().cpu() for h in halves) if halves else 0.0)
        tol = 8 * u * spread + 4 * u * r.abs().max()
        err = (g - r).abs()
        assert g.shape == r.shape, (what, n, g.shape, r.shape)
        assert bool((err <= tol).all()), (f"{what}: {n}: max error {err.max().item():.3g} (tolerance there "
                                          f"{tol.flatten()[err.argmax()].item():.3g}), max |ref| "
                                          f"{r.abs().max().item():.3g}")
        assert r.abs().max() > 0, (what, n, "a zero gradient checks nothing")


def check_params(got: dict, ref: dict, start: dict, dtype, lr_bound, what):
    """After training: ``|got - ref| <= STEPS * (2 u |ref| + lr_bound)`` elementwise (each step may round the
    parameter differently by an ulp and move it by at most ``lr_bound`` more or less), and the difference is small
    against what training moved: ``||got - ref|| <= 0.1 ||ref - start||``."""
    u = UNIT_ROUNDOFF[dtype]
    for n, r in ref.items():
        g, r, s = got[n].detach().float().cpu(), r.detach().float().cpu(), start[n].float().cpu()
        assert bool(torch.isfinite(g).all() and torch.isfinite(r).all()), f"{what}: {n}: not finite"
        err = (g - r).abs()
        tol = STEPS * (2 * u * r.abs() + lr_bound)
        assert bool((err <= tol).all()), f"{what}: {n}: max error {err.max().item():.3g}"
        moved = (r - s).norm()
        assert moved > 0, (what, n, "training did not move it")
        assert (g - r).norm() <= 0.1 * moved, (what, n, (g - r).norm().item(), moved.item())


def structure(model):
    return [(m.crow_indices.detach().clone(), m.col_indices.detach().clone())
            for m in model.modules() if isinstance(m, BlockSparseLinear)]


def check_structure(model, expected, index_dtype, what):
    """The index buffers: plain tensors of ``index_dtype``, equal to ``expected``, and the same on every rank."""
    now = structure(model)
    every = [None] * WORLD
    dist.all_gather_object(every, [(c.cpu(), k.cpu()) for c, k in now])  # first: every rank gets here
    assert len(now) == len(expected)
    for (crow, col), (crow0, col0) in zip(now, expected):
        assert type(crow) is torch.Tensor and type(col) is torch.Tensor, (what, type(crow))
        assert crow.dtype == col.dtype == index_dtype, (what, crow.dtype, col.dtype)
        assert torch.equal(crow, crow0) and torch.equal(col, col0), f"{what}: the structure changed"
    for other in every:
        assert all(torch.equal(a, b) and torch.equal(c, d) for (a, c), (b, d) in zip(other, every[0])), \
            f"{what}: the ranks' structures differ"


def same_on_every_rank(tensors: dict, what):
    every = [None] * WORLD
    dist.all_gather_object(every, {n: t.detach().cpu() for n, t in tensors.items()})
    for n in tensors:
        assert all(torch.equal(e[n], every[0][n]) for e in every), f"{what}: {n} differs between the ranks"


def optimizer(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01)


def lr_bound(name, grad_scale):
    """How much more or less one step may move a parameter when its gradient is off by the tolerance."""
    if name == "sgd":  # lr * (the gradient's tolerance, accumulated by the momentum: 1 / (1 - 0.9))
        return 0.05 * 10 * 12 * grad_scale
    return 2 * 1e-2  # Adam's step is at most about lr whatever the gradient


def _dense(values, crow, col, rows, cols):
    """A BSR gradient expanded to dense float32 (zeros outside the stored blocks)."""
    bs = values.shape[-1]
    crow, col = crow.cpu().long(), col.cpu().long()
    w = torch.zeros(rows // bs, cols // bs, bs, bs)
    block_rows = torch.repeat_interleave(torch.arange(crow.numel() - 1), crow[1:] - crow[:-1])
    w[block_rows, col] = values.detach().float().cpu()
    return w.permute(0, 2, 1, 3).reshape(rows, cols)


def dense_grad(layer):
    return _dense(layer.values.grad, layer.crow_indices, layer.col_indices, layer.out_features, layer.in_features)


# -----------------------------------------------------------------------------------------------------------------
# Cases: each takes (rank, device) and raises on failure.

CASES, case = dist_runner.registry()


def _ddp(device, model, broadcast_buffers):
    ids = [torch.cuda.current_device()] if device == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, broadcast_buffers=broadcast_buffers)


def _ddp_case(dtype, opt_name, index_dtype, broadcast_buffers):
    def run(rank, device):
        name = f"ddp-{dtype}-{opt_name}"
        model = mlp(dtype, device, index_dtype)
        single = copy.deepcopy(model)
        start = {n: p.detach().clone() for n, p in single.named_parameters()}
        before = structure(model)
        sd.check_same_structure(model)
        ddp = _ddp(device, model, broadcast_buffers)
        check_structure(model, before, index_dtype, "after DDP's construction")
        data = batches(name, STEPS, 64, 64, device)
        # One backward: each rank its half of the batch; DDP all-reduces (averages) the gradients.
        x, t = data[0]
        loss_fn(ddp(x[mine(rank)]), t[mine(rank)]).backward()
        got = {n: p.grad for n, p in model.named_parameters()}
        ref = grads(single, x, t)
        halves = [grads(single, x[mine(r)], t[mine(r)]) for r in range(WORLD)]
        check_grads(got, ref, halves, dtype, name)
        same_on_every_rank(got, name)
        # STEPS optimizer steps (the first on the gradients above), against the single process's.
        opt, opt1 = optimizer(opt_name, model.parameters()), optimizer(opt_name, single.parameters())
        versions = [(m.crow_indices._version, m.col_indices._version) for m in model]
        for step, (x, t) in enumerate(data):
            if step:
                opt.zero_grad(set_to_none=True)
                loss_fn(ddp(x[mine(rank)]), t[mine(rank)]).backward()
            opt.step()
            opt1.zero_grad(set_to_none=True)
            loss_fn(single(x), t).backward()
            opt1.step()
        params = dict(model.named_parameters())
        same_on_every_rank(params, name)
        scale = max(r.abs().max().item() for r in ref.values()) * UNIT_ROUNDOFF[dtype]
        check_params(params, dict(single.named_parameters()), start, dtype, lr_bound(opt_name, scale), name)
        check_structure(model, before, index_dtype, "after training")
        if not broadcast_buffers:
            # Nothing wrote the index buffers: the CUDA path keeps using the structure it checked once.
            assert versions == [(m.crow_indices._version, m.col_indices._version) for m in model]
    return run


# Float16 values train with SGD; Adam's state in float16 loses its eps (NaN at the first step on a single process
# too): AdamW trains bfloat16 values, as the package README says.
for _dtype, _opt, _index, _bb in ((torch.float16, "sgd", torch.int32, True),
                                  (torch.float16, "sgd", torch.int64, False),
                                  (torch.bfloat16, "sgd", torch.int64, True),
                                  (torch.bfloat16, "adamw", torch.int32, False)):
    case(f"ddp-{str(_dtype)[6:]}-{_opt}-{str(_index)[6:]}-broadcast_buffers={_bb}")(_ddp_case(_dtype, _opt, _index,
                                                                                                 _bb))


@case("ddp-accumulation-no-sync")
def _ddp_accumulate(rank, device):
    """Gradient accumulation: two micro-batches per rank (a quarter of the batch each, loss halved), the first
    under no_sync (no all-reduce), the second synchronised: the gradient of the whole batch's mean loss."""
    dtype = torch.bfloat16
    model = mlp(dtype, device, seed=20)
    single = copy.deepcopy(model)
    ddp = _ddp(device, model, False)
    x, t = batches("ddp-accumulate", 1, 64, 64, device)[0]
    quarter = BATCH // (2 * WORLD)
    parts = [slice(q * quarter, (q + 1) * quarter) for q in range(2 * WORLD)]
    first, second = parts[2 * rank], parts[2 * rank + 1]
    with ddp.no_sync():
        (loss_fn(ddp(x[first]), t[first]) / 2).backward()
    unsynced = [None] * WORLD
    dist.all_gather_object(unsynced, model[0].values.grad.cpu())
    assert not torch.equal(unsynced[0], unsynced[1]), "no_sync all-reduced"
    (loss_fn(ddp(x[second]), t[second]) / 2).backward()
    got = {n: p.grad for n, p in model.named_parameters()}
    check_grads(got, grads(single, x, t), [grads(single, x[q], t[q]) for q in parts], dtype, "ddp no_sync")
    same_on_every_rank(got, "ddp no_sync")


@case("ddp-structure-across-ranks")
def _ddp_structure(rank, device):
    """Rank 1 builds another pattern with the same block counts (and runs it first: on CUDA its structure is
    checked and remembered). With broadcast_buffers=True DDP's construction makes it rank 0's, index dtype kept,
    and rank 1 then computes with it; with broadcast_buffers=False DDP copies rank 0's values into rank 1's own
    pattern, which check_same_structure refuses beforehand. A different block count DDP refuses itself."""
    dtype = torch.bfloat16
    gen = torch.Generator().manual_seed(seed_for("ddp-structure"))
    x = torch.randn(4, 64, generator=gen).to(device)
    rank0 = mlp(dtype, device, torch.int64, seed=0)
    for broadcast_buffers in (True, False):
        model = mlp(dtype, device, torch.int64, seed=10 * rank)  # rank 1: another pattern, the same counts
        with torch.no_grad():
            model(x)
        try:
            sd.check_same_structure(model)
        except ValueError as e:
            assert "0 on rank 1" in str(e) and "1 on rank 1" in str(e), e
        else:
            raise AssertionError("check_same_structure accepted different patterns")
        ddp = _ddp(device, model, broadcast_buffers)
        for m, m0 in zip(model, rank0):
            assert torch.equal(m.values, m0.values), "DDP copies rank 0's parameters"
        if broadcast_buffers:
            check_structure(model, structure(rank0), torch.int64, "after DDP's construction")
            with torch.no_grad():
                assert torch.equal(ddp(x), rank0(x)), "rank 1 computes with its old structure"
        else:
            same = [None] * WORLD
            dist.all_gather_object(same, all(torch.equal(m.col_indices, m0.col_indices) for m, m0 in zip(model,
                                                                                                        rank0)))
            assert same == [True, False], same  # rank 1 kept its own pattern, under rank 0's values
        del ddp
    # A different nnzb on rank 1: check_same_structure refuses on every rank. (DDP's own check of the parameters'
    # shapes raises on rank 1 only, while rank 0 goes on into its broadcast and waits there until the timeout.)
    other = mlp(dtype, device, seed=0)
    if rank == 1:
        other[0] = BlockSparseLinear(64, 128, 16, 16 / 32, activation="relu", seed=1, dtype=dtype,
                                     io_dtype=torch.float32).to(device)
    try:
        sd.check_same_structure(other)
    except ValueError as e:
        assert "0 on rank 1" in str(e) and "1 on rank 1" not in str(e), e
    else:
        raise AssertionError("check_same_structure accepted different block counts")
    # Other layers altogether: refused too.
    try:
        sd.check_same_structure(other if rank == 0 else other[1])
    except ValueError as e:
        assert "holds other BlockSparseLinear layers" in str(e), e
    else:
        raise AssertionError("check_same_structure accepted other layers")


def _fsdp_case(dtype, opt_name):
    def run(rank, device):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import DTensor, Shard

        name = f"fsdp-{dtype}-{opt_name}"
        mesh = init_device_mesh(device, (WORLD,))
        model = mlp(dtype, device)
        single = copy.deepcopy(model)
        start = {n: p.detach().clone() for n, p in single.named_parameters()}
        before = structure(model)
        sd.check_same_structure(model)  # fully_shard copies nothing between the ranks
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        seen = []
        for layer, ref in zip(model, single):
            # values (nnzb, bs, bs) shard over blocks (dim 0, torch.chunk's split: 9 + 8, 3 + 2); buffers stay.
            v = layer.values
            assert isinstance(v, DTensor) and tuple(v.placements) == (Shard(0),), (type(v), v)
            assert v.shape == ref.values.shape
            assert torch.equal(v.to_local(), ref.values.detach().chunk(WORLD)[rank])
            assert type(layer.crow_indices) is torch.Tensor and type(layer.col_indices) is torch.Tensor

            def hook(module, args, _ref=ref):
                w = module.values
                seen.append((type(w) is not DTensor and w.shape == _ref.values.shape
                             and torch.equal(w.detach(), _ref.values.detach())))
            layer.register_forward_pre_hook(hook)
        # One backward (each rank its half of the batch): the reduce-scattered gradients, put together.
        data = batches(name, STEPS, 64, 64, device)
        x, t = data[0]
        loss_fn(model(x[mine(rank)]), t[mine(rank)]).backward()
        assert seen == [True, True], f"the forward saw {seen} (True: the whole values, all-gathered)"
        got = {n: local(p.grad) for n, p in model.named_parameters()}
        ref = grads(single, x, t)
        halves = [grads(single, x[mine(r)], t[mine(r)]) for r in range(WORLD)]
        check_grads(got, ref, halves, dtype, name)
        # STEPS optimizer steps on the shards against the single process's.
        opt, opt1 = optimizer(opt_name, model.parameters()), optimizer(opt_name, single.parameters())
        for step, (x, t) in enumerate(data):
            if step:
                opt.zero_grad(set_to_none=True)
                loss_fn(model(x[mine(rank)]), t[mine(rank)]).backward()
            opt.step()
            opt1.zero_grad(set_to_none=True)
            loss_fn(single(x), t).backward()
            opt1.step()
        params = {n: local(p) for n, p in model.named_parameters()}
        scale = max(r.abs().max().item() for r in ref.values()) * UNIT_ROUNDOFF[dtype]
        check_params(params, dict(single.named_parameters()), start, dtype, lr_bound(opt_name, scale), name)
        check_structure(model, before, torch.int32, "after FSDP2 training")
    return run


for _dtype, _opt in ((torch.float16, "sgd"), (torch.bfloat16, "adamw")):
    case(f"fsdp2-{str(_dtype)[6:]}-{_opt}")(_fsdp_case(_dtype, _opt))


def trainable_pair(dtype, gen, device):
    """An MLP pair for the tensor-parallel training cases: up ``128 -> 256`` (32-blocks, skewed block rows, SiLU)
    and down ``256 -> 128``, values of ``dtype``, float32 in and out, every parameter trainable."""
    up = make_layer(128, 256, 32, dtype, gen, skew="rows", activation="silu", device=device).float()
    down = make_layer(256, 128, 32, dtype, gen, activation=None, device=device).float()
    for p in (*up.parameters(), *down.parameters()):
        p.requires_grad_(True)
    return up, down


def check_shard_grads(shards, whole, feats, dtype, what):
    """The shards' (up, down) gradients of values and bias are their blocks (hidden features ``feats``) of the
    whole layers'."""
    (up_s, down_s), (up, down) = shards, whole
    check_grads({"up": dense_grad(up_s)}, {"up": dense_grad(up)[feats]}, None, dtype, what)
    check_grads({"down": dense_grad(down_s)}, {"down": dense_grad(down)[:, feats]}, None, dtype, what)
    check_grads({"up.bias": up_s.bias.grad, "down.bias": down_s.bias.grad},
                {"up.bias": up.bias.grad.float().cpu()[feats], "down.bias": down.bias.grad.float()},
                None, dtype, what)


def _tp_mlp_case(dtype):
    def run(rank, device):
        """shard_mlp's pair trains: every shard's gradients are its blocks of the single-process ones, the input's
        gradient is whole on every rank, and SGD steps keep the gathered layers equal to the single process's."""
        name = f"tp-mlp-{dtype}"
        gen = torch.Generator().manual_seed(seed_for(name))
        # Skewed block rows and a permuted (greedy) partition of the shared dimension.
        up, down = trainable_pair(dtype, gen, device)
        up_s, down_s = sd.shard_mlp(up, down, strategy="greedy")
        assert not up_s.pair_partition.contiguous
        assert all(p.requires_grad for p in (*up_s.parameters(), *down_s.parameters()))
        feats = up_s.partition.features(rank)
        for tokens in (6, 1):  # 1 token: the all-reduced partial is a view
            x = torch.randn(tokens, 128, generator=gen).to(device)
            t = torch.randn(tokens, 128, generator=gen).to(device)
            x1, xs = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
            for p in (*up.parameters(), *down.parameters(), *up_s.parameters(), *down_s.parameters()):
                p.grad = None
            loss_fn(down(up(x1)), t).backward()
            with Counter() as fwd:
                loss = loss_fn(down_s(up_s(xs)), t)
            with Counter() as bwd:
                loss.backward()
            # Forward: down's all-reduce only; backward: the input gradient's all-reduce (up's copy) only.
            assert fwd.calls == ["all_reduce"] and bwd.calls == ["all_reduce"], (fwd.calls, bwd.calls)
            what = f"{name} ({tokens} tokens)"
            check_shard_grads((up_s, down_s), (up, down), feats, dtype, what)
            check_grads({"x": xs.grad}, {"x": x1.grad}, None, dtype, what)
        # Without an input that requires grad, the backward communicates nothing.
        x = torch.randn(4, 128, generator=gen).to(device)
        loss = loss_fn(down_s(up_s(x)), torch.zeros(4, 128, device=device))
        with Counter() as bwd:
            loss.backward()
        assert bwd.calls == [], bwd.calls
        # STEPS SGD steps on the shards and on the whole layers: the gathered layers follow the single process's.
        start = {f"{k}.{n}": p.detach().clone() for k, m in (("up", up), ("down", down))
                 for n, p in m.state_dict().items() if n in ("values", "bias")}
        opt = torch.optim.SGD([*up_s.parameters(), *down_s.parameters()], lr=0.05)
        opt1 = torch.optim.SGD([*up.parameters(), *down.parameters()], lr=0.05)
        scale = 0.0
        for step in range(STEPS):
            x = torch.randn(6, 128, generator=gen).to(device)
            t = torch.randn(6, 128, generator=gen).to(device)
            for o, (a, b) in ((opt, (up_s, down_s)), (opt1, (up, down))):
                o.zero_grad(set_to_none=True)
                loss_fn(b(a(x)), t).backward()
                if a is up:
                    scale = max(scale, up.values.grad.abs().max().item(), down.values.grad.abs().max().item())
                o.step()
        got = {f"{k}.{n}": v for k, s in (("up", up_s), ("down", down_s))
               for n, v in s.full_state_dict().items() if n in ("values", "bias")}
        ref = {f"{k}.{n}": p for k, m in (("up", up), ("down", down))
               for n, p in m.state_dict().items() if n in ("values", "bias")}
        check_params(got, ref, start, dtype, lr_bound("sgd", scale * UNIT_ROUNDOFF[dtype]) / 10, name)
        # The structure did not move (the gathered layers' indices are the whole layers').
        whole_up = up_s.full_layer()
        assert torch.equal(whole_up.crow_indices, up.crow_indices) and torch.equal(whole_up.col_indices,
                                                                                   up.col_indices)
    return run


for _dtype in DTYPES:
    case(f"tp-mlp-{str(_dtype)[6:]}")(_tp_mlp_case(_dtype))


def _seqpar_train_case(dtype):
    def run(rank, device):
        """The sequence-parallel pair trains: with each rank's loss on its own tokens (their sum is the loss of
        the whole batch), every shard's gradients are its blocks of the single-process ones (down's bias, which
        every rank adds to its own tokens, summed over the ranks) and each rank's input gradient is its rows of the
        single process's."""
        name = f"seqpar-mlp-{dtype}"
        gen = torch.Generator().manual_seed(seed_for(name))
        up, down = trainable_pair(dtype, gen, device)
        mlp = sd.sequence_parallel_mlp(up, down, strategy="greedy")
        up_s, down_s = mlp.up, mlp.down
        assert not up_s.pair_partition.contiguous
        feats = up_s.partition.features(rank)
        nccl = torch.device(device).type == "cuda"
        for tokens in (3, 1):  # per rank
            x = torch.randn(WORLD * tokens, 128, generator=gen).to(device)
            t = torch.randn(WORLD * tokens, 128, generator=gen).to(device)
            mine_rows = slice(rank * tokens, (rank + 1) * tokens)
            x1, xs = x.clone().requires_grad_(True), x[mine_rows].clone().requires_grad_(True)
            for p in (*up.parameters(), *down.parameters(), *mlp.parameters()):
                p.grad = None
            # The single process's loss: the sum over the ranks' mean losses.
            sum(loss_fn(y, tt) for y, tt in zip(down(up(x1)).chunk(WORLD), t.chunk(WORLD))).backward()
            with Counter() as fwd:
                loss = loss_fn(mlp(xs), t[mine_rows])
            with Counter() as bwd:
                loss.backward()
            gather, scatter = (("all_gather_into_tensor", "reduce_scatter_tensor") if nccl
                               else ("all_gather", "all_reduce"))
            # Backward: the two collectives' adjoints and the down bias's gradient summed over the ranks.
            assert fwd.calls == [gather, scatter], fwd.calls
            assert sorted(bwd.calls) == sorted([gather, scatter, "all_reduce"]), bwd.calls
            what = f"{name} ({tokens} tokens a rank)"
            check_shard_grads((up_s, down_s), (up, down), feats, dtype, what)
            check_grads({"x": xs.grad}, {"x": x1.grad[mine_rows]}, None, dtype, what)
        # Under no_grad the same module answers alike (the fast path where it applies; the recorded forward applies
        # up's SiLU to its rounded pre-activation, so the two differ by the values' roundings; test_distributed's
        # seqpar cases check the no_grad output against the f64 product).
        x = torch.randn(WORLD * 4, 128, generator=gen).to(device)
        with torch.no_grad():
            a = mlp(x[rank * 4:(rank + 1) * 4])
        b = mlp(x[rank * 4:(rank + 1) * 4])
        err, scale = (a - b.detach()).abs().max().item(), b.detach().abs().max().item()
        assert b.requires_grad and err <= 4 * UNIT_ROUNDOFF[dtype] * scale, (err, scale)
    return run


for _dtype in DTYPES:
    case(f"seqpar-mlp-{str(_dtype)[6:]}")(_seqpar_train_case(_dtype))


@case("tp-parallelize-module-trains")
def _tp_parallelize(rank, device):
    """parallelize_module with paired_styles on a trainable model: the converted layers still require grad (the
    styles' broadcast of rank 0's layer and load_full_state_dict keep the flags) and train as shard_mlp's do."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    dtype = torch.bfloat16
    gen = torch.Generator().manual_seed(seed_for("tp-parallelize"))
    m = torch.nn.Module()
    m.up = make_layer(64, 256, 16, dtype, gen, skew="rows", activation="relu", device=device).float()
    m.down = make_layer(256, 64, 16, dtype, gen, device=device).float()
    for p in m.parameters():
        p.requires_grad_(True)
    single = copy.deepcopy(m)  # every rank drew the same layers from the same seed
    up_style, down_style = sd.paired_styles()
    parallelize_module(m, init_device_mesh(device, (WORLD,)), {"up": up_style, "down": down_style})
    assert isinstance(m.up, sd.ColumnParallelBlockSparseLinear) and isinstance(m.down, sd.RowParallelBlockSparseLinear)
    assert all(p.requires_grad for p in m.parameters()), [n for n, p in m.named_parameters() if not p.requires_grad]
    x = torch.randn(5, 64, generator=gen).to(device)
    t = torch.randn(5, 64, generator=gen).to(device)
    loss_fn(single.down(single.up(x)), t).backward()
    loss_fn(m.down(m.up(x)), t).backward()
    feats = m.up.partition.features(rank)
    check_grads({"up": dense_grad(m.up), "down": dense_grad(m.down), "up.bias": m.up.bias.grad},
                {"up": dense_grad(single.up)[feats], "down": dense_grad(single.down)[:, feats],
                 "up.bias": single.up.bias.grad.float().cpu()[feats]}, None, dtype, "parallelize_module")
    # A whole state dict loaded into a trained shard: still trainable.
    m.up.load_full_state_dict(single.up.state_dict())
    assert m.up.values.requires_grad and m.up.bias.requires_grad


def _gated_case(dtype):
    def run(rank, device):
        """shard_gated_mlp's three shards train (LLaMA's ``down(silu(gate(x)) * up(x))``, the activation between the
        layers): every shard's gradients are its blocks of the single-process ones (gate and up: their hidden rows;
        down: its hidden columns; down's bias whole), the input's gradient is whole on every rank."""
        name = f"tp-gated-mlp-{dtype}"
        gen = torch.Generator().manual_seed(seed_for(name))
        gate = make_layer(128, 256, 32, dtype, gen, skew="rows", device=device).float()
        up = make_layer(128, 256, 32, dtype, gen, device=device).float()
        down = make_layer(256, 128, 32, dtype, gen, device=device).float()
        for p in (*gate.parameters(), *up.parameters(), *down.parameters()):
            p.requires_grad_(True)
        g_s, u_s, d_s = sd.shard_gated_mlp(gate, up, down, strategy="greedy")
        assert not g_s.pair_partition.contiguous
        silu = torch.nn.functional.silu
        x = torch.randn(6, 128, generator=gen).to(device)
        t = torch.randn(6, 128, generator=gen).to(device)
        x1, xs = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        loss_fn(down(silu(gate(x1)) * up(x1)), t).backward()
        loss_fn(d_s(silu(g_s(xs)) * u_s(xs)), t).backward()
        feats = g_s.partition.features(rank)
        check_grads({"gate": dense_grad(g_s), "up": dense_grad(u_s), "down": dense_grad(d_s)},
                    {"gate": dense_grad(gate)[feats], "up": dense_grad(up)[feats], "down": dense_grad(down)[:, feats]},
                    None, dtype, name)
        check_grads({"gate.bias": g_s.bias.grad, "up.bias": u_s.bias.grad, "down.bias": d_s.bias.grad, "x": xs.grad},
                    {"gate.bias": gate.bias.grad.float().cpu()[feats], "up.bias": up.bias.grad.float().cpu()[feats],
                     "down.bias": down.bias.grad.float(), "x": x1.grad}, None, dtype, name)
    return run


for _dtype in DTYPES:
    case(f"tp-gated-mlp-{str(_dtype)[6:]}")(_gated_case(_dtype))


def _sp_plan_case(dtype, plan_kind):
    def run(rank, device):
        """A block ``x + down(up(norm(x)))`` in the sequence-parallel layout through ``parallelize_module``, the
        block-sparse styles beside torch's own: ``plan_kind="torch"`` is the plan of torch's tensor-parallel
        tutorial (``SequenceParallel`` on the norm, ``PrepareModuleInput`` gathering the MLP's input into a
        replicated DTensor, the pair's output reduce-scattered along the sequence); ``"shard-in"`` gives the pair
        the tokens themselves (``input_layouts=Shard(1)``: up all-gathers them). With each rank's loss on its own
        tokens (their sum is the whole batch's), the output is each rank's tokens of the single process's, and
        every gradient is as in test_distributed_train's other tensor-parallel cases: the shards' blocks of the
        single process's, down's bias and the norm's parameters whole, the input's its rank's tokens."""
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Replicate, Shard
        from torch.distributed.tensor.parallel import PrepareModuleInput, SequenceParallel, parallelize_module

        name = f"sp-plan-{plan_kind}-{dtype}"
        gen = torch.Generator().manual_seed(seed_for(name))
        up, down = trainable_pair(dtype, gen, device)
        block = torch.nn.Module()
        block.norm = torch.nn.LayerNorm(128).to(device)
        block.mlp = torch.nn.Module()
        block.mlp.up, block.mlp.down = up, down
        with torch.no_grad():  # a norm that is not the identity, so that its gradients check something
            block.norm.weight.copy_(1 + 0.5 * torch.randn(128, generator=gen))
            block.norm.bias.copy_(0.5 * torch.randn(128, generator=gen))

        def forward(m, x):
            return x + m.mlp.down(m.mlp.up(m.norm(x)))

        single = copy.deepcopy(block)
        mesh = init_device_mesh(device, (WORLD,))
        if plan_kind == "torch":
            up_style, down_style = sd.paired_styles(output_layouts=Shard(1), strategy="greedy")
            plan = {"norm": SequenceParallel(),
                    "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                    "mlp.up": up_style, "mlp.down": down_style}
        else:
            up_style, down_style = sd.paired_styles(input_layouts=Shard(1), output_layouts=Shard(1),
                                                    strategy="greedy")
            plan = {"mlp.up": up_style, "mlp.down": down_style}
        parallelize_module(block, mesh, plan)
        up_s, down_s = block.mlp.up, block.mlp.down
        assert isinstance(up_s, sd.ColumnParallelBlockSparseLinear)
        assert up_s.sequence_dim == (None if plan_kind == "torch" else 1), up_s.sequence_dim
        assert isinstance(down_s, sd.RowParallelBlockSparseLinear) and down_s.sequence_dim == 1
        assert not up_s.pair_partition.contiguous  # skewed rows, greedy: a permuted hidden dimension
        feats = up_s.partition.features(rank)
        seq = 3  # tokens a rank along the sequence
        x = torch.randn(2, WORLD * seq, 128, generator=gen).to(device)
        t = torch.randn(2, WORLD * seq, 128, generator=gen).to(device)
        mine_seq = slice(rank * seq, (rank + 1) * seq)
        x1, xs = x.clone().requires_grad_(True), x[:, mine_seq].clone().requires_grad_(True)
        y1 = forward(single, x1)
        sum(loss_fn(y1[:, r * seq:(r + 1) * seq], t[:, r * seq:(r + 1) * seq]) for r in range(WORLD)).backward()
        y = forward(block, xs)
        assert type(y) is torch.Tensor and y.shape == (2, seq, 128), (type(y), y.shape)
        u = UNIT_ROUNDOFF[dtype]
        ref = y1.detach()[:, mine_seq]
        err = (y.detach() - ref).abs().max().item()
        assert err <= 16 * u * ref.abs().max().item(), (name, err, ref.abs().max().item())
        loss_fn(y, t[:, mine_seq]).backward()
        what = f"{name} rank {rank}"
        check_shard_grads((up_s, down_s), (single.mlp.up, single.mlp.down), feats, dtype, what)
        check_grads({"x": xs.grad}, {"x": x1.grad[:, mine_seq]}, None, dtype, what)
        norm = {}
        for n in ("weight", "bias"):
            g = getattr(block.norm, n).grad
            norm[n] = g.full_tensor() if isinstance(g, DTensor) else g
        if plan_kind == "torch":  # the norm's own gradient is summed over the ranks' tokens by torch's style
            check_grads(norm, {"weight": single.norm.weight.grad, "bias": single.norm.bias.grad}, None, dtype,
                        what)
    return run


for _dtype in DTYPES:
    for _kind in ("torch", "shard-in"):
        case(f"sp-plan-{_kind}-{str(_dtype)[6:]}")(_sp_plan_case(_dtype, _kind))


@case("tp-gathered-output-and-whole-input")
def _tp_gather(rank, device):
    """A column-parallel layer with gather_output (a permuted, padded gather) and a row-parallel one taking the
    whole input train: their gradients are their blocks of the single-process ones, the input's is whole."""
    dtype = torch.bfloat16
    gen = torch.Generator().manual_seed(seed_for("tp-gather"))
    for layout in ("column", "row"):
        skew = "rows" if layout == "column" else "cols"
        layer = make_layer(256, 256, 16, dtype, gen, skew=skew, activation="gelu_tanh", device=device).float()
        for p in layer.parameters():
            p.requires_grad_(True)
        if layout == "column":
            shard = sd.column_parallel(layer, gather_output=True)
        else:
            shard = sd.row_parallel(layer, input_is_parallel=False)
        assert not shard.partition.contiguous
        x = torch.randn(5, 256, generator=gen).to(device)
        t = torch.randn(5, 256, generator=gen).to(device)
        x1, xs = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        loss_fn(layer(x1), t).backward()
        loss_fn(shard(xs), t).backward()
        feats = shard.partition.features(rank)
        full = dense_grad(layer)
        want = full[feats] if layout == "column" else full[:, feats]
        bias_want = layer.bias.grad.float().cpu()[feats] if layout == "column" else layer.bias.grad.float()
        check_grads({"values": dense_grad(shard), "bias": shard.bias.grad, "x": xs.grad},
                    {"values": want, "bias": bias_want, "x": x1.grad}, None, dtype, f"tp-{layout}")


# -----------------------------------------------------------------------------------------------------------------
# The pytest tests: every case on 2 ranks, gloo on the CPU and NCCL on two GPUs (dist_runner.py).

dist_runner.add_pytest_tests(globals())


# -----------------------------------------------------------------------------------------------------------------
# torchrun entry point: every case, this process one rank.

if __name__ == "__main__":
    dist_runner.torchrun_main(CASES, __doc__)
