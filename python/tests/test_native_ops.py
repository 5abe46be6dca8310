"""The native kernels of ``sparsek::linear`` and ``sparsek::bsr_mm`` (registered through torch's stable C ABI at run
time) against the Python kernels they replace, which stay registered as the twins ``sparsek::_linear_py`` and
``sparsek::_bsr_mm_py``: the same results bit for bit, the same errors (type and message), the calls the native
kernels hand to the Python ones, and the fallback where the native registration is switched off or torch lacks a
symbol (``SPARSEK_NATIVE_OPS``; simulated with ``SPARSEK_NATIVE_OPS_HIDE``, in a subprocess each)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import sparsek
from conftest import DEVICES, DTYPES, HAVE_CUDA, INDEX_TYPES, NO_GPU_REASON, random_bsr, randn, seed_for
from sparsek import _ops

native = pytest.mark.skipif(not _ops.NATIVE_OPS, reason=f"native operators not registered: {_ops.NATIVE_OPS_WHY_NOT}")


def both_linear(*args):
    """``(native result, Python result)`` of ``sparsek::linear`` on the same arguments."""
    return torch.ops.sparsek.linear(*args), torch.ops.sparsek._linear_py(*args)


def both_bsr_mm(*args):
    return torch.ops.sparsek.bsr_mm(*args), torch.ops.sparsek._bsr_mm_py(*args)


def test_native_ops_registered_on_this_torch():
    """torch 2.11 (the project's) exports every symbol used: the native kernels must be the ones registered."""
    if os.environ.get("SPARSEK_NATIVE_OPS") == "0":
        pytest.skip("SPARSEK_NATIVE_OPS=0: the Python kernels were asked for")
    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 11):
        pytest.skip(f"torch {torch.__version__}: the native registration may legitimately be missing")
    assert _ops.NATIVE_OPS, _ops.NATIVE_OPS_WHY_NOT


@native
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_TYPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_native_equals_python(device, dtype, index_dtype):
    gen = torch.Generator().manual_seed(seed_for("native-linear", device, dtype, index_dtype))
    a, _ = random_bsr(128, 96, 32, 0.5, dtype, index_dtype, device, gen)
    v, c, ci = a.values(), a.crow_indices(), a.col_indices()
    bias = randn(128, dtype=dtype, device=device, gen=gen)
    for x, b, act in [
        (randn(5, 96, dtype=dtype, device=device, gen=gen), None, 0),
        (randn(2, 3, 96, dtype=dtype, device=device, gen=gen), bias, 1),
        (randn(96, dtype=dtype, device=device, gen=gen), bias, 2),  # 1-D x
        (randn(8, 96, dtype=dtype, device=device, gen=gen), bias, 3),
        (randn(96, 7, dtype=dtype, device=device, gen=gen).t(), None, 0),  # column-major x (read as it is)
        (randn(4, 200, dtype=dtype, device=device, gen=gen)[:, 3:99], bias, 1),  # unaligned rows: a copy (Python)
        (randn(0, 96, dtype=dtype, device=device, gen=gen), bias, 0),  # no tokens
    ]:
        done, handed = _ops._native.native_counts()
        y, y_py = both_linear(x, v, c, ci, 96, b, act)
        if device == "cpu":  # on the CPU every case runs natively (no alignment to keep there)
            assert _ops._native.native_counts() == (done + 1, handed), (x.shape, x.stride())
        assert y.shape == y_py.shape == (*x.shape[:-1], 128)
        assert y.dtype == dtype and y.device == x.device
        assert torch.equal(y, y_py), (x.shape, x.stride(), act)


@native
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_dtype", [None, torch.float32])
def test_bsr_mm_native_equals_python(device, out_dtype):
    gen = torch.Generator().manual_seed(seed_for("native-mm", device, out_dtype))
    a, _ = random_bsr(64, 128, 16, 0.4, torch.bfloat16, torch.int32, device, gen)
    v, c, ci = a.values(), a.crow_indices(), a.col_indices()
    for b in [
        randn(128, 24, dtype=torch.bfloat16, device=device, gen=gen),
        randn(24, 128, dtype=torch.bfloat16, device=device, gen=gen).t(),  # column-major b
        randn(128, 5, dtype=torch.bfloat16, device=device, gen=gen),  # N = 5: unaligned rows on CUDA (Python)
    ]:
        y, y_py = both_bsr_mm(v, c, ci, 64, 128, b, 0.5, out_dtype)
        assert y.dtype == (out_dtype or torch.bfloat16)
        assert torch.equal(y, y_py), (b.shape, b.stride())


@native
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_bsr_mm_out_native_equals_python(device, out_dtype):
    """out = alpha A b + beta out, in place: both kernels from the same poisoned-free random start, bit for bit;
    an out whose rows cannot be written in place (handed over: staged in Python) too."""
    gen = torch.Generator().manual_seed(seed_for("native-mm-out", device, out_dtype))
    a, _ = random_bsr(64, 96, 32, 0.5, torch.float16, torch.int64, device, gen)
    v, c, ci = a.values(), a.crow_indices(), a.col_indices()
    for n, transposed_out in [(16, False), (16, True), (5, False)]:
        b = randn(96, n, dtype=torch.float16, device=device, gen=gen)
        start = randn(n, 64, dtype=out_dtype, device=device, gen=gen).t() if transposed_out else \
            randn(64, n, dtype=out_dtype, device=device, gen=gen)
        out, out_py = start.clone(), start.clone()
        if transposed_out:
            out, out_py = start.t().clone().t(), start.t().clone().t()
        torch.ops.sparsek.bsr_mm_out(v, c, ci, 64, 96, b, 0.75, -1.25, out)
        torch.ops.sparsek._bsr_mm_out_py(v, c, ci, 64, 96, b, 0.75, -1.25, out_py)
        assert torch.equal(out, out_py), (n, transposed_out)
        assert not torch.equal(out, start)


def raised(f):
    """``(type, message)`` of the exception ``f()`` raises, with the public wrappers' TypeError restored."""
    try:
        f()
    except RuntimeError as e:
        try:
            _ops.raise_type_error(e)
        except TypeError as t:
            return TypeError, str(t)
        return RuntimeError, str(e)
    except Exception as e:  # noqa: BLE001
        return type(e), str(e)
    pytest.fail("no exception")


@native
@pytest.mark.parametrize("device", DEVICES)
def test_errors_are_the_python_kernels(device):
    """Every check of _ops.py, once through the native kernel and once through the Python one: same exception
    type (TypeError after the wrappers' restoration), same message."""
    gen = torch.Generator().manual_seed(seed_for("native-errors", device))
    a, _ = random_bsr(128, 64, 32, 0.5, torch.float16, torch.int64, device, gen)
    v, c, ci = a.values(), a.crow_indices(), a.col_indices()
    x = randn(3, 64, dtype=torch.float16, device=device, gen=gen)
    b = randn(64, 8, dtype=torch.float16, device=device, gen=gen)
    bias = randn(128, dtype=torch.float16, device=device, gen=gen)
    linear_cases = [
        (x.float(), v, c, ci, 64, None, 0),  # x dtype
        (x, v.float(), c, ci, 64, None, 0),  # values dtype
        (x, v, c.int(), ci, 64, None, 0),  # index dtypes differ
        (x, v, c.to(torch.int16), ci.to(torch.int16), 64, None, 0),
        (x, v[:, :, :16], c, ci, 64, None, 0),  # not square
        (x, v.reshape(-1), c, ci, 64, None, 0),  # not 3-D
        (x, v, c[:-1], ci, 64, None, 0),  # crow too short
        (x, v, c, ci[:-1], 64, None, 0),  # col length
        (x, v, c, ci, 48, None, 0),  # in_features not a multiple of bs
        (x[:, :32], v, c, ci, 64, None, 0),  # x's last dimension
        (x, v, c, ci, 64, bias[:64], 0),  # bias shape
        (x, v, c, ci, 64, bias.float(), 0),  # bias dtype
        (x, v, c, ci, 64, None, 7),  # activation code
        (x, v, c, ci, 64, None, -1),
        (x.t().contiguous().t(), v, c, ci, 48, None, 0),  # an error before a call that would be handed over
    ]
    if device == "cuda":
        linear_cases += [(x.cpu(), v, c, ci, 64, None, 0), (x, v, c.cpu(), ci, 64, None, 0)]
    for args in linear_cases:
        got = raised(lambda: torch.ops.sparsek.linear(*args))
        want = raised(lambda: torch.ops.sparsek._linear_py(*args))
        assert got == want, args[4:]
    mm_cases = [
        (v, c, ci, 128, 64, b.float(), 1.0, None),
        (v, c, ci, 128, 64, b[:32], 1.0, None),  # shape mismatch
        (v, c, ci, 128, 64, b[0], 1.0, None),  # 1-D b
        (v, c, ci, 128, 64, b, 1.0, torch.bfloat16),  # out dtype
        (v, c, ci, 96, 64, b, 1.0, None),  # rows vs crow
        (v, c, ci, 128, 60, b, 1.0, None),  # cols not a multiple of bs
    ]
    for args in mm_cases:
        got = raised(lambda: torch.ops.sparsek.bsr_mm(*args))
        want = raised(lambda: torch.ops.sparsek._bsr_mm_py(*args))
        assert got == want, args[3:]
    out = randn(128, 8, dtype=torch.float32, device=device, gen=gen)
    before = out.clone()
    out_cases = [
        (v, c, ci, 128, 64, b.float(), 1.0, 0.0, out),  # b dtype
        (v, c, ci, 128, 64, b, 1.0, 0.0, out.to(torch.bfloat16)),  # out dtype
        (v, c, ci, 128, 64, b, 1.0, 0.0, out[:, :4]),  # out shape
        (v, c, ci, 128, 64, b, 1.0, 0.0, out[0]),  # 1-D out
        (v, c, ci, 128, 64, b[:32], 1.0, 0.0, out),  # shape mismatch
        (v, c, ci, 128, 64, out.view(torch.float16)[:64, :8], 1.0, 0.0, out),  # out over b: refused
    ]
    if device == "cuda":
        out_cases.append((v, c, ci, 128, 64, b, 1.0, 0.0, out.cpu()))
    for args in out_cases:
        got = raised(lambda: torch.ops.sparsek.bsr_mm_out(*args))
        want = raised(lambda: torch.ops.sparsek._bsr_mm_out_py(*args))
        assert got == want, args[3:8]
    assert torch.equal(out, before)


@native
def test_public_wrappers_raise_type_error():
    """The direct op raises a Python kernel's TypeError as RuntimeError (no C++ standard exception becomes a
    TypeError); the public functions and the module raise TypeError, with the message."""
    gen = torch.Generator().manual_seed(seed_for("native-typeerror"))
    a, _ = random_bsr(64, 64, 32, 1.0, torch.float16, torch.int32, "cpu", gen)
    x = randn(2, 64, dtype=torch.float32, device="cpu", gen=gen)
    with pytest.raises(RuntimeError, match="x is torch.float32; it must have the BSR values' dtype torch.float16"):
        torch.ops.sparsek.linear(x, a.values(), a.crow_indices(), a.col_indices(), 64, None, 0)
    with pytest.raises(TypeError, match="x is torch.float32; it must have the BSR values' dtype torch.float16"):
        sparsek.linear(x, a)
    with pytest.raises(TypeError, match="the output must be float32"):
        sparsek.bsr_mm(a, x.t().half(), out_dtype=torch.bfloat16)
    # A later, unrelated RuntimeError is not mistaken for it.
    assert _ops._native.take_type_error() is None


@native
def test_invalid_structure_same_error_cpu(capfd):
    """The CPU backend's structure check (in the native kernel's product, and in a call handed to Python, which
    hands the exception back without libtorch logging a failed call)."""
    gen = torch.Generator().manual_seed(seed_for("native-structure"))
    a, _ = random_bsr(64, 64, 32, 1.0, torch.float16, torch.int64, "cpu", gen)
    v, c = a.values(), a.crow_indices()
    bad_col = torch.tensor([1, 0, 0, 1])  # not increasing in block row 0
    x = randn(3, 64, dtype=torch.float16, device="cpu", gen=gen)
    for xin in (x, randn(64, 3, dtype=torch.float16, device="cpu", gen=gen).t()[:, :].contiguous()[:, :]):
        got = raised(lambda: torch.ops.sparsek.linear(xin, v, c, bad_col, 64, None, 0))
        want = raised(lambda: torch.ops.sparsek._linear_py(xin, v, c, bad_col, 64, None, 0))
        assert got == want and got[0] is ValueError, got
    # Handed to the Python kernel (a non-contiguous col_indices), which raises: the same exception comes back.
    bad_col_strided = torch.tensor([1, 9, 0, 9, 0, 9, 1, 9])[::2]
    got = raised(lambda: torch.ops.sparsek.linear(x, v, c, bad_col_strided, 64, None, 0))
    want = raised(lambda: torch.ops.sparsek._linear_py(x, v, c, bad_col_strided, 64, None, 0))
    assert got == want and got[0] is ValueError, got
    assert capfd.readouterr().err == ""


@native
@pytest.mark.parametrize("mode", ["grad", "no_grad", "inference_mode"])
def test_autograd_modes(mode):
    """The autograd formula (Python) runs over the native kernel in grad mode (the input's gradient checked);
    under no_grad and inference_mode the result is plain."""
    gen = torch.Generator().manual_seed(seed_for("native-modes", mode))
    a, _ = random_bsr(64, 64, 32, 1.0, torch.float16, torch.int32, "cpu", gen)
    x = randn(2, 64, dtype=torch.float16, device="cpu", gen=gen)
    ctx = {"grad": torch.enable_grad, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}[mode]
    with ctx():
        xg = x.clone().requires_grad_(mode == "grad")
        y = sparsek.linear(xg, a)
        assert torch.equal(y.detach(), torch.ops.sparsek._linear_py(x, a.values(), a.crow_indices(),
                                                                    a.col_indices(), 64, None, 0))
    if mode == "grad":
        y.sum().backward()
        ref = torch.ones(2, 64, dtype=torch.float64) @ a.to_dense().double()
        assert torch.allclose(xg.grad.double(), ref, rtol=1e-2, atol=1e-2)
    else:
        assert not y.requires_grad


def test_wrappers_skip_autograd_only_where_no_grad_is_needed():
    """The public functions and the module skip the op's autograd kernel where grad mode is off or no input needs
    grad (the output then needs none); any input that needs grad keeps the formula, and its gradient arrives."""
    gen = torch.Generator().manual_seed(seed_for("skip-autograd"))
    a, _ = random_bsr(64, 64, 32, 0.5, torch.float16, torch.int32, "cpu", gen)
    module = sparsek.BlockSparseLinear.from_bsr(a)
    x = randn(3, 64, dtype=torch.float16, device="cpu", gen=gen)
    assert _ops.skips_autograd(x, module.values, module.bias)
    for y in (sparsek.linear(x, a), module(x), sparsek.bsr_mm(a, x.t())):
        assert not y.requires_grad and y.grad_fn is None
    for needs in ("x", "values", "bias"):
        bias = torch.zeros(64, dtype=torch.float16)
        m = sparsek.BlockSparseLinear.from_bsr(a, bias=bias) if needs == "bias" else module
        xi = x.clone().requires_grad_(needs == "x")
        if needs == "values":
            m.values.requires_grad_(True)
        if needs == "bias":
            m.bias.requires_grad_(True)
        assert not _ops.skips_autograd(xi, m.values, m.bias)
        y = m(xi)
        assert y.requires_grad
        y.sum().backward()
        leaf = {"x": xi, "values": m.values, "bias": m.bias}[needs]
        assert leaf.grad is not None and leaf.grad.shape == leaf.shape
        m.values.requires_grad_(False)
    with torch.no_grad():
        assert _ops.skips_autograd(x.clone().requires_grad_(True), module.values, None)
    with torch.inference_mode():  # skipped already
        assert not _ops.skips_autograd(x, module.values, None)


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("SPARSEK_NATIVE_OPS", "SPARSEK_NATIVE_OPS_HIDE")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**base, **env}, timeout=300)


FALLBACK_CHECK = """
    import warnings
    warnings.filterwarnings("ignore", "Sparse BSR")
    import torch, sparsek
    from sparsek import _ops
    print("NATIVE", _ops.NATIVE_OPS, "|", _ops.NATIVE_OPS_WHY_NOT)
    g = torch.Generator().manual_seed(3)
    w = torch.randn(64, 64, generator=g).half().to_sparse_bsr(32)
    x = torch.randn(3, 64, generator=g).half()
    y = sparsek.linear(x, w)
    ref = x.double() @ w.to_dense().double().t()
    assert (y.double() - ref).abs().max() < 0.05, (y, ref)
    try:
        sparsek.linear(x.float(), w)
    except TypeError as e:
        print("TYPEERROR", e)
"""


@pytest.mark.parametrize("env, registered, why", [
    ({}, True, ""),
    ({"SPARSEK_NATIVE_OPS": "0"}, False, "SPARSEK_NATIVE_OPS=0"),
    ({"SPARSEK_NATIVE_OPS_HIDE": "aoti_torch_empty_strided"}, False, "aoti_torch_empty_strided"),
    ({"SPARSEK_NATIVE_OPS_HIDE": "__cxa_throw,aoti_torch_call_dispatcher"}, False, "__cxa_throw"),
])
def test_fallback_registration(env, registered, why):
    """The Python kernels serve the ops where the native ones are switched off or a symbol is missing (simulated),
    silently; the results and errors are the same."""
    if registered and not _ops.NATIVE_OPS:
        pytest.skip(_ops.NATIVE_OPS_WHY_NOT)
    r = run_python(FALLBACK_CHECK, **env)
    assert r.returncode == 0, r.stderr
    assert f"NATIVE {registered} |" in r.stdout and why in r.stdout, r.stdout
    assert "TYPEERROR sparsek: x is torch.float32" in r.stdout, r.stdout
    assert r.stderr == "", r.stderr  # silent


def test_missing_symbol_is_an_error_when_native_ops_are_required():
    r = run_python("import sparsek", SPARSEK_NATIVE_OPS="1", SPARSEK_NATIVE_OPS_HIDE="aoti_torch_get_data_ptr")
    assert r.returncode != 0
    assert "SPARSEK_NATIVE_OPS=1" in r.stderr and "aoti_torch_get_data_ptr" in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------------------------
# CUDA: the structure cache the native kernel reads, captures.


@native
@pytest.mark.skipif(not HAVE_CUDA, reason=NO_GPU_REASON)
def test_cuda_native_cache_and_recheck():
    """The first call of a weight is handed to Python (it checks the structure), which records it for the native
    kernel; later calls run natively with it; an in-place write to the indices (a new version) is checked again,
    and an invalid structure is refused then."""
    gen = torch.Generator().manual_seed(seed_for("native-cuda-cache"))
    a, _ = random_bsr(256, 128, 32, 0.5, torch.float16, torch.int32, "cuda", gen)
    v, c, ci = a.values(), a.crow_indices().clone(), a.col_indices().clone()
    x = randn(16, 128, dtype=torch.float16, device="cuda", gen=gen)

    def key():
        return ((c.data_ptr(), ci.data_ptr(), False, 256, 128, 32, v.shape[0]), (c._version, ci._version), 0)

    assert not _ops._native.native_checked_has(key())
    done, handed = _ops._native.native_counts()
    y, y_py = both_linear(x, v, c, ci, 128, None, 0)
    assert torch.equal(y, y_py)
    assert _ops._native.native_counts() == (done, handed + 1)  # the first call checks (in Python)
    assert _ops._native.native_checked_has(key())
    for _ in range(3):
        assert torch.equal(torch.ops.sparsek.linear(x, v, c, ci, 128, None, 0), y_py)
    assert _ops._native.native_counts() == (done + 3, handed + 1)  # then native
    ci.copy_(ci)  # a new version: checked again (in Python) and recorded under the new key
    assert not _ops._native.native_checked_has(key())
    assert torch.equal(torch.ops.sparsek.linear(x, v, c, ci, 128, None, 0), y_py)
    assert _ops._native.native_checked_has(key())
    assert _ops._native.native_counts() == (done + 3, handed + 2)
    if ci.numel() >= 2:
        # A block column past the last (128 / 32 = 4 block columns) is invalid whatever the rows hold; swapping two
        # entries was not (an H200 run, 2026-11-28: a first row of one block swapped with the next row's first can
        # leave every row sorted).
        bad = ci.clone()
        bad[0] = 128 // 32
        with pytest.raises(ValueError, match="sparsek"):
            torch.ops.sparsek.linear(x, v, c, bad, 128, None, 0)
    torch.cuda.synchronize()


@native
@pytest.mark.skipif(not HAVE_CUDA, reason=NO_GPU_REASON)
def test_cuda_native_graph_capture():
    """A warmed-up weight captured into a CUDA graph: the capture pins the structure (through Python once), the
    replay equals the eager result."""
    gen = torch.Generator().manual_seed(seed_for("native-cuda-graph"))
    a, _ = random_bsr(256, 256, 64, 0.5, torch.float16, torch.int64, "cuda", gen)
    x = randn(4, 256, dtype=torch.float16, device="cuda", gen=gen)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ref = sparsek.linear(x, a, activation="relu")
        sparsek.linear(x, a, activation="relu")
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = sparsek.linear(x, a, activation="relu")
    x.copy_(randn(4, 256, dtype=torch.float16, device="cuda", gen=gen))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, sparsek.linear(x, a, activation="relu"))
    assert not torch.equal(out, ref)


@native
@pytest.mark.parametrize("exc, want", [(MemoryError("no room"), MemoryError), (RuntimeError("driver said no"),
                                                                                  RuntimeError),
                                       (ValueError("bad structure"), ValueError)])
def test_handed_over_call_raises_the_python_exception(monkeypatch, capfd, exc, want):
    """A call handed to the Python kernel (here: non-contiguous indices) whose launch fails: the native kernel
    raises the exception's kind (MemoryError as std::bad_alloc, without its message), libtorch logs nothing."""
    gen = torch.Generator().manual_seed(seed_for("handed-over", want.__name__))
    a, _ = random_bsr(64, 64, 32, 1.0, torch.float16, torch.int64, "cpu", gen)
    col = torch.stack([a.col_indices(), a.col_indices()], 1)[:, 0]  # strided: handed over
    x = randn(2, 64, dtype=torch.float16, device="cpu", gen=gen)

    def fail(*args):
        raise exc

    monkeypatch.setattr(_ops, "_launch", fail)
    with pytest.raises(want) as info:
        torch.ops.sparsek.linear(x, a.values(), a.crow_indices(), col, 64, None, 0)
    if want is not MemoryError:
        assert str(info.value) == str(exc)
    monkeypatch.undo()
    done, handed = _ops._native.native_counts()
    assert torch.equal(torch.ops.sparsek.linear(x, a.values(), a.crow_indices(), col, 64, None, 0),
                       torch.ops.sparsek._linear_py(x, a.values(), a.crow_indices(), col, 64, None, 0))
    assert _ops._native.native_counts() == (done, handed + 1)
    assert capfd.readouterr().err == ""
