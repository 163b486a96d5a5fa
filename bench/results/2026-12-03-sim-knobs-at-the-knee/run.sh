cd "$(dirname "$0")/../../.."
cargo build -q --release -p tts-engine --example sim_h200
S=target/release/examples/sim_h200
P=crates/tts-bench/prompts/en.txt
for v in "" "codec_long_from=32" "codec_long_from=48" "max_fill_from=8" "max_fill_from=32" "chunks=1,2,4,8,16" "lead_ms=200" "reserve_ms=30" "codec_max_frames=192" "codec_max_frames=256" "codec_max_frames=256 codec_long_from=48"; do
  for rate in 120 125; do
    for seed in 1 2 3; do
      l=$($S $rate 60 192 balanced $P seed=$seed $v | grep -E 'TTFA \(audible\)|underruns:' | sed -E 's/ +/ /g' | tr '\n' ' ')
      echo "v=[$v] rate=$rate seed=$seed $l"
    done
  done
done
