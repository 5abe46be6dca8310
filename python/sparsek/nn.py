"""``BlockSparseLinear``, a ``torch.nn.Linear`` whose weight keeps only some ``block_size x block_size`` blocks, and
:func:`sparsify`, which converts a whole model's eligible ``torch.nn.Linear`` layers into it.

**dtypes.** The kernels take float16 or bfloat16, so a layer's weight (``values``) and bias are always stored in
one of these. Its *io dtype* (``io_dtype``) is the dtype its ``forward`` takes and returns: the values' dtype, or
float32 / float64, in which case the input is cast to the values' dtype, multiplied (float32 accumulation, one
rounding to the values' dtype) and the result cast back. ``forward`` accepts inputs of the io dtype or of the
values' dtype and returns the input's dtype; any other dtype raises ``TypeError``. Module conversions follow one
rule, applied when they are called (never later, in ``forward``):

- ``.half()`` / ``.bfloat16()`` / ``.to(torch.float16 | torch.bfloat16)``: the values and bias are converted to
  that type (float16 <-> bfloat16 rounds) and it becomes the io dtype;
- ``.float()`` / ``.double()`` / ``.to(torch.float32 | torch.float64)``: the values and bias keep their 16-bit
  type and the target becomes the io dtype;
- any other dtype raises ``TypeError`` when converting; device moves (``.cuda()``, ``.to(device)``) keep dtypes.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import fnmatch
import warnings
from typing import Iterable, Iterator

import torch

from . import _ops
from ._ops import _check_bsr, activation_code

_LINEAR = torch.ops.sparsek.linear.default

__all__ = ["BlockSparseLinear", "sparsify", "SparsifyReport", "LayerRecord"]

_VALUE_TYPES = (torch.float16, torch.bfloat16)
_WIDE_TYPES = (torch.float32, torch.float64)
_INDEX_TYPES = (torch.int32, torch.int64)
_BLOCK_SIZES = (16, 32, 64, 128)
_ACTIVATION_MODULES = {
    "relu": lambda: torch.nn.ReLU(),
    "gelu_tanh": lambda: torch.nn.GELU(approximate="tanh"),
    "silu": lambda: torch.nn.SiLU(),
}


class _Default:
    """The default of ``bias``: ``True`` for a random layer, ``None`` for one over given components."""

    def __repr__(self) -> str:
        return "<True, or None with given values>"


_DEFAULT = _Default()


@contextlib.contextmanager
def _quiet_sparse_notices() -> Iterator[None]:
    """Hides torch's two notices about BSR tensors ("support is in beta", "invariant checks are implicitly
    disabled") around sparsek's own calls: sparsek validates every structure it builds or loads itself."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse BSR tensor support is in beta", category=UserWarning)
        warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly", category=UserWarning)
        yield


def _check_block_size(block_size: int) -> int:
    bs = int(block_size)
    if bs not in _BLOCK_SIZES:
        raise ValueError(f"sparsek: block size {bs} is not supported (16, 32, 64 or 128)")
    return bs


def _check_density(density: float) -> float:
    if not 0.0 <= density <= 1.0:
        raise ValueError(f"sparsek: density {density} is outside [0, 1]")
    return float(density)


def _check_io_dtype(io_dtype: torch.dtype | None, values_dtype: torch.dtype) -> torch.dtype:
    if io_dtype is None:
        return values_dtype
    if io_dtype != values_dtype and io_dtype not in _WIDE_TYPES:
        raise TypeError(
            f"sparsek: io_dtype {io_dtype} is neither the values' dtype {values_dtype} nor float32 / float64"
        )
    return io_dtype


def _random_components(in_f, out_f, bs, density, bias, seed, dtype):
    """A random pattern of ``round(density * blocks)`` blocks spread evenly over the block rows, and values drawn
    as ``torch.nn.Linear`` draws them with the row's kept fan-in (see :class:`BlockSparseLinear`), on the CPU."""
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())  # follows torch.manual_seed
    gen = torch.Generator().manual_seed(int(seed))
    r, c = out_f // bs, in_f // bs
    keep = round(density * r * c)
    counts = torch.zeros(r, dtype=torch.int64)
    if r:
        base, extra = divmod(keep, r)
        counts += base
        if extra:
            counts[torch.randperm(r, generator=gen)[:extra]] += 1
    order = torch.rand(r, c, generator=gen).argsort(dim=1)  # a random order of each row's block columns
    mask = torch.zeros(r, c, dtype=torch.bool)
    mask.scatter_(1, order, torch.arange(c).expand(r, c) < counts[:, None])
    crow = torch.zeros(r + 1, dtype=torch.int64)
    crow[1:] = counts.cumsum(0)
    col = mask.nonzero()[:, 1]
    fan_in = (counts * bs).double()
    bound = torch.where(fan_in > 0, fan_in.clamp(min=1).rsqrt(), torch.zeros_like(fan_in))  # per block row
    block_rows = torch.repeat_interleave(torch.arange(r), counts)
    values = (torch.rand(keep, bs, bs, generator=gen, dtype=torch.float64) * 2 - 1) * bound[block_rows, None, None]
    b = None
    if bias:
        b = (torch.rand(out_f, generator=gen, dtype=torch.float64) * 2 - 1) * bound.repeat_interleave(bs)
        b = b.to(dtype)
    return values.to(dtype), crow, col, b


class BlockSparseLinear(torch.nn.Module):
    """``y = act(x @ W.T + bias)`` with ``W`` (``out_features x in_features``) stored in BSR form, computed by
    ``torch.ops.sparsek.linear`` in one launch (CUDA: sparsek's tensor-core kernel, zero-copy, on the current
    stream; CPU: sparsek's CPU backend).

    The weight is held as three tensors, all in ``state_dict``: ``values`` (``nnzb x bs x bs``, float16 or
    bfloat16, a ``Parameter`` created frozen: ``values.requires_grad_(True)`` to fine-tune it), ``crow_indices``
    (``out_features / bs + 1``) and ``col_indices`` (``nnzb``) as int32 (or int64) buffers; ``bias`` is optional.
    Loading a state dict replaces the pattern (its ``nnzb`` may differ from the module's); the structure is
    validated. ``io_dtype`` is the dtype ``forward`` takes and returns (the values' dtype, float32 or float64; see
    the module's doc for the dtype rule and ``.float()`` / ``.half()`` / ``.to(dtype)``).

    Build one:

    - with a random pattern, for training from scratch or tests:
      ``BlockSparseLinear(in_features, out_features, block_size, density, bias=True, seed=None, dtype=None,
      device=None, index_dtype=None, io_dtype=None)``;
    - from a dense layer with :meth:`from_dense` (keeps its largest blocks), from a BSR tensor with
      :meth:`from_bsr`, or over given components: ``BlockSparseLinear(in_features, out_features, block_size,
      values, crow_indices, col_indices, bias=None, activation=None)``.

    Go back with :meth:`to_linear` (a dense ``torch.nn.Linear`` holding the pruned weight), :meth:`to_dense` or
    :meth:`to_bsr`.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        block_size: int,
        density: float | torch.Tensor | None = None,
        crow_indices: torch.Tensor | None = None,
        col_indices: torch.Tensor | None = None,
        bias: bool | torch.Tensor | None = _DEFAULT,  # type: ignore[assignment]
        activation: str | None = None,
        *,
        values: torch.Tensor | None = None,
        seed: int | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        index_dtype: torch.dtype | None = None,
        io_dtype: torch.dtype | None = None,
    ) -> None:
        """Two forms, told apart by the fourth argument.

        **Random** (``density`` a number): a pattern of ``round(density * blocks)`` blocks, spread evenly over
        the block rows (each gets ``floor`` or ``ceil`` of the mean, the extra ones to random rows; the columns of
        each row uniformly at random), and values drawn as ``torch.nn.Linear`` draws its weight and bias,
        ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` (kaiming-uniform with ``a = sqrt(5)``), with ``fan_in`` the
        row's *kept* inputs (its blocks x ``block_size``), so that each output has the variance of a dense layer
        of that fan-in (a block row left without blocks gets a zero bias, as ``nn.Linear`` with ``fan_in`` 0
        does). ``seed`` makes it reproducible (same seed, same layer on every device); without one the
        seed is drawn from torch's default generator (``torch.manual_seed`` applies). ``bias``: ``True``
        (default) or ``False``; ``dtype``: the values' dtype, float16 (default) or bfloat16; ``device``;
        ``index_dtype``: int32 (default) or int64; ``io_dtype``: see the class doc.

        **Components** (``values`` a tensor, fourth or by keyword): ``values`` (``nnzb x block_size x
        block_size``, float16 or bfloat16), ``crow_indices`` (``out_features / block_size + 1``) and
        ``col_indices`` (``nnzb``), any integer dtype (stored as ``index_dtype``, default int32), validated here;
        ``bias`` (``out_features``, default ``None``) is converted to the values' dtype. Most callers want
        :meth:`from_dense` or :meth:`from_bsr`.

        ``activation`` (both forms): ``None``, ``"relu"``, ``"gelu_tanh"``, ``"silu"``, fused after the bias.
        In training, GELU's and SiLU's backward follows :func:`sparsek.set_activation_backward` (recompute the
        pre-activation, or save it: ``tokens x out_features`` elements of the values' dtype kept per layer).
        """
        super().__init__()
        if isinstance(density, torch.Tensor):
            if values is not None:
                raise TypeError("sparsek: values given twice (fourth argument and values=)")
            values, density = density, None
        if values is not None:
            if density is not None or seed is not None or dtype is not None or device is not None:
                raise TypeError(
                    "sparsek: a layer over given values takes no density, seed, dtype or device (those build a "
                    "random layer); convert the tensors first"
                )
            if crow_indices is None or col_indices is None:
                raise TypeError("sparsek: values need crow_indices and col_indices")
            bias = None if bias is _DEFAULT else bias
            if bias is not None and not isinstance(bias, torch.Tensor):
                raise TypeError(f"sparsek: with given values, bias is a tensor or None, not {bias!r}")
        else:
            if density is None:
                raise TypeError(
                    "sparsek: give a density (a random pattern) or values, crow_indices and col_indices (e.g. "
                    "BlockSparseLinear(1024, 4096, 64, density=0.25))"
                )
            if crow_indices is not None or col_indices is not None:
                raise TypeError("sparsek: crow_indices and col_indices come with values, not with a density")
            bias = True if bias is _DEFAULT else bias
            if not isinstance(bias, bool):
                raise TypeError(f"sparsek: a random layer's bias is True or False, not {type(bias).__name__}")
            dtype = torch.float16 if dtype is None else dtype
            if dtype not in _VALUE_TYPES:
                raise TypeError(
                    f"sparsek: dtype is the values' type, float16 or bfloat16, not {dtype} (for {dtype} inputs and "
                    f"outputs pass io_dtype={dtype})"
                )
            bs = _check_block_size(block_size)
            if in_features % bs or out_features % bs or in_features < 0 or out_features < 0:
                raise ValueError(
                    f"sparsek: the weight is {out_features}x{in_features}, not a multiple of the block size {bs}"
                )
            values, crow_indices, col_indices, bias = _random_components(
                int(in_features), int(out_features), bs, _check_density(density), bias, seed, dtype
            )
            if device is not None:
                values, crow_indices, col_indices = values.to(device), crow_indices.to(device), col_indices.to(device)
                bias = None if bias is None else bias.to(device)
        index_dtype = torch.int32 if index_dtype is None else index_dtype
        if index_dtype not in _INDEX_TYPES:
            raise TypeError(f"sparsek: index_dtype is torch.int32 or torch.int64, not {index_dtype}")
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.block_size = int(block_size)
        self.activation = activation
        self._activation_code = activation_code(activation)
        self.io_dtype = _check_io_dtype(io_dtype, values.dtype)
        self.values = torch.nn.Parameter(values.detach().contiguous(), requires_grad=False)
        self.register_buffer("crow_indices", crow_indices.detach().to(index_dtype).contiguous())
        self.register_buffer("col_indices", col_indices.detach().to(index_dtype).contiguous())
        if bias is None:
            self.register_parameter("bias", None)
        else:
            self.bias = torch.nn.Parameter(bias.detach().to(values.dtype).contiguous(), requires_grad=False)
        self._validate()

    # -----------------------------------------------------------------------------------------------------------
    # Construction.

    @classmethod
    def from_dense(
        cls,
        linear: torch.nn.Linear,
        block_size: int,
        *,
        density: float | None = None,
        threshold: float | None = None,
        dtype: torch.dtype | None = None,
        activation: str | None = None,
        io_dtype: torch.dtype | None = None,
    ) -> "BlockSparseLinear":
        """Prunes ``linear``'s weight to its largest blocks.

        Args:
            linear: the dense layer (its weight ``out_features x in_features``, both multiples of ``block_size``).
            block_size: 16, 32, 64 or 128.
            density: keep this fraction of the blocks (rounded to the nearest count), those of largest
                Frobenius norm (ties: the first in row-major order). Exactly one of ``density`` / ``threshold``.
            threshold: keep the blocks whose Frobenius norm exceeds this.
            dtype: the values' dtype, float16 or bfloat16; default: the weight's dtype, which must then be one of
                these (a float32 layer needs an explicit ``dtype``: the conversion rounds).
            activation: fused after the bias: ``None``, ``"relu"``, ``"gelu_tanh"``, ``"silu"``.
            io_dtype: the dtype ``forward`` takes and returns: the values' dtype (default), float32 or float64
                (:func:`sparsify` passes the dense layer's dtype, so a float32 model stays a float32 model).
        """
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"sparsek: from_dense takes a torch.nn.Linear, not {type(linear).__name__}")
        if (density is None) == (threshold is None):
            raise ValueError("sparsek: give exactly one of density= and threshold=")
        weight = linear.weight.detach()
        dtype = weight.dtype if dtype is None else dtype
        if dtype not in _VALUE_TYPES:
            raise TypeError(
                f"sparsek: the weight is {weight.dtype}; pass dtype=torch.float16 or torch.bfloat16 (the kernels' "
                "input types)"
            )
        _check_io_dtype(io_dtype, dtype)
        out_f, in_f = weight.shape
        bs = _check_block_size(block_size)
        if out_f % bs or in_f % bs:
            raise ValueError(f"sparsek: the weight is {out_f}x{in_f}, not a multiple of the block size {bs}")
        r, c = out_f // bs, in_f // bs
        blocks = weight.reshape(r, bs, c, bs).permute(0, 2, 1, 3)  # (r, c, bs, bs)
        norms = blocks.float().pow(2).sum(dim=(2, 3)).sqrt()
        if density is not None:
            keep = round(_check_density(density) * r * c)
            mask = torch.zeros(r * c, dtype=torch.bool, device=weight.device)
            if keep > 0:
                # A stable sort keeps the first of equal norms, so the pattern is deterministic.
                order = torch.sort(norms.flatten(), descending=True, stable=True).indices
                mask[order[:keep]] = True
            mask = mask.reshape(r, c)
        else:
            if not threshold >= 0.0:
                raise ValueError(f"sparsek: threshold {threshold} must be >= 0")
            mask = norms > threshold
        crow = torch.zeros(r + 1, dtype=torch.int64, device=weight.device)
        crow[1:] = mask.sum(dim=1).cumsum(0)
        col = mask.nonzero()[:, 1]  # row-major order: sorted within each block row
        values = blocks[mask].to(dtype)
        bias = None if linear.bias is None else linear.bias.detach().to(dtype)
        return cls(in_f, out_f, bs, values, crow, col, bias, activation, io_dtype=io_dtype)

    @classmethod
    def from_bsr(
        cls, w_bsr: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None
    ) -> "BlockSparseLinear":
        """A layer over a 2-D ``torch.sparse_bsr`` weight (``out_features x in_features``)."""
        from . import _bsr_components

        values, crow, col, rows, cols = _bsr_components(w_bsr, "w_bsr")
        return cls(cols, rows, values.shape[-1], values, crow, col, bias, activation)

    # -----------------------------------------------------------------------------------------------------------
    # Use.

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``act(x @ W.T + bias)`` for ``x`` of shape ``(..., in_features)``, of the values' dtype or of
        ``io_dtype`` (cast to the values' dtype and the result cast back); the result has ``x``'s dtype."""
        # The registered tensors straight from their dicts: `self.values` etc. go through nn.Module.__getattr__'s
        # fallback, ~0.3-0.5 us each on a GPU host, four per call (issue 43: the module's per-call cost).
        params, buffers = self._parameters, self._buffers
        try:
            values, bias, crow, col = params["values"], params["bias"], buffers["crow_indices"], buffers["col_indices"]
        except KeyError:  # moved by a parametrization (of bias) or a subclass: the attribute lookup finds them
            values, bias, crow, col = self.values, self.bias, self.crow_indices, self.col_indices
        try:
            if x.dtype == values.dtype:
                args = (x, values, crow, col, self.in_features, bias, self._activation_code)
                # Where no grad is needed the call skips the op's (Python) autograd kernel: see _ops.skips_autograd.
                if _ops.skips_autograd(x, values, bias):
                    with _ops.below_autograd():
                        return _LINEAR(*args)
                if _ops.saves_pre_activation(self._activation_code, x, values, bias):
                    return _ops.linear_saving_pre_activation(_LINEAR, *args)
                return _LINEAR(*args)
            if x.dtype == self.io_dtype:
                xc = x.to(values.dtype)
                if _ops.saves_pre_activation(self._activation_code, xc, values, bias):
                    y = _ops.linear_saving_pre_activation(_LINEAR, xc, values, crow, col, self.in_features, bias,
                                                          self._activation_code)
                else:
                    y = torch.ops.sparsek.linear(xc, values, crow, col, self.in_features, bias, self._activation_code)
                return y.to(x.dtype)
        except RuntimeError as e:
            _ops.raise_type_error(e)
            raise
        # Mixed precision: under torch.autocast of the values' dtype, x is cast to it as nn.Linear's would be (the
        # output in that dtype, x's gradient back in x's). Checked only here, off the fast path.
        kind = x.device.type
        if torch.is_autocast_enabled(kind) and torch.get_autocast_dtype(kind) == values.dtype:
            return self.forward(x.to(values.dtype))
        raise TypeError(
            f"sparsek: x is {x.dtype}; this layer takes {self.io_dtype}"
            + ("" if self.io_dtype == values.dtype else f" or its values' {values.dtype}")
            + " (convert the layer, e.g. .float() or .half(), to change that)"
        )

    @property
    def nnzb(self) -> int:
        """Blocks kept."""
        return self.values.shape[0]

    @property
    def density(self) -> float:
        """Fraction of the weight's blocks kept."""
        total = (self.out_features // self.block_size) * (self.in_features // self.block_size)
        return self.nnzb / total if total else 0.0

    def to_bsr(self) -> torch.Tensor:
        """The weight as a ``torch.sparse_bsr`` tensor (sharing this module's memory), without torch's notices
        about BSR support (the structure was validated when the layer was built or loaded)."""
        with _quiet_sparse_notices():
            return torch.sparse_bsr_tensor(
                self.crow_indices, self.col_indices, self.values, (self.out_features, self.in_features)
            )

    def to_dense(self) -> torch.Tensor:
        """The weight as a dense ``out_features x in_features`` tensor of the values' dtype (pruned blocks are
        zero)."""
        bs = self.block_size
        r, c = self.out_features // bs, self.in_features // bs
        dense = self.values.new_zeros(r, c, bs, bs)
        rows = torch.repeat_interleave(
            torch.arange(r, device=self.values.device), (self.crow_indices[1:] - self.crow_indices[:-1]).long()
        )
        dense[rows, self.col_indices.long()] = self.values.detach()
        return dense.permute(0, 2, 1, 3).reshape(self.out_features, self.in_features)

    def to_linear(self) -> torch.nn.Module:
        """A dense ``torch.nn.Linear`` holding the pruned weight (pruned blocks zero) and the bias, of
        ``io_dtype`` on the values' device (its parameters require grad, as a new ``nn.Linear``'s do). A layer
        with a fused activation gives ``torch.nn.Sequential(linear, activation)`` (``nn.ReLU``,
        ``nn.GELU(approximate="tanh")`` or ``nn.SiLU``) so that nothing is lost.

        Its ``state_dict`` (``weight``, ``bias``) loads into any ``nn.Linear`` of that shape, and
        ``BlockSparseLinear.from_dense(layer.to_linear(), block_size, density=layer.density)`` gives this layer
        back (same pattern, same values: the kept blocks are the only nonzero ones)."""
        linear = torch.nn.Linear(
            self.in_features, self.out_features, bias=self.bias is not None, device=self.values.device,
            dtype=self.io_dtype,
        )
        with torch.no_grad():
            linear.weight.copy_(self.to_dense())
            if self.bias is not None:
                linear.bias.copy_(self.bias)
        if self.activation in (None, "identity"):
            return linear
        return torch.nn.Sequential(linear, _ACTIVATION_MODULES[self.activation]())

    def extra_repr(self) -> str:
        """Shape, block size, density (kept / all blocks), dtype, io dtype when it differs, bias and activation."""
        total = (self.out_features // self.block_size) * (self.in_features // self.block_size)
        act = "" if self.activation in (None, "identity") else f", activation={self.activation}"
        io = "" if self.io_dtype == self.values.dtype else f", io_dtype={self.io_dtype}"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, block_size={self.block_size}, "
            f"density={self.density:.3f} ({self.nnzb}/{total} blocks), dtype={self.values.dtype}{io}, "
            f"bias={self.bias is not None}{act}"
        )

    # -----------------------------------------------------------------------------------------------------------
    # dtype and device conversions.

    def _apply(self, fn, recurse=True):
        """``.to()``, ``.float()``, ``.half()``, ``.cuda()``, ... go through here: the dtype rule of the module
        doc, decided (and refused) before any tensor changes."""
        values = self.values
        p16 = fn(torch.empty(0, dtype=values.dtype, device=values.device)).dtype
        p32 = fn(torch.empty(0, dtype=torch.float32, device=values.device)).dtype
        if p16 == values.dtype and p32 == torch.float32:
            store, io = values.dtype, self.io_dtype  # no dtype change: a device move, share_memory_, ...
        elif p16 == p32 and p16 in _VALUE_TYPES:
            store, io = p16, p16
        elif p16 == p32 and p16 in _WIDE_TYPES:
            store, io = values.dtype, p16
        else:
            raise TypeError(
                f"sparsek: BlockSparseLinear cannot be converted to {p32}: its values are stored in float16 or "
                "bfloat16 (the kernels' types) and it takes float16, bfloat16, float32 or float64 inputs"
            )

        def convert(t: torch.Tensor) -> torch.Tensor:
            out = fn(t)
            if not t.is_floating_point():  # the index buffers keep their dtype (Module.type() converts them too)
                return out if out.dtype == t.dtype else out.to(t.dtype)
            return out if out.dtype == store else out.to(store)

        result = super()._apply(convert, recurse)
        self.io_dtype = io
        return result

    def __setstate__(self, state):
        # Modules pickled by sparsek versions without io_dtype take the values' dtype.
        super().__setstate__(state)
        if "io_dtype" not in self.__dict__:
            self.io_dtype = self.values.dtype

    # -----------------------------------------------------------------------------------------------------------
    # State.

    def _validate(self) -> None:
        """Checks dtypes and shapes and, on the host, the structure (the CUDA kernels also check it on the device
        the first time these index tensors are used)."""
        _check_bsr(self.values, self.crow_indices, self.col_indices, self.out_features, self.in_features)
        if self.values.shape[1] != self.block_size:
            raise ValueError(
                f"sparsek: the values hold {self.values.shape[1]}-blocks; the layer has block size {self.block_size}"
            )
        if self.bias is not None and (self.bias.shape != (self.out_features,) or self.bias.dtype != self.values.dtype):
            raise ValueError(
                f"sparsek: bias is {tuple(self.bias.shape)} {self.bias.dtype}; the layer needs ({self.out_features},) "
                f"{self.values.dtype}"
            )
        crow = self.crow_indices.cpu().long()
        col = self.col_indices.cpu().long()
        nnzb, block_cols = col.shape[0], self.in_features // self.block_size
        if crow[0] != 0 or crow[-1] != nnzb or bool((crow[1:] < crow[:-1]).any()):
            raise ValueError(
                f"sparsek: crow_indices must rise from 0 to nnzb = {nnzb} without decreasing; got {crow.tolist()[:8]}"
                + ("..." if crow.shape[0] > 8 else "")
            )
        if nnzb and (col.min() < 0 or col.max() >= block_cols):
            raise ValueError(f"sparsek: col_indices must lie in [0, {block_cols})")
        rows = torch.repeat_interleave(torch.arange(crow.shape[0] - 1), crow[1:] - crow[:-1])
        if nnzb > 1 and bool(((col[1:] <= col[:-1]) & (rows[1:] == rows[:-1])).any()):
            raise ValueError("sparsek: col_indices must be strictly increasing within each block row")

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # The pattern (and with it nnzb) comes from the state dict: replace the tensors rather than copy into them.
        names = ("values", "crow_indices", "col_indices", "bias")
        loaded = {n: state_dict[prefix + n] for n in names if prefix + n in state_dict}
        if set(loaded) >= {"values", "crow_indices", "col_indices"}:
            old = (self.values, self.crow_indices, self.col_indices, self.bias, self.io_dtype)
            device, index_dtype = self.values.device, self.crow_indices.dtype
            if self.io_dtype == self.values.dtype:
                self.io_dtype = loaded["values"].dtype  # a 16-bit io dtype follows the values
            self.values = torch.nn.Parameter(loaded["values"].detach().to(device).contiguous(), requires_grad=False)
            self.crow_indices = loaded["crow_indices"].detach().to(device, index_dtype).contiguous()
            self.col_indices = loaded["col_indices"].detach().to(device, index_dtype).contiguous()
            if "bias" in loaded and self.bias is not None:
                self.bias = torch.nn.Parameter(loaded["bias"].detach().to(device).contiguous(), requires_grad=False)
            try:
                self._validate()
            except (ValueError, TypeError) as e:
                self.values, self.crow_indices, self.col_indices, self.bias, self.io_dtype = old
                error_msgs.append(f"{prefix}: {e}")
                return
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)


# ---------------------------------------------------------------------------------------------------------------
# Whole models.


@dataclasses.dataclass(frozen=True)
class LayerRecord:
    """What :func:`sparsify` did with one ``torch.nn.Linear`` (or subclass) of the model.

    ``name`` is its qualified name (``model.get_submodule(name)``; a layer reached under several names is one
    record, the others in ``aliases``); ``converted`` tells whether it became a :class:`BlockSparseLinear`, and
    if not, ``reason`` says why. ``nnzb`` / ``total_blocks`` / ``density`` and ``values_dtype`` are set for
    converted layers (``None`` otherwise); ``dtype`` is the dense weight's dtype, which stays the layer's
    ``io_dtype`` when it is float32 or float64."""

    name: str
    kind: str
    out_features: int
    in_features: int
    dtype: torch.dtype
    converted: bool
    reason: str | None = None
    nnzb: int | None = None
    total_blocks: int | None = None
    density: float | None = None
    values_dtype: torch.dtype | None = None
    aliases: tuple[str, ...] = ()

    @property
    def weights(self) -> int:
        """The dense weight's entries (``out_features * in_features``)."""
        return self.out_features * self.in_features


def _dtype_name(dtype: torch.dtype | None) -> str:
    return "-" if dtype is None else str(dtype).replace("torch.", "")


@dataclasses.dataclass(repr=False, eq=False)
class SparsifyReport:
    """The result of :func:`sparsify`: ``model`` (the converted model: the one given when ``inplace``, else the
    copy), ``records`` (one :class:`LayerRecord` per ``torch.nn.Linear`` found, in the model's order), and totals.
    ``str(report)`` (and ``repr``, so a REPL shows it) is a table of every layer with its density or the reason it
    was skipped."""

    model: torch.nn.Module
    records: list[LayerRecord]
    block_size: int
    density: float | None
    threshold: float | None

    @property
    def converted(self) -> list[LayerRecord]:
        """The layers now :class:`BlockSparseLinear`."""
        return [r for r in self.records if r.converted]

    @property
    def skipped(self) -> list[LayerRecord]:
        """The layers left as they were, each with its ``reason``."""
        return [r for r in self.records if not r.converted]

    @property
    def dense_weights(self) -> int:
        """Weight entries of the converted layers before pruning."""
        return sum(r.weights for r in self.converted)

    @property
    def kept_weights(self) -> int:
        """Weight entries the converted layers keep (``nnzb * block_size**2`` summed)."""
        return sum(r.nnzb * self.block_size**2 for r in self.converted)

    @property
    def overall_density(self) -> float:
        """``kept_weights / dense_weights`` (0 when nothing was converted)."""
        return self.kept_weights / self.dense_weights if self.dense_weights else 0.0

    def __str__(self) -> str:
        rule = f"density {self.density:g}" if self.density is not None else f"threshold {self.threshold:g}"
        head = (
            f"sparsek.nn.sparsify: {len(self.converted)} of {len(self.records)} Linear layers converted "
            f"(block size {self.block_size}, {rule})"
        )
        name_w = max([len("layer")] + [len(r.name) for r in self.records])
        rows = [head, f"  {'layer':<{name_w}}  {'out x in':>11}  {'dtype':<8}  {'values':<8}  {'blocks':>13}  "
                      f"{'density':>7}  note"]
        for r in self.records:
            shape = f"{r.out_features} x {r.in_features}"
            if r.converted:
                blocks, density, note = f"{r.nnzb}/{r.total_blocks}", f"{r.density:.3f}", ""
            else:
                blocks, density, note = "-", "-", f"skipped: {r.reason}"
            if r.aliases:
                note = (note + "; " if note else "") + "also " + ", ".join(r.aliases)
            rows.append(
                f"  {r.name:<{name_w}}  {shape:>11}  {_dtype_name(r.dtype):<8}  {_dtype_name(r.values_dtype):<8}  "
                f"{blocks:>13}  {density:>7}  {note}".rstrip()
            )
        skipped = len(self.skipped)
        rows.append(
            f"  total: {len(self.converted)} converted, {skipped} skipped; the converted weights keep "
            f"{self.kept_weights:,} of {self.dense_weights:,} entries (density {self.overall_density:.3f})"
        )
        return "\n".join(rows)

    __repr__ = __str__


def _patterns(patterns: str | Iterable[str] | None, what: str) -> tuple[str, ...] | None:
    if patterns is None:
        return None
    if isinstance(patterns, str):
        return (patterns,)
    result = tuple(patterns)
    if not all(isinstance(p, str) for p in result):
        raise TypeError(f"sparsek: {what} takes a pattern or a list of patterns (strings)")
    return result


def _matches(name: str, patterns: tuple[str, ...]) -> str | None:
    for p in patterns:
        if fnmatch.fnmatchcase(name, p):
            return p
    return None


def sparsify(
    model: torch.nn.Module,
    block_size: int,
    *,
    density: float | None = None,
    threshold: float | None = None,
    include: str | Iterable[str] | None = None,
    exclude: str | Iterable[str] | None = None,
    inplace: bool = True,
    dtype: torch.dtype | None = None,
    verbose: bool = False,
) -> SparsifyReport:
    """Converts ``model``'s eligible ``torch.nn.Linear`` layers into :class:`BlockSparseLinear` with
    :meth:`BlockSparseLinear.from_dense` (each keeps its own largest blocks) and reports every Linear layer:
    converted (with its density) or skipped (with the reason). Nothing is skipped silently.

    Args:
        model: any module; it may itself be a ``torch.nn.Linear`` only when ``inplace=False`` (a module cannot
            replace itself in place; the copy is then the converted layer).
        block_size: 16, 32, 64 or 128.
        density: keep this fraction of each layer's blocks (largest Frobenius norm first). Exactly one of
            ``density`` / ``threshold``.
        threshold: keep the blocks whose Frobenius norm exceeds this (each layer's density then differs).
        include: a layer is converted only if its qualified name (as in ``model.named_modules()``, e.g.
            ``"encoder.layer.0.intermediate.dense"``) matches one of these shell-style patterns
            (``fnmatch.fnmatchcase``: ``*`` matches any characters, dots included, ``?`` one, ``[seq]``;
            case-sensitive; the whole name must match). Default: every layer.
        exclude: patterns of layers to leave dense (checked after ``include``).
        inplace: replace the layers in ``model`` itself (default) or in a ``copy.deepcopy`` of it; either way the
            converted model is ``report.model``.
        dtype: the values' dtype, float16 or bfloat16. Default: a float16 or bfloat16 layer keeps its dtype; a
            float32 or float64 layer is stored in float16 and keeps its dtype as ``io_dtype`` (it still takes and
            returns float32: the input is rounded to float16 for the product, accumulated in float32). float16
            holds magnitudes up to 65504: for a model whose activations or outputs go beyond (some large language
            models' do), pass ``dtype=torch.bfloat16`` (float32's range, 8 bits of precision instead of 11).
        verbose: print the report.

    Layers are skipped (and reported) when their name is not included or is excluded, their shape is not a
    multiple of ``block_size``, their weight's dtype is not a float type, they live on a device other than CPU or
    CUDA, they are a subclass of ``nn.Linear`` (e.g. ``nn.MultiheadAttention``'s ``out_proj``, whose owner reads
    ``.weight`` directly), their weight is shared with another module (tied embeddings), or they have hooks.
    Bad arguments raise before anything changes. The converted layers' values are created frozen (inference);
    ``values.requires_grad_(True)`` makes a layer trainable (sparsek's backward products, no dense weight).

    Returns:
        a :class:`SparsifyReport`: ``report.model``, ``report.records`` / ``.converted`` / ``.skipped``, totals,
        and a table as ``str(report)``.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"sparsek: sparsify takes a torch.nn.Module, not {type(model).__name__}")
    bs = _check_block_size(block_size)
    if (density is None) == (threshold is None):
        raise ValueError("sparsek: give exactly one of density= and threshold=")
    if density is not None:
        _check_density(density)
    elif not threshold >= 0.0:
        raise ValueError(f"sparsek: threshold {threshold} must be >= 0")
    if dtype is not None and dtype not in _VALUE_TYPES:
        raise TypeError(f"sparsek: dtype is the values' type, float16 or bfloat16, not {dtype}")
    include_p, exclude_p = _patterns(include, "include"), _patterns(exclude, "exclude")
    if inplace and type(model) is torch.nn.Linear:
        raise ValueError("sparsek: a Linear layer cannot replace itself in place: pass inplace=False (or convert it "
                         "with BlockSparseLinear.from_dense)")
    if not inplace:
        model = copy.deepcopy(model)

    # Every place a module is reachable from (a module shared by two parents is replaced in both), and every owner
    # of each parameter (a weight tied to an embedding cannot be pruned here without untying it).
    places: dict[int, list[tuple[str, torch.nn.Module | None, str]]] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        for child_name, child in module.named_children():
            full = f"{name}.{child_name}" if name else child_name
            places.setdefault(id(child), []).append((full, module, child_name))
    if type(model) is torch.nn.Linear:
        places[id(model)] = [("", None, "")]
    param_owners: dict[int, list[tuple[str, str]]] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        for pname, p in module.named_parameters(recurse=False, remove_duplicate=False):
            owners = param_owners.setdefault(id(p), [])
            if (name, pname) not in owners:
                owners.append((name, pname))

    records: list[LayerRecord] = []
    replacements: list[tuple[list[tuple[str, torch.nn.Module | None, str]], BlockSparseLinear]] = []
    seen: set[int] = set()
    modules = [("", model)] if type(model) is torch.nn.Linear else list(model.named_modules())
    for name, module in modules:
        if not isinstance(module, torch.nn.Linear) or id(module) in seen:
            continue
        seen.add(id(module))
        where = places.get(id(module), [(name, None, "")])
        aliases = tuple(n for n, _, _ in where if n != name)
        weight = module.weight
        common = dict(name=name, kind=type(module).__name__, out_features=module.out_features,
                      in_features=module.in_features, dtype=weight.dtype, aliases=aliases)

        def skip(reason: str) -> None:
            records.append(LayerRecord(converted=False, reason=reason, **common))

        if include_p is not None and _matches(name, include_p) is None:
            skip("not included (matches no include pattern)")
            continue
        hit = _matches(name, exclude_p) if exclude_p is not None else None
        if hit is not None:
            skip(f"excluded by name (pattern {hit!r})")
            continue
        if type(module) is not torch.nn.Linear:
            skip(f"a subclass of nn.Linear ({type(module).__name__}): its owner may read .weight directly")
            continue
        if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or \
                getattr(module, "_backward_pre_hooks", None):
            skip("has hooks, which a replacement would drop")
            continue
        names = {n for n, _, _ in where}
        others = [f"{m}.{p}" if m else p for m, p in param_owners.get(id(weight), []) if m not in names]
        if others:
            skip(f"weight shared with {', '.join(others)} (tied): pruning it would untie it")
            continue
        if not weight.is_floating_point():
            skip(f"unsupported dtype {_dtype_name(weight.dtype)} (float16, bfloat16, float32 or float64 only)")
            continue
        if weight.dtype not in _VALUE_TYPES + _WIDE_TYPES:
            skip(f"unsupported dtype {_dtype_name(weight.dtype)} (float16, bfloat16, float32 or float64 only)")
            continue
        if weight.device.type not in ("cpu", "cuda"):
            skip(f"on {weight.device.type} (sparsek runs on CPU and CUDA)")
            continue
        if module.out_features % bs or module.in_features % bs:
            skip(f"shape {module.out_features} x {module.in_features} is not a multiple of the block size {bs}")
            continue
        if module.out_features == 0 or module.in_features == 0:
            skip("empty weight")
            continue
        values_dtype = dtype if dtype is not None else (
            weight.dtype if weight.dtype in _VALUE_TYPES else torch.float16
        )
        io_dtype = weight.dtype if weight.dtype in _WIDE_TYPES else values_dtype
        with torch.no_grad():
            layer = BlockSparseLinear.from_dense(module, bs, density=density, threshold=threshold,
                                                 dtype=values_dtype, io_dtype=io_dtype)
        layer.train(module.training)
        total = (module.out_features // bs) * (module.in_features // bs)
        records.append(LayerRecord(converted=True, nnzb=layer.nnzb, total_blocks=total, density=layer.density,
                                   values_dtype=values_dtype, **common))
        replacements.append((where, layer))

    # Everything is built: now swap the layers in.
    for where, layer in replacements:
        for _, parent, attr in where:
            if parent is None:
                model = layer
            else:
                setattr(parent, attr, layer)
    report = SparsifyReport(model=model, records=records, block_size=bs, density=density, threshold=threshold)
    if verbose:
        print(report)
    return report
