#!/usr/bin/env bash
# The fuzz smoke test of CI (see fuzz/README.md): builds every target of fuzz/ (cargo-fuzz, AddressSanitizer,
# debug assertions, the pinned nightly), replays the committed seeds and regression inputs, then fuzzes each
# target for a fixed time, new inputs going to a temporary corpus (the committed one is never written).
# Exits non-zero on any crash, panic, timeout or out-of-memory, printing the saved input and the command that
# reproduces it.
#
#   fuzz/run-ci.sh [SECONDS_PER_TARGET]     (default 30, or $FUZZ_SECONDS)
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-${FUZZ_SECONDS:-30}}

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi
cargo fuzz --version

echo "=== building the fuzz targets ($(date -u +%H:%M:%S))"
cargo fuzz build

work=$(mktemp -d "${TMPDIR:-/tmp}/sparsek-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
failed=()
for target in $(cargo fuzz list); do
  echo
  echo "=== $target: ${secs}s ($(date -u +%H:%M:%S))"
  mkdir -p "$work/corpus/$target" "$work/artifacts/$target"
  # libFuzzer reads every directory given and writes new inputs only to the first one.
  dirs=("$work/corpus/$target")
  for d in "fuzz/corpus/$target" "fuzz/regressions/$target"; do
    if [ -d "$d" ]; then dirs+=("$d"); fi
  done
  extra=()
  if [ -f "fuzz/dict/$target.dict" ]; then extra+=("-dict=fuzz/dict/$target.dict"); fi
  log="$work/$target.log"
  if cargo fuzz run "$target" "${dirs[@]}" -- \
      -max_total_time="$secs" -rss_limit_mb=2048 -timeout=20 -max_len=4096 \
      -artifact_prefix="$work/artifacts/$target/" -print_final_stats=1 "${extra[@]}" >"$log" 2>&1; then
    grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$log" || true
  else
    tail -n 60 "$log"
    # Keep what libFuzzer saved (fuzz/artifacts is ignored by git; CI may upload it).
    mkdir -p "fuzz/artifacts/$target"
    found=0
    for f in "$work/artifacts/$target"/*; do
      [ -e "$f" ] || continue
      cp "$f" "fuzz/artifacts/$target/"
      found=1
      echo
      echo "FAILED: $target, input saved at fuzz/artifacts/$target/$(basename "$f")"
      echo "  reproduce:   cargo fuzz run $target fuzz/artifacts/$target/$(basename "$f")"
      echo "  show input:  cargo fuzz fmt $target fuzz/artifacts/$target/$(basename "$f")"
      echo "  minimise:    cargo fuzz tmin $target fuzz/artifacts/$target/$(basename "$f")"
    done
    if [ "$found" = 0 ]; then
      echo "FAILED: $target (no input saved; a committed seed or regression input may be the one that fails:"
      echo "  cargo fuzz run $target fuzz/corpus/$target fuzz/regressions/$target -- -runs=0)"
    fi
    failed+=("$target")
  fi
done

echo
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzzing failed for: ${failed[*]}"
  exit 1
fi
echo "fuzzing: no crash in $secs s per target"
