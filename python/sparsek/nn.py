"""``BlockSparseLinear``: a ``torch.nn.Linear`` whose weight keeps only some ``block_size x block_size`` blocks."""

from __future__ import annotations

import torch

from ._ops import _check_bsr, activation_code

__all__ = ["BlockSparseLinear"]


class BlockSparseLinear(torch.nn.Module):
    """``y = act(x @ W.T + bias)`` with ``W`` (``out_features x in_features``) stored in BSR form, computed by
    ``torch.ops.sparsek.linear`` in one launch (CUDA: sparsek's tensor-core kernel, zero-copy, on the current
    stream; CPU: sparsek's CPU backend).

    The weight is held as three tensors, all in ``state_dict``: ``values`` (``nnzb x bs x bs``, float16 or
    bfloat16, a ``Parameter`` that does not require grad: backward is not supported yet), ``crow_indices``
    (``out_features / bs + 1``) and ``col_indices`` (``nnzb``) as int32 buffers; ``bias`` is optional. Loading a
    state dict replaces the pattern (its ``nnzb`` may differ from the module's); the structure is validated.

    Build one from a dense layer with :meth:`from_dense`, or from a BSR tensor with :meth:`from_bsr`.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        block_size: int,
        values: torch.Tensor,
        crow_indices: torch.Tensor,
        col_indices: torch.Tensor,
        bias: torch.Tensor | None = None,
        activation: str | None = None,
    ) -> None:
        """A layer over given BSR components: ``values`` (``nnzb x block_size x block_size``, float16 or
        bfloat16), ``crow_indices`` (``out_features / block_size + 1``) and ``col_indices`` (``nnzb``), any
        integer dtype (stored as int32), validated here; ``bias`` (``out_features``) is converted to the values'
        dtype. Most callers want :meth:`from_dense` or :meth:`from_bsr`."""
        super().__init__()
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.block_size = int(block_size)
        self.activation = activation
        self._activation_code = activation_code(activation)
        self.values = torch.nn.Parameter(values.detach().contiguous(), requires_grad=False)
        self.register_buffer("crow_indices", crow_indices.detach().to(torch.int32).contiguous())
        self.register_buffer("col_indices", col_indices.detach().to(torch.int32).contiguous())
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
    ) -> "BlockSparseLinear":
        """Prunes ``linear``'s weight to its largest blocks.

        Args:
            linear: the dense layer (its weight ``out_features x in_features``, both multiples of ``block_size``).
            block_size: 16, 32, 64 or 128.
            density: keep this fraction of the blocks (rounded to the nearest count), those of largest
                Frobenius norm (ties: the first in row-major order). Exactly one of ``density`` / ``threshold``.
            threshold: keep the blocks whose Frobenius norm exceeds this.
            dtype: float16 or bfloat16; default: the weight's dtype, which must then be one of these (a float32
                layer needs an explicit ``dtype``: the conversion rounds).
            activation: fused after the bias: ``None``, ``"relu"``, ``"gelu_tanh"``, ``"silu"``.
        """
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"sparsek: from_dense takes a torch.nn.Linear, not {type(linear).__name__}")
        if (density is None) == (threshold is None):
            raise ValueError("sparsek: give exactly one of density= and threshold=")
        weight = linear.weight.detach()
        dtype = weight.dtype if dtype is None else dtype
        if dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(
                f"sparsek: the weight is {weight.dtype}; pass dtype=torch.float16 or torch.bfloat16 (the kernels' "
                "input types)"
            )
        out_f, in_f = weight.shape
        bs = int(block_size)
        if bs not in (16, 32, 64, 128):
            raise ValueError(f"sparsek: block size {bs} is not supported (16, 32, 64 or 128)")
        if out_f % bs or in_f % bs:
            raise ValueError(f"sparsek: the weight is {out_f}x{in_f}, not a multiple of the block size {bs}")
        r, c = out_f // bs, in_f // bs
        blocks = weight.reshape(r, bs, c, bs).permute(0, 2, 1, 3)  # (r, c, bs, bs)
        norms = blocks.float().pow(2).sum(dim=(2, 3)).sqrt()
        if density is not None:
            if not 0.0 <= density <= 1.0:
                raise ValueError(f"sparsek: density {density} is outside [0, 1]")
            keep = round(density * r * c)
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
        return cls(in_f, out_f, bs, values, crow, col, bias, activation)

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
        """``act(x @ W.T + bias)`` for ``x`` of shape ``(..., in_features)`` and the values' dtype."""
        return torch.ops.sparsek.linear(
            x, self.values, self.crow_indices, self.col_indices, self.in_features, self.bias, self._activation_code
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
        """The weight as a ``torch.sparse_bsr`` tensor (sharing this module's memory)."""
        return torch.sparse_bsr_tensor(
            self.crow_indices, self.col_indices, self.values, (self.out_features, self.in_features)
        )

    def to_dense(self) -> torch.Tensor:
        """The weight as a dense ``out_features x in_features`` tensor (pruned blocks are zero)."""
        bs = self.block_size
        r, c = self.out_features // bs, self.in_features // bs
        dense = self.values.new_zeros(r, c, bs, bs)
        rows = torch.repeat_interleave(
            torch.arange(r, device=self.values.device), (self.crow_indices[1:] - self.crow_indices[:-1]).long()
        )
        dense[rows, self.col_indices.long()] = self.values.detach()
        return dense.permute(0, 2, 1, 3).reshape(self.out_features, self.in_features)

    def extra_repr(self) -> str:
        """Shape, block size, density (kept / all blocks), dtype, bias and activation."""
        total = (self.out_features // self.block_size) * (self.in_features // self.block_size)
        act = "" if self.activation in (None, "identity") else f", activation={self.activation}"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, block_size={self.block_size}, "
            f"density={self.density:.3f} ({self.nnzb}/{total} blocks), dtype={self.values.dtype}, "
            f"bias={self.bias is not None}{act}"
        )

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
            old = (self.values, self.crow_indices, self.col_indices, self.bias)
            device = self.values.device
            self.values = torch.nn.Parameter(loaded["values"].detach().to(device).contiguous(), requires_grad=False)
            self.crow_indices = loaded["crow_indices"].detach().to(device, torch.int32).contiguous()
            self.col_indices = loaded["col_indices"].detach().to(device, torch.int32).contiguous()
            if "bias" in loaded and self.bias is not None:
                self.bias = torch.nn.Parameter(loaded["bias"].detach().to(device).contiguous(), requires_grad=False)
            try:
                self._validate()
            except (ValueError, TypeError) as e:
                self.values, self.crow_indices, self.col_indices, self.bias = old
                error_msgs.append(f"{prefix}: {e}")
                return
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
