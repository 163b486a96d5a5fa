# Third device call (a fresh lease, qwen3-tts rebuilt at 36f5d98 where balanced merges by
# default): no scheduling flag at 110, 115, 120 req/s. The kernel cache was not unpacked
# on this lease, so the server compiled its kernels with NVRTC first (127 s, server-head.log);
# the sweep waited for /ready, and the 110 req/s warm-up began 0.2 s after it (bench-110.txt).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64; P=$OUT
OUT=/tmp/o PACK=$P/e2e-default.tgz LABEL=default RATES="110 115 120" BENCH_ARGS=--raw bash bench/e2e-sweep.sh
