# Sourced by the device scripts (repository root of the device machine): the CUDA
# libraries' path, D=.device-carry (the binaries built here and carried), and the kernels
# compiled here ahead (crates/tts-cuda/examples/kernel_cache.rs), when carried, packed
# (kcache.tgz) or not; without them a binary compiles its kernels first (~2 min).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
D=.device-carry
if [ -f "$D/kcache.tgz" ] && [ ! -d "$D/kcache" ]; then
    tar xzf "$D/kcache.tgz" -C "$D"
fi
if [ -d "$PWD/$D/kcache" ]; then
    export QWEN3_TTS_KERNEL_CACHE=$PWD/$D/kcache
fi
