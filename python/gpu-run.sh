#!/usr/bin/env bash
# Runs the Python package's tests (CUDA required) and, optionally, its benchmark on a GPU machine that has
# Python, torch and the NVIDIA driver but no Rust and no network. Prepare on the build machine (python/README.md):
#   (cd python && maturin build --release --out ../dist/py)
#   pip download pytest -d dist/pywheels --python-version 3.12 --only-binary=:all: --platform any
# then, on the GPU machine, from the repository root:
#   python/gpu-run.sh [tests] [memcheck] [bench [bench args...]]   (default: tests)
# Logs go to $OUT (default /tmp/sparsek-py); the last lines printed are a summary.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/sparsek-py}
mkdir -p "$OUT"
SITE=$(mktemp -d)
python -m pip install -q --no-deps --no-index --target "$SITE" "$REPO"/dist/py/sparsek-*.whl || exit 1
python -m pip install -q --no-index --find-links "$REPO/dist/pywheels" --target "$SITE" pytest || exit 1
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
cd /tmp  # not python/: its sparsek/ sources (without the extension module) would shadow the installed package
python -c 'import sparsek, torch; print("sparsek", sparsek.__version__, "torch", torch.__version__, sparsek.device_info())' \
  | tee "$OUT/versions.txt"
summary=()
want=${1:-tests}
if [[ $want == tests ]]; then
  shift || true
  SPARSEK_REQUIRE_GPU=1 timeout 600 python -m pytest -q -rs -p no:cacheprovider --rootdir "$REPO/python" \
    -c "$REPO/python/pyproject.toml" "$REPO/python/tests" > "$OUT/pytest.log" 2>&1
  rc=$?
  summary+=("pytest (SPARSEK_REQUIRE_GPU=1): rc=$rc, $(tail -1 "$OUT/pytest.log")")
  want=${1:-}
fi
if [[ $want == memcheck ]]; then
  # Every tensor its own cudaMalloc (no caching allocator), so that an access outside a tensor is caught. Without
  # the caching allocator torch cannot capture CUDA graphs or report memory statistics: those tests are left out
  # (by name: compile, graph, capture, zero_copy, and the programmatic chain, which replays a captured graph; a
  # capture refused there also leaves torch's CUDA generator in capture mode and fails the tests after it).
  shift
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 SPARSEK_REQUIRE_GPU=1 timeout 600 compute-sanitizer --tool memcheck \
    --print-limit 20 --error-exitcode 9 python -m pytest -q -p no:cacheprovider --rootdir "$REPO/python" \
    -c "$REPO/python/pyproject.toml" "$REPO/python/tests" \
    -k "cuda and not compile and not graph and not capture and not zero_copy and not programmatic_launch_chains" > "$OUT/memcheck.log" 2>&1
  rc=$?
  summary+=("pytest under compute-sanitizer memcheck: rc=$rc, $(grep -E 'passed|failed' "$OUT/memcheck.log" | tail -1), \
$(grep 'ERROR SUMMARY' "$OUT/memcheck.log")")
  want=${1:-}
fi
if [[ $want == bench ]]; then
  shift
  timeout 560 python "$REPO/python/bench/bench_torch.py" --json "$OUT/bench.json" --md "$OUT/bench.md" "$@" \
    > "$OUT/bench.out" 2> "$OUT/bench.err"
  rc=$?
  summary+=("bench: rc=$rc")
  cat "$OUT/bench.out"
fi
echo
printf '%s\n' "${summary[@]}"
