#!/usr/bin/env bash
# Builds, on this CPU machine, what a device call carries (`run` with carry
# [".device-carry"]): the release server binary, the GPU test binaries (gpu_parity,
# gpu_codec, gpu_sampling), the codec_first_calls example with FIRST_CALLS=1 (for
# startup-check.sh; codec_pass too with CODEC_PASS=1), and the NVRTC kernel cache for the
# H200 (sm_90a, crates/tts-cuda/examples/kernel_cache.rs), packed as kcache.tgz; the
# binaries gzipped. The device scripts (device-env.sh and those that source it) unpack
# them and use the cache, so a binary does not compile its kernels first (~2 min).
# Installs cmake where it is missing and fetches NVRTC from PyPI, as scripts/test-all.sh
# does (scripts/build-deps.sh). Usage (repository root): bash bench/device-build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/build-deps.sh
. scripts/build-deps.sh
need_cmake
fetch_nvrtc
cargo build --release -p tts-server
cargo test --release -p tts-cuda --no-run
cargo build --release -p tts-cuda --example kernel_cache --example codec_pass \
    --example codec_first_calls
D=.device-carry
mkdir -p "$D"
cp target/release/qwen3-tts "$D/"
# a carry holds 64 MiB with the tracked tree (~25 MiB): codec_first_calls and codec_pass
# (~6 MB each) only when asked
rm -f "$D/codec_pass" "$D/codec_first_calls" "$D/codec_pass.gz" "$D/codec_first_calls.gz"
if [ "${FIRST_CALLS:-0}" = 1 ]; then cp target/release/examples/codec_first_calls "$D/"; fi
if [ "${CODEC_PASS:-0}" = 1 ]; then cp target/release/examples/codec_pass "$D/"; fi
for t in gpu_parity gpu_codec gpu_sampling; do
    # the newest test binary of that name (cargo keeps older hashes beside it)
    f=$(ls -t target/release/deps/"$t"-* | grep -v '\.d$' | head -1)
    cp "$f" "$D/$t"
done
strip "$D/qwen3-tts" "$D/gpu_parity" "$D/gpu_codec" "$D/gpu_sampling"
for f in codec_pass codec_first_calls; do
    if [ -e "$D/$f" ]; then strip "$D/$f"; fi
done
# carried gzipped (less than half the bytes); bench/device-env.sh unpacks them there
for f in qwen3-tts gpu_parity gpu_codec gpu_sampling codec_pass codec_first_calls; do
    if [ -e "$D/$f" ]; then gzip -f "$D/$f"; fi
done
cache=$(mktemp -d)
QWEN3_TTS_CUDA_LIB_DIRS="$NVRTC_DIR" QWEN3_TTS_KERNEL_CACHE="$cache/kcache" \
    ./target/release/examples/kernel_cache sm_90a
rm -rf "$D/kcache"
tar czf "$D/kcache.tgz" -C "$cache" kcache
rm -rf "$cache"
du -sh "$D"
# what a call carries: the tracked tree plus this folder, at most 64 MiB
tree=$(git ls-files -z | xargs -0 stat -c %s | awk '{s+=$1} END {print s}')
carry=$(find "$D" -type f ! -path "$D/kcache/*" -printf '%s\n' | awk '{s+=$1} END {print s}')
total=$(( (tree + carry) / 1048576 ))
echo "carry: tree $(( tree / 1048576 )) MiB + $D $(( carry / 1048576 )) MiB = $total MiB (limit 64)"
if [ "$total" -ge 64 ]; then
    echo "too big for one call: move binaries this call does not need out of $D" >&2
fi
