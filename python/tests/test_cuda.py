"""CUDA-only behaviour: zero-copy (no input copied, no allocation but the output), torch's current stream (a
non-default one included), CUDA-graph capture of a module, torch.compile with inductor (and its CUDA graphs),
the device-side structure check and when it is remembered. Skipped without a GPU unless SPARSEK_REQUIRE_GPU=1."""

from __future__ import annotations

import pytest
import torch

import sparsek
from conftest import HAVE_CUDA, NO_GPU_REASON, REQUIRE_GPU, assert_close, random_bsr, seed_for
from sparsek import _ops
from sparsek.nn import BlockSparseLinear


def test_gpu_present():
    """Fails instead of skipping when SPARSEK_REQUIRE_GPU=1 and there is no usable GPU."""
    if not REQUIRE_GPU and not HAVE_CUDA:
        pytest.skip(NO_GPU_REASON)
    assert HAVE_CUDA, "SPARSEK_REQUIRE_GPU=1 but torch sees no CUDA GPU"
    assert sparsek.cuda_available(), "SPARSEK_REQUIRE_GPU=1 but sparsek finds no CUDA driver or device"
    info = sparsek.device_info()
    assert info["compute_capability"] >= (8, 0), info
    # The sm_90a module is loaded exactly on compute capability 9.0.
    assert (info["hopper_module"] == "sparsek_sm90a") == (tuple(info["compute_capability"]) == (9, 0)), info
    print(f"sparsek on {info}")


pytestmark = pytest.mark.skipif(not HAVE_CUDA, reason=NO_GPU_REASON)


def layer(in_f, out_f, bs, density, seed, activation=None, dtype=torch.float16):
    torch.manual_seed(seed)
    lin = torch.nn.Linear(in_f, out_f).cuda()
    return BlockSparseLinear.from_dense(lin, bs, density=density, dtype=dtype, activation=activation)


def check_layer(y, x, lay):
    w = lay.to_dense().cpu().double()
    x64 = x.cpu().double().reshape(-1, lay.in_features)
    ref = x64 @ w.t() + lay.bias.cpu().double()
    if lay.activation == "relu":
        ref = torch.relu(ref)
    assert_close(y.reshape(-1, lay.out_features), ref, x64.abs() @ w.abs().t() + lay.bias.cpu().double().abs(),
                 lay.in_features)


def test_zero_copy():
    gen = torch.Generator().manual_seed(seed_for("zero-copy"))
    w, _ = random_bsr(1024, 512, 64, 0.3, torch.float16, torch.int64, "cuda", gen)
    x = torch.randn(48, 512, generator=gen).half().cuda()
    b = x.t().contiguous()
    ptrs = [t.data_ptr() for t in (x, b, w.values(), w.crow_indices(), w.col_indices())]
    sparsek.linear(x, w)  # the first use checks the structure on the device (not through torch's allocator)
    sparsek.bsr_mm(w, b)
    for op, out_bytes in ((lambda: sparsek.linear(x, w), 48 * 1024 * 2), (lambda: sparsek.bsr_mm(w, b), 1024 * 48 * 2)):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        y = op()
        torch.cuda.synchronize()
        # The only allocation is the output (torch's allocator rounds to 512 bytes): no staging copy of anything.
        assert torch.cuda.max_memory_allocated() - before == y.untyped_storage().nbytes() == out_bytes
        del y
    assert ptrs == [t.data_ptr() for t in (x, b, w.values(), w.crow_indices(), w.col_indices())]


def test_runs_on_the_current_stream():
    """Work queued on a non-default stream before the op (a long sleep, then a new x) is seen by the op, and the
    op's result is complete when that stream is synchronised: it ran on that stream, in order."""
    lay = layer(512, 256, 64, 0.5, 11)
    x = torch.randn(32, 512, device="cuda", dtype=torch.float16)
    new_x = torch.randn(32, 512, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s), torch.no_grad():
        lay(x)  # structure checked on first use
        torch.cuda._sleep(50_000_000)  # ~tens of ms on s
        x.copy_(new_x)
        y = lay(x)
    s.synchronize()
    check_layer(y, new_x, lay)


def test_cuda_graph_capture_of_a_module():
    model = torch.nn.Sequential(layer(256, 512, 64, 0.4, 12, activation="relu"), layer(512, 256, 32, 0.3, 13))
    static_x = torch.randn(16, 256, device="cuda", dtype=torch.float16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(2):
            model(static_x)  # warm-up (checks the structures, as the capture cannot)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        static_y = model(static_x)
    for i in range(3):
        x = torch.randn(16, 256, device="cuda", dtype=torch.float16)
        static_x.copy_(x)
        static_y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        with torch.no_grad():
            h = model[0](x)
        check_layer(h, x, model[0])
        check_layer(static_y, h, model[1])


def replays_give(op, want):
    """Runs ``op`` once on a side stream (the warm-up), captures it in a CUDA graph, and replays the graph three
    times into its poisoned output, which must hold ``want``'s bits each time."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        op()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static = op()
    for _ in range(3):
        static.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(static.view(torch.int16), want.view(torch.int16)), "a replay differs"


def test_structures_captured_in_a_graph_are_never_dropped(monkeypatch):
    """A CUDA graph reads the checked copy of the indices and the schedule at every replay, so a structure used
    inside a capture is kept for good: checking more structures than the bound allows afterwards drops every other
    entry, and the replays still give the eager bits (under compute-sanitizer memcheck: no read of freed memory)."""
    monkeypatch.setattr(_ops, "_CHECKED", type(_ops._CHECKED)())
    monkeypatch.setattr(_ops, "_CAPTURED", {})
    monkeypatch.setattr(_ops, "_CHECKED_MAX", 1)
    monkeypatch.setattr(_ops, "_checked_bytes", 0)
    gen = torch.Generator().manual_seed(seed_for("captured-kept"))
    w, _ = random_bsr(512, 256, 64, 0.5, torch.float16, torch.int64, "cuda", gen, skew=True)
    b = torch.randn(256, 8, device="cuda", dtype=torch.float16)
    want = sparsek.bsr_mm(w, b)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        sparsek.bsr_mm(w, b)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static = sparsek.bsr_mm(w, b)
    assert len(_ops._CAPTURED) == 1 and len(_ops._CHECKED) == 0
    for i in range(3):
        other, _ = random_bsr(512, 256, 64, 0.5, torch.float16, torch.int64, "cuda", gen)
        sparsek.bsr_mm(other, b)  # each check drops the one before it (bound 1)
        assert len(_ops._CHECKED) == 1 and len(_ops._CAPTURED) == 1
        static.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(static.view(torch.int16), want.view(torch.int16)), f"replay {i} differs"


@pytest.mark.parametrize("tokens", [8, 48])
def test_captured_skewed_weight_replays_the_eager_bits(tokens):
    """A weight whose first block row holds every block: eagerly the library splits that row over several CTAs (or
    spreads the blocks by its flat list), adding the parts in a fixed order. Captured in a CUDA graph it must do the
    same on a workspace the graph owns, so each replay gives the eager launch's bits (random values: whole rows, or
    any other split, would round differently), for ``linear`` and ``bsr_mm``."""
    gen = torch.Generator().manual_seed(seed_for("captured-skewed", tokens))
    # 256 block rows (more than the decode kernels take) of about 2 blocks, the first holding all 32.
    m, k = 64 * 256, 64 * 32
    w, w64 = random_bsr(m, k, 64, 0.2, torch.float16, torch.int64, "cuda", gen, skew=True)
    assert int((w.crow_indices()[1:] - w.crow_indices()[:-1]).max()) == 32  # the first row is full
    x = torch.randn(tokens, k, generator=gen).half().cuda()
    static_x = x.clone()
    ops = (lambda t: sparsek.linear(t, w), lambda t: sparsek.bsr_mm(w, t.t().contiguous()))
    for op in ops:
        eager = op(x)  # also the warm-up: checks the structure, as the capture cannot
        torch.cuda.synchronize()
        ref = w64 @ x.cpu().double().t()
        got = eager.t() if eager.shape[0] == tokens else eager
        assert_close(got.cpu(), ref, w64.abs() @ x.cpu().double().abs().t(), k)
        replays_give(lambda: op(static_x), eager)


@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty")  # the refused op queued nothing, as it should
def test_capture_before_any_check_is_refused_clearly():
    lay = layer(128, 128, 64, 1.0, 14)
    x = torch.randn(4, 128, device="cuda", dtype=torch.float16)
    fresh_col = lay.col_indices.clone()  # a new index tensor: never checked
    g = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="run the op once before capturing"):
        with torch.cuda.graph(g), torch.no_grad():
            torch.ops.sparsek.linear(x, lay.values, lay.crow_indices, fresh_col, 128, None, 0)


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_torch_compile_inductor(mode):
    torch._dynamo.reset()
    model = torch.nn.Sequential(layer(256, 512, 64, 0.4, 15, activation="relu"), torch.nn.Dropout(0.0),
                                layer(512, 256, 64, 0.4, 16))
    compiled = torch.compile(model, fullgraph=True, mode=mode)
    with torch.no_grad():
        for tokens in (8, 8, 8, 24):
            x = torch.randn(tokens, 256, device="cuda", dtype=torch.float16)
            y = compiled(x)
            expected = model(x)
            assert torch.equal(y, expected), (y - expected).abs().max()


def test_structure_check_is_remembered_until_the_indices_change(monkeypatch):
    calls = []
    real = _ops._native.cuda_check_bsr

    def counting(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(_ops._native, "cuda_check_bsr", counting)
    gen = torch.Generator().manual_seed(seed_for("remembered"))
    w, _ = random_bsr(256, 256, 64, 0.5, torch.float16, torch.int32, "cuda", gen)
    values, crow, col = w.values(), w.crow_indices(), w.col_indices()
    x = torch.randn(8, 256, device="cuda", dtype=torch.float16)
    for _ in range(3):
        torch.ops.sparsek.linear(x, values, crow, col, 256, None, 0)
    assert len(calls) == 1
    col[0] = 7  # in place: the version counter moves, so the next call checks again, and refuses
    with pytest.raises(ValueError, match="block row"):
        torch.ops.sparsek.linear(x, values, crow, col, 256, None, 0)
    assert len(calls) == 2


@pytest.mark.parametrize("how", ["data", "dlpack", "inference"])
def test_index_writes_torch_cannot_see_never_reach_the_kernel(how):
    """Writes to remembered index tensors that their version counter does not see (through ``.data``, through a
    DLPack alias, or to inference tensors, which have none) cannot make a kernel read an unchecked structure: the
    launches read the private copy checked at the first call. The indices are made wildly out of range (columns
    of 2^30, a row pointer past nnzb): a kernel following them would read far outside B and A's values (run under
    compute-sanitizer memcheck). The result keeps the checked structure's bits; an in-place torch op (the counter
    moves) makes the next call check again and refuse."""
    gen = torch.Generator().manual_seed(seed_for("unseen-writes", how))
    m, k, n, bs = 256, 256, 8, 64
    with torch.inference_mode(how == "inference"):
        w, w64 = random_bsr(m, k, bs, 0.5, torch.float16, torch.int64, "cuda", gen)
        values, crow, col = w.values().clone(), w.crow_indices().clone(), w.col_indices().clone()
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    first = torch.ops.sparsek.bsr_mm(values, crow, col, m, k, b, 1.0, None)
    b64 = b.cpu().double()
    assert_close(first, w64 @ b64, w64.abs() @ b64.abs(), k)
    version = _ops._versions(crow, col)
    if how == "data":
        col.data.fill_(1 << 30)
        crow.data[1:] = 1 << 30
    elif how == "dlpack":
        torch.from_dlpack(col).fill_(1 << 30)
        torch.from_dlpack(crow)[1:] = 1 << 30
    else:
        with torch.inference_mode():
            col.fill_(1 << 30)
            crow[1:] = 1 << 30
    assert _ops._versions(crow, col) == version  # torch did not see the writes
    for _ in range(2):
        again = torch.ops.sparsek.bsr_mm(values, crow, col, m, k, b, 1.0, None)
        torch.cuda.synchronize()
        assert torch.equal(again, first)
    if how != "inference":
        col[0] = 1 << 30  # a write torch sees: checked again, refused
        with pytest.raises(ValueError, match="block row"):
            torch.ops.sparsek.bsr_mm(values, crow, col, m, k, b, 1.0, None)


def test_invalid_structure_on_the_device_names_the_row():
    crow = torch.tensor([0, 1, 3], device="cuda")
    col = torch.tensor([0, 1, 1], device="cuda")  # row 1 repeats column 1
    values = torch.randn(3, 32, 32, device="cuda", dtype=torch.float16)
    bad = torch.sparse_bsr_tensor(crow, col, values, (64, 64))
    b = torch.randn(64, 8, device="cuda", dtype=torch.float16)
    out = torch.randn(64, 8, device="cuda")
    before = out.clone()
    with pytest.raises(ValueError, match="block row 1"):
        sparsek.bsr_mm(bad, b, out=out, beta=1.0)
    assert torch.equal(out, before)


def test_tensors_on_another_device_type_are_refused():
    gen = torch.Generator().manual_seed(1)
    w, _ = random_bsr(64, 64, 32, 1.0, torch.float16, torch.int64, "cuda", gen)
    with pytest.raises(ValueError, match="x is on cpu, the BSR matrix on cuda"):
        sparsek.linear(torch.randn(2, 64).half(), w)


def test_remembered_checks_are_bounded_by_bytes(monkeypatch):
    """The remembered structures keep their index tensors alive; past the byte bound the least recently used is
    dropped (and simply checked again on its next use)."""
    calls = []
    real = _ops._native.cuda_check_bsr
    monkeypatch.setattr(_ops._native, "cuda_check_bsr", lambda *a: (calls.append(a), real(*a))[1])
    gen = torch.Generator().manual_seed(seed_for("bounded"))
    w1, _ = random_bsr(256, 256, 64, 1.0, torch.float16, torch.int64, "cuda", gen)
    w2, _ = random_bsr(256, 256, 64, 1.0, torch.float16, torch.int64, "cuda", gen)
    # The index tensors, the checked copy of them and the schedule (4 block rows of int32).
    one = 2 * (w1.crow_indices().nbytes + w1.col_indices().nbytes) + 4 * 4
    monkeypatch.setattr(_ops, "_CHECKED_MAX_BYTES", one)  # room for one structure
    monkeypatch.setattr(_ops, "_CHECKED", type(_ops._CHECKED)())
    monkeypatch.setattr(_ops, "_checked_bytes", 0)
    b = torch.randn(256, 8, device="cuda", dtype=torch.float16)
    for w in (w1, w1, w2, w2, w1):
        sparsek.bsr_mm(w, b)
    assert len(calls) == 3  # w1, w2 (drops w1), w1 again
    assert len(_ops._CHECKED) == 1 and _ops._checked_bytes == one


def test_launches_carry_the_schedule_made_at_the_check(monkeypatch):
    """Every CUDA launch passes the block rows' schedule made when the structure was checked (the library's
    RowSchedule: longest rows first, the longest row's blocks), the same one while the indices are unchanged, so
    the library schedules a torch tensor's rows as it does an uploaded matrix's. Skewed rows through bsr_mm (few
    columns: the split rows) and linear (the sm_90a kernels on an H100/H200) give the float64 result; a structure
    without block rows gets none."""
    schedules = []
    real = _ops._native.cuda_spmm
    monkeypatch.setattr(_ops._native, "cuda_spmm", lambda *a: (schedules.append(a[3]), real(*a))[1])
    counts = _ops._native.native_counts() if _ops.NATIVE_OPS else None
    gen = torch.Generator().manual_seed(seed_for("schedule-carried"))
    w, w64 = random_bsr(64 * 300, 64 * 40, 64, 0.1, torch.float16, torch.int64, "cuda", gen, skew=True)
    for n in (8, 8, 200):
        b = torch.randn(64 * 40, n, device="cuda", dtype=torch.float16)
        got = sparsek.bsr_mm(w, b)
        b64 = b.cpu().double()
        assert_close(got, w64 @ b64, w64.abs() @ b64.abs(), 64 * 40)
    x = torch.randn(16, 64 * 40, device="cuda", dtype=torch.float16)
    got = sparsek.linear(x, w)
    x64 = x.cpu().double()
    assert_close(got, x64 @ w64.t(), x64.abs() @ w64.abs().t(), 64 * 40)
    if counts is None:
        assert len(schedules) == 4 and all(s is schedules[0] for s in schedules), schedules
    else:
        # The native kernels (sparsek._ops.NATIVE_OPS) run every launch after the structure's check with the schedule
        # recorded at the check; only the calls they hand to the Python kernel (the first: the check) pass
        # cuda_spmm, with that same schedule.
        done = _ops._native.native_counts()[0] - counts[0]
        assert schedules and all(s is schedules[0] for s in schedules), schedules
        assert done + len(schedules) == 4, (done, schedules)
    s = schedules[0]
    crow = w.crow_indices().cpu()
    assert (s.block_rows, s.nnzb, s.max_row_blocks) == (300, int(crow[-1]), int((crow[1:] - crow[:-1]).max()))
    assert s.max_row_blocks == 40  # the skewed first row is full
    # int32 indices give the same schedule; a matrix without block rows gets none.
    s32 = _ops._schedule(w.crow_indices().to(torch.int32), w.device.index or 0)
    assert (s32.block_rows, s32.nnzb, s32.max_row_blocks) == (s.block_rows, s.nnzb, s.max_row_blocks)
    assert _ops._schedule(torch.zeros(1, dtype=torch.int64, device="cuda"), 0) is None
    with pytest.raises(ValueError, match="row_ptr decreases at block row 1"):
        _ops._schedule(torch.tensor([0, 3, 2], device="cuda"), 0)


def test_sm_limit_holds_the_sm90a_grid_and_keeps_the_bits():
    """Under set_sm_limit the plan says so and, on an H100/H200, the sm_90a kernels of many columns run a grid of
    the limit's CTAs, one per SM; the outputs are the bits of the launches without a limit (the same kernel and
    tiles). The limit applies to later products only, and lifting it gives the plain plan back."""
    torch.manual_seed(seed_for("sm-limit"))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    lay = layer(1024, 4096, 64, 0.3, 60, dtype=torch.bfloat16)  # 64 block rows x 4 N tiles: more tiles than SMs
    x = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        want = lay(x)
        plain = sparsek.last_plan()
        assert plain is not None and "(limit)" not in plain, plain
        limit = max(1, sms - 24)
        with sparsek.limit_sms(limit):
            got = lay(x)
            held = sparsek.last_plan()
        torch.cuda.synchronize()
    print(f"without a limit: {plain}\nwith {limit} of {sms} SMs: {held}")
    check_layer(want, x, lay)
    assert torch.equal(got, want)
    assert held.endswith(f"; planned for {limit} SMs (limit)"), held
    if sparsek.device_info()["hopper_module"] is not None:
        assert held.startswith("sparsek_sm90_bs64_bf16") and f"; {limit} CTAs of" in held, held
        assert f"; {sms} CTAs of" in plain, plain
    with torch.no_grad():
        again = lay(x)
    assert torch.equal(again, want) and "(limit)" not in sparsek.last_plan()


def test_programmatic_launch_chains_match_plain_ones():
    """With set_programmatic_launch(True) a chain of layers queued back to back (each reading the last one's
    output), eagerly and captured in a CUDA graph, gives the bits of the same chain launched plainly with a
    synchronisation after every layer. On a GPU without programmatic launch the setting changes nothing."""
    torch.manual_seed(seed_for("programmatic"))
    layers = [layer(1024, 1024, bs, 0.3, 40 + i) for i, bs in enumerate([64, 32, 64, 128, 64, 32])]
    x = torch.randn(8, 1024, device="cuda", dtype=torch.float16)

    def chain(sync_each):
        h = x
        with torch.no_grad():
            for lay in layers:
                h = lay(h)
                if sync_each:
                    torch.cuda.synchronize()
        return h

    assert not sparsek.programmatic_launch()
    want = chain(True)
    assert torch.isfinite(want).all()
    try:
        sparsek.set_programmatic_launch(True)
        assert sparsek.programmatic_launch()
        print(f"programmatic launch available: {sparsek.device_info()['programmatic_launch']}")
        for _ in range(3):
            got = chain(False)
            torch.cuda.synchronize()
            assert torch.equal(got, want)
        replays_give(lambda: chain(False), want)
    finally:
        sparsek.set_programmatic_launch(False)
