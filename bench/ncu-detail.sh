#!/usr/bin/env bash
# Nsight Compute's detail sections (speed of light, memory, warp stalls, scheduler,
# occupancy, launch) for a few launches of chosen kernels inside `qwen3-tts bench-stages`
# graphs: where a kernel's time goes, not only how much (bench/ncu-stages.sh).
# Usage (repository root of the device machine, binaries in .device-carry/):
#   PICKS="gemv_staged_m1:1200:4:1 tile_wg_linear_t4:2101:5:32" OUT=$OUT bash bench/ncu-detail.sh
# A pick is kernel:skip:count:batch: skip that many of the kernel's launches (start-up's
# routing measurements and the earlier stage calls; bench/ncu-stages.sh's CSV gives the
# totals), profile the next `count`, in a bench-stages run at that batch size.
set -u
source bench/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for pick in ${PICKS:?kernel:skip:count:batch ...}; do
    IFS=: read -r kernel skip count batch <<< "$pick"
    timeout "${NCU_TIMEOUT:-120}" /usr/local/cuda/bin/ncu --graph-profiling node \
        --cache-control none --clock-control none -k "regex:^${kernel}\$" \
        --launch-skip "$skip" --launch-count "$count" \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section SchedulerStats --section Occupancy --section LaunchStats \
        "$D/qwen3-tts" bench-stages --batches "$batch" --iters 1 --context 2 --codec-frames 2 \
        > "$OUT/detail_${kernel}_b$batch.txt" 2> "$OUT/detail_${kernel}_b$batch.err"
    echo "$pick rc $? $(grep -c "^  $kernel " "$OUT/detail_${kernel}_b$batch.txt") profiled"
done
