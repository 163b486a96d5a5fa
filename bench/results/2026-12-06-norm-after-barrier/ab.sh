#!/usr/bin/env bash
# Same-lease A/B of two builds (repository root of the device machine): the base build's
# qwen3-tts.gz and kcache.tgz in .device-carry/old/, this tree's (gzipped too) in
# .device-carry/. PART=stages: bench-stages old, new, old, new (the first pair with the
# link-cost ladder), then the parity tests of the changed kernels. PART=pcm: a request
# alone (--max-in-flight 1, rate 5), old, new, old, new, each on a fresh server; then
# Nsight Compute's per-kernel times of the new build at one row. PART=both: two stage runs
# and one request-alone run of each build (set OUT to a scratch folder and PACK to an
# archive in the call's $OUT, PACK first: `PACK=$OUT/both.tgz OUT=/tmp/abo PART=both bash
# ...`; with OUT reassigned before it, PACK would name the scratch folder).
set -u
D=.device-carry
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64 QWEN3_TTS_FIXTURES=$PWD/fixtures
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/ab/old /tmp/ab/new
for v in old new; do
    src=$D; [ $v = old ] && src=$D/old
    [ -x /tmp/ab/$v/qwen3-tts ] || { gunzip -c $src/qwen3-tts.gz > /tmp/ab/$v/qwen3-tts; chmod +x /tmp/ab/$v/qwen3-tts; }
    [ -d /tmp/ab/$v/kcache ] || tar xzf $src/kcache.tgz -C /tmp/ab/$v
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
stages() { # label build [args...]
    local label=$1 v=$2; shift 2
    QWEN3_TTS_KERNEL_CACHE=/tmp/ab/$v/kcache timeout 200 /tmp/ab/$v/qwen3-tts bench-stages \
        --batches "${BATCHES:-1,2,32}" --iters 30 --context 8 --codec-frames 2 "$@" \
        --out "$OUT/st_$label.json" > "$OUT/st_$label.txt" 2>&1
    echo "$label rc $?"
    grep -E "^(staged|chain)|^(prefill|code_predictor|talker_step|codec_decode) " "$OUT/st_$label.txt"
}
pcm() { # label build
    local label=$1 v=$2
    # the sweep with this build's binary, and its cache (device-env.sh would set the tree's)
    sed -e "s#\$D/qwen3-tts#/tmp/ab/$v/qwen3-tts#g" -e "s#^source bench/device-env.sh#:#" \
        bench/e2e-sweep.sh > /tmp/ab/sweep.sh
    QWEN3_TTS_KERNEL_CACHE=/tmp/ab/$v/kcache RATES=5 WARMUP=5 DURATION=40 \
        BENCH_ARGS="--max-in-flight 1" LABEL=$label OUT=/tmp/ab/pcm bash /tmp/ab/sweep.sh > /dev/null 2>&1
    cp /tmp/ab/pcm/$label/metrics-5.txt "$OUT/metrics_$label.txt"
    awk '/^tts_time_to_first_audio_seconds_(sum|count)/ {v[$1]=$2} END {
        printf "%s first PCM mean %.3f ms over %d requests\n", "'$label'",
        1000 * v["tts_time_to_first_audio_seconds_sum"] / v["tts_time_to_first_audio_seconds_count"],
        v["tts_time_to_first_audio_seconds_count"] }' "$OUT/metrics_$label.txt"
}
case ${PART:-stages} in
stages)
    stages 1_old old --link-costs 400
    stages 2_new new --link-costs 400
    BATCHES=1,2 stages 3_old old
    BATCHES=1,2 stages 4_new new
    gunzip -c $D/gpu_parity.gz > /tmp/ab/gpu_parity && chmod +x /tmp/ab/gpu_parity
    QWEN3_TTS_KERNEL_CACHE=/tmp/ab/new/kcache timeout 240 /tmp/ab/gpu_parity --test-threads=1 \
        ${PARITY_TESTS:-staged gemv_norm_chain row_attention grouped_attention tensor_core_linear full_size_random fixture_cases} \
        > "$OUT/parity.txt" 2>&1
    echo "parity rc $?"; grep -E "^test |test result" "$OUT/parity.txt"
    if [ -e $D/gpu_codec.gz ] && [ "${CODEC:-1}" = 1 ]; then
        gunzip -c $D/gpu_codec.gz > /tmp/ab/gpu_codec && chmod +x /tmp/ab/gpu_codec
        QWEN3_TTS_KERNEL_CACHE=/tmp/ab/new/kcache timeout 120 /tmp/ab/gpu_codec --test-threads=1 > "$OUT/codec.txt" 2>&1
        echo "codec rc $?"; grep -E "^test |test result" "$OUT/codec.txt"
    fi
    ;;
both)
    # stages and a request alone, alternating, everything packed into one archive
    stages 1_old old --link-costs 400
    stages 2_new new --link-costs 400
    pcm 3_old old
    pcm 4_new new
    BATCHES=1,2 stages 5_old old
    BATCHES=1,2 stages 6_new new
    ;;
pcm)
    pcm 1_old old; pcm 2_new new; pcm 3_old old; pcm 4_new new
    sed -i "s#\$D/qwen3-tts#/tmp/ab/new/qwen3-tts#g" bench/ncu-stages.sh
    QWEN3_TTS_KERNEL_CACHE=/tmp/ab/new/kcache BATCHES=1 OUT="$OUT" bash bench/ncu-stages.sh
    ;;
esac
if [ -n "${PACK:-}" ]; then tar czf "$PACK" -C "$OUT" .; fi
