#!/usr/bin/env bash
# ncu-gpu.sh MODEL [SKIP] [COUNT]: Nsight Compute's speed-of-light,
# occupancy, memory and warp-stall sections for COUNT kernels of decode
# steps (after SKIP kernels: past the load and the first, eager steps), as
# text for PERF-NOTES. Needs build-cuda/. Writes $OUT/ncu-<model>.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-env.sh
M=${1:?model}
SKIP=${2:-2000}
COUNT=${3:-9}
out=${OUT:-/tmp}/ncu-$(basename "$M" .gguf).txt
timeout 240 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section MemoryWorkloadAnalysis --section WarpStateStats --launch-skip "$SKIP" --launch-count "$COUNT" \
    ./build-cuda/bin/tela bench -m "$M" -p 0 -n 40 -r 1 > "$out" 2>&1
grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|Warp Cycles Per Issued|Block Limit Reg|Waves Per SM|L1/TEX Hit|L2 Hit" "$out" | head -150
