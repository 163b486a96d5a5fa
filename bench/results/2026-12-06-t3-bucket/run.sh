#!/usr/bin/env bash
# Device script of 2026-12-06 (night): tile_wg.cu's aliased entries against its usual ones,
# and the 24-token prefill bucket (tile_wg_linear_t3) against the 32-token one. Repository
# root of the device machine; binaries in .device-carry/ (gzipped or not).
# PART: one or more of alias, b24, check, pcm (in the order given).
#   alias (a build with aliased-entries.patch applied, as dfa16df was): bench-stages at 1,
#     2, 16 and 32 rows with QWEN3_TTS_TILE_WG_ALIAS=0 and 1, alternating, ROUNDS times
#     each (2).
#   b24: bench-stages at 1 row (its three prefills: 16 tokens, streamed, 24 tokens) with
#     QWEN3_TTS_PREFILL_24=1 and 0, alternating, ROUNDS times each (3).
#   check: gpu_parity's tests PARITY_FILTER names (default: the 24-token bucket's; the
#     call at dfa16df also ran aliased_tile).
#   pcm: a request alone (--max-in-flight 1, rate 5) on a fresh server, with
#     QWEN3_TTS_PREFILL_24 as each of PCM_RUNS says (label:value, default b24:1 b32:0).
# Set PACK to an archive in the call's $OUT, then OUT to a scratch folder.
set -u
D=.device-carry
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64 QWEN3_TTS_FIXTURES=$PWD/fixtures
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/m
for b in qwen3-tts gpu_parity; do
    if [ ! -x /tmp/m/$b ]; then
        if [ -e $D/$b.gz ]; then gunzip -c $D/$b.gz > /tmp/m/$b; elif [ -e $D/$b ]; then cp $D/$b /tmp/m/$b; fi
        [ -e /tmp/m/$b ] && chmod +x /tmp/m/$b
    fi
done
[ -d /tmp/m/kcache ] || tar xzf $D/kcache.tgz -C /tmp/m
export QWEN3_TTS_KERNEL_CACHE=/tmp/m/kcache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
stages() {  # label, batches, then env assignments
    local label=$1 batches=$2
    shift 2
    env "$@" timeout 200 /tmp/m/qwen3-tts bench-stages --batches "$batches" --iters 30 --context 8 \
        --codec-frames 2 --out "$OUT/$label.json" > "$OUT/$label.txt" 2>&1
    echo "$label rc $?"
    grep -E "^(prefill|prefill_stream|prefill_24|code_predictor|talker_step) " "$OUT/$label.txt"
}
part_alias() {
    for round in $(seq ${ROUNDS:-2}); do
        for v in 0 1; do stages "alias_${v}_$round" 1,2,16,32 QWEN3_TTS_TILE_WG_ALIAS=$v; done
    done
}
part_b24() {
    for round in $(seq ${ROUNDS:-3}); do
        for v in 1 0; do stages "b24_${v}_$round" 1 QWEN3_TTS_PREFILL_24=$v; done
    done
}
part_check() {
    timeout ${TEST_TIMEOUT:-300} /tmp/m/gpu_parity --test-threads=1 \
        ${PARITY_FILTER:-prefill_bucket_24} > "$OUT/gpu_parity.txt" 2>&1
    echo "gpu_parity rc $?"; grep -E "^test |test result|identical|rel err" "$OUT/gpu_parity.txt"
}
part_pcm() {
    sed -e "s#\$D/qwen3-tts#/tmp/m/qwen3-tts#g" -e "s#^source bench/device-env.sh#:#" \
        bench/e2e-sweep.sh > /tmp/m/sweep.sh
    for run in ${PCM_RUNS:-b24:1 b32:0}; do
        local label=${run%%:*} v=${run##*:}
        QWEN3_TTS_PREFILL_24=$v RATES=5 WARMUP=5 DURATION=40 BENCH_ARGS="--max-in-flight 1" \
            LABEL=$label OUT=/tmp/m/pcm bash /tmp/m/sweep.sh > /dev/null 2>&1
        cp /tmp/m/pcm/$label/metrics-5.txt "$OUT/metrics_$label.txt"
        awk '/^tts_time_to_first_audio_seconds_(sum|count)/ {v[$1]=$2} END {
            printf "%s first PCM mean %.3f ms over %d requests\n", "'$label'",
            1000 * v["tts_time_to_first_audio_seconds_sum"] / v["tts_time_to_first_audio_seconds_count"],
            v["tts_time_to_first_audio_seconds_count"] }' "$OUT/metrics_$label.txt"
        awk '/^tts_stage_duration_seconds_(sum|count)\{stage="prefill"\}/ {v[$1]=$2} END { for (k in v) if (k ~ /_sum/) { c = k; sub("_sum", "_count", c); printf "'$label' prefill mean %.3f ms\n", 1000 * v[k] / v[c] } }' "$OUT/metrics_$label.txt"
    done
}
# (packed after each part: a call that runs out of time keeps what its parts wrote)
for part in ${PART:-alias}; do
    "part_$part"
    if [ -n "${PACK:-}" ]; then tar czf "$PACK" -C "$OUT" .; fi
done
