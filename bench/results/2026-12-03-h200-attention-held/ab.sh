#!/usr/bin/env bash
# The four device runs of this folder, as run (RUN=1..4 picks one; OUT, BATCHES as in the
# README). Binaries and kernel caches in .device-carry/: qwen3-tts-head + kcache_head.tgz
# (fb20460), qwen3-tts + kcache.tgz (the tree of that run). The QWEN3_TTS_X_* knobs were
# experiment-only switches of those trees; none is in a commit. As run, `run` also printed
# each variant's seconds and left out the codec lines; the setup is bench/device-ab-lib.sh.
set -u
# shellcheck source=bench/device-ab-lib.sh
. bench/device-ab-lib.sh
parity() {
    QWEN3_TTS_KERNEL_CACHE=$PWD/$D/kcache timeout 330 $D/gpu_parity --test-threads=1 > "$OUT/parity.txt" 2>&1; echo "parity rc $?"
    QWEN3_TTS_KERNEL_CACHE=$PWD/$D/kcache timeout 120 $D/gpu_codec --test-threads=1 > "$OUT/codec.txt" 2>&1; echo "codec rc $?"
    grep -E "^test |test result|panicked" "$OUT/parity.txt" "$OUT/codec.txt"
}
case ${RUN:?RUN=1..4} in
1)
    run head qwen3-tts-head kcache_head
    run new qwen3-tts kcache
    run b1 qwen3-tts kcache QWEN3_TTS_X_B1=1
    run full qwen3-tts kcache QWEN3_TTS_X_FULL=1
    run b1full qwen3-tts kcache QWEN3_TTS_X_B1=1 QWEN3_TTS_X_FULL=1
    run greedy qwen3-tts kcache QWEN3_TTS_X_CP_GREEDY=1
    run nosample qwen3-tts kcache QWEN3_TTS_WITHOUT_KERNELS=sample
    run head2 qwen3-tts-head kcache_head
    run new2 qwen3-tts kcache
    ;;
2)
    run head qwen3-tts-head kcache_head
    run new qwen3-tts kcache
    run h0 qwen3-tts kcache QWEN3_TTS_X_HELD_MAX=0
    run h64 qwen3-tts kcache QWEN3_TTS_X_HELD_MAX=64
    run head2 qwen3-tts-head kcache_head
    run new2 qwen3-tts kcache
    parity
    ;;
3)
    run final qwen3-tts kcache
    BATCHES=64,128 run head_big qwen3-tts-head kcache_head
    parity
    ;;
4)
    run v2 qwen3-tts kcache
    run v2heldall qwen3-tts kcache QWEN3_TTS_X_HELD_ALL=1
    ;;
esac
(cd "$OUT" && tar czf r.tgz *.txt *.json)
if [ "$RUN" = 4 ]; then
    mkdir -p /tmp/e && PACK=$OUT/e2e.tgz OUT=/tmp/e RATES="${RATES:-1 10 40}" LABEL=held BENCH_ARGS=--raw bash bench/e2e-sweep.sh
fi
