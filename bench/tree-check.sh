#!/usr/bin/env bash
# The tree whole on the GPU machine (an H200 when one comes), in parts, each a device call
# of its own where they would pass the call's limit. Repository root of the device
# machine; binaries in .device-carry/ (gzipped). Usage: PART="check" OUT=$OUT bash
# bench/tree-check.sh (bench/results/2026-12-06-h100-batch-bucket-24/run.sh was its
# first form).
# PART: one or more of check, pcm, e2e, b24, passes, e2e24 (in the order given).
#   check: gpu_parity, gpu_codec, gpu_sampling, then bench-stages at 1, 2, 16, 32, 64 rows
#     (bench/device-check.sh, per-kernel times included).
#   pcm: a request alone on a fresh server (bench/first-pcm.sh), PCM_RUNS times.
#   e2e: bench/e2e-sweep.sh at RATES (default 10 40), 30 s warm-up, 60 s measured.
#   b24: bench-stages at 16, 20, 24 and 32 rows with QWEN3_TTS_BATCH_24=0 and 1,
#     alternating, twice each; then gpu_parity's batch_bucket_24 test.
#   passes: bench-stages at 1 and 2 rows with QWEN3_TTS_GEMV_PASSES=4, 8 and 8pre,
#     alternating, ROUNDS rounds (default 3); then gpu_parity's gemv_passes test.
#   e2e24: a fresh server with QWEN3_TTS_BATCH_24=0, then =1, each at B24_RATES (default
#     80) req/s, 20 s warm-up and 40 s measured; packed into $OUT/e2e24.tgz.
# Set OUT to the call's $OUT; the e2e part packs its files into $OUT/e2e.tgz.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for part in ${PART:-check pcm}; do
    case $part in
    check) OUT=$OUT/check BATCHES=${BATCHES:-1,2,16,32,64} bash bench/device-check.sh ;;
    pcm)
        runs=""
        for i in $(seq 1 "${PCM_RUNS:-2}"); do runs="$runs default$i:"; done
        RUNS="$runs" OUT=$OUT/pcm bash bench/first-pcm.sh ;;
    e2e)
        scratch=$(mktemp -d)
        RATES=${RATES:-10 40} LABEL=e2e OUT=$scratch bash bench/e2e-sweep.sh
        tar czf "$OUT/e2e.tgz" -C "$scratch" e2e ;;
    e2e24)
        scratch=$(mktemp -d)
        for v in 0 1; do
            QWEN3_TTS_BATCH_24=$v RATES=${B24_RATES:-80} WARMUP=20 DURATION=40 LABEL=b24_$v \
                OUT=$scratch bash bench/e2e-sweep.sh
        done
        tar czf "$OUT/e2e24.tgz" -C "$scratch" b24_0 b24_1 ;;
    passes)
        source bench/device-env.sh
        mkdir -p "$OUT/passes"
        for round in $(seq 1 "${ROUNDS:-3}"); do
            for v in 4 8 8pre; do
                QWEN3_TTS_GEMV_PASSES=$v timeout 200 $D/qwen3-tts bench-stages --batches 1,2 \
                    --iters 30 --out "$OUT/passes/p${v}_$round.json" \
                    > "$OUT/passes/p${v}_$round.txt" 2>&1
                echo "passes=$v round $round rc $?"
                grep -E "^(prefill|code_predictor|talker_step) " "$OUT/passes/p${v}_$round.txt"
            done
        done
        timeout 300 $D/gpu_parity --test-threads=1 gemv_passes > "$OUT/passes/parity.txt" 2>&1
        echo "parity rc $?"; grep -E "^test |test result|same bits" "$OUT/passes/parity.txt"
        tar czf "$OUT/passes.tgz" -C "$OUT" passes && rm -r "$OUT/passes" ;;
    b24)
        source bench/device-env.sh
        mkdir -p "$OUT/b24"
        for round in 1 2; do
            for v in 0 1; do
                QWEN3_TTS_BATCH_24=$v timeout 200 $D/qwen3-tts bench-stages --batches 16,20,24,32 \
                    --iters 30 --context 8 --codec-frames 2 --out "$OUT/b24/b24_${v}_$round.json" \
                    > "$OUT/b24/b24_${v}_$round.txt" 2>&1
                echo "b24=$v round $round rc $?"
                grep -E "^(code_predictor|talker_step) " "$OUT/b24/b24_${v}_$round.txt"
            done
        done
        timeout 200 $D/gpu_parity --test-threads=1 batch_bucket_24 > "$OUT/b24/parity.txt" 2>&1
        echo "parity rc $?"; grep -E "^test |test result|rel err" "$OUT/b24/parity.txt" ;;
    esac
done
