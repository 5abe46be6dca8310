"""The torch operators ``sparsek::bsr_mm``, ``sparsek::bsr_mm_out`` and ``sparsek::linear``.

They are defined with ``torch.library.Library`` (schema, a CUDA and a CPU kernel, a fake kernel for
``torch.compile``, and an autograd formula that refuses backward) on the *components* of a BSR matrix (values,
crow indices, col indices as dense tensors), so that ``torch.compile`` traces them without a graph break. The
kernels read each tensor's address, sizes and strides here and hand plain integers to the extension module
(``sparsek._native``), so nothing depends on torch's C++ ABI: one wheel serves every torch version.

On CUDA the product runs zero-copy on ``torch.cuda.current_stream()`` with the output allocated by torch; the
only copies are made when an operand's memory cannot be read as it is (see ``_dense``: a row that is not 16-byte
aligned, e.g. a row-major B with an N that is not a multiple of 8 halves).
"""

from __future__ import annotations

import collections
import math
import os
import threading

import torch

from . import _native

_LIB = torch.library.Library("sparsek", "DEF")
_LIB.define(
    "bsr_mm(Tensor values, Tensor crow_indices, Tensor col_indices, SymInt rows, SymInt cols, Tensor b, "
    "float alpha=1.0, ScalarType? out_dtype=None) -> Tensor"
)
_LIB.define(
    "bsr_mm_out(Tensor values, Tensor crow_indices, Tensor col_indices, SymInt rows, SymInt cols, Tensor b, "
    "float alpha, float beta, Tensor(a!) out) -> ()"
)
_LIB.define(
    "linear(Tensor x, Tensor values, Tensor crow_indices, Tensor col_indices, SymInt in_features, "
    "Tensor? bias=None, int activation=0) -> Tensor"
)
# The Python implementations of ``bsr_mm``, ``linear`` and ``bsr_mm_out`` under names of their own: where the kernels
# are registered natively (see ``NATIVE_OPS`` below), the native kernel hands a call it does not run itself (a copy to
# make, a structure to check first) to these through the dispatcher.
_LIB.define(
    "_bsr_mm_py(Tensor values, Tensor crow_indices, Tensor col_indices, SymInt rows, SymInt cols, Tensor b, "
    "float alpha=1.0, ScalarType? out_dtype=None) -> Tensor"
)
_LIB.define(
    "_linear_py(Tensor x, Tensor values, Tensor crow_indices, Tensor col_indices, SymInt in_features, "
    "Tensor? bias=None, int activation=0) -> Tensor"
)
_LIB.define(
    "_bsr_mm_out_py(Tensor values, Tensor crow_indices, Tensor col_indices, SymInt rows, SymInt cols, Tensor b, "
    "float alpha, float beta, Tensor(a!) out) -> ()"
)

#: Activation names accepted by ``linear`` and ``BlockSparseLinear``, with the library's codes.
ACTIVATIONS = {None: 0, "identity": 0, "relu": 1, "gelu_tanh": 2, "silu": 3}

_ACTIVATION_CODES = frozenset(ACTIVATIONS.values())
_IN_TYPES = {torch.float16: "f16", torch.bfloat16: "bf16"}
_OUT_TYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_INDEX_TYPES = (torch.int32, torch.int64)


def activation_code(activation: str | None) -> int:
    """The library's code of an activation name (``None``, ``"relu"``, ``"gelu_tanh"``, ``"silu"``)."""
    try:
        return ACTIVATIONS[activation]
    except (KeyError, TypeError):
        hint = (
            " (sparsek's GELU is the tanh approximation, torch.nn.functional.gelu(x, approximate='tanh'): "
            "ask for 'gelu_tanh')"
            if activation == "gelu"
            else ""
        )
        raise ValueError(
            f"sparsek: unknown activation {activation!r}; one of None, 'relu', 'gelu_tanh', 'silu'{hint}"
        ) from None


# ---------------------------------------------------------------------------------------------------------------
# Argument checks shared by the real and the fake kernels (shapes, dtypes, devices: no data is read).


def _check_bsr(values: torch.Tensor, crow: torch.Tensor, col: torch.Tensor, rows: int, cols: int):
    """Checks a BSR description's dtypes, shapes and devices; returns ``(block size, device)``. (Each tensor
    attribute is read once: this runs on every call, and the whole check costs a few microseconds.)"""
    dtype, index_dtype = values.dtype, crow.dtype
    if dtype not in _IN_TYPES:
        raise TypeError(f"sparsek: BSR values must be float16 or bfloat16, not {dtype}")
    if index_dtype not in _INDEX_TYPES or col.dtype != index_dtype:
        raise TypeError(
            f"sparsek: crow_indices and col_indices must both be int32 or both int64, not {index_dtype} and "
            f"{col.dtype}"
        )
    vshape, cshape, colshape = values.shape, crow.shape, col.shape
    if len(vshape) != 3 or vshape[1] != vshape[2]:
        raise ValueError(
            f"sparsek: BSR values must have shape (nnzb, bs, bs) with square blocks, not {tuple(vshape)} "
            "(batched or hybrid BSR tensors are not supported)"
        )
    bs = vshape[1]
    if bs not in (16, 32, 64, 128):
        raise ValueError(f"sparsek: block size {bs} is not supported (16, 32, 64 or 128)")
    if rows % bs or cols % bs:
        raise ValueError(f"sparsek: the matrix is {rows}x{cols}, not a multiple of the block size {bs}")
    if len(cshape) != 1 or cshape[0] != rows // bs + 1:
        raise ValueError(
            f"sparsek: crow_indices has shape {tuple(cshape)}; a {rows}x{cols} matrix of {bs}-blocks needs "
            f"({rows // bs + 1},)"
        )
    if len(colshape) != 1 or colshape[0] != vshape[0]:
        raise ValueError(f"sparsek: col_indices has shape {tuple(colshape)}; the values hold {vshape[0]} blocks")
    device = values.device
    if crow.device != device or col.device != device:
        raise ValueError(
            f"sparsek: the BSR components are on different devices ({device}, {crow.device}, {col.device})"
        )
    return bs, device


def _check_dense(b: torch.Tensor, what: str, dtype: torch.dtype, device: torch.device) -> None:
    if b.dtype != dtype:
        raise TypeError(f"sparsek: {what} is {b.dtype}; it must have the BSR values' dtype {dtype}")
    if b.device != device:
        raise ValueError(f"sparsek: {what} is on {b.device}, the BSR matrix on {device}")


def _check_mm(values, crow, col, rows, cols, b, out_dtype) -> torch.dtype:
    _, device = _check_bsr(values, crow, col, rows, cols)
    if b.dim() != 2:
        raise ValueError(f"sparsek: b must be 2-D, not of shape {tuple(b.shape)}")
    dtype = values.dtype
    _check_dense(b, "b", dtype, device)
    if b.shape[0] != cols:
        raise ValueError(f"sparsek: shape mismatch: a is {rows}x{cols}, b is {b.shape[0]}x{b.shape[1]}")
    out_dtype = dtype if out_dtype is None else out_dtype
    if out_dtype not in (torch.float32, dtype):
        raise TypeError(f"sparsek: the output must be float32 or the inputs' {dtype}, not {out_dtype}")
    return out_dtype


def _check_linear(x, values, crow, col, in_features, bias, activation) -> int:
    vshape, cshape = values.shape, crow.shape
    if len(vshape) != 3 or len(cshape) != 1 or cshape[0] < 1:
        raise ValueError(
            f"sparsek: the weight's values must be (nnzb, bs, bs) and its crow_indices (rows / bs + 1,), not "
            f"{tuple(vshape)} and {tuple(cshape)}"
        )
    out_features = (cshape[0] - 1) * vshape[1]
    _, device = _check_bsr(values, crow, col, out_features, in_features)
    xshape = x.shape
    if len(xshape) < 1 or xshape[-1] != in_features:
        raise ValueError(
            f"sparsek: x has shape {tuple(xshape)}; the weight is {out_features}x{in_features} (out x in), "
            f"so x's last dimension must be {in_features}"
        )
    dtype = values.dtype
    _check_dense(x, "x", dtype, device)
    if bias is not None:
        _check_dense(bias, "bias", dtype, device)
        if bias.shape != (out_features,):
            raise ValueError(
                f"sparsek: bias has shape {tuple(bias.shape)}; the layer has {out_features} output features"
            )
    if activation not in _ACTIVATION_CODES:
        raise ValueError(f"sparsek: activation code {activation} is not one of {sorted(_ACTIVATION_CODES)}")
    return out_features


# ---------------------------------------------------------------------------------------------------------------
# Reading tensors as the library's operands.


def _round_up(v: int, m: int) -> int:
    return (v + m - 1) // m * m


def _align(t: torch.Tensor) -> int:
    """Elements in 16 bytes on CUDA (the kernels read rows in 16-byte chunks); 1 on the CPU (no constraint)."""
    return 16 // t.element_size() if t.is_cuda else 1


def _dense(t: torch.Tensor, align: int, transposed: bool = False):
    """``(address, ld, col_major)`` describing the 2-D ``t`` (or its transpose, without making it) as it lies in
    memory, or ``None`` when the library cannot read it so: neither stride is 1, or the start or the leading
    dimension is not a multiple of ``align`` elements (16 bytes on CUDA)."""
    r, c = t.shape
    s0, s1 = t.stride()
    if transposed:
        r, c, s0, s1 = c, r, s1, s0
    ptr = t.data_ptr()
    if r == 0 or c == 0:
        return ptr, _round_up(max(c, 1), align), False
    if ptr % (align * t.element_size()):
        return None
    if s1 == 1 or c == 1:
        ld = s0 if r > 1 else _round_up(c, align)
        if ld >= c and ld % align == 0:
            return ptr, ld, False
    if s0 == 1 or r == 1:
        ld = s1 if c > 1 else _round_up(r, align)
        if ld >= r and ld % align == 0:
            return ptr, ld, True
    return None


def _aligned(t: torch.Tensor, align: int) -> torch.Tensor:
    """A copy of the 2-D ``t`` whose rows start 16-byte aligned (row-major, leading dimension padded)."""
    r, c = t.shape
    buf = torch.empty((r, _round_up(max(c, 1), align)), dtype=t.dtype, device=t.device)[:, :c]
    buf.copy_(t)
    return buf


def _input(t: torch.Tensor, transposed: bool = False):
    """``(tensor to keep alive, (address, ld, col_major))`` for a dense input, copied only when unavoidable."""
    align = _align(t)
    d = _dense(t, align, transposed)
    if d is None:
        t = _aligned(t, align)
        d = _dense(t, align, transposed)
    return t, d


def _output(t: torch.Tensor, transposed: bool = False):
    """``(tensor the kernel writes, its description, staged)``: ``t`` itself, or an aligned copy of it (holding
    its values, for beta) that the caller copies back when ``staged``."""
    align = _align(t)
    d = _dense(t, align, transposed)
    if d is not None:
        return t, d, False
    staged = _aligned(t, align)
    return staged, _dense(staged, align, transposed), True


# ---------------------------------------------------------------------------------------------------------------
# The structure check on CUDA, and the block rows' schedule, remembered per index tensor.

# Index tensors whose structure passed the device check, keyed by their addresses, version counters and the
# sizes checked. The check runs on a private copy of the indices that the library makes in memory it owns
# (``_native.CheckedStructure``), and every launch reads that copy, never the tensors: so a write to the tensors
# that the key cannot see (through ``.data``, DLPack or CuPy, or to an inference tensor, which has no version
# counter) cannot make a kernel read an unchecked structure. Such a write is not seen at all: launches keep using
# the structure as it was checked until the tensors' addresses or version counters change (an in-place torch op
# moves the counter, and the next call checks again). The entry holds the tensors themselves, so their memory
# cannot be freed and reused by another structure while the entry exists, the checked copy and the schedule made
# then. Bounded by entries and by the bytes it keeps alive (least recently used dropped first): a dropped
# structure is simply checked again on its next use. An entry used by a launch inside a CUDA graph capture moves to
# _CAPTURED and is never dropped: a replay reads its copy and schedule whenever it runs. Per call this costs a
# dictionary lookup (the key) and, until the entry is kept for a capture, whether the stream is capturing (one
# driver query), nothing on the device; per check, two device-to-device copies of the indices more than the check.
_CHECKED: collections.OrderedDict = collections.OrderedDict()
_CHECKED_MAX = 256
_CHECKED_MAX_BYTES = 64 << 20
_checked_bytes = 0
_CHECKED_LOCK = threading.Lock()
_CAPTURED: dict = {}


def _remember(key, entry, captured: bool) -> None:
    """Lets the native kernels launch with a checked structure (``entry`` of ``_CHECKED`` or ``_CAPTURED``, which
    keeps its tensors alive: the native record is forgotten when the entry is dropped)."""
    if NATIVE_OPS:
        _native.remember_checked(key, entry[3], entry[4], captured)


def _versions(crow: torch.Tensor, col: torch.Tensor):
    try:
        return crow._version, col._version
    except RuntimeError:
        # Inference tensors have no version counter (and cannot be modified in place outside inference mode).
        return None, None


def _schedule(crow: torch.Tensor, device_index: int):
    """The schedule of the structure's block rows (``_native.RowSchedule``: longest rows first, and the most blocks
    in one row), made by the library from ``crow`` read back to the host, in memory it allocates itself (outside
    torch's allocator, so a CUDA-graph pool never holds it), or ``None`` without block rows. With it the launcher
    schedules these rows as it does an uploaded matrix's: long rows start first on the sm_90a kernels' persistent
    grid, and a skewed row is split over several CTAs (or the work spread by the flat block list) where the rules
    take it."""
    if crow.numel() < 2:
        return None
    host = crow.detach().to("cpu").contiguous()
    return _native.cuda_row_schedule(device_index, host.data_ptr(), host.numel(), host.dtype == torch.int64)


def _ensure_checked(crow, col, device_index, dtype_name, a_args):
    """Checks the structure described by ``a_args`` (``_launch``'s description of A) on the device, unless these
    index tensors, unchanged, passed before; returns the checked private copy of the indices (``CheckedStructure``,
    whose addresses the launch uses) and the schedule of its block rows (``_schedule``)."""
    global _checked_bytes
    key = (a_args[1:], _versions(crow, col), device_index)
    with _CHECKED_LOCK:
        entry = _CAPTURED.get(key)
        if entry is not None:
            _remember(key, entry, True)
            return entry[3], entry[4]
        entry = _CHECKED.get(key)
        if entry is not None:
            if torch.cuda.is_current_stream_capturing():
                # A CUDA graph will read this copy and schedule at every replay: never drop them.
                _CAPTURED[key] = _CHECKED.pop(key)
                _checked_bytes -= entry[2]
                _remember(key, entry, True)
            else:
                _CHECKED.move_to_end(key)
                _remember(key, entry, False)
            return entry[3], entry[4]
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            "sparsek: this BSR structure has not been checked yet, and checking it reads a result back, which a "
            "CUDA graph capture forbids: run the op once before capturing (the usual warm-up) so that the check "
            "is done and remembered"
        )
    # The copy and the check run on the library's stream of the device: let the work that wrote the indices finish
    # first.
    torch.cuda.current_stream(device_index).synchronize()
    structure = _native.cuda_check_bsr(device_index, dtype_name, a_args)
    schedule = _schedule(crow, device_index)
    nbytes = crow.nbytes + col.nbytes + structure.nbytes + 4 * (crow.numel() - 1)
    dropped = []
    with _CHECKED_LOCK:
        if key not in _CHECKED:
            _CHECKED[key] = (crow, col, nbytes, structure, schedule)
            _checked_bytes += nbytes
        else:
            structure, schedule = _CHECKED[key][3], _CHECKED[key][4]
        _remember(key, _CHECKED[key], False)
        while len(_CHECKED) > 1 and (len(_CHECKED) > _CHECKED_MAX or _checked_bytes > _CHECKED_MAX_BYTES):
            old_key, entry = _CHECKED.popitem(last=False)
            _checked_bytes -= entry[2]
            if NATIVE_OPS:
                _native.forget_checked(old_key)
            dropped.append(entry)
    if dropped:
        # A dropped copy's and schedule's memory is freed at once: let every launch that may still read it finish
        # first (a structure is dropped only here, after a check, which has synchronised already).
        torch.cuda.synchronize(device_index)
        del dropped
    return structure, schedule


try:
    _raw_stream = torch._C._cuda_getCurrentRawStream  # 0.1 us; the public API below builds a Stream object (2 us)
except AttributeError:  # pragma: no cover (every torch >= 2.0 has it)
    def _raw_stream(device_index: int) -> int:
        return torch.cuda.current_stream(device_index).cuda_stream


def _launch(values, crow, col, rows, cols, bias, b_desc, n, c_desc, out_dtype, alpha, beta, activation):
    """``C = act(alpha * A @ B + bias) + beta * C`` with every operand checked and described (``b_desc`` and
    ``c_desc`` from ``_dense``): one launch on torch's current stream of the tensors' device, or the CPU
    backend."""
    if not values.is_contiguous() or values.data_ptr() % 16:
        values = values.clone(memory_format=torch.contiguous_format)
    crow, col = crow.contiguous(), col.contiguous()
    if bias is not None and (not bias.is_contiguous() or bias.data_ptr() % 16):
        bias = bias.clone(memory_format=torch.contiguous_format)
    dtype_name = _IN_TYPES[values.dtype]
    index64 = crow.dtype == torch.int64
    bs = values.shape[1]
    bias_ptr = 0 if bias is None or bias.numel() == 0 else bias.data_ptr()
    a_args = (values.data_ptr(), crow.data_ptr(), col.data_ptr(), index64, rows, cols, bs, values.shape[0])
    args = ((dtype_name, _OUT_TYPES[out_dtype]), a_args, (*b_desc, n), c_desc, (bias_ptr, alpha, beta, activation))
    if values.is_cuda:
        dev = values.get_device()
        structure, schedule = _ensure_checked(crow, col, dev, dtype_name, a_args)
        # The kernel reads the checked copy of the indices, not the tensors (see _CHECKED).
        a_args = (a_args[0], structure.row_ptr, structure.col_idx, *a_args[3:])
        args = (args[0], a_args, *args[2:])
        _native.cuda_spmm(dev, _raw_stream(dev), args, schedule)
    elif values.device.type == "cpu":
        _native.cpu_spmm(args)
    else:
        raise ValueError(f"sparsek: tensors on {values.device} are not supported (CUDA or CPU)")


# ---------------------------------------------------------------------------------------------------------------
# The kernels.


def _mm(values, crow, col, rows, cols, b, alpha, beta, out) -> None:
    b, b_desc = _input(b)
    c, c_desc, staged = _output(out)
    _launch(values, crow, col, rows, cols, None, b_desc, b.shape[1], c_desc, out.dtype, float(alpha), float(beta), 0)
    if staged:
        out.copy_(c)


def bsr_mm_impl(values, crow_indices, col_indices, rows, cols, b, alpha=1.0, out_dtype=None):
    """``alpha * A @ b`` into a new tensor (``sparsek::bsr_mm`` on CUDA and CPU)."""
    out_dtype = _check_mm(values, crow_indices, col_indices, rows, cols, b, out_dtype)
    out = torch.empty((rows, b.shape[1]), dtype=out_dtype, device=b.device)
    _mm(values, crow_indices, col_indices, rows, cols, b, alpha, 0.0, out)
    return out


def _extent(t: torch.Tensor):
    """``(first byte, one past the last byte)`` of the memory ``t``'s elements span (equal without elements)."""
    start = t.data_ptr()
    if t.is_contiguous():
        return start, start + t.nbytes
    if t.numel() == 0:
        return start, start
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return start, start + (last + 1) * t.element_size()


def _refuse_aliasing(out: torch.Tensor, inputs) -> None:
    """Raises ``ValueError`` when ``out``'s memory shares a byte with one of ``inputs`` (``(name, tensor)`` pairs on
    its device): the kernel reads every input while it writes ``out``, and the structure's indices above all must
    not be written through a float view of them. (Under a microsecond for the four inputs of ``bsr_mm_out``.)"""
    o0, o1 = _extent(out)
    for name, t in inputs:
        e0, e1 = _extent(t)
        if o0 < o1 and e0 < e1 and e0 < o1 and o0 < e1:
            raise ValueError(f"sparsek: out overlaps {name}: the output must not alias an input")


def bsr_mm_out_impl(values, crow_indices, col_indices, rows, cols, b, alpha, beta, out):
    """``out = alpha * A @ b + beta * out`` in place (``sparsek::bsr_mm_out``). ``out`` must not overlap an input
    (the values, the indices or ``b``)."""
    _check_mm(values, crow_indices, col_indices, rows, cols, b, out.dtype)
    if out.shape != (rows, b.shape[1]):
        raise ValueError(f"sparsek: out has shape {tuple(out.shape)}; the product is {rows}x{b.shape[1]}")
    if out.device != b.device:
        raise ValueError(f"sparsek: out is on {out.device}, the operands on {b.device}")
    _refuse_aliasing(out, (("the BSR values", values), ("crow_indices", crow_indices),
                           ("col_indices", col_indices), ("b", b)))
    _mm(values, crow_indices, col_indices, rows, cols, b, alpha, beta, out)


def linear_impl(x, values, crow_indices, col_indices, in_features, bias=None, activation=0):
    """``act(x @ W^T + bias)`` over x's last dimension (``sparsek::linear``): one launch, ``y^T = W @ x^T`` read
    and written through column-major descriptions of the row-major x and y (no transpose is made)."""
    out_features = _check_linear(x, values, crow_indices, col_indices, in_features, bias, activation)
    y = torch.empty((*x.shape[:-1], out_features), dtype=x.dtype, device=x.device)
    x2, b_desc = _input(x.reshape(-1, in_features), transposed=True)
    y2 = y.view(-1, out_features)
    c, c_desc, staged = _output(y2, transposed=True)
    _launch(values, crow_indices, col_indices, out_features, in_features, bias, b_desc, x2.shape[0], c_desc,
            y.dtype, 1.0, 0.0, activation)
    if staged:
        y2.copy_(c)
    return y


def _stashing(impl, placeholder=lambda: torch.empty(0)):
    """``impl`` for a twin operator. Called by a native kernel, an exception is handed back to it (the
    dispatcher's C interface would report only that the call failed, and libtorch would log it) with an empty
    placeholder result, and the native kernel raises it; called directly, it raises."""

    def twin(*args):
        try:
            return impl(*args)
        except BaseException as e:
            kind = next((c.__name__ for c in (TypeError, ValueError, MemoryError) if isinstance(e, c)), "RuntimeError")
            if _native.stash_error(kind, str(e)):
                return placeholder()
            raise

    return twin


def _register_native() -> tuple[bool, str]:
    """Registers the native CPU and CUDA kernels of ``bsr_mm``, ``bsr_mm_out`` and ``linear`` (``sparsek._native``,
    through torch's stable C ABI found at run time). ``SPARSEK_NATIVE_OPS=0`` keeps the Python kernels; ``=1`` makes
    a missing symbol an error; unset, a torch without the symbols silently keeps the Python kernels. Returns
    (registered, why not)."""
    mode = os.environ.get("SPARSEK_NATIVE_OPS", "")
    if mode == "0":
        return False, "SPARSEK_NATIVE_OPS=0"
    hide = [s for s in os.environ.get("SPARSEK_NATIVE_OPS_HIDE", "").split(",") if s]  # tests: simulate a torch
    missing = _native.register_native_ops(os.path.join(os.path.dirname(torch.__file__), "lib"), hide)
    if missing:
        why = "torch lacks " + ", ".join(missing)
        if mode == "1":
            raise RuntimeError(f"sparsek: SPARSEK_NATIVE_OPS=1 but the native operators cannot be registered: {why}")
        return False, why
    return True, ""


for _key in ("CUDA", "CPU"):
    _LIB.impl("_bsr_mm_py", _stashing(bsr_mm_impl), _key)
    _LIB.impl("_linear_py", _stashing(linear_impl), _key)
    _LIB.impl("_bsr_mm_out_py", _stashing(bsr_mm_out_impl, lambda: None), _key)

#: Whether ``bsr_mm``, ``bsr_mm_out`` and ``linear`` run their native kernels (else the Python ones), and why not.
NATIVE_OPS, NATIVE_OPS_WHY_NOT = _register_native()
if not NATIVE_OPS:
    for _key in ("CUDA", "CPU"):
        _LIB.impl("bsr_mm", bsr_mm_impl, _key)
        _LIB.impl("bsr_mm_out", bsr_mm_out_impl, _key)
        _LIB.impl("linear", linear_impl, _key)


_BELOW_AUTOGRAD = torch._C._AutoDispatchBelowAutograd
_grad_enabled = torch.is_grad_enabled
_inference_mode = torch.is_inference_mode_enabled
_compiling = torch.compiler.is_compiling


def skips_autograd(x: torch.Tensor, values: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether a public call should skip the autograd layer of the op (``below_autograd()``): when grad mode is off
    or no input requires grad, the autograd formula does nothing (the output needs no grad_fn) but costs a Python
    kernel per call (3.4 us on this project's CPU, ~11-16 us on the H100 host). Not under inference_mode (which
    skips it already: the guard would only cost its 0.5 us), nor while torch.compile traces (Dynamo sees the op
    as called)."""
    if _grad_enabled():
        return not (x.requires_grad or values.requires_grad or (bias is not None and bias.requires_grad)
                    or _compiling())
    return not _compiling() and not _inference_mode()


def below_autograd():
    """A context under which ops skip their autograd kernels (``torch._C._AutoDispatchBelowAutograd``, the guard
    torch's own autograd formulas redispatch under): only where ``skips_autograd`` said so."""
    return _BELOW_AUTOGRAD()


def raise_type_error(e: RuntimeError) -> None:
    """Raises ``TypeError`` in place of ``e`` where a native kernel raised a ``TypeError`` of the Python kernels as
    ``RuntimeError`` (no C++ standard exception becomes a Python ``TypeError``); returns otherwise. The public
    functions call it in an ``except RuntimeError`` (free when nothing is raised)."""
    msg = _native.take_type_error()
    if msg is not None and msg == str(e):
        raise TypeError(msg) from None


@torch.library.register_fake("sparsek::bsr_mm")
def _bsr_mm_fake(values, crow_indices, col_indices, rows, cols, b, alpha=1.0, out_dtype=None):
    out_dtype = _check_mm(values, crow_indices, col_indices, rows, cols, b, out_dtype)
    return b.new_empty((rows, b.shape[1]), dtype=out_dtype)


@torch.library.register_fake("sparsek::bsr_mm_out")
def _bsr_mm_out_fake(values, crow_indices, col_indices, rows, cols, b, alpha, beta, out):
    _check_mm(values, crow_indices, col_indices, rows, cols, b, out.dtype)
    return None


@torch.library.register_fake("sparsek::linear")
def _linear_fake(x, values, crow_indices, col_indices, in_features, bias=None, activation=0):
    out_features = _check_linear(x, values, crow_indices, col_indices, in_features, bias, activation)
    return x.new_empty((*x.shape[:-1], out_features))


# ---------------------------------------------------------------------------------------------------------------
# Autograd (issue 44, first stage). The gradients are computed with torch's dense operations on the weight expanded
# from its blocks: correct on every device and dtype the forward takes, in float32, but as costly as a dense layer's
# backward (sparsek's own backward kernels replace these per device: the CPU products exist in the Rust library,
# `cpu::spmm_t` and `cpu::sddmm`; the GPU kernels are next). Only the stored blocks get gradients (the structure is
# fixed); the index tensors and sizes get none.


def _block_rows(crow_indices: torch.Tensor) -> torch.Tensor:
    """The block row of every stored block (nnzb,), from the block-row offsets."""
    counts = (crow_indices[1:] - crow_indices[:-1]).to(torch.int64)
    return torch.repeat_interleave(torch.arange(counts.numel(), device=crow_indices.device), counts)


def _dense_weight(values, crow_indices, col_indices, rows: int, cols: int) -> torch.Tensor:
    """The BSR matrix expanded to a dense float32 ``rows x cols`` tensor (zeros outside the stored blocks)."""
    bs = values.shape[-1]
    w = values.new_zeros((rows // bs, cols // bs, bs, bs), dtype=torch.float32)
    w[_block_rows(crow_indices), col_indices.to(torch.int64)] = values.float()
    return w.permute(0, 2, 1, 3).reshape(rows, cols)


def _block_gather(dense: torch.Tensor, crow_indices, col_indices, bs: int) -> torch.Tensor:
    """The stored blocks' entries of a dense ``rows x cols`` tensor, in the BSR value layout (nnzb, bs, bs)."""
    rows, cols = dense.shape
    blocks = dense.reshape(rows // bs, bs, cols // bs, bs).permute(0, 2, 1, 3)
    return blocks[_block_rows(crow_indices), col_indices.to(torch.int64)]


def _activation_grad(z: torch.Tensor, activation: int) -> torch.Tensor:
    """d act(z) / dz in float32, for the activation codes of ``ACTIVATIONS`` (GELU: its tanh form)."""
    if activation == 1:
        return (z > 0).float()
    if activation == 2:
        c = math.sqrt(2.0 / math.pi)
        u = c * (z + 0.044715 * z**3)
        t = torch.tanh(u)
        return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * c * (1 + 3 * 0.044715 * z * z)
    if activation == 3:
        sig = torch.sigmoid(z)
        return sig * (1 + z * (1 - sig))
    return torch.ones_like(z)


def _linear_context(ctx, inputs, output):
    x, values, crow_indices, col_indices, in_features, bias, activation = inputs
    ctx.in_features, ctx.activation, ctx.has_bias = in_features, activation, bias is not None
    ctx.save_for_backward(x, values, crow_indices, col_indices, bias)


def _linear_backward(ctx, grad):
    x, values, crow, col, bias = ctx.saved_tensors
    out_features = (crow.numel() - 1) * values.shape[-1]
    w = _dense_weight(values, crow, col, out_features, ctx.in_features)
    x2 = x.reshape(-1, ctx.in_features).float()
    g = grad.reshape(-1, out_features).float()
    if ctx.activation != 0:
        # The pre-activation, recomputed (x @ W^T + b in float32 from the same low-precision inputs).
        z = x2 @ w.t() + (bias.float() if bias is not None else 0.0)
        g = g * _activation_grad(z, ctx.activation)
    grad_x = grad_values = grad_bias = None
    if ctx.needs_input_grad[0]:
        grad_x = (g @ w).to(x.dtype).reshape(x.shape)
    if ctx.needs_input_grad[1]:
        grad_values = _block_gather(g.t() @ x2, crow, col, values.shape[-1]).to(values.dtype)
    if ctx.has_bias and ctx.needs_input_grad[5]:
        grad_bias = g.sum(0).to(bias.dtype)
    return grad_x, grad_values, None, None, None, grad_bias, None


def _bsr_mm_context(ctx, inputs, output):
    values, crow_indices, col_indices, rows, cols, b, alpha, out_dtype = inputs
    ctx.rows, ctx.cols, ctx.alpha = rows, cols, alpha
    ctx.save_for_backward(values, crow_indices, col_indices, b)


def _bsr_mm_backward(ctx, grad):
    values, crow, col, b = ctx.saved_tensors
    g = grad.float() * ctx.alpha
    grad_values = grad_b = None
    if ctx.needs_input_grad[0]:
        grad_values = _block_gather(g @ b.float().t(), crow, col, values.shape[-1]).to(values.dtype)
    if ctx.needs_input_grad[5]:
        w = _dense_weight(values, crow, col, ctx.rows, ctx.cols)
        grad_b = (w.t() @ g).to(b.dtype)
    return grad_values, None, None, None, None, grad_b, None, None


torch.library.register_autograd("sparsek::bsr_mm", _bsr_mm_backward, setup_context=_bsr_mm_context)
torch.library.register_autograd("sparsek::linear", _linear_backward, setup_context=_linear_context)
# The twins get the same formulas, so that calling one directly (the benchmarks do) costs what the registration of
# bsr_mm and linear costs.
torch.library.register_autograd("sparsek::_bsr_mm_py", _bsr_mm_backward, setup_context=_bsr_mm_context)
torch.library.register_autograd("sparsek::_linear_py", _linear_backward, setup_context=_linear_context)
