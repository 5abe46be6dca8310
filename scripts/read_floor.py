"""What a plain read of a decode product's bytes costs per event on this GPU: the floor under issue 12's
copy-fraction targets (docs/perf-notes.md, issue 12 step 14). Needs PyTorch and Triton on a GPU machine.

    python3 scripts/read_floor.py [MB ...]        (default: 118.3 54.0 29.6, the decode grid's sizes)

Method, as `sparsek bench --decode`: every launch between its own pair of CUDA events, median of 30 after 5
warm-up. Before every timed launch a dense matmul (16384 x 16384 by 8 columns, ~140 us: the grid's cuBLAS case)
runs untimed, so the host is ahead of the GPU (Python's launch cost stays out of the events) and L2 holds none of
the next launch's bytes; consecutive launches read different input sets. Contenders, each over the same bytes:
- `read bBLOCKxITERS wW efE`: Triton, one program of W warps per BLOCK * ITERS f16 values (all ITERS loads issued
  before the sum), E = 1 with evict-first loads (`.L1::evict_first` and an L2 evict-first cache policy);
- `persist P/SM`: P programs per SM looping over the chunks (one load in flight per program);
- `same-size copy`: `copy_` moving half the bytes each way (the grid's same-size copy);
- `empty`: a Triton kernel doing nothing (what the events cost around a launch).
Then, with `--patterns`: the best read with its chunks taken in order against S streams far apart (program `p`
reads chunk `(p % S) * (chunks / S) + p / S`), which is how a kernel with one CTA per block row reads A.
The copy bandwidth is that of a 1 GiB `copy_`, read + written, as the grid's.
"""
import statistics
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def read_sum(x, out, n, nchunks, streams, BLOCK: tl.constexpr, ITERS: tl.constexpr, EVICT: tl.constexpr):
    pid = tl.program_id(0)
    c = pid
    if streams > 0:
        per = nchunks // streams
        c = tl.where(pid < per * streams, (pid % streams) * per + pid // streams, pid)
    base = c.to(tl.int64) * BLOCK * ITERS
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in tl.static_range(ITERS):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        if EVICT:
            v = tl.load(x + offs, mask=offs < n, other=0.0, eviction_policy="evict_first")
        else:
            v = tl.load(x + offs, mask=offs < n, other=0.0)
        acc += v.to(tl.float32)
    tl.store(out + pid, tl.sum(acc))


@triton.jit
def read_persist(x, out, n, chunks, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for c in range(pid, chunks, tl.num_programs(0)):
        offs = c.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x + offs, mask=offs < n, other=0.0, eviction_policy="evict_first").to(tl.float32)
    tl.store(out + pid, tl.sum(acc))


@triton.jit
def empty(out):
    pass


def timeit(contenders, filler, warm=5, iters=30):
    """Per-event medians (us) of each contender, `filler` untimed before every launch. Each contender is called
    with a launch counter running over all of them, so consecutive launches read different input sets."""
    ev, g = [], 0
    for it in range(warm + iters):
        for name, launch in contenders.items():
            filler()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            launch(g)
            b.record()
            g += 1
            if it >= warm:
                ev.append((name, a, b))
    torch.cuda.synchronize()
    times = {name: [] for name in contenders}
    for name, a, b in ev:
        times[name].append(a.elapsed_time(b) * 1000)
    return {name: statistics.median(v) for name, v in times.items()}


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    patterns = "--patterns" in sys.argv
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    sms = props.multi_processor_count
    l2 = getattr(props, "L2_cache_size", 60 << 20)
    print(f"# {props.name}, {sms} SMs, L2 {l2 >> 20} MiB, torch {torch.__version__}, triton {triton.__version__}")
    w = torch.randn(16384, 16384, device=dev, dtype=torch.float16)
    xb = torch.randn(16384, 8, device=dev, dtype=torch.float16)
    filler = lambda: torch.mm(w, xb)  # noqa: E731
    src = torch.randn(512 << 20, device=dev, dtype=torch.float16)  # 1 GiB
    dst = torch.empty_like(src)
    t = timeit({"copy": lambda g: dst.copy_(src)}, filler, 3, 20)["copy"]
    copy_bw = 2 * src.numel() * 2 / (t * 1e-6) / 1e9
    print(f"copy 1 GiB: {t:.1f} us, {copy_bw:.1f} GB/s (read + written)")
    del src, dst
    out = torch.empty(1 << 22, device=dev, dtype=torch.float32)
    rows = []
    for mb in [float(a) for a in (args or ["118.3", "54.0", "29.6"])]:
        n = int(mb * 1e6 / 2) // 8 * 8
        sets = max(3, -(-2 * l2 // (n * 2)))
        xs = [torch.randn(n, device=dev, dtype=torch.float16) for _ in range(sets)]
        half = n // 2 // 8 * 8
        cs = [(torch.randn(half, device=dev, dtype=torch.float16), torch.empty(half, device=dev, dtype=torch.float16))
              for _ in range(sets)]
        con = {}

        def read(blk, iters, warps, evict, streams=0):
            chunks = triton.cdiv(n, blk * iters)
            return lambda g: read_sum[(chunks,)](xs[g % sets], out, n, chunks, streams, BLOCK=blk, ITERS=iters,
                                                  EVICT=evict, num_warps=warps)

        for blk, iters, warps, evict in [(4096, 4, 4, 0), (4096, 4, 4, 1), (8192, 4, 8, 1), (2048, 8, 4, 1),
                                         (4096, 8, 8, 1)]:
            con[f"read b{blk}x{iters} w{warps} ef{evict}"] = read(blk, iters, warps, evict)
        for per_sm, blk, warps in [(8, 2048, 4), (4, 4096, 8)]:
            chunks = triton.cdiv(n, blk)
            con[f"persist {per_sm}/SM b{blk} w{warps}"] = (
                lambda per_sm, blk, warps, chunks: lambda g: read_persist[(sms * per_sm,)](
                    xs[g % sets], out, n, chunks, BLOCK=blk, num_warps=warps))(per_sm, blk, warps, chunks)
        con["same-size copy"] = lambda g: cs[g % sets][1].copy_(cs[g % sets][0])
        con["empty"] = lambda g: empty[(1,)](out)
        if patterns:
            for s in (128, 256, 512, 1024):
                con[f"read b4096x4 w4 ef1 {s} streams"] = read(4096, 4, 4, 1, s)
        for name, us in timeit(con, filler).items():
            moved = 0 if name == "empty" else n * 2
            bw = moved / (us * 1e-6) / 1e9
            rows.append((mb, name, us, bw, bw / copy_bw))
        del xs, cs
    print(f"{'MB':>6} {'contender':<32} {'us':>8} {'GB/s':>8} {'of copy':>8}")
    for mb, name, us, bw, frac in rows:
        print(f"{mb:6.1f} {name:<32} {us:8.2f} {bw:8.1f} {frac * 100:7.1f}%")


if __name__ == "__main__":
    main()
