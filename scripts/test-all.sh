#!/usr/bin/env bash
# The whole test suite: formatting, lints, API docs, and every test (unit, fixture parity, engine,
# server, kernel compilation). GPU tests skip themselves (and say so) without a GPU.
#
# Installs what a fresh machine lacks:
#   * cmake (Debian), to build the bundled libopus;
#   * g++ (Debian), to run the kernels on the CPU (tts-cuda's kernels_emulated test);
#   * NVRTC from PyPI (nvidia-cuda-nvrtc), so the CUDA kernels are compiled in CI;
#   * chromium + chromium-driver (Debian, as root), for the playground's browser test.
# The OpenAI SDK test installs `openai` from PyPI into target/py-openai itself.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cmake >/dev/null 2>&1; then
    echo "installing cmake (needed to build the bundled libopus)"
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq cmake; else sudo apt-get update -qq && sudo apt-get install -y -qq cmake; fi
fi

if ! command -v "${CXX:-c++}" >/dev/null 2>&1; then
    echo "installing g++ (runs the CUDA kernels on the CPU in the kernels_emulated test)"
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq g++; else sudo apt-get update -qq && sudo apt-get install -y -qq g++; fi \
        || echo "g++ install failed: the emulated kernel tests will report SKIPPED"
fi

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        echo "installing chromium and chromium-driver (the playground's browser test)"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; } \
            || echo "chromium install failed: the browser test will report SKIPPED"
    else
        echo "not root: chromium is not installed; the browser test will report SKIPPED"
    fi
fi

nvrtc_dir="$PWD/target/ci-nvrtc/nvidia/cu13/lib"
if [ -z "${QWEN3_TTS_CUDA_LIB_DIRS:-}" ]; then
    if [ ! -e "$nvrtc_dir/libnvrtc.so.13" ]; then
        echo "fetching NVRTC 13.0 from PyPI (compiles the CUDA kernels in CI; no GPU needed)"
        mkdir -p target/ci-nvrtc
        if python3 -m pip download -q --no-deps "nvidia-cuda-nvrtc==13.0.88" -d target/ci-nvrtc/wheel; then
            python3 -m zipfile -e target/ci-nvrtc/wheel/nvidia_cuda_nvrtc-*.whl target/ci-nvrtc/
        else
            echo "NVRTC download failed: the kernel compile test will report SKIPPED"
        fi
    fi
    export QWEN3_TTS_CUDA_LIB_DIRS="$nvrtc_dir"
fi

# A fresh build gains nothing from incremental state, which would double the workspace's
# share of the disk (a full disk makes the linker die with SIGBUS).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# the API docs build without broken or private links
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q
cargo test --workspace
