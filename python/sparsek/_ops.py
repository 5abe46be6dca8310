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
# The backward products (issue 44): ``alpha * A^T @ b`` (the input gradient) and SDDMM (the stored blocks' gradient).
_LIB.define(
    "bsr_mm_t(Tensor values, Tensor crow_indices, Tensor col_indices, SymInt rows, SymInt cols, Tensor b, "
    "float alpha=1.0, ScalarType? out_dtype=None, bool transpose_out=False) -> Tensor"
)
_LIB.define(
    "sddmm(Tensor x, Tensor y, Tensor crow_indices, Tensor col_indices, SymInt rows, SymInt cols, SymInt block_size, "
    "float alpha=1.0, ScalarType? out_dtype=None) -> Tensor"
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
    if dtype not in _IN_TYPES and not (dtype == torch.float64 and values.device.type == "cpu"):
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
    if values.dtype == torch.float64:
        res = _torch_mm(values, crow, col, rows, cols, b, alpha)
        out.copy_(res if beta == 0.0 else res + beta * out)
        return
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
    if values.dtype == torch.float64:
        return _torch_linear(x, values, crow_indices, col_indices, out_features, in_features, bias, activation)
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


#: The default strategy of GELU's and SiLU's backward in ``sparsek.linear`` and ``BlockSparseLinear`` (see
#: ``set_activation_backward``). One constant: flip it here (and the one sentence that names it in python/README.md).
ACTIVATION_BACKWARD_DEFAULT = "save"
ACTIVATION_BACKWARDS = ("recompute", "save")
# Whether a recording forward of GELU/SiLU runs unfused and saves the pre-activation (``"save"``); torch.compile
# guards on it (a change recompiles).
_save_pre_activation = ACTIVATION_BACKWARD_DEFAULT == "save"


def set_activation_backward(strategy: str) -> None:
    """Chooses how the backward of a GELU or SiLU fused into ``sparsek.linear`` / ``BlockSparseLinear`` gets the
    pre-activation z (process-wide; ReLU and no activation are unaffected). See ``sparsek.set_activation_backward``."""
    if strategy not in ACTIVATION_BACKWARDS:
        raise ValueError(f"sparsek: unknown activation backward {strategy!r}; one of {ACTIVATION_BACKWARDS}")
    global _save_pre_activation
    _save_pre_activation = strategy == "save"


def activation_backward() -> str:
    """The strategy ``set_activation_backward`` set (``ACTIVATION_BACKWARD_DEFAULT`` until then)."""
    return "save" if _save_pre_activation else "recompute"


def saves_pre_activation(activation: int, x: torch.Tensor, values: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether a public call of ``linear`` with this activation code takes the ``"save"`` path: GELU or SiLU, the
    strategy ``"save"``, and autograd recording (grad mode on and an input that requires grad; never under
    ``no_grad`` or ``inference_mode``, where the fused kernel runs as always). Read by torch.compile as well (the
    flags it reads are guarded)."""
    return (activation > 1 and _save_pre_activation and _grad_enabled()
            and (x.requires_grad or values.requires_grad or (bias is not None and bias.requires_grad)))


def linear_saving_pre_activation(op, x, values, crow, col, in_features, bias, activation: int) -> torch.Tensor:
    """``act(x @ W^T + bias)`` for a recording forward under ``"save"``: the op (``op``: ``sparsek::linear`` or its
    twin) with the bias fused and no activation gives z in x's dtype, and torch's own GELU (tanh) or SiLU is applied
    to it; torch's autograd of that activation keeps z (tokens x out_features elements of x's dtype) for the
    backward, which then needs no block-sparse product to recompute it. The output differs from the fused kernel's
    by z's rounding to x's dtype before the activation (the fused kernel applies it to the float32 accumulator)."""
    z = op(x, values, crow, col, in_features, bias, 0)
    if activation == 2:
        return torch.nn.functional.gelu(z, approximate="tanh")
    return torch.nn.functional.silu(z)


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
# Block-wise products with torch's operations: the float64 path of every op on the CPU (for
# ``torch.autograd.gradcheck``: sparsek's CPU backend computes in float32) and, for now, the CUDA bodies of the
# backward products. They gather the stored blocks and the dense rows they meet and run batched products, in
# chunks of blocks that bound the temporaries; no dense weight is ever made. The block row of each block is found
# with ``searchsorted`` (no read-back to the host, so nothing synchronises on CUDA).

_CHUNK_BYTES = 256 << 20


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _block_rows(crow: torch.Tensor, nnzb: int) -> torch.Tensor:
    """The block row of every stored block (``(nnzb,)`` int64), from the block-row offsets."""
    i = torch.arange(nnzb, device=crow.device, dtype=crow.dtype)
    return torch.searchsorted(crow[1:].contiguous(), i, right=True).to(torch.int64)


def _chunks(nnzb: int, per_block_bytes: int):
    step = max(1, _CHUNK_BYTES // max(per_block_bytes, 1))
    return ((i, min(i + step, nnzb)) for i in range(0, nnzb, step))


def _torch_mm(values, crow, col, rows: int, cols: int, b, alpha: float) -> torch.Tensor:
    """``alpha * A @ b`` block by block (``rows x N``, in float64 for float64 values, else float32)."""
    bs, nnzb, n = values.shape[-1], values.shape[0], b.shape[1]
    ct = _compute_dtype(values.dtype)
    out = torch.zeros(rows // bs, bs, n, dtype=ct, device=b.device)
    if nnzb and n:
        bb = b.to(ct).reshape(cols // bs, bs, n)
        brow, colx = _block_rows(crow, nnzb), col.to(torch.int64)
        for i0, i1 in _chunks(nnzb, bs * n * 8):
            out.index_add_(0, brow[i0:i1], torch.bmm(values[i0:i1].to(ct), bb[colx[i0:i1]]))
    return (out * alpha).reshape(rows, n)


def _torch_linear(x, values, crow, col, out_features: int, in_features: int, bias, activation: int) -> torch.Tensor:
    """``act(x @ W^T + bias)`` block by block in float64 (the float64 CPU path of ``linear``)."""
    x2 = x.reshape(-1, in_features)
    z = _torch_mm(values, crow, col, out_features, in_features, x2.t(), 1.0).t()
    if bias is not None:
        z = z + bias
    if activation == 1:
        z = torch.relu(z)
    elif activation == 2:
        z = torch.nn.functional.gelu(z, approximate="tanh")
    elif activation == 3:
        z = torch.nn.functional.silu(z)
    return z.to(x.dtype).contiguous().reshape(*x.shape[:-1], out_features)


def _torch_mm_t(values, index, rows: int, cols: int, b, alpha: float) -> torch.Tensor:
    """``alpha * A^T @ b`` (``cols x N``, float64 or float32) through the transposed index ``(col_ptr, row_idx,
    perm)``: block column ``bc`` of A sums its blocks ``values[perm[j]]^T @ b[row_idx[j] rows]``."""
    col_ptr, row_idx, perm = index
    bs, nnzb, n = values.shape[-1], values.shape[0], b.shape[1]
    ct = _compute_dtype(values.dtype)
    out = torch.zeros(cols // bs, bs, n, dtype=ct, device=b.device)
    if nnzb and n:
        bb = b.to(ct).reshape(rows // bs, bs, n)
        bcol = _block_rows(col_ptr, nnzb)  # the block column of every entry of the index
        perm, row_idx = perm.to(torch.int64), row_idx.to(torch.int64)
        for j0, j1 in _chunks(nnzb, bs * n * 8):
            blocks = values[perm[j0:j1]].to(ct).transpose(1, 2)
            out.index_add_(0, bcol[j0:j1], torch.bmm(blocks, bb[row_idx[j0:j1]]))
    return (out * alpha).reshape(cols, n)


def _torch_sddmm(x, y, crow, col, rows: int, cols: int, bs: int, nnzb: int, alpha: float) -> torch.Tensor:
    """``alpha * (x @ y^T)`` at the stored blocks, ``(nnzb, bs, bs)`` in float64 or float32."""
    k = x.shape[1]
    ct = _compute_dtype(x.dtype)
    out = torch.zeros(nnzb, bs, bs, dtype=ct, device=x.device)
    if nnzb and k:
        xb, yb = x.to(ct).reshape(rows // bs, bs, k), y.to(ct).reshape(cols // bs, bs, k)
        brow, colx = _block_rows(crow, nnzb), col.to(torch.int64)
        for i0, i1 in _chunks(nnzb, 2 * bs * k * 8):
            torch.bmm(xb[brow[i0:i1]], yb[colx[i0:i1]].transpose(1, 2), out=out[i0:i1])
    return out * alpha


# ---------------------------------------------------------------------------------------------------------------
# The transposed index of a structure, built once and remembered.

# (addresses, version counters, sizes, device) -> (crow, col, (col_ptr, row_idx, perm)). The entry holds the index
# tensors themselves, so that their memory is not reused by another structure while it exists; an in-place torch
# write moves a version counter and the next use builds the index again. Least recently used dropped first.
_TRANSPOSED: collections.OrderedDict = collections.OrderedDict()
_TRANSPOSED_MAX = 64
_TRANSPOSED_LOCK = threading.Lock()


def _build_transpose_index(crow, col, rows: int, cols: int, bs: int):
    nnzb, block_cols = col.numel(), cols // bs
    dev = crow.device
    if dev.type == "cpu":
        # sparsek's Rust BsrTranspose::from_structure, which validates the structure first.
        crow_c, col_c = crow.contiguous(), col.contiguous()
        col_ptr = torch.empty(block_cols + 1, dtype=torch.int32)
        row_idx = torch.empty(nnzb, dtype=torch.int32)
        perm = torch.empty(nnzb, dtype=torch.int32)
        _native.cpu_bsr_transpose(
            crow_c.data_ptr(), col_c.data_ptr(), crow.dtype == torch.int64, (rows, cols, bs, nnzb),
            col_ptr.data_ptr(), row_idx.data_ptr(), perm.data_ptr(),
        )
        return col_ptr, row_idx, perm
    return _transpose_index_torch(crow, col, rows, cols, bs)


def _transpose_index_torch(crow, col, rows: int, cols: int, bs: int):
    """The transposed index with torch's operations on the indices' device, no read-back to the host: a stable sort
    of the blocks by block column gives perm; row_idx is the blocks' block rows in that order; col_ptr counts each
    column's blocks (a search in the sorted columns). The structure is not validated here (on CUDA the forward
    checked it on the device, ``_ensure_checked``)."""
    nnzb, block_cols, dev = col.numel(), cols // bs, col.device
    col64 = col.to(torch.int64)
    sorted_col, perm = torch.sort(col64, stable=True)
    row_idx = _block_rows(crow, nnzb)[perm]
    col_ptr = torch.searchsorted(sorted_col, torch.arange(block_cols + 1, device=dev, dtype=torch.int64))
    return col_ptr.to(torch.int32), row_idx.to(torch.int32), perm.to(torch.int32)


def bsr_transpose_index(crow_indices: torch.Tensor, col_indices: torch.Tensor, rows: int, cols: int, bs: int):
    """The transposed index of a BSR structure: ``(col_ptr, row_idx, perm)``, int32 tensors on the indices' device.

    ``col_ptr`` (``cols / bs + 1``): block column ``bc`` of A holds entries ``col_ptr[bc]:col_ptr[bc + 1]``;
    ``row_idx`` (``nnzb``): each entry's block row, ascending within a column; ``perm`` (``nnzb``): the entry's
    position among A's stored blocks (its values are ``values[perm[j]]``). It is the structure of ``A^T`` plus a
    permutation into A's values, which the ``A^T @ B`` product (``torch.ops.sparsek.bsr_mm_t``) reads the blocks
    through, transposing each as it loads it (no transposed copy of the values).

    Built once per structure and remembered (keyed by the index tensors' identity and version counters, like the
    structure check): on CUDA with torch's operations on the device (a stable sort by block column, no host round
    trip); on the CPU by sparsek's ``format::BsrTranspose``, which validates the structure (``ValueError``).
    """
    crow, col = crow_indices, col_indices
    if crow.dtype not in _INDEX_TYPES or col.dtype != crow.dtype:
        raise TypeError(f"sparsek: crow_indices and col_indices must both be int32 or both int64, not {crow.dtype} "
                        f"and {col.dtype}")
    if bs not in (16, 32, 64, 128) or rows % bs or cols % bs:
        raise ValueError(f"sparsek: a {rows}x{cols} matrix of {bs}-blocks is not supported")
    if crow.dim() != 1 or crow.numel() != rows // bs + 1 or col.dim() != 1 or crow.device != col.device:
        raise ValueError(f"sparsek: crow_indices {tuple(crow.shape)} and col_indices {tuple(col.shape)} do not describe "
                         f"a {rows}x{cols} matrix of {bs}-blocks on one device")
    key = (crow.data_ptr(), col.data_ptr(), _versions(crow, col), col.numel(), rows, cols, bs, str(crow.device))
    with _TRANSPOSED_LOCK:
        entry = _TRANSPOSED.get(key)
        if entry is not None:
            _TRANSPOSED.move_to_end(key)
            return entry[2]
    index = _build_transpose_index(crow, col, rows, cols, bs)
    with _TRANSPOSED_LOCK:
        _TRANSPOSED[key] = (crow, col, index)
        while len(_TRANSPOSED) > _TRANSPOSED_MAX:
            _TRANSPOSED.popitem(last=False)
    return index


# ---------------------------------------------------------------------------------------------------------------
# The backward products' kernels.


def _check_mm_t(values, crow, col, rows, cols, b, out_dtype) -> torch.dtype:
    _, device = _check_bsr(values, crow, col, rows, cols)
    if b.dim() != 2:
        raise ValueError(f"sparsek: b must be 2-D, not of shape {tuple(b.shape)}")
    dtype = values.dtype
    _check_dense(b, "b", dtype, device)
    if b.shape[0] != rows:
        raise ValueError(f"sparsek: shape mismatch: a^T is {cols}x{rows}, b is {b.shape[0]}x{b.shape[1]}")
    out_dtype = dtype if out_dtype is None else out_dtype
    if out_dtype not in (torch.float32, dtype):
        raise TypeError(f"sparsek: the output must be float32 or the inputs' {dtype}, not {out_dtype}")
    return out_dtype


def _new_mm_t_out(b, cols: int, out_dtype, transpose_out: bool) -> torch.Tensor:
    n = b.shape[1]
    if transpose_out:
        return b.new_empty((n, cols), dtype=out_dtype)
    return b.new_empty((cols, n), dtype=out_dtype)


def _bsr_mm_t_cuda(values, crow, col, rows, cols, b, alpha, index, c) -> None:
    """``c = alpha * A^T @ b`` on CUDA (``c``: ``cols x N``, any strides): sparsek's GPU kernel (``Gpu::spmm_t_raw``)
    on torch's current stream, reading A's stored blocks through the transposed index ``index = (col_ptr, row_idx,
    perm)`` (int32 device tensors from ``bsr_transpose_index``) and transposing each block as it loads it. The
    structure is checked on the device first, once (as the forward's launches do); the index, built by torch's
    operations from the same tensors, addresses only A's blocks and B's rows whatever they hold."""
    if not values.is_contiguous() or values.data_ptr() % 16:
        values = values.clone(memory_format=torch.contiguous_format)
    crow, col = crow.contiguous(), col.contiguous()
    dtype_name = _IN_TYPES[values.dtype]
    bs = values.shape[1]
    a_args = (values.data_ptr(), crow.data_ptr(), col.data_ptr(), crow.dtype == torch.int64, rows, cols, bs,
              values.shape[0])
    dev = values.get_device()
    _ensure_checked(crow, col, dev, dtype_name, a_args)
    col_ptr, row_idx, perm = (t.contiguous() for t in index)
    b, b_desc = _input(b)
    cw, c_desc, staged = _output(c)
    args = ((dtype_name, _OUT_TYPES[c.dtype]), a_args, (*b_desc, b.shape[1]), c_desc, float(alpha),
            (col_ptr.data_ptr(), row_idx.data_ptr(), perm.data_ptr()))
    _native.cuda_spmm_t(dev, _raw_stream(dev), args)
    if staged:
        c.copy_(cw)


def _sddmm_cuda(x, y, crow, col, rows, cols, bs, alpha, out) -> None:
    """``out = alpha * (x @ y^T)`` at A's stored blocks on CUDA (``out``: a contiguous ``(nnzb, bs, bs)`` tensor):
    sparsek's GPU kernel (``Gpu::sddmm_raw``) on torch's current stream, x and y read in their own storage orders (a
    column-major view is read as it is). The kernel reads the structure's checked copy (``_ensure_checked``), as the
    forward's launches do, and the schedule made of it (on sm_90a: one tile per group of a block row's blocks)."""
    crow, col = crow.contiguous(), col.contiguous()
    dtype_name = _IN_TYPES[x.dtype]
    a_args = (out.data_ptr(), crow.data_ptr(), col.data_ptr(), crow.dtype == torch.int64, rows, cols, bs,
              out.shape[0])
    dev = x.get_device()
    structure, schedule = _ensure_checked(crow, col, dev, dtype_name, a_args)
    a_args = (a_args[0], structure.row_ptr, structure.col_idx, *a_args[3:])
    x, x_desc = _input(x)
    y, y_desc = _input(y)
    args = ((dtype_name, _OUT_TYPES[out.dtype]), x_desc, y_desc, x.shape[1], a_args, (float(alpha), 0.0))
    _native.cuda_sddmm(dev, _raw_stream(dev), args, schedule)


def bsr_mm_t_impl(values, crow_indices, col_indices, rows, cols, b, alpha=1.0, out_dtype=None, transpose_out=False):
    """``alpha * A^T @ b`` (``sparsek::bsr_mm_t``): A ``rows x cols`` BSR, ``b`` ``rows x N`` (any strides), the
    result ``cols x N``, or with ``transpose_out`` its transpose ``N x cols`` (both contiguous): ``dX = dZ @ W`` of a
    linear layer is ``bsr_mm_t(W, dZ.t(), transpose_out=True)``, read and written through column-major views."""
    out_dtype = _check_mm_t(values, crow_indices, col_indices, rows, cols, b, out_dtype)
    out = _new_mm_t_out(b, cols, out_dtype, transpose_out)
    c = out.t() if transpose_out else out  # cols x N
    if values.dtype == torch.float64:
        index = bsr_transpose_index(crow_indices, col_indices, rows, cols, values.shape[-1])
        c.copy_(_torch_mm_t(values, index, rows, cols, b, alpha))
    elif values.is_cuda:
        index = bsr_transpose_index(crow_indices, col_indices, rows, cols, values.shape[-1])
        _bsr_mm_t_cuda(values, crow_indices, col_indices, rows, cols, b, float(alpha), index, c)
    elif values.device.type == "cpu":
        # sparsek's CPU backend, cpu::spmm_t (it builds the transposed index of the structure it validates).
        values = values.contiguous()
        crow, col = crow_indices.contiguous(), col_indices.contiguous()
        b, b_desc = _input(b)
        cw, c_desc, staged = _output(c)
        a_args = (values.data_ptr(), crow.data_ptr(), col.data_ptr(), crow.dtype == torch.int64, rows, cols,
                  values.shape[-1], values.shape[0])
        _native.cpu_spmm_t(((_IN_TYPES[values.dtype], _OUT_TYPES[out_dtype]), a_args, (*b_desc, b.shape[1]), c_desc,
                            (0, float(alpha), 0.0, 0)))
        if staged:
            c.copy_(cw)
    else:
        raise ValueError(f"sparsek: tensors on {values.device} are not supported (CUDA or CPU)")
    return out


def _check_sddmm(x, y, crow, col, rows, cols, bs, out_dtype) -> torch.dtype:
    dtype = x.dtype
    if dtype not in _IN_TYPES and not (dtype == torch.float64 and x.device.type == "cpu"):
        raise TypeError(f"sparsek: x must be float16 or bfloat16 (float64 on the CPU), not {dtype}")
    if x.dim() != 2 or y.dim() != 2:
        raise ValueError(f"sparsek: x and y must be 2-D, not of shapes {tuple(x.shape)} and {tuple(y.shape)}")
    _check_dense(y, "y", dtype, x.device)
    if x.shape[0] != rows or y.shape[0] != cols or x.shape[1] != y.shape[1]:
        raise ValueError(f"sparsek: shape mismatch: x is {tuple(x.shape)}, y is {tuple(y.shape)}; x @ y^T must be "
                         f"{rows}x{cols}")
    # The pattern: checked as a BSR description whose values are absent (a (nnzb, bs, bs) placeholder of x's type).
    _check_bsr(x.new_empty((col.shape[0] if col.dim() == 1 else 0, bs, bs)), crow, col, rows, cols)
    if crow.device != x.device:
        raise ValueError(f"sparsek: the structure is on {crow.device}, x on {x.device}")
    out_dtype = dtype if out_dtype is None else out_dtype
    if out_dtype not in (torch.float32, dtype):
        raise TypeError(f"sparsek: the output must be float32 or the inputs' {dtype}, not {out_dtype}")
    return out_dtype


def sddmm_impl(x, y, crow_indices, col_indices, rows, cols, block_size, alpha=1.0, out_dtype=None):
    """``alpha * (x @ y^T)`` at the stored blocks of the ``rows x cols`` structure (``sparsek::sddmm``): x ``rows x
    K``, y ``cols x K``, any strides (a column-major view, e.g. ``t.t()`` of a contiguous ``t``, is read as it is);
    the result is the values tensor ``(nnzb, bs, bs)`` in the BSR value layout. ``dW = dZ^T @ X`` of a linear layer
    is ``sddmm(dZ.t(), X.t())``: no transposed copy."""
    out_dtype = _check_sddmm(x, y, crow_indices, col_indices, rows, cols, block_size, out_dtype)
    nnzb = col_indices.shape[0]
    out = x.new_empty((nnzb, block_size, block_size), dtype=out_dtype)
    if x.dtype == torch.float64:
        out.copy_(_torch_sddmm(x, y, crow_indices, col_indices, rows, cols, block_size, nnzb, alpha))
    elif x.is_cuda:
        _sddmm_cuda(x, y, crow_indices, col_indices, rows, cols, block_size, float(alpha), out)
    elif x.device.type == "cpu":
        crow, col = crow_indices.contiguous(), col_indices.contiguous()
        x, x_desc = _input(x)
        y, y_desc = _input(y)
        a_args = (out.data_ptr(), crow.data_ptr(), col.data_ptr(), crow.dtype == torch.int64, rows, cols,
                  block_size, nnzb)
        _native.cpu_sddmm(((_IN_TYPES[x.dtype], _OUT_TYPES[out_dtype]), x_desc, y_desc, x.shape[1], a_args,
                           (float(alpha), 0.0)))
    else:
        raise ValueError(f"sparsek: tensors on {x.device} are not supported (CUDA or CPU)")
    return out


for _key in ("CUDA", "CPU"):
    _LIB.impl("bsr_mm_t", bsr_mm_t_impl, _key)
    _LIB.impl("sddmm", sddmm_impl, _key)


@torch.library.register_fake("sparsek::bsr_mm_t")
def _bsr_mm_t_fake(values, crow_indices, col_indices, rows, cols, b, alpha=1.0, out_dtype=None, transpose_out=False):
    out_dtype = _check_mm_t(values, crow_indices, col_indices, rows, cols, b, out_dtype)
    return _new_mm_t_out(b, cols, out_dtype, transpose_out)


@torch.library.register_fake("sparsek::sddmm")
def _sddmm_fake(x, y, crow_indices, col_indices, rows, cols, block_size, alpha=1.0, out_dtype=None):
    out_dtype = _check_sddmm(x, y, crow_indices, col_indices, rows, cols, block_size, out_dtype)
    return x.new_empty((col_indices.shape[0], block_size, block_size), dtype=out_dtype)


# ---------------------------------------------------------------------------------------------------------------
# Autograd (issue 44): the formulas of ``linear`` and ``bsr_mm`` on the backward products above, so that no dense
# weight is ever made. Only the gradients autograd asks for are computed; only the stored blocks get gradients (the
# structure is fixed); the index tensors and sizes get none.
#
# Layouts (no transposed copy anywhere): with the upstream gradient dZ (tokens x out, row-major) and the input X
# (tokens x in, row-major), dW = dZ^T @ X at W's blocks is ``sddmm(dZ.t(), X.t())`` (both read as column-major
# views: x @ y^T with x = dZ^T, y = X^T), and dX = dZ @ W = (W^T @ dZ^T)^T is ``bsr_mm_t(W, dZ.t(),
# transpose_out=True)`` (dZ^T read column-major, the result written column-major as W^T dZ^T, i.e. row-major dX).

_BSR_MM_T = torch.ops.sparsek.bsr_mm_t.default
_SDDMM = torch.ops.sparsek.sddmm.default
_BSR_MM_OP = torch.ops.sparsek.bsr_mm.default


def _activation_grad(z: torch.Tensor, activation: int) -> torch.Tensor:
    """d act(z) / dz, in z's dtype, for the activation codes of ``ACTIVATIONS`` (GELU: its tanh form)."""
    if activation == 1:
        return (z > 0).to(z.dtype)
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
    # What is saved: x, the weight and the bias (the forward's inputs, alive anyway for the optimizer) and, for
    # ReLU only, the output (act'(z) = [y > 0]: no recomputation, and y exists already). GELU and SiLU recompute the
    # pre-activation z in float32 with one block-sparse product in the backward (the forward's cost again) rather
    # than keeping a tokens x out tensor alive from the forward to the backward. (The other strategy, "save", never
    # reaches this formula with GELU or SiLU: the public functions then call the op without the activation and apply
    # torch's, see linear_saving_pre_activation.)
    x, values, crow_indices, col_indices, in_features, bias, activation = inputs
    ctx.in_features, ctx.activation, ctx.has_bias = in_features, activation, bias is not None
    ctx.save_for_backward(x, values, crow_indices, col_indices, bias, output if activation == 1 else None)


def _linear_backward(ctx, grad):
    x, values, crow, col, bias, y = ctx.saved_tensors
    bs, in_features = values.shape[-1], ctx.in_features
    out_features = (crow.shape[0] - 1) * bs
    x2 = x.reshape(-1, in_features)
    dz = grad.reshape(-1, out_features)
    dz_wide = None  # dZ before its rounding to x's dtype (float32, or float64), for the bias gradient
    if ctx.activation == 1:
        dz = torch.where(y.reshape(-1, out_features) > 0, dz, torch.zeros((), dtype=dz.dtype, device=dz.device))
    elif ctx.activation != 0:
        wide = _compute_dtype(x.dtype)
        z = _BSR_MM_OP(values, crow, col, out_features, in_features, x2.t(), 1.0, wide).t()
        if bias is not None:
            z = z + bias.to(wide)
        dz_wide = dz.to(wide) * _activation_grad(z, ctx.activation)
        dz = dz_wide.to(x.dtype)
    grad_x = grad_values = grad_bias = None
    if ctx.needs_input_grad[0]:
        grad_x = _BSR_MM_T(values, crow, col, out_features, in_features, dz.t(), 1.0, None, True).reshape(x.shape)
    if ctx.needs_input_grad[1]:
        grad_values = _SDDMM(dz.t(), x2.t(), crow, col, out_features, in_features, bs, 1.0, None)
    if ctx.has_bias and ctx.needs_input_grad[5]:
        src = dz_wide if dz_wide is not None else dz.to(_compute_dtype(x.dtype))
        grad_bias = src.sum(0).to(bias.dtype)
    return grad_x, grad_values, None, None, None, grad_bias, None


def _bsr_mm_context(ctx, inputs, output):
    values, crow_indices, col_indices, rows, cols, b, alpha, out_dtype = inputs
    ctx.rows, ctx.cols, ctx.alpha = rows, cols, alpha
    ctx.save_for_backward(values, crow_indices, col_indices, b)


def _bsr_mm_backward(ctx, grad):
    values, crow, col, b = ctx.saved_tensors
    # dC in the inputs' dtype (a float32 output's gradient is rounded once, as AMP does).
    g = grad.to(values.dtype)
    grad_values = grad_b = None
    if ctx.needs_input_grad[0]:
        # dA = alpha * dC @ B^T at A's blocks: x = dC (rows x N), y = B (cols x N).
        grad_values = _SDDMM(g, b, crow, col, ctx.rows, ctx.cols, values.shape[-1], ctx.alpha, None)
    if ctx.needs_input_grad[5]:
        grad_b = _BSR_MM_T(values, crow, col, ctx.rows, ctx.cols, g, ctx.alpha, None, False)
    return grad_values, None, None, None, None, grad_b, None, None


torch.library.register_autograd("sparsek::bsr_mm", _bsr_mm_backward, setup_context=_bsr_mm_context)
torch.library.register_autograd("sparsek::linear", _linear_backward, setup_context=_linear_context)
# The twins get the same formulas, so that calling one directly (the benchmarks do) costs what the registration of
# bsr_mm and linear costs.
torch.library.register_autograd("sparsek::_bsr_mm_py", _bsr_mm_backward, setup_context=_bsr_mm_context)
torch.library.register_autograd("sparsek::_linear_py", _linear_backward, setup_context=_linear_context)
