#!/usr/bin/env bash
# Simulator A/B of Policy::prefill_with_step: a backend that merges prompts into talker
# steps, each prompt adding M µs to the step (`merge_prefill_us=M`), against separate
# prefill calls. Balanced profile (its defaults, long codec top-ups from 64 included),
# 192 slots, the bench's embedded English prompts, H200 stage costs of
# crates/tts-engine/examples/sim_h200.rs (refitted 2026-12-03), 60 s per rate, seeds 1-4. Repository root;
# writes sim.txt beside this script.
set -u
cargo build -q --release -p tts-engine --example sim_h200
S=target/release/examples/sim_h200
P=crates/tts-bench/prompts/en.txt
OUT=$(dirname "$0")/sim.txt
: > "$OUT"
for variant in off 250 600; do
    # since the balanced profile merges by default (2026-12-03), `off` says so explicitly
    extra="prefill_with_step=false"
    [ "$variant" != off ] && extra="merge_prefill_us=$variant"
    for rate in 10 40 60 80 100 110 120 130; do
        for seed in 1 2 3 4; do
            line=$($S "$rate" 60 192 balanced "$P" seed="$seed" $extra |
                grep -E "TTFA \(audible\)|underruns:|^prefill |^code_predictor |^talker_step " |
                sed -E 's/ +/ /g' | tr '\n' ' ')
            echo "merge=$variant rate=$rate seed=$seed $line" >> "$OUT"
        done
    done
done
