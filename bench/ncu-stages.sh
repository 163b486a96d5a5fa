#!/usr/bin/env bash
# Which kernels the stages spend their time in (issue 3): Nsight Compute over
# `qwen3-tts bench-stages`, every graph node timed alone, one CSV per batch size.
# Usage (repository root of the device machine, `qwen3-tts` and, when built ahead, the kernel
# cache (kcache.tgz or kcache/) carried in .device-carry/):
#   BATCHES="32 1" OUT=$OUT bash bench/ncu-stages.sh
# Then here, after gunzip: cargo run -p tts-bench --example ncu_stages -- ncu_b32.csv ncu_b1.csv
# (~1 min per batch size on the H200; the sums exceed the graphs' times: no overlap between
# launches under the profiler).
set -u
source bench/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for b in ${BATCHES:-32 1}; do
    timeout 280 /usr/local/cuda/bin/ncu --graph-profiling node --cache-control none \
        --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
        "$D/qwen3-tts" bench-stages --batches "$b" --iters 1 --context 2 --codec-frames 2 \
        > "$OUT/ncu_b$b.csv" 2> "$OUT/ncu_b$b.err"
    echo "batch $b rc $? lines $(wc -l < "$OUT/ncu_b$b.csv")"
    gzip -f "$OUT/ncu_b$b.csv"
done
