#!/usr/bin/env bash
# Nsight Compute on the kernel of one case: the key metrics (duration, tensor pipes, DRAM and L2 throughput,
# achieved occupancy, top stall reasons) of one launch, written to a record file.
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
    "$sparsek" run "$@" --iters 3 --warmup 1 2>&1 | grep -v "^==PROF==" | grep -v "^    [A-Z ]*  .*Section:" || true
} > "$out"
# The summary: the metrics and the largest stall reasons.
grep -E "gpu__time|pipe_tensor|ops_path|dram__|lts__|warps_active|sm__throughput|Stall|Warp Cycles Per Issued|Achieved Occupancy" "$out" | head -30
