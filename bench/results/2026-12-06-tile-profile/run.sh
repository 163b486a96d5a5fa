#!/usr/bin/env bash
# Device script of 2026-12-06 (evening): the tree checked whole, the stages by rows, and
# where the batched tensor-core linear layers (tile_wg.cu) spend their time. Repository
# root of the device machine; binaries in .device-carry/ (gzipped or not).
# PART: one or more of check, stages, ncu, depth, alias, pcm (in the order given).
#   check: gpu_parity (the tests PARITY_FILTER names, else all), gpu_codec, gpu_sampling.
#   stages: bench-stages at 1, 2, 8, 16, 32 and 64 rows (or BATCHES).
#   ncu: Nsight Compute sections (speed of light, memory, warp states, launch, occupancy,
#     scheduler; caches flushed between passes) of the tile_wg.cu launches of a run at 32
#     rows, then per-kernel times (caches not flushed) of the same run.
#   depth (a build with deep-pipeline.patch applied): bench-stages at 1, 2, 8, 16 and 32 rows
#     (prefill of 16 tokens included) with each
#     QWEN3_TTS_TILE_WG_DEPTH (usual, one-wave, deep), alternating, twice each.
#   alias: bench-stages at 1, 2, 16 and 32 rows with QWEN3_TTS_TILE_WG_ALIAS=0 and 1,
#     alternating, twice each; then gpu_parity's aliased_tile test.
#   pcm: a request alone (--max-in-flight 1, rate 5) on a fresh server, twice (PCM_RUNS
#     names the runs).
# Set PACK to an archive in the call's $OUT, then OUT to a scratch folder.
set -u
D=.device-carry
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64 QWEN3_TTS_FIXTURES=$PWD/fixtures
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/m
for b in qwen3-tts gpu_codec gpu_parity gpu_sampling; do
    if [ ! -x /tmp/m/$b ]; then
        if [ -e $D/$b.gz ]; then gunzip -c $D/$b.gz > /tmp/m/$b; elif [ -e $D/$b ]; then cp $D/$b /tmp/m/$b; fi
        [ -e /tmp/m/$b ] && chmod +x /tmp/m/$b
    fi
done
[ -d /tmp/m/kcache ] || tar xzf $D/kcache.tgz -C /tmp/m
export QWEN3_TTS_KERNEL_CACHE=/tmp/m/kcache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
part_check() {
    for t in gpu_parity gpu_codec gpu_sampling; do
        local filter=""
        [ "$t" = gpu_parity ] && filter=${PARITY_FILTER:-}
        timeout ${TEST_TIMEOUT:-240} /tmp/m/$t --test-threads=1 $filter > "$OUT/$t.txt" 2>&1
        echo "$t rc $?"; grep -E "test result" "$OUT/$t.txt"
    done
}
part_stages() {
    timeout 200 /tmp/m/qwen3-tts bench-stages --batches ${BATCHES:-1,2,8,16,32,64} --iters 30 --context 8 \
        --codec-frames 2 --out "$OUT/stages.json" > "$OUT/stages.txt" 2>&1
    echo "stages rc $?"
    grep -E "^(prefill|prefill_stream|code_predictor|talker_step|codec_decode) " "$OUT/stages.txt"
}
part_ncu() {
    local ncu=/usr/local/cuda/bin/ncu
    timeout 300 $ncu --graph-profiling node --kernel-name regex:tile_wg --launch-count 160 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section LaunchStats --section Occupancy --section SchedulerStats \
        --cache-control all --clock-control none \
        /tmp/m/qwen3-tts bench-stages --batches 32 --iters 1 --context 1 --codec-frames 1 \
        > /tmp/m/ncu_sections.txt 2> "$OUT/ncu_sections.err"
    echo "ncu sections rc $?"; gzip -c /tmp/m/ncu_sections.txt > "$OUT/ncu_sections.txt.gz"
    for b in 16 32; do
        timeout 200 $ncu --graph-profiling node --cache-control none --clock-control none \
            --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --print-units base \
            /tmp/m/qwen3-tts bench-stages --batches $b --iters 1 --context 2 --codec-frames 2 \
            > /tmp/m/ncu_b$b.csv 2> "$OUT/ncu_b$b.err"
        echo "ncu b$b rc $?"; gzip -c /tmp/m/ncu_b$b.csv > "$OUT/ncu_b$b.csv.gz"
    done
}
part_depth() {
    for round in 1 2; do
        for v in usual one-wave deep; do
            QWEN3_TTS_TILE_WG_DEPTH=$v timeout 200 /tmp/m/qwen3-tts bench-stages --batches 1,2,8,16,32 \
                --iters 30 --context 8 --codec-frames 2 --out "$OUT/depth_${v}_$round.json" \
                > "$OUT/depth_${v}_$round.txt" 2>&1
            echo "depth $v round $round rc $?"
            grep -E "^(prefill|code_predictor|talker_step) " "$OUT/depth_${v}_$round.txt"
        done
    done
}
part_alias() {
    for round in 1 2; do
        for v in 0 1; do
            QWEN3_TTS_TILE_WG_ALIAS=$v timeout 200 /tmp/m/qwen3-tts bench-stages --batches 1,2,16,32 \
                --iters 30 --context 8 --codec-frames 2 --out "$OUT/alias_${v}_$round.json" \
                > "$OUT/alias_${v}_$round.txt" 2>&1
            echo "alias $v round $round rc $?"
            grep -E "^(prefill|code_predictor|talker_step) " "$OUT/alias_${v}_$round.txt"
        done
    done
    timeout 200 /tmp/m/gpu_parity --test-threads=1 aliased_tile > "$OUT/parity_alias.txt" 2>&1
    echo "parity rc $?"; grep -E "^test |test result" "$OUT/parity_alias.txt"
}
part_pcm() {
    sed -e "s#\$D/qwen3-tts#/tmp/m/qwen3-tts#g" -e "s#^source bench/device-env.sh#:#" \
        bench/e2e-sweep.sh > /tmp/m/sweep.sh
    for label in ${PCM_RUNS:-pcm1 pcm2}; do
        RATES=5 WARMUP=5 DURATION=40 BENCH_ARGS="--max-in-flight 1" \
            LABEL=$label OUT=/tmp/m/pcm bash /tmp/m/sweep.sh > /dev/null 2>&1
        cp /tmp/m/pcm/$label/metrics-5.txt "$OUT/metrics_$label.txt"
        awk '/^tts_time_to_first_audio_seconds_(sum|count)/ {v[$1]=$2} END {
            printf "%s first PCM mean %.3f ms over %d requests\n", "'$label'",
            1000 * v["tts_time_to_first_audio_seconds_sum"] / v["tts_time_to_first_audio_seconds_count"],
            v["tts_time_to_first_audio_seconds_count"] }' "$OUT/metrics_$label.txt"
    done
}
# (packed after each part: a call that runs out of time keeps what its parts wrote)
for part in ${PART:-check}; do
    "part_$part"
    if [ -n "${PACK:-}" ]; then tar czf "$PACK" -C "$OUT" .; fi
done
