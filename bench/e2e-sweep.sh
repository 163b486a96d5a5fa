#!/usr/bin/env bash
# End-to-end sweep on the GPU machine (issue 6; the H200, or an H100): the server with
# random:1.7b on CUDA and the `qwen3-tts bench` client on loopback, one bench run per rate
# with a /metrics snapshot after each (stage batch sizes and durations per rate come from
# their differences).
# Usage (repository root of the device machine, binary carried in .device-carry/):
#   RATES="1 10 40" LABEL=a OUT=... [SERVE_ARGS="--urgent-model-stages false"] [BENCH_ARGS=--raw] bash bench/e2e-sweep.sh
# Stage work per rate window from the snapshots, here afterwards:
#   cargo run -p tts-bench --example stage_work -- "10 req/s=metrics-1.txt:metrics-10.txt" ...
# Voice cloning: MODEL=random:1.7b-base and, in BENCH_ARGS, `--voice alloy --ref-audio REC
# --extra x_vector_only_mode=true` (or `--extra ref_text=...`); any WAV serves as REC, e.g.
# one from `$D/qwen3-tts synth --model demo --text "..." --voice ryan --out /tmp/ref.wav`.
# It writes ~5 files per rate, and a device call brings back only a few files from its $OUT:
# there, set OUT to a scratch folder and PACK=$OUT/<name>.tgz to get them as one archive.
set -u
source bench/device-env.sh
OUT=${OUT:-/tmp/out}
LABEL=${LABEL:-a}
WARMUP=${WARMUP:-30}
DURATION=${DURATION:-60}
mkdir -p "$OUT/$LABEL"
# the reports' label names the card (h200, h100, ...; GPU_TAG overrides)
gpu_tag=${GPU_TAG:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 \
    | grep -oiE 'h[0-9]{3}' | head -1 | tr 'A-Z' 'a-z')}
gpu_tag=${gpu_tag:-gpu}
$D/qwen3-tts serve --model "${MODEL:-random:1.7b}" --device cuda --max-slots 192 --max-queue 256 \
    --port 8000 ${SERVE_ARGS:-} > "$OUT/$LABEL/server.log" 2>&1 &
server=$!
for _ in $(seq 1 240); do
    curl -sf http://127.0.0.1:8000/ready > /dev/null && break
    sleep 0.5
done
curl -sf http://127.0.0.1:8000/metrics > "$OUT/$LABEL/metrics-0.txt"
for rate in ${RATES:-1 10 40}; do
    # a rate given twice (a fresh server's run, then a warm one's) gets its own folder
    run=$rate
    while [ -e "$OUT/$LABEL/r$run" ]; do run="$run+"; done
    $D/qwen3-tts bench --url http://127.0.0.1:8000 --rates "$rate" --warmup "$WARMUP" \
        --duration "$DURATION" --label "$gpu_tag-$LABEL-$rate" --out "$OUT/$LABEL/r$run" ${BENCH_ARGS:-} \
        > "$OUT/$LABEL/bench-$run.txt" 2>&1
    echo "rate $rate rc $?"
    curl -sf http://127.0.0.1:8000/metrics > "$OUT/$LABEL/metrics-$run.txt"
    grep -E "^\| *$rate \|" "$OUT/$LABEL/r$run/bench.md" 2>/dev/null | head -2
    grep -E "tightest|p95 per" "$OUT/$LABEL/bench-$run.txt"
done
kill -TERM $server
wait $server
if [ -n "${PACK:-}" ]; then tar czf "$PACK" -C "$OUT" "$LABEL"; fi
