#!/usr/bin/env bash
# Nsight Compute on the kernel of one case: the key metrics (duration, tensor pipes, DRAM and L2 throughput,
# achieved occupancy, top stall reasons) of one launch, the 30 SASS instructions where its warps were sampled
# stalled most (where the time goes, per instruction) and the stall samples ranked by reason, written to a record
# file.
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
  echo
  echo "# Warp stall samples by reason (smsp__pcsamp_warps_issue_stalled_*, the SourceCounters section's raw metrics)"
  ncu -i "$rep.ncu-rep" --page raw --csv 2>/dev/null | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
if len(rows) < 3:
    sys.exit("no raw page in the report")
head, values = rows[0], rows[-1]
prefix = "smsp__pcsamp_warps_issue_stalled_"
reasons = {}
for name, v in zip(head, values):
    if name.startswith(prefix) and not name.endswith("_not_issued"):
        try:
            reasons[name[len(prefix):]] = float(v.replace(",", ""))
        except ValueError:
            pass
total = sum(reasons.values())
if not total:
    sys.exit("no stall samples in the raw page")
print(f"{total:.0f} samples")
for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:12]:
    print(f"  {reason:28s} {100 * n / total:5.1f}%")
' || echo "(the stall reasons could not be read from the report)"
} > "$out"
rm -f "$rep.ncu-rep"
# The summary: the metrics and the largest stall reasons.
grep -E "gpu__time|pipe_tensor|ops_path|dram__|lts__|warps_active|sm__throughput|Stall|Warp Cycles Per Issued|Achieved Occupancy" "$out" | head -30
sed -n '/^# Warp stall samples by reason/,$p' "$out" | head -10
