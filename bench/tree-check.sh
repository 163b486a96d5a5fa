#!/usr/bin/env bash
# The tree whole on the GPU machine (an H200 when one comes), in parts, each a device call
# of its own where they would pass the call's limit. Repository root of the device
# machine; binaries in .device-carry/ (gzipped). Usage: PART="check" OUT=$OUT bash
# bench/tree-check.sh (bench/results/2026-12-06-h100-batch-bucket-24/run.sh was its
# first form).
# PART: one or more of parity, check, pcm, e2e, b24, passes, e2e24 (in the order given).
#   parity: the whole gpu_parity alone, at most 580 s (31 tests took up to ~460 s on an
#     H100 on 2026-12-07, too long to share a call with check's other steps).
#   check: gpu_codec, gpu_sampling, then bench-stages at 1, 2, 16, 32, 64 rows
#     (bench/device-check.sh, per-kernel times included); gpu_parity first too with
#     PARITY=1.
#   pcm: a request alone on a fresh server (bench/first-pcm.sh), PCM_RUNS times.
#   e2e: bench/e2e-sweep.sh at RATES (default 10 40), 30 s warm-up, 60 s measured.
#   b24: bench-stages at 16, 20, 24 and 32 rows with QWEN3_TTS_BATCH_24=0 and 1,
#     alternating, twice each; then gpu_parity's batch_bucket_24 test.
#   passes: bench-stages at 1 and 2 rows with QWEN3_TTS_GEMV_PASSES=4, 8 and 8pre,
#     alternating, ROUNDS rounds (default 3); then gpu_parity's gemv_passes test.
#   e2e24: a fresh server with QWEN3_TTS_BATCH_24=0, then =1, each at B24_RATES (default
#     80) req/s, 20 s warm-up and 40 s measured; packed into $OUT/e2e24.tgz.
# NEED_GPU=H200: stop (status 3) unless the card is an H200 (bench/device-env.sh).
# Set OUT to the call's $OUT; the e2e part packs its files into $OUT/e2e.tgz.
set -u
# bench-stages ARGS once per value of a knob, alternating, ROUNDS times, into
# DIR/PREFIX<value>_<round>.{txt,json}; prints the rows of the stages PATTERN names.
# Usage: stages_ab DIR KNOB PREFIX LABEL "VALUES" ROUNDS PATTERN ARGS...
stages_ab() {
    local dir=$1 knob=$2 prefix=$3 label=$4 values=$5 rounds=$6 pattern=$7
    shift 7
    for round in $(seq 1 "$rounds"); do
        for v in $values; do
            local f="$dir/$prefix${v}_$round"
            env "$knob=$v" timeout 200 $D/qwen3-tts bench-stages "$@" --out "$f.json" > "$f.txt" 2>&1
            echo "$label=$v round $round rc $?"
            grep -E "^($pattern) " "$f.txt"
        done
    done
}
# gpu_parity's tests matching FILTER into DIR/parity.txt, at most SECS; prints the test
# lines and those matching LINE. Usage: gpu_test DIR FILTER SECS LINE
gpu_test() {
    timeout "$3" $D/gpu_parity --test-threads=1 "$2" > "$1/parity.txt" 2>&1
    echo "parity rc $?"; grep -E "^test |test result|$4" "$1/parity.txt"
}
# the binaries unpacked; with NEED_GPU=H200 nothing runs on another card
source bench/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for part in ${PART:-check pcm}; do
    case $part in
    parity)
        # (an empty filter: every test)
        mkdir -p "$OUT/parity" && gpu_test "$OUT/parity" "" 580 "test result" ;;
    check)
        PARITY=${PARITY:-0} OUT=$OUT/check BATCHES=${BATCHES:-1,2,16,32,64} \
            bash bench/device-check.sh ;;
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
        mkdir -p "$OUT/passes"
        stages_ab "$OUT/passes" QWEN3_TTS_GEMV_PASSES p passes "4 8 8pre" "${ROUNDS:-3}" \
            "prefill|code_predictor|talker_step" --batches 1,2 --iters 30
        gpu_test "$OUT/passes" gemv_passes 300 "same bits"
        tar czf "$OUT/passes.tgz" -C "$OUT" passes && rm -r "$OUT/passes" ;;
    b24)
        mkdir -p "$OUT/b24"
        stages_ab "$OUT/b24" QWEN3_TTS_BATCH_24 b24_ b24 "0 1" 2 "code_predictor|talker_step" \
            --batches 16,20,24,32 --iters 30 --context 8 --codec-frames 2
        gpu_test "$OUT/b24" batch_bucket_24 200 "rel err" ;;
    esac
done
