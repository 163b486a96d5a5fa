#!/usr/bin/env bash
# Device script of 2026-12-07: a one-token prefill (text streamed, prompt head cached) on
# the talker step's fused attention (abe5d2b) against the split attention it had before
# (3a77f87's binary, carried as .device-carry/qwen3-tts-head.gz; the kernels are the same,
# so both use the tree's kernel cache). Repository root of the device machine;
# OUT=$OUT bash bench/results/2026-12-07-h100-stream-first-pcm/run.sh
#   1. bench-stages at one row, base and new alternating, ROUNDS rounds (default 2), by
#      bench/device-ab-lib.sh's `run`;
#   2. the GPU tests that run one-token prefills against the CPU reference and the
#      one-pass-per-prompt path (new binary);
#   3. a request alone with its text streamed (bench/first-pcm.sh), base then new
#      (skipped with PCM=0).
# PARITY_SECS bounds step 2 (default 300).
set -u
top=${OUT:-/tmp/out}
BATCHES=1 OUT=$top/stages
# shellcheck source=bench/device-ab-lib.sh
. bench/device-ab-lib.sh
for round in $(seq 1 "${ROUNDS:-2}"); do
    run "base_$round" qwen3-tts-head kcache
    run "new_$round" qwen3-tts kcache
done
OUT=$top
timeout "${PARITY_SECS:-300}" $D/gpu_parity --test-threads=1 prefix_cache_hits batched_prefill merged_prefill \
    > "$OUT/parity.txt" 2>&1
echo "parity rc $?"; grep -E "^test |test result|identical" "$OUT/parity.txt"
if [ "${PCM:-1}" = 0 ]; then
    tar czf "$OUT/run.tgz" -C "$OUT" stages parity.txt && rm -r "$OUT/stages"
    exit 0
fi
# the base binary in the new one's place for its first-PCM run, then the new one back
mv "$D/qwen3-tts" "$D/qwen3-tts-new" && cp "$D/qwen3-tts-head" "$D/qwen3-tts"
RUNS="stream_base:PCM_BENCH_ARGS=--extra=text_mode=stream" OUT=$OUT/pcm bash bench/first-pcm.sh
mv "$D/qwen3-tts-new" "$D/qwen3-tts"
RUNS="stream_new:PCM_BENCH_ARGS=--extra=text_mode=stream" OUT=$OUT/pcm bash bench/first-pcm.sh
tar czf "$OUT/run.tgz" -C "$OUT" stages pcm parity.txt && rm -r "$OUT/stages" "$OUT/pcm"
