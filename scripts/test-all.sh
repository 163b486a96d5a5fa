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

# shellcheck source=scripts/build-deps.sh
. scripts/build-deps.sh
need_cmake

if ! command -v "${CXX:-c++}" >/dev/null 2>&1; then
    echo "installing g++ (runs the CUDA kernels on the CPU in the kernels_emulated test)"
    apt_install g++ || echo "g++ install failed: the emulated kernel tests will report SKIPPED"
fi

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        echo "installing chromium and chromium-driver (the playground's browser test)"
        apt_install chromium chromium-driver || echo "chromium install failed: the browser test will report SKIPPED"
    else
        echo "not root: chromium is not installed; the browser test will report SKIPPED"
    fi
fi

if [ -z "${QWEN3_TTS_CUDA_LIB_DIRS:-}" ]; then
    fetch_nvrtc || echo "NVRTC download failed: the kernel compile test will report SKIPPED"
    export QWEN3_TTS_CUDA_LIB_DIRS="$NVRTC_DIR"
fi

# A fresh build gains nothing from incremental state, which would double the workspace's
# share of the disk (a full disk makes the linker die with SIGBUS).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# the API docs build without broken or private links
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q
cargo test --workspace
