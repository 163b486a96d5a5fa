#!/usr/bin/env bash
# GPU session check on the H200 (run from the repository root of the device machine, with
# the binaries built here carried in .device-carry/): parity tests first, then the stage
# benchmark with and without programmatic dependent launch. Results go to $OUT (6-8
# files; a device call brings back at most 8 from its $OUT: there, set OUT to a scratch
# folder and PACK=<device call's $OUT>/<name>.tgz to get them as one archive).
set -u
source bench/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
# PARITY=0 leaves gpu_parity out (31 tests took up to ~460 s on an H100 on 2026-12-07:
# with the stages after it, more than a device call's 600 s; tree-check.sh's `parity`
# part runs it in a call of its own)
if [ "${PARITY:-1}" = 1 ]; then
    timeout ${PARITY_TIMEOUT:-420} $D/gpu_parity --test-threads=1 > "$OUT/parity.txt" 2>&1
    echo "parity rc $?"
fi
timeout 120 $D/gpu_codec --test-threads=1 > "$OUT/codec.txt" 2>&1; echo "codec rc $?"
timeout 60 $D/gpu_sampling --test-threads=1 > "$OUT/sampling.txt" 2>&1; echo "sampling rc $?"
grep -E "^test |test result" "$OUT/codec.txt" "$OUT/sampling.txt"
if [ -f "$OUT/parity.txt" ]; then grep -E "^test |test result" "$OUT/parity.txt"; fi
if [ "${STAGES:-1}" = 1 ]; then
    timeout 240 $D/qwen3-tts bench-stages --batches "${BATCHES:-1,4,16,32,64}" --iters 20 \
        --kernels --out "$OUT/stages.json" > "$OUT/stages.txt" 2>&1; echo "stages rc $?"
    if [ "${NOPDL:-0}" = 1 ]; then
        QWEN3_TTS_PDL=0 timeout 200 $D/qwen3-tts bench-stages --batches "${BATCHES:-1,4,16,32,64}" \
            --iters 20 --kernels --out "$OUT/stages_nopdl.json" > "$OUT/stages_nopdl.txt" 2>&1
        echo "no-pdl rc $?"
    fi
    grep -E "^(gemv|tc|cublas) " "$OUT/stages.txt"
    grep -A30 "^stage" "$OUT/stages.txt"
fi
pack_out
