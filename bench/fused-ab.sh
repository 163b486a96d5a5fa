#!/usr/bin/env bash
# The one-row fused kernels on the H200 (repository root of the device machine, binaries
# built here by bench/device-build.sh and carried in .device-carry/), in two commands of
# under 600 s each:
#   PART=parity OUT=... bash bench/fused-ab.sh   # their GPU tests (gpu_parity, filtered)
#   PART=parity2 OUT=... bash bench/fused-ab.sh  # the fused attention's (16 runs a model)
#   PART=stages OUT=... bash bench/fused-ab.sh   # bench-stages once per variant
#   PART=more OUT=... bash bench/fused-ab.sh     # the other variants, and the MLP table
# Variants are knob sets (docs/cuda-knobs.md): the fused MLP kernels (QWEN3_TTS_FUSED_MLP),
# the fused attention halves (QWEN3_TTS_FUSED_ATTENTION) and the fused head + sampler
# (QWEN3_TTS_FUSED_HEAD). STAGE_VARIANTS replaces the list (NAME:KNOB=VALUE+KNOB=VALUE ...).
set -u
source bench/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
PART=${PART:-stages}
case "$PART" in
parity | parity2)
    # the kernel tests, then the stage-level comparisons (1.7B geometry: the slow ones);
    # FILTERS replaces the list
    if [ "$PART" = parity2 ]; then
        filters=${FILTERS:-fused_attention_stages}
        limit=${PARITY_TIMEOUT:-540}
    else
        filters=${FILTERS:-fused_mlp_matches staged_gemv_stages fused_mlp_stages fused_head_stages}
        limit=${PARITY_TIMEOUT:-135}
    fi
    for filter in $filters; do
        timeout "$limit" $D/gpu_parity --test-threads=1 "$filter" \
            > "$OUT/parity_$filter.txt" 2>&1
        echo "parity $filter rc $?"
        grep -E "^test |test result|panicked|rel err|fit at once" "$OUT/parity_$filter.txt" | head -40
    done
    ;;
stages | more)
    M=QWEN3_TTS_FUSED_MLP A=QWEN3_TTS_FUSED_ATTENTION F=QWEN3_TTS_FUSED_HEAD
    # (7 variants of ~30-60 s each: one command)
    first="base: mlps:$M=staged-stream qkv:$A=qkv mlps_qkv:$M=staged-stream+$A=qkv head:$F=1 talker:$A=talker stream_all_head:$M=all-stream+$A=all+$F=1"
    more="base: mlp:$M=staged stream:$M=stream o:$A=o mlp_qkv:$M=staged+$A=qkv both_all:$M=1+$A=all stream_all:$M=all-stream+$A=all"
    if [ "$PART" = more ]; then VARIANTS=${STAGE_VARIANTS:-$more}; else VARIANTS=${STAGE_VARIANTS:-$first}; fi
    for v in $VARIANTS; do
        name=${v%%:*}
        knobs=${v#*:}
        # shellcheck disable=SC2086
        env ${knobs//+/ } timeout "${STAGE_TIMEOUT:-90}" $D/qwen3-tts bench-stages \
            --batches "${BATCHES:-1,2,4}" --iters "${ITERS:-30}" --context 8 --codec-frames 2 \
            --out "$OUT/stages_$name.json" > "$OUT/stages_$name.txt" 2>&1
        echo "variant $name ($knobs) rc $?"
        grep -E "^(code_predictor|talker_step) " "$OUT/stages_$name.txt" | head -8
    done
    if [ "$PART" = more ]; then
        timeout 120 $D/qwen3-tts bench-stages --batches 1 --iters 10 --kernels \
            > "$OUT/kernels.txt" 2>&1
        echo "kernels rc $?"
        grep -E "^mlp" "$OUT/kernels.txt"
    fi
    ;;
*)
    echo "PART must be parity, parity2, stages or more" >&2
    exit 2
    ;;
esac
