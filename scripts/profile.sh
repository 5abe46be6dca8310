#!/usr/bin/env bash
# Nsight Compute on the kernel of one case: the key metrics (duration, tensor pipes, DRAM and L2 throughput,
# achieved occupancy, top stall reasons) of one launch, and the 30 SASS instructions where its warps were sampled
# stalled most (where the time goes, per instruction), written to a record file.
#
#   scripts/profile.sh OUT_FILE SPARSEK [sparsek run options...]
#   e.g. scripts/profile.sh docs/ncu/2026-11-22-sm90-bs128-8192.txt dist/bin/sparsek \
#          --m 8192 --n 8192 --k 8192 --bs 128 --density 0.22 [--module sm80]
#
# Runs `SPARSEK run ... --iters 3 --warmup 1` under ncu, profiling its third sparsek launch (after the checked
# launch and the warm-up), with the SM clock left to the GPU (--clock-control none) so the figures match the
# benchmark's. Needs ncu on PATH and a GPU. The record starts with the command, date and device.
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,11p "$0"; exit 2; }
out=$1 sparsek=$2; shift 2
rep=$(mktemp -u "${TMPDIR:-/tmp}/sparsek-profile.XXXXXX")
# (sm__pipe_tensor_op_gmma_cycles_active and sm__ops_path_tensor_* read n/a with the ncu of the lent H100 machine,
# 2026-11-22; the hmma pipe figure moves with the sm_90a kernels' time, so it is kept for both modules.)
metrics=(
  gpu__time_duration.sum
  sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
  dram__throughput.avg.pct_of_peak_sustained_elapsed
  lts__t_sectors.avg.pct_of_peak_sustained_elapsed
  lts__t_sector_hit_rate.pct
  sm__warps_active.avg.pct_of_peak_sustained_active
  sm__throughput.avg.pct_of_peak_sustained_elapsed
)
{
  echo "# scripts/profile.sh $*"
  echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
  ncu --clock-control none --kernel-name regex:sparsek_ --launch-skip 2 --launch-count 1 \
    --section WarpStateStats --section Occupancy --section SourceCounters --metrics "$(IFS=,; echo "${metrics[*]}")" \
    --import-source no --export "$rep" -f \
    "$sparsek" run "$@" --iters 3 --warmup 1 2>&1 | grep -v "^==PROF==" || true
  # (With --export, ncu prints no results itself: they come from the report.)
  ncu -i "$rep.ncu-rep" --page details 2>&1 | grep -v "^    [A-Z ]*  .*Section:" || true
  echo
  echo "# Warp stall samples per SASS instruction (ncu --page source), the 30 largest"
  ncu -i "$rep.ncu-rep" --page source --csv --print-source sass 2>/dev/null | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
if len(rows) < 3:
    sys.exit("no source page in the report")
head, data = rows[1], rows[2:]
s, e = head.index("Warp Stall Sampling (All Samples)"), head.index("Instructions Executed")
total = sum(int(r[s]) for r in data) or 1
print(f"{total} samples over {len(data)} instructions")
for r in sorted(data, key=lambda r: -int(r[s]))[:30]:
    print(f"{int(r[0], 16) & 0xfffff:6x} {100 * int(r[s]) / total:5.1f}% executed {r[e]:>9}  {r[1].strip()}")
' || echo "(the per-instruction table could not be read from the report)"
} > "$out"
rm -f "$rep.ncu-rep"
# The summary: the metrics and the largest stall reasons.
grep -E "gpu__time|pipe_tensor|ops_path|dram__|lts__|warps_active|sm__throughput|Stall|Warp Cycles Per Issued|Achieved Occupancy" "$out" | head -30
