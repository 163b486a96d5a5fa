#!/usr/bin/env bash
# Same-lease comparison of the codec's few-step GEMVs on tensor cores (one build, knob
# variants; repository root of the device machine, binaries gzipped in .device-carry/).
# PART: one or more of check, ncu, pcm, final, split (in the order given).
#   check: gpu_codec (every codec parity test), then bench-stages at 1 and 2 rows, variants
#     alternating: from 3 steps (QWEN3_TTS_CODEC_GEMV_MMA=3), off (0), all (1).
#   ncu: Nsight Compute's per-kernel times of a codec pass at one row, from 3 steps and off.
#   pcm: a request alone (--max-in-flight 1, rate 5) on fresh servers, off and from 3
#     steps alternating.
#   final: gpu_codec, then bench-stages at 1, 2 and 32 rows with the defaults.
#   split (a build with cluster-split.patch applied; not kept): gpu_codec, then
#     bench-stages at 1 and 2 rows with the rule's K split (QWEN3_TTS_CODEC_GEMV_MMA_SPLIT
#     unset) and without (1), alternating, twice each; then Nsight Compute's per-kernel
#     times of a codec pass at one row with the rule.
# Set PACK to an archive in the call's $OUT, then OUT to a scratch folder.
set -u
D=.device-carry
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64 QWEN3_TTS_FIXTURES=$PWD/fixtures
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/m
for b in qwen3-tts gpu_codec gpu_parity; do
    [ -e $D/$b.gz ] && [ ! -x /tmp/m/$b ] && { gunzip -c $D/$b.gz > /tmp/m/$b; chmod +x /tmp/m/$b; }
done
[ -d /tmp/m/kcache ] || tar xzf $D/kcache.tgz -C /tmp/m
export QWEN3_TTS_KERNEL_CACHE=/tmp/m/kcache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
stages() { # label mma-steps [env...]
    local label=$1 steps=$2; shift 2
    env QWEN3_TTS_CODEC_GEMV_MMA=$steps "$@" timeout 200 /tmp/m/qwen3-tts bench-stages \
        --batches "${BATCHES:-1,2}" --iters 30 --context 8 --codec-frames 2 \
        --out "$OUT/st_$label.json" > "$OUT/st_$label.txt" 2>&1
    echo "$label (mma from $steps steps $*) rc $?"
    grep -E "^codec_decode " "$OUT/st_$label.txt"
}
part_check() {
    timeout 150 /tmp/m/gpu_codec --test-threads=1 > "$OUT/codec.txt" 2>&1
    echo "codec rc $?"; grep -E "^test |test result" "$OUT/codec.txt"
    for r in 1 2; do stages ${r}_def 3; stages ${r}_off 0; stages ${r}_all 1; done
}
part_ncu() {
    for v in def:3 off:0; do
        QWEN3_TTS_CODEC_GEMV_MMA=${v#*:} timeout 200 /usr/local/cuda/bin/ncu --graph-profiling node \
            --cache-control none --clock-control none --metrics gpu__time_duration.sum --csv \
            --print-units base /tmp/m/qwen3-tts bench-stages --batches 1 --iters 1 --context 2 \
            --codec-frames 2 > /tmp/m/ncu_${v%%:*}.csv 2> "$OUT/ncu_${v%%:*}.err"
        echo "ncu ${v%%:*} rc $?"; gzip -c /tmp/m/ncu_${v%%:*}.csv > "$OUT/ncu_${v%%:*}.csv.gz"
    done
}
part_pcm() {
    sed -e "s#\$D/qwen3-tts#/tmp/m/qwen3-tts#g" -e "s#^source bench/device-env.sh#:#" \
        bench/e2e-sweep.sh > /tmp/m/sweep.sh
    for v in 1_off:0 2_def:3 3_off:0 4_def:3; do
        label=${v%%:*}
        QWEN3_TTS_CODEC_GEMV_MMA=${v#*:} RATES=5 WARMUP=5 DURATION=40 BENCH_ARGS="--max-in-flight 1" \
            LABEL=$label OUT=/tmp/m/pcm bash /tmp/m/sweep.sh > /dev/null 2>&1
        cp /tmp/m/pcm/$label/metrics-5.txt "$OUT/metrics_$label.txt"
        awk '/^tts_time_to_first_audio_seconds_(sum|count)/ {v[$1]=$2} END {
            printf "%s first PCM mean %.3f ms over %d requests\n", "'$label'",
            1000 * v["tts_time_to_first_audio_seconds_sum"] / v["tts_time_to_first_audio_seconds_count"],
            v["tts_time_to_first_audio_seconds_count"] }' "$OUT/metrics_$label.txt"
    done
}
part_split() {
    timeout 150 /tmp/m/gpu_codec --test-threads=1 > "$OUT/codec.txt" 2>&1
    echo "codec rc $?"; grep -E "^test |test result" "$OUT/codec.txt"
    for r in 1 2; do
        stages ${r}_rule 3
        stages ${r}_s1 3 QWEN3_TTS_CODEC_GEMV_MMA_SPLIT=1
    done
    timeout 200 /usr/local/cuda/bin/ncu --graph-profiling node --cache-control none \
        --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
        /tmp/m/qwen3-tts bench-stages --batches 1 --iters 1 --context 2 --codec-frames 2 \
        > /tmp/m/ncu_rule.csv 2> "$OUT/ncu_rule.err"
    echo "ncu rule rc $?"; gzip -c /tmp/m/ncu_rule.csv > "$OUT/ncu_rule.csv.gz"
}
part_final() {
    timeout 150 /tmp/m/gpu_codec --test-threads=1 > "$OUT/codec.txt" 2>&1
    echo "codec rc $?"; grep -E "test result" "$OUT/codec.txt"
    timeout 200 /tmp/m/qwen3-tts bench-stages --batches 1,2,32 --iters 30 --context 8 \
        --codec-frames 2 --out "$OUT/st_final.json" > "$OUT/st_final.txt" 2>&1
    echo "final stages rc $?"
    grep -E "^(prefill|code_predictor|talker_step|codec_decode) " "$OUT/st_final.txt"
}
for part in ${PART:-check}; do "part_$part"; done
if [ -n "${PACK:-}" ]; then tar czf "$PACK" -C "$OUT" .; fi
