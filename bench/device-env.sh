# Sourced by the device scripts (repository root of the device machine): the CUDA
# libraries' path, the test fixtures, D=.device-carry (the binaries bench/device-build.sh
# built here, carried, gzipped or not), and the kernels
# compiled here ahead (crates/tts-cuda/examples/kernel_cache.rs), when carried, packed
# (kcache.tgz) or not; without them a binary compiles its kernels first (~2 min).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
# With NEED_GPU set (e.g. NEED_GPU=H200): the script stops here, status 3, unless
# nvidia-smi names that card. A call that asks for an H200 may get an H100, whose figures
# would not compare with the H200's.
if [ -n "${NEED_GPU:-}" ]; then
    card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    case "$card" in
    *"$NEED_GPU"*) ;;
    *) echo "not an $NEED_GPU (${card:-no GPU found}): nothing run"; exit 3 ;;
    esac
fi
# the GPU tests' fixtures (their built-in path is this machine's checkout)
export QWEN3_TTS_FIXTURES=$PWD/fixtures
D=.device-carry
# binaries carried gzipped (bench/device-build.sh's note: the carry holds 64 MiB), unpacked
# beside them once
for gz in "$D"/*.gz; do
    [ -e "$gz" ] || continue
    bin=${gz%.gz}
    if [ ! -x "$bin" ]; then gunzip -c "$gz" > "$bin" && chmod +x "$bin"; fi
done
if [ -f "$D/kcache.tgz" ] && [ ! -d "$D/kcache" ]; then
    tar xzf "$D/kcache.tgz" -C "$D"
fi
if [ -d "$PWD/$D/kcache" ]; then
    export QWEN3_TTS_KERNEL_CACHE=$PWD/$D/kcache
fi
# With PACK set: the folder $OUT as one archive there (a device call brings back at most 8
# files from its $OUT).
pack_out() {
    if [ -n "${PACK:-}" ]; then tar czf "$PACK" -C "$(dirname "$OUT")" "$(basename "$OUT")"; fi
}
