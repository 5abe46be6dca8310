# Issue 12 step 18: which of banded's two properties makes 16384 x 8 x 16384 bs 64 22% faster: equal row lengths
# or consecutive block columns? Four patterns with the same nnzb through the Python package (sparsek::bsr_mm_out,
# f16 A and B, f32 C), per event with a 140 us matmul untimed before every launch (read_floor.py's method).
import statistics, sys, warnings, torch, sparsek

warnings.filterwarnings("ignore", category=UserWarning)

torch.manual_seed(1)
dev = torch.device("cuda")
BS, BR, BC, N = 64, 256, 256, 8
NNZB = 14418
rows = cols = BR * BS

def binom_lengths():
    cells = torch.randperm(BR * BC, device="cpu")[:NNZB]
    return torch.bincount(cells // BC, minlength=BR)

def equal_lengths():
    return torch.tensor([NNZB // BR + (1 if i < NNZB % BR else 0) for i in range(BR)])

def random_cols(ln):
    return [torch.randperm(BC)[:l].sort().values for l in ln.tolist()]

def band_cols(ln):
    out = []
    for i, l in enumerate(ln.tolist()):
        start = min(max(i * BC // BR - l // 2, 0), BC - l)
        out.append(torch.arange(start, start + l))
    return out

def build(ln, cl):
    crow = torch.zeros(BR + 1, dtype=torch.int32)
    crow[1:] = torch.cumsum(ln, 0)
    col = torch.cat(cl).to(torch.int32)
    assert int(crow[-1]) == NNZB == col.numel()
    return crow.to(dev), col.to(dev)

pats = {}
bl, el = binom_lengths(), equal_lengths()
pats["uniform (binomial rows, random columns)"] = build(bl, random_cols(bl))
pats["equal rows, random columns"] = build(el, random_cols(el))
pats["equal rows, consecutive columns (banded)"] = build(el, band_cols(el))
pats["binomial rows, consecutive columns"] = build(bl, band_cols(bl))
print(f"longest row: binomial {int(bl.max())}, equal {int(el.max())}; mean {NNZB / BR:.1f}")
vals = [torch.randn(NNZB, BS, BS, device=dev, dtype=torch.float16) for _ in range(2)]
b = torch.randn(cols, N, device=dev, dtype=torch.float16)
out = torch.empty(rows, N, device=dev, dtype=torch.float32)
mm_ = lambda: torch.mm(W, xb)
W = torch.randn(16384, 16384, device=dev, dtype=torch.float16)
xb = torch.randn(16384, 8, device=dev, dtype=torch.float16)
op = torch.ops.sparsek.bsr_mm_out

# Check each pattern once against a dense product.
for name, (crow, col) in pats.items():
    out.fill_(float("nan"))
    op(vals[0], crow, col, rows, cols, b, 1.0, 0.0, out)
    a = torch.sparse_bsr_tensor(crow, col, vals[0], size=(rows, cols)).to_dense()
    ref = (a.float() @ b.float())
    scale = a.float().abs() @ b.float().abs()  # the sum of the terms' magnitudes, per element
    err = ((out - ref).abs() / (scale + 1e-6)).max().item()
    ok = bool(torch.isfinite(out).all()) and err < 1e-4
    print(f"check {name}: max |got - ref| / sum|terms| {err:.2e} {'PASS' if ok else 'FAIL'}")
    del a, ref, scale
    if not ok:
        sys.exit(1)

ev, g = [], 0
for it in range(35):
    for name, (crow, col) in pats.items():
        mm_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); op(vals[g % 2], crow, col, rows, cols, b, 1.0, 0.0, out); e.record()
        g += 1
        if it >= 5:
            ev.append((name, s, e))
torch.cuda.synchronize()
ts = {}
for name, s, e in ev:
    ts.setdefault(name, []).append(s.elapsed_time(e) * 1000)
for name, v in ts.items():
    print(f"{name:<45} median {statistics.median(v):7.2f} us  (min {min(v):.2f}, max {max(v):.2f})")
