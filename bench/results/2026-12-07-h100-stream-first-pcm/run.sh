#!/usr/bin/env bash
# Device script of 2026-12-07: a one-token prefill (text streamed, prompt head cached) on
# the talker step's fused attention (abe5d2b) against the split attention it had before
# (3a77f87's binary, carried as .device-carry/qwen3-tts-base.gz). Repository root of the
# device machine; OUT=$OUT bash bench/results/2026-12-07-h100-stream-first-pcm/run.sh
#   1. bench-stages at one row, base and new alternating, ROUNDS rounds (default 2);
#   2. the GPU tests that run one-token prefills against the CPU reference and the
#      one-pass-per-prompt path (new binary);
#   3. a request alone with its text streamed (bench/first-pcm.sh), base then new
#      (skipped with PCM=0).
# PARITY_SECS bounds step 2 (default 300).
set -u
source bench/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/stages"
for round in $(seq 1 "${ROUNDS:-2}"); do
    for bin in base new; do
        exe=$D/qwen3-tts; [ "$bin" = base ] && exe=$D/qwen3-tts-base
        f=$OUT/stages/${bin}_$round
        timeout 200 "$exe" bench-stages --batches 1 --iters 30 --out "$f.json" > "$f.txt" 2>&1
        echo "$bin round $round rc $?"
        grep -E "^(prefill|prefill_stream|prefill_24|talker_step) " "$f.txt"
    done
done
timeout "${PARITY_SECS:-300}" $D/gpu_parity --test-threads=1 prefix_cache_hits batched_prefill merged_prefill \
    > "$OUT/parity.txt" 2>&1
echo "parity rc $?"; grep -E "^test |test result|identical" "$OUT/parity.txt"
if [ "${PCM:-1}" = 0 ]; then
    tar czf "$OUT/run.tgz" -C "$OUT" stages parity.txt && rm -r "$OUT/stages"
    exit 0
fi
# the base binary in the new one's place for its first-PCM run, then the new one back
mv "$D/qwen3-tts" "$D/qwen3-tts-new" && cp "$D/qwen3-tts-base" "$D/qwen3-tts"
RUNS="stream_base:PCM_BENCH_ARGS=--extra=text_mode=stream" OUT=$OUT/pcm bash bench/first-pcm.sh
mv "$D/qwen3-tts-new" "$D/qwen3-tts"
RUNS="stream_new:PCM_BENCH_ARGS=--extra=text_mode=stream" OUT=$OUT/pcm bash bench/first-pcm.sh
tar czf "$OUT/run.tgz" -C "$OUT" stages pcm parity.txt && rm -r "$OUT/stages" "$OUT/pcm"
