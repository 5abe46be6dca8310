"""The read floor for the Python benches (issue 43 part 3): a kernel that reads the bytes a product must read and
writes the bytes it must write, and nothing else, as ``sparsek bench --decode``'s ``sparsek_read_floor`` does for
the CLI (bench/src/floor.rs; docs/BENCHMARKS.md, "Decode").

A Triton kernel (not part of the package; the benches import it from here): programs of 4 warps, each reading one
32 KiB chunk with 16-byte loads that skip L1 (``ld.global.cg.v2.b64``, sixteen a thread, all issued before one is
used: the CLI floor's shape), XOR-reducing it and storing the result over its share of the output, so the output's
bytes are written once and no load is dead. Two sources: the weight's bytes (the values and index tensors of one
copy, so a benchmark rotates the floor over as many copies as the product's weights) and the input's (shared by the
copies, as the product's ``x`` is). Nothing to check: it computes nothing.
"""

from __future__ import annotations

import torch

WORDS = 4096  # int64 words a program reads: 32 KiB
_WORD = 8


def why_not(device: torch.device) -> str | None:
    """Why the floor cannot run on ``device`` (``None`` when it can)."""
    if device.type != "cuda":
        return "the read floor is a CUDA kernel"
    try:
        import triton  # noqa: F401
    except ImportError as e:  # pragma: no cover - torch's CUDA wheels bring Triton
        return f"no Triton ({e})"
    return None


def _words(nbytes: int) -> int:
    """Words of a buffer holding ``nbytes`` (rounded up to 16 words: whole 128-byte lines, vector-aligned)."""
    return -(-max(nbytes, 1) // (16 * _WORD)) * 16


_KERNEL = None


def _kernel():
    global _KERNEL
    if _KERNEL is None:
        import triton
        import triton.language as tl

        @triton.jit
        def chunk(src, n, local, WORDS: tl.constexpr):
            offs = local.to(tl.int64) * WORDS + tl.arange(0, WORDS)
            v = tl.load(src + offs, mask=offs < n, other=0, cache_modifier=".cg")
            return tl.xor_sum(v, axis=0)

        @triton.jit
        def read_floor(src_a, n_a, a_progs, src_b, n_b, dst, n_out, WORDS: tl.constexpr, OUT_PER: tl.constexpr):
            pid = tl.program_id(0)
            if pid < a_progs:
                acc = chunk(src_a, n_a, pid, WORDS)
            else:
                acc = chunk(src_b, n_b, pid - a_progs, WORDS)
            o = pid.to(tl.int64) * OUT_PER + tl.arange(0, OUT_PER)
            tl.store(dst + o, acc + (o * 0), mask=o < n_out)

        _KERNEL = read_floor
    return _KERNEL


class ReadFloor:
    """The floor of one product: ``weight_bytes`` read from a copy of its own, ``input_bytes`` read from a buffer
    every copy shares, ``output_bytes`` written. ``call()`` runs it over the first copy; ``copies(n)`` gives ``n``
    calls, each over its own weight buffer (the rotation a benchmark gives the product's weights); each call returns
    its output buffer. Buffers are filled with random bits (no zero pages)."""

    def __init__(self, weight_bytes: int, input_bytes: int, output_bytes: int, device: torch.device):
        why = why_not(device)
        if why is not None:
            raise RuntimeError(why)
        self.device = device
        self.weight_bytes, self.input_bytes, self.output_bytes = weight_bytes, input_bytes, output_bytes
        self.n_a, self.n_b, self.n_out = _words(weight_bytes), _words(input_bytes), _words(output_bytes)
        self.a_progs = -(-self.n_a // WORDS)
        self.grid = self.a_progs + -(-self.n_b // WORDS)
        per = -(-self.n_out // self.grid)
        self.out_per = 1 << max(0, (per - 1).bit_length())  # a power of two (tl.arange)
        self.x = self._random(self.n_b)
        self.out = torch.empty(self.n_out, dtype=torch.int64, device=device)
        self._first = self._random(self.n_a)

    def _random(self, words: int) -> torch.Tensor:
        return torch.randint(-(2**62), 2**62, (words,), dtype=torch.int64, device=self.device)

    def _launch(self, w: torch.Tensor) -> torch.Tensor:
        _kernel()[(self.grid,)](w, self.n_a, self.a_progs, self.x, self.n_b, self.out, self.n_out, WORDS=WORDS,
                                OUT_PER=self.out_per, num_warps=4)
        return self.out

    def call(self) -> torch.Tensor:
        return self._launch(self._first)

    def copies(self, n: int) -> list:
        bufs = [self._first] + [self._random(self.n_a) for _ in range(n - 1)]
        return [lambda w=w: self._launch(w) for w in bufs]

    def describe(self) -> str:
        return (f"reads {self.weight_bytes} + {self.input_bytes} bytes, writes {self.output_bytes} "
                f"({self.grid} programs of 4 warps, 32 KiB each)")
