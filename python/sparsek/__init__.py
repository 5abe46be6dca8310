"""sparsek: block-sparse (BSR) x dense matrix multiplication on NVIDIA tensor cores, for PyTorch.

The kernels are written in Rust and embedded in the extension module (prebuilt SASS for A100/H100-class GPUs,
PTX for the rest): no CUDA toolkit is needed, only the NVIDIA driver, and on a machine without a GPU the same
functions run sparsek's multi-threaded CPU backend on CPU tensors.

- :func:`bsr_mm`: ``alpha * a @ b (+ beta * out)`` with ``a`` a ``torch.sparse_bsr`` tensor (square blocks of
  16, 32, 64 or 128, int32 or int64 indices, float16 or bfloat16) and ``b`` dense;
- :func:`linear`: ``act(x @ w.T + bias)`` with ``w`` a BSR weight, any leading batch dimensions of ``x``;
- :class:`sparsek.nn.BlockSparseLinear`: a drop-in for ``torch.nn.Linear`` with block-pruned weights
  (``BlockSparseLinear.from_dense(linear, block_size, density=...)``, or a random pattern for training from
  scratch, ``BlockSparseLinear(in_features, out_features, block_size, density, seed=...)``);
- :func:`sparsek.nn.sparsify`: converts a whole model's eligible ``torch.nn.Linear`` layers and reports each one.

On CUDA tensors everything runs zero-copy on ``torch.cuda.current_stream()``, works under ``torch.compile``
(the ops are registered with ``torch.library`` as ``torch.ops.sparsek.*``) and inside CUDA graphs. ``bsr_mm`` and
``linear`` are differentiable (the input, the stored blocks' values, the bias) through the backward ops
``torch.ops.sparsek.bsr_mm_t`` (``A^T @ B``) and ``torch.ops.sparsek.sddmm`` (the gradient at the stored blocks),
with :func:`bsr_transpose_index`, the transposed index they read, built once per structure.
"""

from __future__ import annotations

import contextlib
import weakref

import torch

from . import _native, _ops
from ._ops import ACTIVATIONS, activation_code, bsr_transpose_index

__version__ = _native.__version__

__all__ = [
    "bsr_mm",
    "linear",
    "bsr_transpose_index",
    "nn",
    "sparsify",
    "BlockSparseLinear",
    "cuda_available",
    "device_info",
    "set_programmatic_launch",
    "programmatic_launch",
    "set_sm_limit",
    "sm_limit",
    "limit_sms",
    "last_plan",
    "set_activation_backward",
    "activation_backward",
    "ACTIVATIONS",
    "__version__",
]


_LINEAR = torch.ops.sparsek.linear.default
_BSR_MM = torch.ops.sparsek.bsr_mm.default


# id(a) -> (weakref to a, a's components): `_bsr_components` of a BSR tensor seen before, without its three ATen
# accessor calls (1.4 us per call on the build machine's CPU, more on a GPU host). An entry leaves when `a` is freed
# (the weakref's callback, which runs before `id(a)` can be reused); its detached aliases share `a`'s storage and
# version counters, so in-place writes to `a`'s values or indices are seen as before (and made under
# inference_mode they are normal tensors, as the accessors' views are). Not for a tensor that requires grad (its
# components carry autograd history), nor while torch.compile traces.
_COMPONENTS: dict = {}


def _forget_components(key: int):
    return lambda _ref: _COMPONENTS.pop(key, None)


def _bsr_components(a: torch.Tensor, what: str):
    hit = _COMPONENTS.get(id(a))
    if hit is not None and hit[0]() is a and not a.requires_grad:
        return hit[1]
    if not isinstance(a, torch.Tensor) or a.layout != torch.sparse_bsr:
        layout = a.layout if isinstance(a, torch.Tensor) else type(a).__name__
        raise TypeError(
            f"sparsek: {what} must be a torch.sparse_bsr tensor (e.g. dense.to_sparse_bsr(64)), not {layout}"
        )
    if a.dim() != 2:
        raise ValueError(f"sparsek: {what} must be a 2-D BSR matrix (batched BSR is not supported), not {a.dim()}-D")
    values, crow, col = a.values(), a.crow_indices(), a.col_indices()
    if not a.requires_grad and not _ops._compiling():
        # Detached: the accessors' views hold `a` as their base, which would keep it alive (and here forever).
        values, crow, col = values.detach(), crow.detach(), col.detach()
        _COMPONENTS[id(a)] = (weakref.ref(a, _forget_components(id(a))), (values, crow, col, a.shape[0], a.shape[1]))
    return values, crow, col, a.shape[0], a.shape[1]


def bsr_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``alpha * (a @ b) + beta * out``: a block-sparse matrix times a dense one, like ``torch.sparse.mm``.

    Args:
        a: a 2-D ``torch.sparse_bsr`` tensor, ``M x K``, with square blocks of 16, 32, 64 or 128, int32 or int64
            ``crow_indices``/``col_indices`` and float16 or bfloat16 values (``dense.to_sparse_bsr(64)``).
        b: a dense ``K x N`` tensor of ``a``'s dtype on ``a``'s device, row- or column-major (``b.t()`` of a
            contiguous tensor is read as it is).
        out: optional ``M x N`` result tensor, float32 or ``a``'s dtype, written in place; with ``beta != 0`` its
            old values are scaled by ``beta`` and added (``beta == 0``: they are never read, NaN included).
        alpha: scale of the product.
        beta: scale of ``out``'s old values; needs ``out``.
        out_dtype: the result's dtype when ``out`` is not given: ``a``'s dtype (default) or ``torch.float32``.

    Returns:
        ``out`` if given, else a new contiguous ``M x N`` tensor. Accumulation is in float32.

    CUDA tensors run sparsek's tensor-core kernel on ``torch.cuda.current_stream()`` without copying any input
    (an input whose rows are not 16-byte aligned, e.g. a row-major ``b`` with ``N`` not a multiple of 8, is
    first copied to an aligned buffer, and likewise the result). The BSR structure is checked on the device the
    first time a set of index tensors is used (an invalid one raises ``ValueError`` naming the block row), on a
    private copy of the indices that every later launch reads, remembered while the tensors keep their addresses
    and version counters (writes torch does not see, e.g. through ``.data``, are not seen). ``out`` must not overlap
    ``a``'s values or indices or ``b`` (``ValueError``). CPU tensors run sparsek's CPU backend.

    Raises:
        TypeError: ``a`` is not BSR, or unsupported or mismatched dtypes.
        ValueError: shapes, block size, invalid structure, devices.
        RuntimeError: CUDA errors (no usable GPU or driver, a refused launch).
    """
    values, crow, col, rows, cols = _bsr_components(a, "a")
    if out is None:
        if beta != 0.0:
            raise ValueError("sparsek: beta scales out's old values; pass out= to use it")
        try:
            if _ops.skips_autograd(b, values, None):
                with _ops.below_autograd():
                    return _BSR_MM(values, crow, col, rows, cols, b, float(alpha), out_dtype)
            return _BSR_MM(values, crow, col, rows, cols, b, float(alpha), out_dtype)
        except RuntimeError as e:
            _ops.raise_type_error(e)
            raise
    if out_dtype is not None and out_dtype != out.dtype:
        raise TypeError(f"sparsek: out_dtype {out_dtype} differs from out's dtype {out.dtype}")
    if torch.is_grad_enabled() and (out.requires_grad or values.requires_grad or b.requires_grad):
        raise RuntimeError("sparsek: bsr_mm(..., out=...) does not support automatic differentiation")
    try:
        torch.ops.sparsek.bsr_mm_out(values, crow, col, rows, cols, b, float(alpha), float(beta), out)
    except RuntimeError as e:
        _ops.raise_type_error(e)
        raise
    return out


def linear(
    x: torch.Tensor,
    w_bsr: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
) -> torch.Tensor:
    """``act(x @ w_bsr.T + bias)``: a linear layer with a block-sparse weight, in one kernel launch.

    Args:
        x: ``(..., in_features)``, float16 or bfloat16, any leading batch dimensions.
        w_bsr: the weight, a 2-D ``torch.sparse_bsr`` tensor ``out_features x in_features`` (as
            ``torch.nn.Linear.weight``) of ``x``'s dtype, square blocks of 16, 32, 64 or 128.
        bias: optional ``(out_features,)`` of ``x``'s dtype, fused into the kernel's epilogue.
        activation: ``None``, ``"relu"``, ``"gelu_tanh"`` (``F.gelu(approximate="tanh")``) or ``"silu"``, fused.

    Returns:
        ``(..., out_features)`` of ``x``'s dtype, accumulated in float32. On CUDA no transpose and no copy is
        made (``y^T = W @ x^T`` on column-major views of ``x`` and ``y``), for any number of tokens.

    Differentiable in ``x``, the weight's values and the bias. With GELU or SiLU and autograd recording, the
    strategy of :func:`set_activation_backward` applies: ``"recompute"`` (one fused kernel; the backward recomputes
    the pre-activation) or ``"save"`` (the kernel with the bias and without the activation, torch's activation on
    its result, which keeps the pre-activation for the backward).
    """
    values, crow, col, _, cols = _bsr_components(w_bsr, "w_bsr")
    act = activation_code(activation)
    try:
        if _ops.skips_autograd(x, values, bias):
            with _ops.below_autograd():
                return _LINEAR(x, values, crow, col, cols, bias, act)
        if _ops.saves_pre_activation(act, x, values, bias):
            return _ops.linear_saving_pre_activation(_LINEAR, x, values, crow, col, cols, bias, act)
        return _LINEAR(x, values, crow, col, cols, bias, act)
    except RuntimeError as e:
        _ops.raise_type_error(e)
        raise


def cuda_available() -> bool:
    """Whether the NVIDIA driver and a GPU are present (sparsek needs compute capability 8.0 or newer)."""
    return _native.cuda_available()


def device_info(device: int | torch.device | None = None) -> dict:
    """The GPU's name, compute capability, the kernel module sparsek loaded for it (embedded SASS or PTX), on an
    H100/H200 the sm_90a module that serves block sizes 64 and 128 above 64 columns (else None), and whether
    products can start before the kernel ahead of them ends there (``programmatic_launch``: see
    :func:`set_programmatic_launch`)."""
    index = torch.device("cuda", device) if isinstance(device, int) else torch.device(device or "cuda")
    index = index.index if index.index is not None else torch.cuda.current_device()
    name, cc, module, loaded_from, hopper, programmatic = _native.device_info(index)
    return {
        "name": name,
        "compute_capability": cc,
        "module": module,
        "loaded_from": loaded_from,
        "hopper_module": hopper,
        "programmatic_launch": programmatic,
    }


def set_activation_backward(strategy: str) -> None:
    """How the backward of a GELU or SiLU fused into :func:`linear` or :class:`~sparsek.nn.BlockSparseLinear` gets
    the pre-activation ``z = x @ W.T + bias`` it needs (process-wide; ReLU and no activation are unaffected):

    - ``"recompute"``: the forward is one kernel (bias and activation fused) and keeps nothing more than the
      inputs; the backward recomputes ``z`` in float32 with one more block-sparse product (the forward's cost
      again).
    - ``"save"``: while autograd records (grad mode on and an input that requires grad), the forward runs the kernel
      with the bias fused and without the activation, then torch's GELU (tanh) or SiLU, whose autograd keeps ``z``:
      ``tokens x out_features`` elements of ``x``'s dtype per layer, alive from the forward to the backward (e.g.
      4096 tokens x 11008 features in bfloat16: 86 MiB), and no product to recompute it. The training forward's
      output then differs from the fused kernel's by ``z``'s rounding to ``x``'s dtype before the activation.

    Under ``torch.no_grad()``, ``torch.inference_mode()`` or when no input requires grad both run the single fused
    kernel, bit for bit as before. The default is ``sparsek._ops.ACTIVATION_BACKWARD_DEFAULT``
    (``python/bench/bench_act_backward.py`` measures both). A direct ``torch.ops.sparsek.linear`` call always
    recomputes. Under ``torch.compile`` the setting at trace time is compiled in (changing it recompiles)."""
    _ops.set_activation_backward(strategy)


def activation_backward() -> str:
    """The strategy of :func:`set_activation_backward` in effect: ``"recompute"`` or ``"save"``."""
    return _ops.activation_backward()


def set_programmatic_launch(enabled: bool) -> None:
    """Lets later CUDA products start before the kernel ahead of them on the stream has finished (programmatic
    dependent launch; H100/H200, elsewhere a no-op; off by default, process-wide).

    The product then reads its weight (``a``'s values and indices, or ``w``'s) while that kernel still runs, and
    waits for it before it reads ``b``/``x`` or the bias or writes the output. So **enable it only when no kernel
    writes a weight right before a product that uses it** (inference; not an optimizer step updating the weights
    in place just before). Back to back on an H200 a decode-sized product took 17-34% less GPU time on layer-sized
    weights and 9-24% at 8192 x 8192; it also holds inside CUDA graphs, where a stack of 8 decode layers replayed
    7-8% faster (H200). Results are the same either way. Without it, products on an H100/H200 still start early
    but wait for the kernel ahead before reading anything (no promise needed; up to 1.1 us less GPU time per decode
    product back to back, nothing inside CUDA graphs)."""
    _native.set_programmatic_launch(bool(enabled))


def programmatic_launch() -> bool:
    """The setting of :func:`set_programmatic_launch`."""
    return _native.programmatic_launch()


def set_sm_limit(sms: int | None) -> None:
    """Plans later CUDA products for at most ``sms`` SMs (``None``, the default: every SM), process-wide, so that
    work on other streams keeps the rest: another model on the same GPU, or a collective overlapping the products
    (measured for a tensor-parallel MLP block on two H200s, where it did not pay: docs/perf-notes.md, "Issue 45: the
    SM-limited overlap").

    On an H100/H200, the products of more than 64 columns at block sizes 64 and 128 (the sm_90a kernels) then run a
    persistent grid of ``sms`` CTAs, one per SM. The other kernels (few columns, block sizes 16 and 32, other GPUs)
    run a CTA per tile that the GPU spreads over every SM; they only size their work split for ``sms``. Results are
    the same bits wherever the work is split the same way (:func:`last_plan` shows the plan; it ends with
    ``planned for N SMs (limit)``). Each distinct limit opens its own copy of the kernels on first use (about
    0.4 s). A limit above the GPU's SMs is the GPU's. ``ValueError`` for 0 or a negative number, ``TypeError`` for
    anything but an ``int`` or ``None``; either leaves the setting as it was. See also :func:`limit_sms`."""
    if sms is not None:
        if isinstance(sms, bool) or not isinstance(sms, int):
            raise TypeError(f"sparsek: sms is an int or None, got {type(sms).__name__}")
        if sms < 1:
            raise ValueError(f"sparsek: an SM limit is at least 1 (None: every SM), got {sms}")
        sms = min(sms, 2**32 - 1)  # no GPU has more; the native setting is 32-bit
    _native.set_sm_limit(sms)


def sm_limit() -> int | None:
    """The setting of :func:`set_sm_limit` (``None``: every SM)."""
    return _native.sm_limit()


@contextlib.contextmanager
def limit_sms(sms: int | None):
    """:func:`set_sm_limit` for the products queued inside the ``with`` block, restoring the previous setting on
    exit (also on an exception). The setting is process-wide, not per thread."""
    before = sm_limit()
    set_sm_limit(sms)
    try:
        yield
    finally:
        _native.set_sm_limit(before)


def last_plan(device: int | torch.device | None = None) -> str | None:
    """The plan of the last CUDA product queued on ``device`` (default: the current one) under the current
    settings, on one line: the kernel, how the work was split, the grid and the launch attributes (what ``sparsek
    plan`` prints); ``None`` before the first, and without CUDA."""
    if not torch.cuda.is_available():
        return None
    index = torch.device("cuda", device) if isinstance(device, int) else torch.device(device or "cuda")
    index = index.index if index.index is not None else torch.cuda.current_device()
    return _native.last_plan(index)


from . import nn  # noqa: E402  (nn uses the ops registered above)
from .nn import BlockSparseLinear, sparsify  # noqa: E402
