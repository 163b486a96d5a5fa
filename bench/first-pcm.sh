#!/usr/bin/env bash
# Issue 6's request alone on the GPU machine: for each RUNS entry LABEL:ENV (ENV: knob
# assignments joined by '+', or empty), a fresh server (bench/e2e-sweep.sh) with those
# knobs serves one request at a time (--max-in-flight 1) at 5 req/s for 40 s after 5 s of
# warm-up, and the run's server-side means are printed: time to first PCM and the
# prefill stage. Writes $OUT/metrics_LABEL.txt per run (the /metrics snapshot).
# PCM_BENCH_ARGS, set like a knob, is added to the client's arguments (one word: e.g.
# PCM_BENCH_ARGS=--extra=text_mode=stream, the text streamed into talker steps).
# Usage (repository root of the device machine):
#   RUNS="b24:QWEN3_TTS_PREFILL_24=1 b32:QWEN3_TTS_PREFILL_24=0" OUT=... bash bench/first-pcm.sh
# Here, on snapshots already fetched: bash bench/first-pcm.sh --summary LABEL=metrics.txt ...
set -u
summary() { # label metrics-file
    awk -v label="$1" '
        /^tts_time_to_first_audio_seconds_(sum|count) / { v[$1] = $2 }
        /^tts_stage_duration_seconds_(sum|count)\{stage="prefill"\} / { p[$1 ~ /_sum/] = $2 }
        END {
            n = v["tts_time_to_first_audio_seconds_count"]
            if (n == 0 || p[0] == 0) { printf "%s: no requests in the snapshot\n", label; exit 1 }
            printf "%s first PCM mean %.3f ms over %d requests, prefill mean %.3f ms\n", label,
                1000 * v["tts_time_to_first_audio_seconds_sum"] / n, n, 1000 * p[1] / p[0]
        }' "$2"
}
if [ "${1:-}" = --summary ]; then
    shift
    status=0
    for a in "$@"; do summary "${a%%=*}" "${a#*=}" || status=1; done
    exit $status
fi
# with NEED_GPU=H200 nothing runs on another card (bench/device-env.sh)
source bench/device-env.sh
OUT=${OUT:-/tmp/out}
scratch=$(mktemp -d)
mkdir -p "$OUT"
for run in ${RUNS:-base:}; do
    label=${run%%:*} knobs=${run#*:}
    env PCM_BENCH_ARGS= ${knobs//+/ } RATES=5 WARMUP=5 DURATION=40 LABEL=$label OUT=$scratch \
        bash -c 'BENCH_ARGS="--max-in-flight 1 $PCM_BENCH_ARGS" exec bash bench/e2e-sweep.sh' \
        > /dev/null 2>&1
    cp "$scratch/$label/metrics-5.txt" "$OUT/metrics_$label.txt" && summary "$label" "$OUT/metrics_$label.txt"
done
