"""Shared helpers of the Python tests: devices, random BSR matrices, the float64 reference and its tolerance.

CUDA cases run where torch sees a GPU and are skipped with a reason otherwise; ``SPARSEK_REQUIRE_GPU=1`` turns
that skip into a failure (test_cuda.py::test_gpu_present).
"""

from __future__ import annotations

import math
import os
import zlib

import pytest
import torch

HAVE_CUDA = torch.cuda.is_available()
REQUIRE_GPU = os.environ.get("SPARSEK_REQUIRE_GPU") == "1"
NO_GPU_REASON = "no CUDA GPU visible to torch (set SPARSEK_REQUIRE_GPU=1 to make this a failure)"

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not HAVE_CUDA, reason=NO_GPU_REASON)),
]
DTYPES = [torch.float16, torch.bfloat16]
INDEX_TYPES = [torch.int32, torch.int64]
BLOCK_SIZES = [16, 32, 64, 128]

# Unit roundoff of each output type (half an ulp at 1.0).
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


def seed_for(*parts) -> int:
    """A seed from a test's parameters, so every case draws its own inputs (and reruns draw the same)."""
    return zlib.crc32(repr(parts).encode()) % (2**31)


def random_bsr(m, k, bs, density, dtype, index_dtype, device, gen, *, skew=False, empty_rows=False):
    """A random ``m x k`` BSR tensor (and its dense float64 twin). Values are normal, never all zero when a block
    is kept; ``skew`` puts most blocks in the first block row; ``empty_rows`` empties every third block row."""
    r, c = m // bs, k // bs
    mask = torch.rand(r, c, generator=gen) < density
    if skew and r > 1:
        mask[0, :] = True
        mask[1:, :] &= torch.rand(r - 1, c, generator=gen) < 0.3
    if empty_rows:
        mask[::3, :] = False
    crow = torch.zeros(r + 1, dtype=torch.int64)
    crow[1:] = mask.sum(1).cumsum(0)
    col = mask.nonzero()[:, 1]
    values = torch.randn(int(mask.sum()), bs, bs, generator=gen).to(dtype)
    a = torch.sparse_bsr_tensor(crow.to(index_dtype), col.to(index_dtype), values, (m, k)).to(device)
    return a, bsr_to_dense64(a)


def bsr_to_dense64(a: torch.Tensor) -> torch.Tensor:
    """The BSR tensor as a dense float64 CPU matrix, built from its components (not through sparsek)."""
    values = a.values().cpu().double()
    crow = a.crow_indices().cpu().long()
    col = a.col_indices().cpu().long()
    m, k = a.shape
    bs = values.shape[-1]
    dense = torch.zeros(m, k, dtype=torch.float64)
    for br in range(m // bs):
        for i in range(int(crow[br]), int(crow[br + 1])):
            bc = int(col[i])
            dense[br * bs:(br + 1) * bs, bc * bs:(bc + 1) * bs] = values[i]
    return dense


def randn(*shape, dtype, device, gen):
    return torch.randn(*shape, generator=gen).to(dtype).to(device)


def activation64(x: torch.Tensor, activation: str | None) -> torch.Tensor:
    """The activations in float64, exactly (GELU: the tanh form)."""
    if activation in (None, "identity"):
        return x
    if activation == "relu":
        return torch.relu(x)
    if activation == "gelu_tanh":
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if activation == "silu":
        return x * torch.sigmoid(x)
    raise ValueError(activation)


def assert_close(got: torch.Tensor, ref: torch.Tensor, abs_prod: torch.Tensor, k: int, activation=None,
                 rounded_inputs: float = 0.0):
    """``|got - ref| <= atol + rtol * |ref|`` elementwise, NaN failing, with the library's error model: f32
    accumulation over ``k`` terms (``atol`` from ``|A| @ |B|``, the sum of the magnitudes of each dot product's
    terms), one rounding to the output type (``rtol``), a little more through GELU/SiLU (approximate exp).
    ``rounded_inputs``: the relative error of an operand rounded before the product (the unit roundoff of a
    gradient rounded to 16 bits), which adds that much of ``abs_prod``."""
    got64 = got.detach().cpu().double()
    assert got64.shape == ref.shape, (got64.shape, ref.shape)
    assert not torch.isnan(got64).any(), "NaN in the result"
    u = UNIT_ROUNDOFF[got.dtype]
    atol = 4.0 * max(k, 1) * 2.0**-24 * abs_prod + 1e-30
    rtol = 2.0 * u
    atol = atol + 1.01 * rounded_inputs * abs_prod
    if got.dtype == torch.float16:
        atol = atol + 2.0**-25  # half an ulp of float16's subnormals (below 2^-14 the rounding is absolute)
    if activation in ("gelu_tanh", "silu"):
        atol = atol * 1.25 + 2.0**-20 * abs_prod.clamp(min=1.0)
        rtol += 2.0**-20
    bad = (got64 - ref).abs() > atol + rtol * ref.abs()
    if bad.any():
        idx = bad.nonzero()[0].tolist()
        raise AssertionError(
            f"{int(bad.sum())} of {bad.numel()} elements outside tolerance; first at {idx}: got "
            f"{got64[tuple(idx)].item()!r}, expected {ref[tuple(idx)].item()!r}"
        )


def blocks_of(dense: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The entries of a dense matrix at ``w``'s stored blocks (a ``torch.sparse_bsr`` tensor), in its value layout."""
    bs = w.values().shape[-1]
    crow, col = w.crow_indices().cpu().long(), w.col_indices().cpu().long()
    rows = torch.repeat_interleave(torch.arange(crow.numel() - 1), crow[1:] - crow[:-1])
    m, k = dense.shape
    return dense.reshape(m // bs, bs, k // bs, bs).permute(0, 2, 1, 3)[rows, col]
