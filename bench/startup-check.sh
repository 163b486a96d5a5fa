#!/usr/bin/env bash
# A fresh server's start-up on the H200 (run from the repository root of the device
# machine, binaries from `FIRST_CALLS=1 bash bench/device-build.sh` carried in .device-carry/,
# gpu_parity and gpu_sampling left out to fit the 64 MiB carry): the codec
# warm-up's GPU test, the codec's first passes per frame count without and with the
# warm-up (examples/codec_first_calls.rs), then a fresh server at $RATE req/s twice (the
# second run on the server the first one warmed; timelines of 10 s slices in each
# bench-*.txt), once with the codec warm-up and, with AB=1, once more without it
# (QWEN3_TTS_CODEC_WARM_UP=0), and the servers' start-up lines. Results go to $OUT
# (startup.tgz).
set -u
source bench/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
timeout 100 $D/gpu_codec --test-threads=1 warm_up codec_graphs > "$OUT/codec.txt" 2>&1
echo "codec rc $?"
grep -E "^test |test result" "$OUT/codec.txt"
for w in "" warm; do
    echo "== first calls ${w:-cold} (module loading ${CUDA_MODULE_LOADING:-EAGER})"
    CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-EAGER} timeout 60 $D/codec_first_calls \
        random:1.7b $w 2>&1 | grep -v INFO | tee -a "$OUT/first_calls.txt"
done
P=$OUT
labels="warm"
if [ "${AB:-0}" = 1 ]; then labels="warm cold"; fi
for label in $labels; do
    flag=1
    if [ "$label" = cold ]; then flag=0; fi
    QWEN3_TTS_CODEC_WARM_UP=$flag OUT=/tmp/startup LABEL=$label \
        RATES="${RATE:-125} ${RATE:-125}" BENCH_ARGS=--raw bash bench/e2e-sweep.sh
    grep -E "module|warmed up|graphs captured|ready device|model on the GPU" \
        "/tmp/startup/$label/server.log" | cut -c1-200
done
tar czf "$P/startup.tgz" -C /tmp startup
