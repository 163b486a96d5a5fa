#!/usr/bin/env bash
# GPU session check with A/B stage benchmarks (H200; repository root of the device machine,
# binaries built here carried in .device-carry/): the parity tests first (device-check.sh),
# then `bench-stages` once per variant, each a set of environment knobs.
# Usage: VARIANTS="base: off:QWEN3_TTS_PERSISTENT_CP=0+QWEN3_TTS_PERSISTENT_TALKER=0" \
#        BATCHES=1,2,4,8,16 TRACE=1 OUT=... bash bench/device-ab.sh
# (a variant is NAME:KNOB=VALUE+KNOB=VALUE...; TRACE=1 adds the persistent kernels' phase trace)
# Each variant writes two files, and a device call brings back only a few files from its
# $OUT: there, set OUT to a scratch folder and PACK=<device call's $OUT>/<name>.tgz.
set -u
source bench/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ "${PARITY:-1}" = 1 ]; then
    # its files are packed with this script's, once
    PACK= STAGES=0 bash bench/device-check.sh
fi
for v in ${VARIANTS:-base:}; do
    name=${v%%:*}
    knobs=${v#*:}
    # shellcheck disable=SC2086
    env ${knobs//+/ } timeout "${STAGE_TIMEOUT:-150}" $D/qwen3-tts bench-stages \
        --batches "${BATCHES:-1,2,4,8,16}" --iters "${ITERS:-20}" --context "${CONTEXT:-8}" \
        --codec-frames "${CODEC_FRAMES:-2}" \
        ${TRACE:+--trace} --out "$OUT/stages_$name.json" > "$OUT/stages_$name.txt" 2>&1
    echo "variant $name ($knobs) rc $?"
    grep -E "^(prefill|code_predictor|talker_step|codec_decode) " "$OUT/stages_$name.txt" | head -60
done
pack_out
