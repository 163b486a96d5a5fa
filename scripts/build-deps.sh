# What building the workspace needs beyond Rust, for a fresh machine; sourced (from the
# repository root) by scripts/test-all.sh and bench/device-build.sh.
#   need_cmake: installs cmake from Debian where it is missing (the bundled libopus).
#   fetch_nvrtc: fetches NVRTC 13.0 from PyPI into target/ci-nvrtc where it is not there
#     yet; returns non-zero when the download fails. NVRTC_DIR is where it lands.

NVRTC_DIR="$PWD/target/ci-nvrtc/nvidia/cu13/lib"

# apt-get install of the named Debian packages, through sudo when not root.
apt_install() {
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
    else
        sudo apt-get update -qq && sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
    fi
}

need_cmake() {
    if ! command -v cmake >/dev/null 2>&1; then
        echo "installing cmake (needed to build the bundled libopus)"
        apt_install cmake
    fi
}

fetch_nvrtc() {
    if [ -e "$NVRTC_DIR/libnvrtc.so.13" ]; then return 0; fi
    echo "fetching NVRTC 13.0 from PyPI (compiles the CUDA kernels; no GPU needed)"
    mkdir -p target/ci-nvrtc
    python3 -m pip download -q --no-deps "nvidia-cuda-nvrtc==13.0.88" -d target/ci-nvrtc/wheel \
        && python3 -m zipfile -e target/ci-nvrtc/wheel/nvidia_cuda_nvrtc-*.whl target/ci-nvrtc/
}
