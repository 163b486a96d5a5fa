#!/usr/bin/env bash
# Simulator A/B of Policy::codec_long_top_ups_from (balanced profile, 192 slots, the bench's
# embedded English prompts, H200 stage costs of crates/tts-engine/examples/sim_h200.rs),
# 60 s per rate, seeds 1-4. Repository root; writes sim.txt beside this script.
set -u
cargo build -q --release -p tts-engine --example sim_h200
S=target/release/examples/sim_h200
P=crates/tts-bench/prompts/en.txt
OUT=$(dirname "$0")/sim.txt
: > "$OUT"
for variant in off 64; do
    extra=""
    [ "$variant" != off ] && extra="codec_long_from=$variant"
    for rate in 10 20 40 60 80 88 95 100; do
        for seed in 1 2 3 4; do
            line=$($S "$rate" 60 192 balanced "$P" seed="$seed" $extra |
                grep -E "TTFA \(audible\)|underruns:|^codec " | sed -E 's/ +/ /g' | tr '\n' ' ')
            echo "codec_long_top_ups_from=$variant rate=$rate seed=$seed $line" >> "$OUT"
        done
    done
done
