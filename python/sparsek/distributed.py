"""Tensor-parallel :class:`~sparsek.nn.BlockSparseLinear` on ``torch.distributed`` (issue 45): Megatron-style
column- and row-parallel shards whose boundaries balance *stored blocks* across ranks, not rows.

- :func:`column_parallel` (output features split by block rows): every rank takes the whole input and computes its
  own output features; with ``gather_output=True`` they are all-gathered and put back in the original feature order.
- :func:`row_parallel` (input features split by block columns): every rank takes its own input features (or the
  whole input with ``input_is_parallel=False``), computes a partial product in float32, the partials are
  all-reduced (sum), and the bias and activation are applied once, after the sum, with a single rounding to the
  output dtype. From :data:`SYMMETRIC_MIN_TOKENS` tokens on CUDA (``comm``), the sum goes through torch's
  symmetric memory instead of NCCL's all-reduce: a reduce-scatter by the kernel's stores into the peers' memory
  and an all-gather by the copy engines.
- :func:`shard_mlp`: an (up, down) pair on ONE partition of the shared dimension, balancing both layers' blocks
  together: up column-parallel without gather, down row-parallel on its input features; nothing is communicated
  between the two.
- :func:`shard_gated_mlp`: a gated MLP (LLaMA's ``gate_proj``, ``up_proj``, ``down_proj``) the same way: gate and
  up column-parallel, down row-parallel, one partition balanced on all three layers' blocks.
- :func:`sequence_parallel_mlp`: the same pair in the sequence-parallel layout (Megatron's; DTensor's ``Shard(0)``):
  input and output split by tokens across the group, the input all-gathered and the partial products
  reduce-scattered. On CUDA with an NCCL group both go through torch's symmetric memory where nothing needs a
  gradient: the copy engines move the input and the kernel's epilogue stores the peers' partial products straight
  into their memory over NVLink, so no SM runs a collective (:class:`SequenceParallelMLP`, ``comm``).
- :class:`ColwiseBlockSparse`, :class:`RowwiseBlockSparse`, :func:`paired_styles` and :func:`gated_styles`:
  ``torch.distributed.tensor.parallel.ParallelStyle`` s for ``parallelize_module`` (see their docs for how the
  module is converted in place), sequence-parallel too (``input_layouts=Shard(d)`` / ``output_layouts=Shard(d)``:
  the shards' ``sequence_dim``), taking torch's DTensors as its own styles produce them (``SequenceParallel``,
  ``PrepareModuleInput``).

**Partitions.** A :class:`BlockPartition` gives each rank a set of block indices (block rows for the column
layout, block columns for the row layout). :func:`partition_blocks` builds it from the stored blocks of each index
(its *load*): ``strategy="auto"`` (the default) first takes the best contiguous split (ranges from prefix sums,
the smallest possible maximum load) and keeps it when ``max / mean <= threshold`` (default
:data:`DEFAULT_THRESHOLD` = 1.05); otherwise it assigns the indices longest-first, each to the least-loaded rank
(ties: the rank with fewer indices, then the lower rank), and keeps that permutation when its maximum is lower than
the contiguous one's. A permuted column partition is undone in the gather (an index map puts every feature back in
place); a permuted row partition needs the input's features in the partition's order, which the preceding
column-parallel layer of a pair produces by construction. ``"contiguous"``, ``"equal"`` (equal ranges of indices,
what a dense tensor-parallel layer does) and ``"greedy"`` force one. Each shard reports ``nnzb`` (its blocks),
``imbalance`` (max / mean of the ranks' blocks, 1.0 when perfectly even) and ``partition``.

**Training.** The shards are differentiable (their ``values`` and ``bias`` are ``Parameter`` s that require grad
when the whole layer's did). The collectives in their forward carry Megatron's gradients, for a loss that every
rank computes alike from the replicated output (the usual tensor-parallel setting; DTensor's too): the row-parallel
all-reduce passes the output's gradient through unchanged, the column-parallel gather gives each rank its own
features' part of the gradient, and the input of a column-parallel layer (or of a row-parallel one with
``input_is_parallel=False``) has its gradient summed over the group in backward, since each rank's shard sees only
part of the weight. Each shard's parameter gradients are then the matching blocks of the single-process layer's.
``torch.distributed.nn.functional``'s autograd collectives sum the gradient over the ranks instead (a loss that is
the sum of the ranks' losses) and would give ``world_size`` times these; they are not used. Data parallelism over
whole ``BlockSparseLinear`` models needs nothing from this module: ``DistributedDataParallel`` and FSDP2's
``fully_shard`` train them as they are (see the package README).

Every rank must hold the same full layer when sharding (the partition is computed on each rank from it); the
``ParallelStyle`` s broadcast it from ``src_data_rank`` first (as torch's styles do), the functions take it as
given.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from typing import Sequence

import torch
import torch.distributed as dist

from .nn import BlockSparseLinear

__all__ = [
    "DEFAULT_THRESHOLD",
    "BlockPartition",
    "partition_blocks",
    "block_row_loads",
    "block_col_loads",
    "column_parallel",
    "row_parallel",
    "shard_mlp",
    "shard_gated_mlp",
    "sequence_parallel_mlp",
    "SequenceParallelMLP",
    "SYMMETRIC_MIN_TOKENS",
    "SYMMETRIC_MIN_TOKENS_SEQPAR",
    "ColumnParallelBlockSparseLinear",
    "RowParallelBlockSparseLinear",
    "ColwiseBlockSparse",
    "RowwiseBlockSparse",
    "paired_styles",
    "gated_styles",
    "layer_from_state_dict",
    "dcp_state_dict",
    "load_dcp_state_dict",
    "check_same_structure",
]

DEFAULT_THRESHOLD = 1.05
_STRATEGIES = ("auto", "contiguous", "equal", "greedy")


# ---------------------------------------------------------------------------------------------------------------
# Partitions.


@dataclasses.dataclass(frozen=True)
class BlockPartition:
    """Which block indices (of one dimension of a weight, in blocks of ``block_size`` features) each rank holds.

    ``ranks[r]`` is rank ``r``'s indices in ascending order (every index in exactly one rank, every rank at least
    one); ``loads[r]`` the stored blocks they hold in the layer(s) the partition was balanced for; ``strategy`` the
    one that built it (``"contiguous"``, ``"equal"``, ``"greedy"`` or ``"given"``)."""

    block_size: int
    ranks: tuple[tuple[int, ...], ...]
    loads: tuple[int, ...]
    strategy: str

    def __post_init__(self) -> None:
        flat = sorted(i for r in self.ranks for i in r)
        if flat != list(range(len(flat))):
            raise ValueError("sparsek: a partition must hold every block index exactly once")
        if any(len(r) == 0 for r in self.ranks):
            raise ValueError("sparsek: every rank of a partition needs at least one block index")
        if any(list(r) != sorted(r) for r in self.ranks):
            raise ValueError("sparsek: a rank's block indices must be ascending")
        if len(self.loads) != len(self.ranks):
            raise ValueError("sparsek: a partition needs one load per rank")

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    @property
    def num_blocks(self) -> int:
        """The block indices of the dimension (its features / ``block_size``)."""
        return sum(len(r) for r in self.ranks)

    @property
    def contiguous(self) -> bool:
        """Each rank holds one range and rank ``r``'s precedes rank ``r + 1``'s (no reordering needed)."""
        return [i for r in self.ranks for i in r] == list(range(self.num_blocks))

    @property
    def imbalance(self) -> float:
        """``max(loads) / mean(loads)`` (1.0 when no blocks are stored)."""
        total = sum(self.loads)
        return max(self.loads) * len(self.loads) / total if total else 1.0

    def features(self, rank: int) -> torch.Tensor:
        """Rank ``rank``'s feature indices (int64, ascending)."""
        bs = self.block_size
        blocks = torch.tensor(self.ranks[rank], dtype=torch.int64)
        return (blocks[:, None] * bs + torch.arange(bs)).reshape(-1)

    def check(self, world_size: int, num_blocks: int, block_size: int, what: str) -> None:
        """Raises ``ValueError`` unless the partition fits ``world_size`` ranks and a dimension of ``num_blocks``
        blocks of ``block_size``."""
        if (self.world_size, self.num_blocks, self.block_size) != (world_size, num_blocks, block_size):
            raise ValueError(
                f"sparsek: mismatched partition for {what}: it is for {self.world_size} ranks, {self.num_blocks} "
                f"blocks of {self.block_size}; the layer needs {world_size} ranks, {num_blocks} blocks of "
                f"{block_size}"
            )

    def with_loads(self, loads: Sequence[int]) -> "BlockPartition":
        """The same assignment, its loads recounted from per-index ``loads``."""
        loads = [int(v) for v in loads]
        return dataclasses.replace(self, loads=tuple(sum(loads[i] for i in r) for r in self.ranks))


def _contiguous_split(loads: list[int], world: int) -> list[tuple[int, ...]]:
    """The contiguous split into ``world`` nonempty ranges with the smallest maximum load (binary search on it)."""
    n = len(loads)

    def split(cap: int) -> list[tuple[int, ...]] | None:
        parts, cur, cur_load = [], [], 0
        for i, v in enumerate(loads):
            left_parts = world - len(parts) - 1  # ranges still to open after the current one
            must_close = cur and (cur_load + v > cap or n - i == left_parts)
            if must_close:
                parts.append(tuple(cur))
                cur, cur_load = [], 0
            if v > cap:
                return None
            cur.append(i)
            cur_load += v
        parts.append(tuple(cur))
        return parts if len(parts) == world else None

    lo, hi = max(loads), sum(loads)
    while lo < hi:
        mid = (lo + hi) // 2
        if split(mid) is not None:
            hi = mid
        else:
            lo = mid + 1
    result = split(lo)
    assert result is not None  # cap = sum(loads) always splits (n >= world)
    return result


def _greedy_split(loads: list[int], world: int) -> list[tuple[int, ...]]:
    """Longest-first: each index (largest load first, ties by index) to the least-loaded rank (ties: fewer indices,
    then lower rank)."""
    order = sorted(range(len(loads)), key=lambda i: (-loads[i], i))
    parts: list[list[int]] = [[] for _ in range(world)]
    sums = [0] * world
    for i in order:
        r = min(range(world), key=lambda q: (sums[q], len(parts[q]), q))
        parts[r].append(i)
        sums[r] += loads[i]
    return [tuple(sorted(p)) for p in parts]


def partition_blocks(
    loads: Sequence[int] | torch.Tensor,
    world_size: int,
    block_size: int,
    *,
    strategy: str = "auto",
    threshold: float = DEFAULT_THRESHOLD,
) -> BlockPartition:
    """Splits the block indices ``0 .. len(loads) - 1`` over ``world_size`` ranks, balancing ``loads`` (the stored
    blocks of each index). See the module doc for the strategies; ``threshold`` is the ``max / mean`` up to which
    ``"auto"`` keeps a contiguous split."""
    if strategy not in _STRATEGIES:
        raise ValueError(f"sparsek: strategy {strategy!r} is not one of {', '.join(_STRATEGIES)}")
    if not threshold >= 1.0:
        raise ValueError(f"sparsek: threshold {threshold} must be >= 1 (it bounds max / mean)")
    if isinstance(loads, torch.Tensor):
        loads = loads.tolist()
    loads = [int(v) for v in loads]
    world = int(world_size)
    if world < 1:
        raise ValueError(f"sparsek: world size {world} must be >= 1")
    if any(v < 0 for v in loads):
        raise ValueError("sparsek: loads must be >= 0")
    if len(loads) < world:
        raise ValueError(
            f"sparsek: {len(loads)} blocks of {block_size} features cannot be split over {world} ranks (each rank "
            "needs at least one block): use fewer ranks or a smaller block size"
        )

    def make(parts, name):
        return BlockPartition(int(block_size), tuple(parts), tuple(sum(loads[i] for i in p) for p in parts), name)

    if strategy == "equal":
        n = len(loads)
        bounds = [n * r // world for r in range(world + 1)]
        return make([tuple(range(bounds[r], bounds[r + 1])) for r in range(world)], "equal")
    contiguous = make(_contiguous_split(loads, world), "contiguous")
    if strategy == "contiguous" or (strategy == "auto" and contiguous.imbalance <= threshold):
        return contiguous
    greedy = make(_greedy_split(loads, world), "greedy")
    if strategy == "greedy" or max(greedy.loads) < max(contiguous.loads):
        return greedy
    return contiguous


def block_row_loads(layer: BlockSparseLinear) -> torch.Tensor:
    """Stored blocks of each block row (int64, ``out_features / block_size``)."""
    crow = layer.crow_indices.detach().cpu().long()
    return crow[1:] - crow[:-1]


def block_col_loads(layer: BlockSparseLinear) -> torch.Tensor:
    """Stored blocks of each block column (int64, ``in_features / block_size``)."""
    return torch.bincount(layer.col_indices.detach().cpu().long(), minlength=layer.in_features // layer.block_size)


# ---------------------------------------------------------------------------------------------------------------
# Slicing and reassembling BSR weights (on the host's copy of the indices; the values stay on their device).


def _rows_of(crow: torch.Tensor) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(crow.shape[0] - 1), crow[1:] - crow[:-1])


def _take_rows(layer: BlockSparseLinear, rows: Sequence[int]):
    """``(values, crow, col)`` of the block rows ``rows`` (in that order)."""
    crow = layer.crow_indices.detach().cpu().long()
    rows_t = torch.tensor(list(rows), dtype=torch.int64)
    counts = crow[rows_t + 1] - crow[rows_t]
    idx = torch.cat([torch.arange(int(crow[r]), int(crow[r + 1])) for r in rows] or [torch.zeros(0, dtype=torch.int64)])
    new_crow = torch.zeros(len(rows) + 1, dtype=torch.int64)
    new_crow[1:] = counts.cumsum(0)
    col = layer.col_indices.detach().cpu().long()[idx]
    values = layer.values.detach().index_select(0, idx.to(layer.values.device))
    return values, new_crow, col


def _take_cols(layer: BlockSparseLinear, cols: Sequence[int]):
    """``(values, crow, col)`` of the block columns ``cols`` (ascending), renumbered ``0 .. len(cols) - 1``."""
    crow = layer.crow_indices.detach().cpu().long()
    col = layer.col_indices.detach().cpu().long()
    where = torch.full((layer.in_features // layer.block_size,), -1, dtype=torch.int64)
    where[torch.tensor(list(cols), dtype=torch.int64)] = torch.arange(len(cols))
    new_col = where[col]
    keep = new_col >= 0
    rows = _rows_of(crow)[keep]
    new_crow = torch.zeros(crow.shape[0], dtype=torch.int64)
    new_crow[1:] = torch.bincount(rows, minlength=crow.shape[0] - 1).cumsum(0)
    idx = keep.nonzero()[:, 0]
    values = layer.values.detach().index_select(0, idx.to(layer.values.device))
    return values, new_crow, new_col[keep]


def layer_from_state_dict(state_dict: dict, in_features: int, out_features: int, activation: str | None = None,
                          io_dtype: torch.dtype | None = None) -> BlockSparseLinear:
    """A whole :class:`BlockSparseLinear` from its state dict (``values``, ``crow_indices``, ``col_indices``,
    optional ``bias``); the shape is not in the state dict, so it is given. The structure is validated."""
    return BlockSparseLinear(
        in_features, out_features, state_dict["values"].shape[-1], state_dict["values"], state_dict["crow_indices"],
        state_dict["col_indices"], state_dict.get("bias"), activation, index_dtype=state_dict["crow_indices"].dtype,
        io_dtype=io_dtype,
    )


def _group_info(group) -> tuple[int, int]:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("sparsek: torch.distributed is not initialized (call init_process_group first)")
    return dist.get_world_size(group), dist.get_rank(group)


def _check_layer(layer) -> None:
    if not isinstance(layer, BlockSparseLinear) or isinstance(layer, _ShardBase):
        raise TypeError(f"sparsek: a shard is built from a whole BlockSparseLinear, not {type(layer).__name__}")


_ACT = {
    None: lambda y: y,
    "identity": lambda y: y,
    "relu": torch.relu,
    "gelu_tanh": lambda y: torch.nn.functional.gelu(y, approximate="tanh"),
    "silu": torch.nn.functional.silu,
}


def _structure_digest(layer: BlockSparseLinear) -> tuple:
    crow, col = layer.crow_indices.detach().cpu().contiguous(), layer.col_indices.detach().cpu().contiguous()
    h = hashlib.sha256(crow.numpy().tobytes())
    h.update(col.numpy().tobytes())
    return (layer.out_features, layer.in_features, layer.block_size, str(crow.dtype), str(col.dtype), h.hexdigest())


def _fingerprintable(t) -> bool:
    """A plain tensor with data: not a DTensor (distributed values, e.g. by FSDP2, which their checkpoint places)
    and not on the meta device."""
    dtensor = _dtensor_class()
    return isinstance(t, torch.Tensor) and not (dtensor is not None and isinstance(t, dtensor)) and not t.is_meta


def _fingerprint(values: torch.Tensor, crow: torch.Tensor, col: torch.Tensor) -> dict:
    """What a shard's saved tensors are: their shapes and dtypes, a digest of the indices and of 64 values sampled
    evenly (bits), so that a load tells them from another rank's (a few small copies to the host, no pass over the
    values)."""
    h = hashlib.sha256()
    for t in (crow, col):
        h.update(t.detach().to("cpu", torch.int64).contiguous().numpy().tobytes())
    flat = values.detach().reshape(-1)
    sample = flat[:: max(1, flat.numel() // 64)][:64].cpu().contiguous()
    h.update(sample.view(torch.uint8).numpy().tobytes())
    return {"values": [list(values.shape), str(values.dtype)], "digest": h.hexdigest()}


def check_same_structure(module: torch.nn.Module, group=None) -> None:
    """Raises ``ValueError`` (on every rank of ``group``, a collective) unless each :class:`BlockSparseLinear` of
    ``module`` (tensor-parallel shards excepted: they differ by design) has the same shape, block size, index dtypes,
    ``crow_indices`` and ``col_indices`` on every rank, and the ranks hold the same such layers.

    Data parallelism needs one structure everywhere, and neither wrapper guarantees it: ``DistributedDataParallel``
    copies rank 0's buffers (the index tensors among them) at construction only with ``broadcast_buffers=True``,
    which also re-broadcasts them before every forward (each time moving their version counters, which makes the
    CUDA path check the structure again: a device synchronisation per layer and step); with
    ``broadcast_buffers=False`` it copies rank 0's *values* into each rank's own pattern, and FSDP2's
    ``fully_shard`` copies nothing. Build the model the same way on every rank (same seed, same state dict), call
    this once, then wrap with ``broadcast_buffers=False`` or ``fully_shard``."""
    world, _ = _group_info(group)
    mine = [(name, _structure_digest(m)) for name, m in module.named_modules()
            if isinstance(m, BlockSparseLinear) and not isinstance(m, _ShardBase)]
    every: list = [None] * world
    dist.all_gather_object(every, mine, group=group)
    bad = []
    for r, theirs in enumerate(every):
        if [n for n, _ in theirs] != [n for n, _ in every[0]]:
            bad.append(f"rank {r} holds other BlockSparseLinear layers than rank 0")
            continue
        bad += [f"{n or '(the module)'} on rank {r}" for (n, d), (_, d0) in zip(theirs, every[0]) if d != d0]
    if bad:
        raise ValueError("sparsek: the block-sparse structure differs from rank 0's: " + ", ".join(bad[:8])
                         + (f" and {len(bad) - 8} more" if len(bad) > 8 else ""))


# ---------------------------------------------------------------------------------------------------------------
# Collectives with Megatron's gradients (see the module doc, "Training"). Each is used only where a gradient can flow
# through it (grad mode on and the tensor requiring grad); otherwise the shards call the plain collective, as before.


def _needs_grad(t: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and t.requires_grad


class _CopyToParallel(torch.autograd.Function):
    """Forward: the replicated input as it is; backward: its gradient summed over the group (each rank's shard
    contributed only its part of the weight's)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad, None


class _ReduceFromParallel(torch.autograd.Function):
    """Forward: the partial outputs summed over the group (all-reduce); backward: the output's gradient unchanged
    (every rank's loss sees the same, replicated output)."""

    @staticmethod
    def forward(ctx, partial, group):
        out = partial.clone() if partial._is_view() else partial
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
        if out is partial:
            ctx.mark_dirty(partial)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherFromParallel(torch.autograd.Function):
    """Forward: the ranks' (padded, equally wide) parts concatenated along the last dimension (all-gather);
    backward: this rank's part of the gradient."""

    @staticmethod
    def forward(ctx, part, group, rank, world):
        ctx.rank, ctx.width = rank, part.shape[-1]
        part = part.contiguous()
        parts = [torch.empty_like(part) for _ in range(world)]
        dist.all_gather(parts, part, group=group)
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx, grad):
        return grad.narrow(-1, ctx.rank * ctx.width, ctx.width), None, None, None


# ---------------------------------------------------------------------------------------------------------------
# Shards.


def _token_dim(dim: int, x: torch.Tensor, what: str) -> int:
    """``dim`` (a token dimension, negative from the end) as an index of ``x``'s dimensions; the last one holds
    the features and is refused."""
    d = dim + x.dim() if dim < 0 else dim
    if not 0 <= d < x.dim() - 1:
        raise ValueError(f"sparsek: sequence_dim={dim} is not a token dimension of the {what} of shape "
                         f"{tuple(x.shape)} (the last one holds the features)")
    return d


@functools.lru_cache(maxsize=None)
def _dtensor_class():
    """torch's DTensor class, or ``None``; looked up once (every shard's forward asks)."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch without distributed tensors
        return None
    return DTensor


class _ShardBase(BlockSparseLinear):
    """A rank's shard: a :class:`BlockSparseLinear` over the rank's part of the weight, with the group, the
    partition and the whole layer's shape. Its ``state_dict`` is the shard's own (``values``, ``crow_indices``,
    ``col_indices``, ``bias``) plus ``_extra_state`` (layout, rank, world size, partition): load it into the same
    rank's shard of the same partition (anything else is refused before anything changes). :meth:`full_state_dict`
    gathers the whole layer's; :meth:`load_full_state_dict` takes a whole one and keeps this shard's slice."""

    _layout = ""

    def _setup(self, group, rank: int, partition: BlockPartition, full_in: int, full_out: int) -> None:
        self.group = group
        self.rank = rank
        self.partition = partition
        self.full_in_features = full_in
        self.full_out_features = full_out

    def _requires_grad_as(self, layer: BlockSparseLinear) -> None:
        """The shard's parameters require grad where the whole layer's (or the previous shard's) did."""
        self.values.requires_grad_(layer.values.requires_grad)
        if self.bias is not None and layer.bias is not None:
            self.bias.requires_grad_(layer.bias.requires_grad)

    @property
    def world_size(self) -> int:
        return self.partition.world_size

    @property
    def imbalance(self) -> float:
        """``max / mean`` of the ranks' stored blocks under this shard's partition (for this layer alone)."""
        return self.partition.imbalance

    def extra_repr(self) -> str:
        seq = "" if getattr(self, "sequence_dim", None) is None else f", sequence_dim={self.sequence_dim}"
        return (
            f"{super().extra_repr()}, {self._layout}-parallel rank {self.rank}/{self.world_size} of "
            f"{self.full_out_features}x{self.full_in_features}, {self.partition.strategy} partition, "
            f"imbalance={self.imbalance:.3f}{seq}"
        )

    # DTensor inputs (from torch's styles, e.g. PrepareModuleInput or SequenceParallel) and outputs.

    def _local_input(self, x):
        """``x`` as the plain tensor this shard computes on. A ``DTensor`` on a 1-D mesh: replicated, its local
        tensor; sharded along this column shard's ``sequence_dim`` (evenly), its local tokens (gathered by
        ``forward``); otherwise redistributed to replicated first (DTensor's own collective, differentiable). A row
        shard takes a ``DTensor`` only as its whole input (``input_is_parallel=False``): its parallel input is its
        partition's features, which no ``DTensor`` placement describes."""
        dtensor = _dtensor_class()
        if dtensor is None or not isinstance(x, dtensor):
            return x
        if x.device_mesh.ndim != 1:
            raise ValueError(f"sparsek: the input is a DTensor on a {x.device_mesh.ndim}-D mesh; the block-sparse "
                             "shards take a 1-D (tensor-parallel) mesh's")
        p = x.placements[0]
        if self._layout == "row" and self.input_is_parallel:
            raise ValueError(f"sparsek: this row-parallel shard takes a plain tensor of its partition's features (e.g. "
                             f"the column shard's output), not a DTensor placed {p} (a balanced partition is not "
                             "DTensor's even split of the features); for the whole input build it with "
                             "input_is_parallel=False")
        if p.is_replicate():
            return x.to_local()
        seq = getattr(self, "sequence_dim", None)
        if self._layout == "column" and p.is_shard() and seq is not None:
            d = _token_dim(seq, x, "input")
            if d == (p.dim + x.dim() if p.dim < 0 else p.dim):
                if x.shape[d] % self.world_size:
                    raise ValueError(f"sparsek: the input's {x.shape[d]} tokens along sequence_dim={seq} are not "
                                     f"split evenly over {self.world_size} ranks (the all-gather takes equal "
                                     "shares)")
                return x.to_local()
        from torch.distributed.tensor import Replicate

        return x.redistribute(x.device_mesh, [Replicate()]).to_local()

    def _output(self, y: torch.Tensor):
        """``y``, or with ``use_local_output=False`` (the styles') a ``DTensor`` on the style's mesh placed as the
        output is: sharded along ``sequence_dim`` or replicated."""
        placement = getattr(self, "_output_placement", None)
        if placement is None:
            return y
        from torch.distributed.tensor import DTensor

        return DTensor.from_local(y, self._mesh, [placement], run_check=False)

    # State.

    def _identity(self) -> dict:
        return {"layout": self._layout, "rank": self.rank, "world_size": self.world_size,
                "full_shape": (self.full_out_features, self.full_in_features),
                "ranks": [list(r) for r in self.partition.ranks]}

    def get_extra_state(self):
        # "tensors": what the saved values and indices are, so that a load can tell them from another rank's (not
        # for values that are themselves distributed, e.g. by FSDP2: their checkpoint places them).
        if not _fingerprintable(self.values):
            return self._identity()
        return self._identity() | {"tensors": _fingerprint(self.values, self.crow_indices, self.col_indices)}

    def set_extra_state(self, state) -> None:
        self._check_extra_state(state)

    def _check_extra_state(self, state) -> None:
        mine = self._identity()
        if not isinstance(state, dict) or any(state.get(k) != v for k, v in mine.items()):
            diff = [k for k in mine if not isinstance(state, dict) or state.get(k) != mine[k]]
            raise ValueError(f"sparsek: mismatched shard state dict ({', '.join(diff)} differ from this shard's)")

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        key = prefix + "_extra_state"
        if key in state_dict:
            state = state_dict[key]
            try:
                self._check_extra_state(state)
                saved = state.get("tensors")
                names = [prefix + n for n in ("values", "crow_indices", "col_indices")]
                if (saved is not None and all(n in state_dict for n in names)
                        and all(_fingerprintable(state_dict[n]) for n in names)):
                    if _fingerprint(*(state_dict[n] for n in names)) != saved:
                        raise ValueError(
                            "sparsek: this shard state dict's values and indices are not the ones its _extra_state "
                            "was saved with (another rank's shard: torch.distributed.checkpoint keeps one copy of a "
                            "plain tensor saved under the same name on every rank; save shards with "
                            "sparsek.distributed.dcp_state_dict, or per rank with torch.save)")
            except ValueError as e:
                error_msgs.append(f"{prefix}: {e}")
                return
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def _local_components(self) -> dict:
        return {k: v.detach().cpu() for k, v in (("values", self.values), ("crow_indices", self.crow_indices),
                                                  ("col_indices", self.col_indices), ("bias", self.bias))
                if v is not None}

    def full_layer(self) -> BlockSparseLinear:
        """The whole layer, gathered from every rank (a collective: every rank calls it), on this shard's
        device."""
        parts: list = [None] * self.world_size
        dist.all_gather_object(parts, self._local_components(), group=self.group)
        values, crow, col, bias = self._assemble(parts)
        device = self.values.device
        return BlockSparseLinear(
            self.full_in_features, self.full_out_features, self.block_size, values.to(device), crow.to(device),
            col.to(device), None if bias is None else bias.to(device), self.activation,
            index_dtype=self.crow_indices.dtype, io_dtype=self.io_dtype,
        )

    def full_state_dict(self) -> dict:
        """The whole :class:`BlockSparseLinear`'s state dict (a collective: every rank calls it)."""
        return self.full_layer().state_dict()

    def load_full_state_dict(self, state_dict: dict) -> None:
        """Loads this rank's slice of a whole layer's state dict (same shape and block size), keeping the
        partition (a partner layer may depend on it). Validated before anything changes."""
        whole = layer_from_state_dict(state_dict, self.full_in_features, self.full_out_features)
        if whole.block_size != self.block_size:
            raise ValueError(f"sparsek: the state dict holds {whole.block_size}-blocks; the shard {self.block_size}")
        shard = self._slice(whole)
        flags = (self.values.requires_grad, None if self.bias is None else self.bias.requires_grad)
        self.load_state_dict(shard.state_dict(), strict=False)
        # load_state_dict replaces the parameters with frozen ones: keep training what was trained.
        self.values.requires_grad_(flags[0])
        if self.bias is not None and flags[1] is not None:
            self.bias.requires_grad_(flags[1])

    def _assemble(self, parts):
        """``(values, crow, col, bias)`` of the whole layer from every rank's ``_local_components``."""
        rows, cols, values = [], [], []
        for r, part in enumerate(parts):
            crow, col = part["crow_indices"].long(), part["col_indices"].long()
            local_rows = _rows_of(crow)
            idx = torch.tensor(self.partition.ranks[r], dtype=torch.int64)
            if self._layout == "column":
                rows.append(idx[local_rows])
                cols.append(col)
            else:
                rows.append(local_rows)
                cols.append(idx[col])
            values.append(part["values"])
        rows_t, cols_t, values_t = torch.cat(rows), torch.cat(cols), torch.cat(values)
        n_cols = self.full_in_features // self.block_size
        order = torch.argsort(rows_t * n_cols + cols_t)
        crow = torch.zeros(self.full_out_features // self.block_size + 1, dtype=torch.int64)
        crow[1:] = torch.bincount(rows_t, minlength=crow.shape[0] - 1).cumsum(0)
        bias = None
        if "bias" in parts[0]:
            if self._layout == "column":
                bias = parts[0]["bias"].new_empty(self.full_out_features)
                for r, part in enumerate(parts):
                    bias[self.partition.features(r)] = part["bias"]
            else:
                bias = parts[0]["bias"]
        return values_t[order], crow, cols_t[order], bias

    def _slice(self, whole: BlockSparseLinear) -> "_ShardBase":
        raise NotImplementedError


class ColumnParallelBlockSparseLinear(_ShardBase):
    """A rank's column-parallel shard (made by :func:`column_parallel`): its block rows of the weight and their
    bias entries; ``forward`` takes the whole input ``(..., in_features)`` and returns this rank's output features
    ``(..., out_features)`` (``partition.features(rank)`` of the whole layer's), or with ``gather_output`` the
    whole ``(..., full_out_features)`` in the original order (one all-gather). The activation is fused (it is
    elementwise on the output)."""

    _layout = "column"

    @classmethod
    def _build(cls, layer, group, rank, partition, gather_output, sequence_dim=None):
        values, crow, col = _take_rows(layer, partition.ranks[rank])
        bias = None
        if layer.bias is not None:
            bias = layer.bias.detach().index_select(0, partition.features(rank).to(layer.bias.device))
        device = layer.values.device
        self = cls(layer.in_features, len(partition.ranks[rank]) * layer.block_size, layer.block_size, values,
                   crow.to(device), col.to(device), bias, layer.activation, index_dtype=layer.crow_indices.dtype,
                   io_dtype=layer.io_dtype)
        self._setup(group, rank, partition, layer.in_features, layer.out_features)
        self._requires_grad_as(layer)
        self.gather_output = bool(gather_output)
        self.sequence_dim = sequence_dim
        # The all-gather pads each rank's part to the largest; `_gather_index` picks the features back in order.
        bs, width = partition.block_size, max(len(r) for r in partition.ranks) * partition.block_size
        index = torch.empty(layer.out_features, dtype=torch.int64)
        for r in range(partition.world_size):
            feats = partition.features(r)
            index[feats] = r * width + torch.arange(len(partition.ranks[r]) * bs)
        self._width = width
        # No index map when the ranks' parts are in order and of one width (nothing padded, nothing permuted).
        self._in_order = partition.contiguous and len({len(r) for r in partition.ranks}) == 1
        self.register_buffer("_gather_index", index.to(device), persistent=False)
        return self

    def _slice(self, whole):
        return type(self)._build(whole, self.group, self.rank, self.partition, self.gather_output, self.sequence_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self._local_input(x)
        if self.sequence_dim is not None:
            # This rank's tokens: every rank's gathered along sequence_dim (x's gradient: the ranks' summed, this
            # rank's tokens of it).
            d = _token_dim(self.sequence_dim, x, "input")
            if self.world_size > 1:
                x = (_GatherTokens.apply(x, self.group, self.rank, self.world_size, d) if _needs_grad(x)
                     else _all_gather_dim(x, d, self.group, self.world_size))
        elif self.world_size > 1 and _needs_grad(x):
            x = _CopyToParallel.apply(x, self.group)  # x's gradient: the ranks' parts summed
        y = super().forward(x)
        if not self.gather_output or self.world_size == 1:
            return y
        pad = self._width - y.shape[-1]
        if pad:
            y = torch.nn.functional.pad(y, (0, pad))
        if _needs_grad(y):
            whole = _GatherFromParallel.apply(y, self.group, self.rank, self.world_size)
        else:
            y = y.contiguous()
            parts = [torch.empty_like(y) for _ in range(self.world_size)]
            dist.all_gather(parts, y, group=self.group)
            whole = torch.cat(parts, dim=-1)
        return whole if self._in_order else whole.index_select(-1, self._gather_index)


class RowParallelBlockSparseLinear(_ShardBase):
    """A rank's row-parallel shard (made by :func:`row_parallel`): its block columns of the weight, renumbered, and
    the whole bias. ``forward`` takes this rank's input features ``(..., in_features)`` (``partition.features(rank)``
    of the whole layer's, in that order), or with ``input_is_parallel=False`` the whole input (the shard picks its
    features); the partial product (float32 accumulation, kept in float32) is all-reduced (sum) over the group and
    the bias and activation are applied once after the sum, in float32, then rounded once to the output dtype; with
    ``reduce_dtype`` (the layer's 16-bit type, see :func:`row_parallel`) the partial is rounded to it and the sum
    and activation run in it (the bias: added after the sum where autograd records the forward, else in the first
    rank's partial, once)."""

    _layout = "row"

    @classmethod
    def _build(cls, layer, group, rank, partition, input_is_parallel, reduce_dtype=None, comm="auto",
               sequence_dim=None):
        values, crow, col = _take_cols(layer, partition.ranks[rank])
        device = layer.values.device
        self = cls(len(partition.ranks[rank]) * layer.block_size, layer.out_features, layer.block_size, values,
                   crow.to(device), col.to(device), None if layer.bias is None else layer.bias.detach(),
                   layer.activation, index_dtype=layer.crow_indices.dtype, io_dtype=layer.io_dtype)
        self._setup(group, rank, partition, layer.in_features, layer.out_features)
        self._requires_grad_as(layer)
        self.input_is_parallel = bool(input_is_parallel)
        self.reduce_dtype = _check_reduce_dtype(reduce_dtype, self.io_dtype)
        self.comm = comm
        self.sequence_dim = sequence_dim
        self._symm = _Symmetric(comm, group, rank, partition.world_size)
        self.register_buffer("_input_index", partition.features(rank).to(device), persistent=False)
        return self

    def _slice(self, whole):
        return type(self)._build(whole, self.group, self.rank, self.partition, self.input_is_parallel,
                                 self.reduce_dtype, self.comm, self.sequence_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._output(self._forward(self._local_input(x)))

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        values = self.values
        if x.dtype not in (values.dtype, self.io_dtype):
            raise TypeError(f"sparsek: x is {x.dtype}; this layer takes {self.io_dtype} or its values' {values.dtype}")
        if not self.input_is_parallel:
            if x.shape[-1] != self.full_in_features:
                raise ValueError(f"sparsek: x has {x.shape[-1]} features; the whole layer takes "
                                 f"{self.full_in_features}")
            if self.world_size > 1 and _needs_grad(x):
                x = _CopyToParallel.apply(x, self.group)  # x's gradient: the ranks' features put together
            x = x.index_select(-1, self._input_index)
        elif x.shape[-1] != self.in_features:
            raise ValueError(f"sparsek: x has {x.shape[-1]} features; this rank's shard takes {self.in_features} "
                             "(its partition's input features)")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).to(values.dtype)
        rdt = torch.float32 if self.reduce_dtype is None else self.reduce_dtype
        if self.sequence_dim is not None:
            d = _token_dim(self.sequence_dim, x, "input")
            if lead[d] % self.world_size:
                raise ValueError(f"sparsek: the input's {lead[d]} tokens along sequence_dim={self.sequence_dim} do "
                                 f"not split evenly over {self.world_size} ranks")
            return self._forward_sequence(x2, lead, d, rdt, x.dtype)
        bias = self.bias
        if not (_needs_grad(x2) or _needs_grad(values) or (bias is not None and _needs_grad(bias))):
            return self._forward_no_grad(x2, rdt, x.dtype).reshape(*lead, self.out_features)
        # With autograd: y^T = W_local @ x^T in float32, or rounded to reduce_dtype (x^T read through a transposed
        # view; no copy on CUDA). The sum is elementwise, so y^T is all-reduced as it is and transposed once, at
        # the end, in the output dtype.
        partial = torch.ops.sparsek.bsr_mm(values, self.crow_indices, self.col_indices, self.out_features,
                                           self.in_features, x2.t(), 1.0, rdt)
        if self.world_size > 1:
            if _needs_grad(partial):
                partial = _ReduceFromParallel.apply(partial, self.group)
            else:
                dist.all_reduce(partial, op=dist.ReduceOp.SUM, group=self.group)
        y = partial.t()
        if self.bias is not None:
            y = y + self.bias.to(rdt)
        y = _ACT[self.activation](y)
        # One pass: rounded to the output dtype and made row-major (`to` with a memory format keeps a transposed
        # view of an unchanged dtype as it is).
        out = torch.empty(y.shape, dtype=x.dtype, device=y.device)
        out.copy_(y)
        return out.reshape(*lead, self.out_features)

    def _forward_sequence(self, x2, lead, d, rdt, out_dtype):
        """The output split by tokens (``sequence_dim``, Megatron's sequence parallelism): the partial products
        reduce-scattered along ``d`` (NCCL's collective, or gloo's all-reduce), this rank's tokens of the sum, then
        the bias and activation on them. Where nothing needs a gradient, in the 16-bit ``reduce_dtype``, the bias
        rides in the first rank's partial (added once in the sum)."""
        world, group, rank = self.world_size, self.group, self.rank
        v, c, i, bias = self.values, self.crow_indices, self.col_indices, self.bias
        grad = _needs_grad(x2) or _needs_grad(v) or (bias is not None and _needs_grad(bias))
        in_partial = not grad and rdt != torch.float32
        if grad:
            partial = torch.ops.sparsek.bsr_mm(v, c, i, self.out_features, self.in_features, x2.t(), 1.0, rdt).t()
        else:
            partial = _row_partial(self, x2, rdt, bias if in_partial and rank == 0 else None)
        y = partial.reshape(*lead, self.out_features)
        if world > 1:
            y = (_ScatterTokens.apply(y, group, rank, world, d) if _needs_grad(y)
                 else _reduce_scatter_dim(y, d, group, rank, world))
        if bias is not None and not in_partial:
            if world > 1 and _needs_grad(bias):
                # Every rank adds the whole bias to its own tokens: its gradient is the sum over the ranks' tokens.
                bias = _CopyToParallel.apply(bias, group)
            y = y + bias.to(rdt)
        y = _ACT[self.activation](y)
        out = torch.empty(y.shape, dtype=out_dtype, device=y.device)
        out.copy_(y)  # rounded once, row-major
        return out

    def _forward_no_grad(self, x2, rdt, out_dtype):
        """The forward where nothing needs a gradient: the partial product written row-major by the kernel (no
        transposed pass: on two H200s the transposing copy and bias add of a 4096 x 4096 output took 0.16 ms, more
        than the bf16 all-reduce itself), all-reduced, then the bias and activation. In the 16-bit ``reduce_dtype``
        the bias rides in the first rank's partial (``sparsek::linear``: added once in the sum, no pass of its
        own)."""
        if self.world_size > 1:
            specs = {"R": (rdt, self.out_features), "G": (out_dtype, self.out_features)}
            rows = -(-x2.shape[0] // self.world_size)
            ex = self._symm.get(x2, x2.shape[0], rows, specs)
            if ex is not None:
                return self._forward_symmetric(x2, rdt, out_dtype, ex)
        # In the 16-bit reduce_dtype the bias rides in the first rank's partial; in float32 it is added after the sum.
        in_partial = rdt != torch.float32
        y = _row_partial(self, x2, rdt, self.bias if in_partial and self.rank == 0 else None)
        if self.world_size > 1:
            dist.all_reduce(y, op=dist.ReduceOp.SUM, group=self.group)
        if not in_partial and self.bias is not None:
            y.add_(self.bias.float())
        return _ACT[self.activation](y).to(out_dtype)

    def _forward_symmetric(self, x2, rdt, out_dtype, ex):
        """The no-grad forward through symmetric memory (``comm``): the tokens in ``world`` contiguous chunks, one a
        rank. This rank's partial product of each peer's chunk is stored by the kernel straight into the peer's
        ``R`` (over NVLink), its own chunk's computed here with the bias; a barrier; the peers' partials added
        (this rank's chunk of the sum), the activation, the output dtype; that chunk copied into every peer's ``G``
        by the copy engines; a barrier; the peers' chunks copied out of ``G``. A reduce-scatter and an all-gather
        with no SM spent on communicating and no collective kernel."""
        x2 = x2.contiguous()
        t, world, rank = x2.shape[0], self.world_size, self.rank
        sizes = [t // world + (1 if q < t % world else 0) for q in range(world)]
        starts = [sum(sizes[:q]) for q in range(world)]
        mine = slice(starts[rank], starts[rank] + sizes[rank])
        peer_rows = [sizes[p] for p in ex.peers]
        own_rows = [sizes[rank]] * len(ex.peers)
        v, c, i = self.values, self.crow_indices, self.col_indices
        for p, r_to in zip(ex.peers, ex.to_peers("R", peer_rows)):
            if sizes[p]:
                xp = x2[starts[p]:starts[p] + sizes[p]]
                torch.ops.sparsek.bsr_mm_out(v, c, i, self.out_features, self.in_features, xp.t(), 1.0, 0.0,
                                             r_to.t())
        if sizes[rank]:
            y = _row_partial(self, x2[mine], rdt, self.bias)
        else:
            y = torch.empty(0, self.out_features, dtype=rdt, device=x2.device)
        ex.barrier("R")  # every peer's partial of this rank's chunk has landed
        for r_from in ex.from_peers("R", own_rows):
            y.add_(r_from)
        out = torch.empty(t, self.out_features, dtype=out_dtype, device=x2.device)
        out_mine = out[mine]
        out_mine.copy_(_ACT[self.activation](y))
        cur = torch.cuda.current_stream(x2.device)
        ex.side.wait_stream(cur)
        with torch.cuda.stream(ex.side):
            for g_to in ex.to_peers("G", own_rows):
                g_to.copy_(out_mine)
        cur.wait_stream(ex.side)
        ex.barrier("G")  # every peer's chunk of the output has landed
        for p, g_from in zip(ex.peers, ex.from_peers("G", peer_rows)):
            out[starts[p]:starts[p] + sizes[p]].copy_(g_from)
        return out


def _shard_modules(model: torch.nn.Module) -> dict:
    """``{state-dict prefix: shard}`` for every shard in ``model``."""
    return {(name + "." if name else ""): m for name, m in model.named_modules() if isinstance(m, _ShardBase)}


def _split_key(key: str, shards: dict):
    """``(prefix, shard, name)`` when ``key`` is one of a shard's own entries (``prefix + name``, no further dot),
    else ``None``."""
    prefix, _, name = key.rpartition(".")
    prefix = prefix + "." if prefix else ""
    shard = shards.get(prefix)
    return None if shard is None else (prefix, shard, name)


def dcp_state_dict(model: torch.nn.Module) -> dict:
    """``model.state_dict()`` made safe for ``torch.distributed.checkpoint``: every shard's own entries (values,
    indices, bias, ``_extra_state``) renamed ``<name>@rank<r>of<w>`` with the shard's rank and world size, so that
    the checkpoint keeps every rank's. ``torch.distributed.checkpoint`` treats a plain tensor saved under one name on
    every rank as replicated and keeps one copy: a shard's ``state_dict()`` given to it as it is loses the other
    ranks' shards (a load then refuses them: see the shards' ``_extra_state``). Everything else is left as it is
    (a ``BlockSparseLinear`` under FSDP2, whose parameters are DTensors, needs nothing). Save with
    ``dcp.save(dcp_state_dict(model), checkpoint_id=...)``; load into a model sharded the same way (same world size
    and partitions) with ``state = dcp_state_dict(model); dcp.load(state, checkpoint_id=...);
    load_dcp_state_dict(model, state)``. To change the world size, save the whole layers
    (``full_state_dict()``) instead."""
    shards = _shard_modules(model)
    out = {}
    for key, value in model.state_dict().items():
        hit = _split_key(key, shards)
        if hit is None:
            out[key] = value
        else:
            prefix, shard, name = hit
            out[f"{prefix}{name}@rank{shard.rank}of{shard.world_size}"] = value
    return out


def load_dcp_state_dict(model: torch.nn.Module, state_dict: dict, strict: bool = True):
    """Loads a state dict made by :func:`dcp_state_dict` (and filled by ``torch.distributed.checkpoint.load``) into
    ``model``: the shards' entries named back, then ``model.load_state_dict(..., strict)`` (whose result it
    returns). An entry of another rank or world size than the shard's is refused."""
    shards = _shard_modules(model)
    back = {}
    for key, value in state_dict.items():
        head, sep, tag = key.rpartition("@rank")
        if not sep:
            back[key] = value
            continue
        hit = _split_key(head, shards)
        if hit is None:
            raise ValueError(f"sparsek: {key!r} names no tensor-parallel shard of this model")
        prefix, shard, name = hit
        if tag != f"{shard.rank}of{shard.world_size}":
            raise ValueError(f"sparsek: {key!r} is rank {tag.replace('of', ' of ')}'s; this shard is rank "
                             f"{shard.rank} of {shard.world_size}")
        back[prefix + name] = value
    return model.load_state_dict(back, strict=strict)


# ---------------------------------------------------------------------------------------------------------------
# Building shards.


def _resolve(partition, loads, world, bs, strategy, threshold, what):
    if partition is None:
        return partition_blocks(loads, world, bs, strategy=strategy, threshold=threshold)
    if not isinstance(partition, BlockPartition):
        raise TypeError(f"sparsek: partition= takes a BlockPartition, not {type(partition).__name__}")
    partition.check(world, len(loads), bs, what)
    return partition


def column_parallel(layer: BlockSparseLinear, group=None, *, gather_output: bool = True,
                    partition: BlockPartition | None = None, strategy: str = "auto",
                    threshold: float = DEFAULT_THRESHOLD,
                    sequence_dim: int | None = None) -> ColumnParallelBlockSparseLinear:
    """This rank's column-parallel shard of ``layer`` (output features split by block rows) for ``group``
    (default: the world). ``partition``: use this one (of the block rows) instead of balancing the layer's;
    ``strategy`` / ``threshold``: see :func:`partition_blocks`. ``sequence_dim``: the input is split by tokens
    along this dimension (sequence parallelism: every rank passes its own tokens, all ranks the same shape) and
    ``forward`` all-gathers them first, in rank order (its backward reduce-scatters the input's gradient); default
    ``None``: every rank passes the whole input. No communication here (every rank holds ``layer``)."""
    _check_layer(layer)
    _check_sequence_dim(sequence_dim)
    world, rank = _group_info(group)
    loads = block_row_loads(layer)
    p = _resolve(partition, loads, world, layer.block_size, strategy, threshold, "the column layout (block rows)")
    return ColumnParallelBlockSparseLinear._build(layer, group, rank, p.with_loads(loads), gather_output, sequence_dim)


def _check_sequence_dim(sequence_dim) -> None:
    if sequence_dim is None:
        return
    if isinstance(sequence_dim, bool) or not isinstance(sequence_dim, int):
        raise TypeError(f"sparsek: sequence_dim takes an int or None, not {type(sequence_dim).__name__}")
    if sequence_dim == -1:
        raise ValueError("sparsek: sequence_dim=-1 is the features' dimension; the tokens' is another (e.g. 0 for "
                         "(tokens, features), 1 for (batch, sequence, features))")


def _check_reduce_dtype(reduce_dtype, io_dtype):
    if reduce_dtype is None or reduce_dtype == torch.float32:
        return None
    if reduce_dtype not in (torch.float16, torch.bfloat16) or reduce_dtype != io_dtype:
        raise ValueError(f"sparsek: reduce_dtype must be None (float32) or the layer's own 16-bit type {io_dtype}, "
                         f"got {reduce_dtype}")
    return reduce_dtype


def row_parallel(layer: BlockSparseLinear, group=None, *, input_is_parallel: bool = True,
                 partition: BlockPartition | None = None, strategy: str = "auto",
                 threshold: float = DEFAULT_THRESHOLD, reduce_dtype: torch.dtype | None = None,
                 comm: str = "auto", sequence_dim: int | None = None) -> RowParallelBlockSparseLinear:
    """This rank's row-parallel shard of ``layer`` (input features split by block columns) for ``group``.
    ``partition``: the partition of the input features, which must be the previous layer's output partition when
    it feeds this one without a gather (see :func:`shard_mlp`); default: balance this layer's block columns.
    ``input_is_parallel``: the input holds only this rank's features (default) or all of them.
    ``reduce_dtype``: ``None`` (default) all-reduces the partial products in float32 and rounds once after the
    bias and activation; the layer's 16-bit type (``torch.bfloat16`` / ``torch.float16``) rounds each rank's
    partial product to it and all-reduces half the bytes, bias and activation in that type (what Megatron and
    DTensor's row-parallel layers do; a few more roundings, docs/BENCHMARKS.md "Tensor parallel" has the speed);
    kept as the shard's ``reduce_dtype``. ``comm``: how the partials are summed where nothing needs a gradient:
    ``"nccl"`` (NCCL's all-reduce), ``"symmetric"`` (torch's symmetric memory: a reduce-scatter by the kernel's
    own stores into the peers' memory and an all-gather by the copy engines, no SM spent on communicating; CUDA and
    an NCCL group), ``"auto"`` (default: ``"symmetric"`` from :data:`SYMMETRIC_MIN_TOKENS` tokens where it
    applies and its buffers can be made, else ``"nccl"``). With autograd the all-reduce runs.
    ``sequence_dim``: the output is split by tokens along this dimension (sequence parallelism: the partials are
    reduce-scattered instead of all-reduced, each rank returns its ``1 / world`` of the tokens, in rank order, the
    bias and activation applied to them; the dimension's size must divide by the group's; NCCL's collective, or
    gloo's all-reduce, whatever ``comm`` says: :class:`SequenceParallelMLP` has the symmetric-memory schedule);
    default ``None``: every rank returns the whole output."""
    _check_layer(layer)
    _check_sequence_dim(sequence_dim)
    if comm not in _COMMS:
        raise ValueError(f"sparsek: comm must be one of {_COMMS}, got {comm!r}")
    world, rank = _group_info(group)
    loads = block_col_loads(layer)
    p = _resolve(partition, loads, world, layer.block_size, strategy, threshold, "the row layout (block columns)")
    return RowParallelBlockSparseLinear._build(layer, group, rank, p.with_loads(loads), input_is_parallel,
                                               reduce_dtype, comm, sequence_dim)


def _pair_partition(up, down, world, strategy, threshold, partition, gate=None):
    _check_layer(up)
    _check_layer(down)
    if up.out_features != down.in_features or up.block_size != down.block_size:
        raise ValueError(
            f"sparsek: up's outputs ({up.out_features}, blocks of {up.block_size}) must be down's inputs "
            f"({down.in_features}, blocks of {down.block_size})"
        )
    loads = block_row_loads(up) + block_col_loads(down)
    if gate is not None:
        _check_layer(gate)
        if (gate.in_features, gate.out_features, gate.block_size) != (up.in_features, up.out_features, up.block_size):
            raise ValueError(
                f"sparsek: gate ({gate.out_features}x{gate.in_features}, blocks of {gate.block_size}) must have up's "
                f"shape ({up.out_features}x{up.in_features}, blocks of {up.block_size}): their outputs are multiplied "
                "feature by feature"
            )
        loads = loads + block_row_loads(gate)
    return _resolve(partition, loads, world, up.block_size, strategy, threshold, "the MLP's shared dimension")


def shard_mlp(up: BlockSparseLinear, down: BlockSparseLinear, group=None, *, partition: BlockPartition | None = None,
              strategy: str = "auto", threshold: float = DEFAULT_THRESHOLD, reduce_dtype: torch.dtype | None = None,
              comm: str = "auto"):
    """``(up_shard, down_shard)``: ``up`` column-parallel without gather and ``down`` row-parallel on the same
    partition of the shared dimension (``up.out_features == down.in_features``), balanced on both layers' blocks
    together (each index's load: up's blocks in that block row plus down's in that block column). Between the two
    nothing is communicated (an elementwise function of up's output, e.g. its fused activation, may sit between);
    down's all-reduce is the block's only collective. Each shard's ``partition.loads`` / ``imbalance`` count its
    own layer's blocks; the pair's joint partition is ``pair_partition``. ``reduce_dtype`` and ``comm``: down's
    (see :func:`row_parallel`)."""
    world, _ = _group_info(group)
    p = _pair_partition(up, down, world, strategy, threshold, partition)
    up_shard = column_parallel(up, group, gather_output=False, partition=p)
    down_shard = row_parallel(down, group, input_is_parallel=True, partition=p, reduce_dtype=reduce_dtype, comm=comm)
    up_shard.pair_partition = down_shard.pair_partition = p
    return up_shard, down_shard


def shard_gated_mlp(gate: BlockSparseLinear, up: BlockSparseLinear, down: BlockSparseLinear, group=None, *,
                    partition: BlockPartition | None = None, strategy: str = "auto",
                    threshold: float = DEFAULT_THRESHOLD, reduce_dtype: torch.dtype | None = None,
                    comm: str = "auto"):
    """``(gate_shard, up_shard, down_shard)`` for a gated MLP ``down(act(gate(x)) * up(x))`` (LLaMA's, Mistral's
    and Qwen's SwiGLU: ``gate_proj``, ``up_proj``, ``down_proj``): ``gate`` and ``up`` column-parallel without
    gather and ``down`` row-parallel, all three on ONE partition of the hidden dimension, balanced on the three
    layers' blocks together (each hidden block's load: gate's and up's blocks in that block row plus down's in that
    block column). The product of the two column shards' outputs is elementwise, so it needs nothing from the other
    ranks: each rank computes ``act(gate_shard(x)) * up_shard(x)`` (the activation fused into ``gate`` or applied
    between) and passes it to ``down_shard``, whose all-reduce is the block's only collective. ``reduce_dtype`` and
    ``comm``: down's (see :func:`row_parallel`); reports and ``pair_partition`` as :func:`shard_mlp`'s."""
    world, _ = _group_info(group)
    p = _pair_partition(up, down, world, strategy, threshold, partition, gate=gate)
    gate_shard = column_parallel(gate, group, gather_output=False, partition=p)
    up_shard = column_parallel(up, group, gather_output=False, partition=p)
    down_shard = row_parallel(down, group, input_is_parallel=True, partition=p, reduce_dtype=reduce_dtype, comm=comm)
    gate_shard.pair_partition = up_shard.pair_partition = down_shard.pair_partition = p
    return gate_shard, up_shard, down_shard


# ---------------------------------------------------------------------------------------------------------------
# Sequence parallelism: the MLP pair with its input and output split by tokens.


def _is_nccl(group) -> bool:
    try:
        return dist.get_backend(group) == "nccl"
    except (RuntimeError, ValueError):  # pragma: no cover - not initialised: _group_info has refused it already
        return False


def _all_gather_rows(x: torch.Tensor, group, world: int) -> torch.Tensor:
    """The ranks' ``x`` (each the same shape) concatenated along dim 0, in rank order."""
    x = x.contiguous()
    if _is_nccl(group):
        out = x.new_empty(world * x.shape[0], *x.shape[1:])
        dist.all_gather_into_tensor(out, x, group=group)
        return out
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x, group=group)
    return torch.cat(parts)


def _reduce_scatter_rows(x: torch.Tensor, group, rank: int, world: int) -> torch.Tensor:
    """This rank's ``1 / world`` of dim 0 of the ranks' ``x`` summed."""
    n = x.shape[0] // world
    if _is_nccl(group):
        x = x.contiguous()
        out = x.new_empty(n, *x.shape[1:])
        dist.reduce_scatter_tensor(out, x, op=dist.ReduceOp.SUM, group=group)
        return out
    x = x.clone(memory_format=torch.contiguous_format)  # gloo has no reduce-scatter: the whole sum, then our rows
    dist.all_reduce(x, op=dist.ReduceOp.SUM, group=group)
    return x[rank * n:(rank + 1) * n].clone()


def _all_gather_dim(x: torch.Tensor, dim: int, group, world: int) -> torch.Tensor:
    """The ranks' ``x`` (each the same shape) concatenated along ``dim``, in rank order."""
    if dim == 0:
        return _all_gather_rows(x, group, world)
    return _all_gather_rows(x.movedim(dim, 0), group, world).movedim(0, dim)


def _reduce_scatter_dim(x: torch.Tensor, dim: int, group, rank: int, world: int) -> torch.Tensor:
    """This rank's ``1 / world`` of ``dim`` of the ranks' ``x`` summed."""
    if dim == 0:
        return _reduce_scatter_rows(x, group, rank, world)
    return _reduce_scatter_rows(x.movedim(dim, 0), group, rank, world).movedim(0, dim)


class _GatherTokens(torch.autograd.Function):
    """Forward: the ranks' token shards concatenated along ``dim`` (all-gather); backward: the gradient summed over
    the group, this rank's part of ``dim`` (reduce-scatter): each rank's shard used every token."""

    @staticmethod
    def forward(ctx, x, group, rank, world, dim):
        ctx.group, ctx.rank, ctx.world, ctx.dim = group, rank, world, dim
        return _all_gather_dim(x, dim, group, world)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_dim(grad, ctx.dim, ctx.group, ctx.rank, ctx.world), None, None, None, None


class _ScatterTokens(torch.autograd.Function):
    """Forward: the partial products summed over the group, this rank's part of ``dim`` (reduce-scatter);
    backward: the ranks' output gradients concatenated along ``dim`` (all-gather): every rank's partial reached
    every rank's tokens."""

    @staticmethod
    def forward(ctx, partial, group, rank, world, dim):
        ctx.group, ctx.world, ctx.dim = group, world, dim
        return _reduce_scatter_dim(partial, dim, group, rank, world)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather_dim(grad, ctx.dim, ctx.group, ctx.world), None, None, None, None


class _SymmetricExchange:
    """Symmetric-memory buffers (torch's ``_symmetric_memory``: every rank maps every peer's), each ``world`` slots
    of ``cap`` rows x a width, in a dtype (``specs``: name -> (dtype, width)); slot ``q`` of a rank's buffer holds
    what rank ``q`` sent it. Made collectively on first use (every rank calls it with the same shapes, as every rank
    runs the same forward)."""

    def __init__(self, group, rank, world, cap, specs, device):
        import torch.distributed._symmetric_memory as symm_mem

        group = dist.group.WORLD if group is None else group
        self.cap, self.rank, self.specs = cap, rank, dict(specs)
        self.bufs, self.handles = {}, {}
        for name, (dtype, width) in self.specs.items():
            buf = symm_mem.empty((world, cap, width), dtype=dtype, device=device)
            self.bufs[name], self.handles[name] = buf, symm_mem.rendezvous(buf, group)
        self.peers = [(rank + i) % world for i in range(1, world)]
        self.side = torch.cuda.Stream(device)
        self._views: dict = {}

    def fits(self, rows: int, specs) -> bool:
        return self.cap >= rows and self.specs == specs

    def to_peers(self, name: str, rows: Sequence[int]) -> list[torch.Tensor]:
        """Per peer (in ``peers`` order), this rank's slot in the peer's ``name`` buffer, ``rows[i]`` rows of it
        (views made once per row counts: a call's host time is what eager tensor parallelism waits on)."""
        key = ("to", name, tuple(rows))
        v = self._views.get(key)
        if v is None:
            dtype, width = self.specs[name]
            h = self.handles[name]
            v = self._views[key] = [h.get_buffer(p, (n, width), dtype, self.rank * self.cap * width)
                                    for p, n in zip(self.peers, rows)]
        return v

    def from_peers(self, name: str, rows: Sequence[int]) -> list[torch.Tensor]:
        """Per peer, the peer's slot in this rank's ``name`` buffer, ``rows[i]`` rows of it."""
        key = ("from", name, tuple(rows))
        v = self._views.get(key)
        if v is None:
            buf = self.bufs[name]
            v = self._views[key] = [buf[p, :n] for p, n in zip(self.peers, rows)]
        return v

    def barrier(self, name: str) -> None:
        """Every rank's stream reaches this point (a kernel on each GPU signalling every peer's pad of ``name``'s
        buffer): what a rank wrote into a peer's buffer before it has landed."""
        self.handles[name].barrier()


#: ``comm="auto"`` sums a row-parallel shard's partials through symmetric memory from this many tokens (the whole
#: batch's rows); below, NCCL's all-reduce, whose latency two barriers, a launch per peer and the extra copies do not
#: beat. Two H200s, the 4096 -> 11008 -> 4096 bf16 MLP block in CUDA graphs (python/bench/tp_comm_sweep.py,
#: docs/bench/2026-11-28-tp-comm-sweep-h200x2.md): all-reduce 0.124 / 0.201 / 0.355 ms at 1024 / 2048 / 4096 tokens,
#: symmetric 0.132 / 0.181 / 0.317.
SYMMETRIC_MIN_TOKENS = 2048

#: The same for :class:`SequenceParallelMLP` (its tokens across all ranks): the same sweep, NCCL's all-gather and
#: reduce-scatter 0.045 / 0.076 / 0.113 / 0.156 ms at 64 / 256 / 512 / 1024 tokens, symmetric 0.049 / 0.060 / 0.085 /
#: 0.111; set at 1024, where eager calls (host-bound on that machine below it: the symmetric path issues more
#: operations) are no longer the case to fear.
SYMMETRIC_MIN_TOKENS_SEQPAR = 1024


class _Symmetric:
    """A module's choice between torch's symmetric memory and NCCL's collectives (its ``comm``) and its buffers."""

    def __init__(self, comm: str, group, rank: int, world: int):
        if comm not in _COMMS:
            raise ValueError(f"sparsek: comm must be one of {_COMMS}, got {comm!r}")
        self.comm, self.group, self.rank, self.world = comm, group, rank, world
        self.nccl = world > 1 and _is_nccl(group)
        self.exchange: _SymmetricExchange | None = None
        # Replaced (smaller) exchanges stay alive with the module: a CUDA graph captured with one holds its device
        # addresses and would write into freed memory on replay (doubling keeps them under the largest's size).
        self.retired: list[_SymmetricExchange] = []
        self.failed: str | None = None

    def __deepcopy__(self, memo):
        return _Symmetric(self.comm, self.group, self.rank, self.world)  # buffers are per module, made on use

    def get(self, t: torch.Tensor, tokens: int, rows: int, specs, why_not: str | None = None,
            min_tokens: int | None = None):
        """The exchange for ``rows`` rows a slot of ``specs``, made (collectively) where it is missing or too small;
        ``None`` where the collectives run: ``comm="nccl"``, fewer than ``min_tokens`` (default
        :data:`SYMMETRIC_MIN_TOKENS`) ``tokens`` under ``"auto"``, an earlier failure, a CUDA graph being captured before the buffers exist, or ``why_not``
        / a CPU tensor / another backend than NCCL (``comm="symmetric"`` raises there)."""
        if self.comm == "nccl" or self.failed is not None or self.world == 1:
            return None
        if why_not is None:
            if not t.is_cuda:
                why_not = "the input is not on a CUDA device"
            elif not self.nccl:
                why_not = "the process group is not NCCL's"
        if why_not is not None:
            if self.comm == "symmetric":
                raise RuntimeError(f"sparsek: comm='symmetric' needs CUDA tensors, an NCCL group and the layers' "
                                   f"dtype: {why_not}")
            return None
        if self.comm == "auto" and tokens < (SYMMETRIC_MIN_TOKENS if min_tokens is None else min_tokens):
            return None
        ex = self.exchange
        if ex is not None and ex.fits(rows, specs):
            return ex
        if torch.cuda.is_current_stream_capturing():
            return None  # buffers cannot be made during a capture: the collectives are captured instead
        cap = max(rows, 2 * ex.cap if ex is not None and ex.specs == specs else rows)
        err = None
        try:
            ex = _SymmetricExchange(self.group, self.rank, self.world, cap, specs, t.device)
        except Exception as e:  # noqa: BLE001 - any failure to map the peers' memory: the collectives instead
            err = f"{type(e).__name__}: {e}"
        ok = torch.tensor([0 if err is None else 1], device=t.device)
        dist.all_reduce(ok, op=dist.ReduceOp.MAX, group=self.group)
        if int(ok.item()) != 0:
            self.failed = err or "another rank could not map the symmetric buffers"
            if self.comm == "symmetric":
                raise RuntimeError(f"sparsek: comm='symmetric': {self.failed}")
            import warnings

            warnings.warn(f"sparsek: symmetric memory unavailable, using NCCL collectives ({self.failed})",
                          RuntimeWarning, stacklevel=4)
            return None
        if self.exchange is not None:
            self.retired.append(self.exchange)
        self.exchange = ex
        return ex


def _row_partial(shard, x, rdt, bias):
    """``x @ W_local^T`` (+ ``bias``) row-major in ``rdt`` for a row-parallel shard (``x`` of its values' dtype):
    ``sparsek::linear`` in the values' dtype, else ``W_local @ x^T`` written by the kernel into the transposed view
    of a row-major ``rdt`` output (a column-major C it stores as it is)."""
    v, c, i = shard.values, shard.crow_indices, shard.col_indices
    if rdt == v.dtype:
        return torch.ops.sparsek.linear(x, v, c, i, shard.in_features, None if bias is None else bias.to(rdt), 0)
    y = torch.empty(x.shape[0], shard.out_features, dtype=rdt, device=x.device)
    torch.ops.sparsek.bsr_mm_out(v, c, i, shard.out_features, shard.in_features, x.t(), 1.0, 0.0, y.t())
    if bias is not None:
        y.add_(bias.to(rdt))
    return y


_COMMS = ("auto", "symmetric", "nccl")


class SequenceParallelMLP(torch.nn.Module):
    """A tensor-parallel MLP pair in the sequence-parallel layout (made by :func:`sequence_parallel_mlp`): ``up``
    column-parallel and ``down`` row-parallel on one partition of the hidden dimension, as :func:`shard_mlp` makes
    them, with the tokens split across the ranks at both ends (Megatron's sequence parallelism; DTensor's
    ``Shard(0)``). ``forward`` takes this rank's tokens ``(..., in_features)`` (its equal share of dim 0 of the whole
    input flattened to rows, every rank the same count) and returns the MLP's output for those tokens: the input is
    all-gathered, each rank computes its hidden features for every token and down's partial product, and the
    partials are reduce-scattered (sum) back to the tokens' ranks, then the bias and down's activation.

    ``comm``: ``"nccl"`` (all-gather and reduce-scatter collectives), ``"symmetric"`` (torch's symmetric memory:
    the input rows copied into the peers' buffers by the copy engines while up runs on this rank's own rows, the
    partial products of the peers' rows stored by the kernel straight into the peers' buffers over NVLink, one add
    per peer; no SMs spent on communicating, no collective kernel; where nothing needs a gradient, on CUDA with an
    NCCL group) or ``"auto"`` (the default: ``"symmetric"`` from :data:`SYMMETRIC_MIN_TOKENS_SEQPAR` tokens in
    all, where it applies and the buffers can be made, else ``"nccl"``). With autograd, or while a CUDA graph is captured before the buffers exist, the collectives run.
    The submodules ``up`` and ``down`` are the shards, with their own state dicts, reports and ``full_layer``."""

    def __init__(self, up: "ColumnParallelBlockSparseLinear", down: "RowParallelBlockSparseLinear",
                 comm: str = "auto"):
        super().__init__()
        if comm not in _COMMS:
            raise ValueError(f"sparsek: comm must be one of {_COMMS}, got {comm!r}")
        if up.out_features != down.in_features or up.partition.ranks != down.partition.ranks:
            raise ValueError("sparsek: up and down must be shards of one partition of the hidden dimension "
                             "(build them with sequence_parallel_mlp or shard_mlp)")
        self.up, self.down = up, down
        self.comm = comm
        self._symm = _Symmetric(comm, down.group, down.rank, down.world_size)

    @property
    def group(self):
        return self.down.group

    @property
    def rank(self) -> int:
        return self.down.rank

    @property
    def world_size(self) -> int:
        return self.down.world_size

    def extra_repr(self) -> str:
        return f"sequence-parallel, comm={self.comm!r}"

    def full_state_dict(self) -> dict:
        """The whole pair's state: the whole layers' state dicts under ``up.`` and ``down.`` (a collective: every
        rank calls it), as an unsharded ``up`` / ``down`` module pair would save them."""
        return ({f"up.{k}": v for k, v in self.up.full_state_dict().items()}
                | {f"down.{k}": v for k, v in self.down.full_state_dict().items()})

    def load_full_state_dict(self, state_dict: dict) -> None:
        """Loads this rank's slices of a whole pair's state dict (keys under ``up.`` and ``down.``, as
        :meth:`full_state_dict` writes them), keeping the partition; both halves are validated before either
        changes."""
        parts = {"up": {}, "down": {}}
        for k, v in state_dict.items():
            head, _, rest = k.partition(".")
            if head not in parts or not rest:
                raise ValueError(f"sparsek: unexpected key {k!r} in the pair's state dict (keys under 'up.' and "
                                 "'down.')")
            parts[head][rest] = v
        for name, shard in (("up", self.up), ("down", self.down)):
            whole = layer_from_state_dict(parts[name], shard.full_in_features, shard.full_out_features)
            if whole.block_size != shard.block_size:
                raise ValueError(f"sparsek: the state dict's {name} holds {whole.block_size}-blocks; the shard "
                                 f"{shard.block_size}")
        self.up.load_full_state_dict(parts["up"])
        self.down.load_full_state_dict(parts["down"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        up, down = self.up, self.down
        if x.shape[-1] != up.in_features:
            raise ValueError(f"sparsek: x has {x.shape[-1]} features; this MLP takes {up.in_features}")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, up.in_features)
        rdt = torch.float32 if down.reduce_dtype is None else down.reduce_dtype
        grad = torch.is_grad_enabled() and (x2.requires_grad or any(p.requires_grad for p in self.parameters()))
        world = self.world_size
        if grad:
            y = self._forward_autograd(x2, rdt)
        elif world > 1 and (ex := self._symmetric(x2, rdt)) is not None:
            y = self._forward_symmetric(x2, rdt, ex)
        else:
            y = self._forward_collectives(x2, rdt)
        return y.to(x.dtype).reshape(*lead, down.out_features)

    # The three ways.

    def _forward_autograd(self, x2, rdt):
        up, down, world = self.up, self.down, self.world_size
        if world > 1:
            x2 = (_GatherTokens.apply(x2, self.group, self.rank, world, 0) if _needs_grad(x2)
                  else _all_gather_rows(x2, self.group, world))
        hid = BlockSparseLinear.forward(up, x2).to(down.values.dtype)  # (the base forward: no replicated-input copy)
        partial = torch.ops.sparsek.bsr_mm(down.values, down.crow_indices, down.col_indices, down.out_features,
                                           down.in_features, hid.t(), 1.0, rdt).t()
        if world > 1:
            partial = (_ScatterTokens.apply(partial, self.group, self.rank, world, 0) if _needs_grad(partial)
                       else _reduce_scatter_rows(partial, self.group, self.rank, world))
        if down.bias is not None:
            bias = down.bias
            if world > 1 and _needs_grad(bias):
                # Every rank adds the whole bias to its own tokens: its gradient is the sum over the ranks' tokens.
                bias = _CopyToParallel.apply(bias, self.group)
            partial = partial + bias.to(rdt)
        return _ACT[down.activation](partial)

    def _forward_collectives(self, x2, rdt):
        up, down, world = self.up, self.down, self.world_size
        if world > 1:
            x2 = _all_gather_rows(x2, self.group, world)
        hid = BlockSparseLinear.forward(up, x2)
        # The bias in the first rank's partial (added once in the sum).
        y = _row_partial(down, hid.to(down.values.dtype), rdt, down.bias if self.rank == 0 else None)
        if world > 1:
            y = _reduce_scatter_rows(y, self.group, self.rank, world)
        return _ACT[down.activation](y)

    def _symmetric(self, x2, rdt) -> _SymmetricExchange | None:
        """The exchange for ``x2``'s rows (``X``: the tokens, ``R``: the partial products), or ``None``."""
        up, down = self.up, self.down
        why = None
        if x2.dtype != up.values.dtype or up.values.dtype != down.values.dtype:
            why = f"the input ({x2.dtype}) is not the layers' values' dtype ({up.values.dtype})"
        specs = {"X": (x2.dtype, up.in_features), "R": (rdt, down.out_features)}
        return self._symm.get(x2, x2.shape[0] * self.world_size, x2.shape[0], specs, why,
                              min_tokens=SYMMETRIC_MIN_TOKENS_SEQPAR)

    def _forward_symmetric(self, x2, rdt, ex):
        up, down, n = self.up, self.down, x2.shape[0]
        x2 = x2.contiguous()
        rows = [n] * len(ex.peers)
        cur = torch.cuda.current_stream(x2.device)
        # This rank's tokens into every peer's X (copy engines, beside up's product of them).
        ex.side.wait_stream(cur)
        with torch.cuda.stream(ex.side):
            for x_to in ex.to_peers("X", rows):
                x_to.copy_(x2)
        hid_own = BlockSparseLinear.forward(up, x2)
        cur.wait_stream(ex.side)
        ex.barrier("X")  # every rank's tokens are in place (and every peer is done with the last call's R)
        v, c, i = down.values, down.crow_indices, down.col_indices
        for x_from, r_to in zip(ex.from_peers("X", rows), ex.to_peers("R", rows)):
            hid = BlockSparseLinear.forward(up, x_from)
            # The partial of the peer's tokens, stored by the kernel into the peer's R slot for this rank.
            torch.ops.sparsek.bsr_mm_out(v, c, i, down.out_features, down.in_features, hid.t(), 1.0, 0.0, r_to.t())
        y = _row_partial(down, hid_own, rdt, down.bias)
        ex.barrier("R")  # every peer's partial of this rank's tokens has landed
        for r_from in ex.from_peers("R", rows):
            y.add_(r_from)
        return _ACT[down.activation](y)


def sequence_parallel_mlp(up: BlockSparseLinear, down: BlockSparseLinear, group=None, *,
                          partition: BlockPartition | None = None, strategy: str = "auto",
                          threshold: float = DEFAULT_THRESHOLD, reduce_dtype: torch.dtype | None = None,
                          comm: str = "auto") -> SequenceParallelMLP:
    """The (up, down) pair sharded as :func:`shard_mlp` does (one partition of the hidden dimension, balanced on
    both layers' blocks), in the sequence-parallel layout: a :class:`SequenceParallelMLP` whose input and output are
    split by tokens across the group. ``reduce_dtype`` as for :func:`row_parallel`; ``comm`` see
    :class:`SequenceParallelMLP`."""
    up_s, down_s = shard_mlp(up, down, group, partition=partition, strategy=strategy, threshold=threshold,
                             reduce_dtype=reduce_dtype, comm=comm)
    return SequenceParallelMLP(up_s, down_s, comm)


# ---------------------------------------------------------------------------------------------------------------
# parallelize_module.
#
# torch 2.11's parallelize_module, given a plan dict, calls each style's `_apply(submodule, mesh)` and DISCARDS what
# it returns (api.py: `parallelize_module(submodule, device_mesh, parallelize_style, ...)` in the loop, its result
# unused; only a style given as the whole plan has its result returned). A style that returns a replacement module
# therefore has no effect in a plan dict. These styles convert the BlockSparseLinear in place instead, as torch's own
# styles do (they swap parameters for DTensors in place) and as FSDP2's fully_shard does (it swaps the module's
# class): the module becomes the shard (its class and its state), keeping its identity and its hooks.

try:
    from torch.distributed.tensor.parallel import ParallelStyle as _ParallelStyle
except ImportError:  # pragma: no cover - torch without distributed
    _ParallelStyle = object  # type: ignore[misc,assignment]


def _become(module: torch.nn.Module, shard: torch.nn.Module) -> torch.nn.Module:
    keep = {k: v for k, v in module.__dict__.items() if "hook" in k}
    module.__dict__.clear()
    module.__dict__.update(shard.__dict__)
    module.__dict__.update(keep)
    module.__class__ = type(shard)
    return module


def _broadcast_layer(module: BlockSparseLinear, src: int | None, group) -> None:
    """Makes every rank's ``module`` rank ``src``'s (pattern, values, bias) before sharding."""
    if src is None or dist.get_world_size(group) == 1:
        return
    state = [module.state_dict() if dist.get_rank(group) == src else None]
    state[0] = None if state[0] is None else {k: v.cpu() for k, v in state[0].items()}
    dist.broadcast_object_list(state, src=dist.get_global_rank(group, src) if group is not None else src, group=group)
    flags = [p.requires_grad for p in (module.values, module.bias) if p is not None]
    module.load_state_dict(state[0])
    # load_state_dict replaces the parameters with frozen ones: a trainable layer stays trainable.
    for p, flag in zip([p for p in (module.values, module.bias) if p is not None], flags):
        p.requires_grad_(flag)


def _mesh_group(device_mesh):
    if device_mesh.ndim != 1:
        raise ValueError("sparsek: the block-sparse styles take a 1-D device mesh (the tensor-parallel dimension)")
    return device_mesh.get_group()


def _layout_dim(layout, what: str) -> int | None:
    """A style's token layout: ``None`` for ``None`` / ``Replicate()`` (every token on every rank), ``d`` for
    ``Shard(d)`` (the tokens split along ``d``; the features' last dimension is refused)."""
    if layout is None:
        return None
    from torch.distributed.tensor import Replicate, Shard

    if isinstance(layout, Replicate):
        return None
    if isinstance(layout, Shard):
        if layout.dim == -1:
            raise ValueError(f"sparsek: {what}=Shard(-1) splits the features, which the block-sparse partition does "
                             "(balanced, not DTensor's even split); Shard(d) here names a token dimension")
        return layout.dim
    raise ValueError(f"sparsek: {what} takes Replicate() or Shard(d) of a token dimension d, not {layout!r}")


def _set_output(shard, device_mesh, use_local_output: bool) -> None:
    """With ``use_local_output=False``, the shard returns a ``DTensor`` on ``device_mesh``: sharded along its
    ``sequence_dim``, else replicated."""
    if use_local_output:
        shard._output_placement = None
        return
    from torch.distributed.tensor import Replicate, Shard

    shard._mesh = device_mesh
    shard._output_placement = Replicate() if shard.sequence_dim is None else Shard(shard.sequence_dim)


class ColwiseBlockSparse(_ParallelStyle):
    """``parallelize_module`` style: the :class:`BlockSparseLinear` becomes (in place) its
    :class:`ColumnParallelBlockSparseLinear` for the mesh's group, balanced as :func:`column_parallel` does.
    ``gather_output`` defaults to ``False`` as torch's ``ColwiseParallel`` (output ``Shard(-1)``) does: the output
    is this rank's features, for a following :class:`RowwiseBlockSparse` on the same ``partition`` (use
    :func:`paired_styles` to balance a pair together). The output is a plain tensor.

    ``input_layouts``: ``Replicate()`` (default: every rank passes the whole input) or ``Shard(d)`` (sequence
    parallelism: every rank passes its tokens, split along dimension ``d``, which the layer all-gathers; as
    torch's ``ColwiseParallel(input_layouts=Shard(1))``). A ``DTensor`` input is taken as it is placed: replicated
    (e.g. from ``PrepareModuleInput(desired_input_layouts=(Replicate(),))``) or sharded along ``d`` as its local
    tensor; otherwise redistributed to replicated first."""

    def __init__(self, *, gather_output: bool = False, partition: BlockPartition | None = None,
                 strategy: str = "auto", threshold: float = DEFAULT_THRESHOLD, input_layouts=None) -> None:
        super().__init__()
        self.gather_output, self.partition, self.strategy, self.threshold = gather_output, partition, strategy, threshold
        self.sequence_dim = _layout_dim(input_layouts, "input_layouts")

    def _apply(self, module, device_mesh):
        _check_layer(module)
        group = _mesh_group(device_mesh)
        _broadcast_layer(module, self.src_data_rank, group)
        shard = column_parallel(module, group, gather_output=self.gather_output, partition=self.partition,
                                strategy=self.strategy, threshold=self.threshold, sequence_dim=self.sequence_dim)
        return _become(module, shard)


class RowwiseBlockSparse(_ParallelStyle):
    """``parallelize_module`` style: the :class:`BlockSparseLinear` becomes (in place) its
    :class:`RowParallelBlockSparseLinear` for the mesh's group. Its input features must be split as the producer's
    output is: pass that ``partition`` (e.g. the preceding column shard's ``partition``), or
    ``input_is_parallel=False`` (the whole input, a plain tensor or a replicated ``DTensor``; the layer's own block
    columns are balanced), or use :func:`paired_styles`. Without either it refuses (a partition guessed here would
    silently differ from the producer's).

    ``output_layouts``: ``Replicate()`` (default: the partials all-reduced, every rank the whole output) or
    ``Shard(d)`` (sequence parallelism: reduce-scattered, every rank its ``1 / world`` of the tokens along
    dimension ``d``; as torch's ``RowwiseParallel(output_layouts=Shard(1))``). ``use_local_output``: a plain tensor
    (default) or, with ``False``, a ``DTensor`` on the mesh placed as ``output_layouts`` says."""

    def __init__(self, *, partition: BlockPartition | None = None, input_is_parallel: bool = True,
                 strategy: str = "auto", threshold: float = DEFAULT_THRESHOLD, output_layouts=None,
                 use_local_output: bool = True) -> None:
        super().__init__()
        self.partition, self.input_is_parallel, self.strategy, self.threshold = (
            partition, input_is_parallel, strategy, threshold)
        self.sequence_dim = _layout_dim(output_layouts, "output_layouts")
        self.use_local_output = bool(use_local_output)

    def _apply(self, module, device_mesh):
        _check_layer(module)
        if self.partition is None and self.input_is_parallel:
            raise ValueError(
                "sparsek: RowwiseBlockSparse with a parallel input needs the producer's partition: pass partition=, "
                "input_is_parallel=False, or use paired_styles() for a column-parallel layer feeding this one"
            )
        group = _mesh_group(device_mesh)
        _broadcast_layer(module, self.src_data_rank, group)
        shard = row_parallel(module, group, input_is_parallel=self.input_is_parallel, partition=self.partition,
                             strategy=self.strategy, threshold=self.threshold, sequence_dim=self.sequence_dim)
        _set_output(shard, device_mesh, self.use_local_output)
        return _become(module, shard)


class _Pair:
    """The layers of one MLP offered by their styles, converted together once every role has one (in order: a
    plan's wildcard keys give the layers in the same order for every role)."""

    def __init__(self, strategy, threshold, in_dim, out_dim, use_local_output, roles=("up", "down")):
        self.strategy, self.threshold = strategy, threshold
        self.in_dim, self.out_dim, self.use_local_output = in_dim, out_dim, use_local_output
        self.waiting: dict = {role: [] for role in roles}

    def offer(self, side, module, device_mesh, src):
        _check_layer(module)
        group = _mesh_group(device_mesh)
        _broadcast_layer(module, src, group)
        self.waiting[side].append((module, group, device_mesh))
        while all(self.waiting.values()):  # the first of each role together
            layers = {role: q.pop(0) for role, q in self.waiting.items()}
            groups = {id(g) for _, g, _ in layers.values()}
            if len(groups) != 1:
                raise ValueError("sparsek: the layers of one MLP must be parallelized on the same device mesh")
            g, mesh = layers["down"][1], layers["down"][2]
            if "gate" in layers:
                shards = shard_gated_mlp(layers["gate"][0], layers["up"][0], layers["down"][0], g,
                                         strategy=self.strategy, threshold=self.threshold)
            else:
                shards = shard_mlp(layers["up"][0], layers["down"][0], g, strategy=self.strategy,
                                   threshold=self.threshold)
            *columns, down_shard = shards
            for c in columns:
                c.sequence_dim = self.in_dim
            down_shard.sequence_dim = self.out_dim
            _set_output(down_shard, mesh, self.use_local_output)
            for (module_, _, _), shard in zip(layers.values(), shards):
                _become(module_, shard)
        return module


class _PairedStyle(_ParallelStyle):
    def __init__(self, pair: _Pair, side: str) -> None:
        super().__init__()
        self.pair, self.side = pair, side

    def _apply(self, module, device_mesh):
        return self.pair.offer(self.side, module, device_mesh, self.src_data_rank)


def paired_styles(*, strategy: str = "auto", threshold: float = DEFAULT_THRESHOLD, input_layouts=None,
                  output_layouts=None, use_local_output: bool = True):
    """``(up_style, down_style)`` for one ``parallelize_module`` call, e.g.
    ``up, down = paired_styles(); parallelize_module(model, mesh, {"mlp.up": up, "mlp.down": down})``: each up
    layer is paired with the down layer applied in the same order (wildcard keys such as ``"layers.*.mlp.up"``
    pair layer by layer) and both are converted in place by :func:`shard_mlp` once both have been seen (the first
    stays whole until its partner arrives: give both in the same plan).

    Sequence parallelism (Megatron's, as torch's plans write it): ``input_layouts`` is up's
    (:class:`ColwiseBlockSparse`), ``output_layouts`` and ``use_local_output`` down's (:class:`RowwiseBlockSparse`).
    ``paired_styles(input_layouts=Shard(1), output_layouts=Shard(1))``: the pair takes and returns this rank's
    tokens of a ``(batch, sequence, features)`` input (all-gathered before up, reduce-scattered after down);
    ``paired_styles(output_layouts=Shard(1))`` after torch's ``PrepareModuleInput(input_layouts=(Shard(1),),
    desired_input_layouts=(Replicate(),))`` on the MLP and ``SequenceParallel()`` on its norm: the plan torch's
    tensor-parallel tutorial gives for a Llama block, with the MLP's Linear layers block-sparse."""
    pair = _Pair(strategy, threshold, _layout_dim(input_layouts, "input_layouts"),
                 _layout_dim(output_layouts, "output_layouts"), bool(use_local_output))
    return _PairedStyle(pair, "up"), _PairedStyle(pair, "down")


def gated_styles(*, strategy: str = "auto", threshold: float = DEFAULT_THRESHOLD, input_layouts=None,
                 output_layouts=None, use_local_output: bool = True):
    """``(gate_style, up_style, down_style)`` for a gated MLP (LLaMA's ``gate_proj``, ``up_proj``, ``down_proj``),
    converted in place by :func:`shard_gated_mlp` once all three have been seen, e.g.
    ``g, u, d = gated_styles(); parallelize_module(model, mesh, {"layers.*.mlp.gate_proj": g,
    "layers.*.mlp.up_proj": u, "layers.*.mlp.down_proj": d})``. The model's own ``act(gate(x)) * up(x)`` runs on
    each rank's hidden features unchanged. ``input_layouts``, ``output_layouts`` and ``use_local_output`` as for
    :func:`paired_styles` (``input_layouts=Shard(d)`` gathers the tokens once per column layer, twice in all: a plan
    with ``PrepareModuleInput`` on the MLP gathers them once)."""
    pair = _Pair(strategy, threshold, _layout_dim(input_layouts, "input_layouts"),
                 _layout_dim(output_layouts, "output_layouts"), bool(use_local_output), roles=("gate", "up", "down"))
    return _PairedStyle(pair, "gate"), _PairedStyle(pair, "up"), _PairedStyle(pair, "down")
