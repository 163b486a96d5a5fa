# Shared by the same-machine A/B scripts (sourced; repository root of the device machine):
# bench/device-env.sh (the binaries, the tree's kernel cache kcache.tgz), then the base
# build's cache (kcache_head.tgz) unpacked too when carried (a base build whose kernels are
# the tree's can use the tree's cache), records the GPU in $OUT/gpu.txt, and defines
#   run NAME BINARY CACHE [KNOB=VALUE...]
# which runs BINARY's `bench-stages` over $BATCHES with that cache and those knobs into
# $OUT/stages_NAME.{json,txt} and prints its stage lines (every prefill stage's too).
# shellcheck source=bench/device-env.sh
source bench/device-env.sh
if [ -f $D/kcache_head.tgz ]; then tar xzf $D/kcache_head.tgz -C $D; fi
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
run() { # name binary cache knobs...
    local name=$1 bin=$2 cache=$3; shift 3
    env QWEN3_TTS_KERNEL_CACHE=$PWD/$D/$cache "$@" timeout 150 $D/$bin bench-stages --batches "$BATCHES" \
        --iters 20 --context 8 --codec-frames 2 --out "$OUT/stages_$name.json" > "$OUT/stages_$name.txt" 2>&1
    echo "variant $name rc $?"
    grep -E "^(prefill[a-z0-9_]*|code_predictor|talker_step|codec_decode) " "$OUT/stages_$name.txt"
}
