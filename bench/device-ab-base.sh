#!/usr/bin/env bash
# Same-machine A/B of two builds (H200; repository root of the device machine): the tree's
# binary and kernel cache (.device-carry/qwen3-tts, kcache.tgz) against a base build's
# (.device-carry/qwen3-tts-head, kcache_head.tgz: built here from the base commit, e.g.
# with `git stash -u`, the cache by crates/tts-cuda/examples/kernel_cache.rs into a
# directory named kcache_head). `bench-stages` runs base, tree, tree with NOSTAGED_KNOB,
# base, tree; then the tree's gpu_parity filtered by PARITY_FILTER (space-separated).
# Usage: OUT=... BATCHES=1,2,4,16 PARITY_FILTER="staged demo_model" bash bench/device-ab-base.sh
set -u
# shellcheck source=bench/device-ab-lib.sh
. bench/device-ab-lib.sh
run head qwen3-tts-head kcache_head
run new qwen3-tts kcache
run nostaged qwen3-tts kcache ${NOSTAGED_KNOB:-QWEN3_TTS_STAGED_GEMV=0}
run head2 qwen3-tts-head kcache_head
run new2 qwen3-tts kcache
# shellcheck disable=SC2086
QWEN3_TTS_KERNEL_CACHE=$PWD/$D/kcache timeout 300 $D/gpu_parity --test-threads=1 ${PARITY_FILTER:-} \
    > "$OUT/parity.txt" 2>&1
echo "parity rc $?"
grep -E "^test |test result|panicked" "$OUT/parity.txt"
