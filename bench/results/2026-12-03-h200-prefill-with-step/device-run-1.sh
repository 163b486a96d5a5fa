# b0702ad: merged-pass parity first; if it holds, e2e with --prefill-with-step at 100/110/120; then the rest of gpu_parity
D=.device-carry
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64 QWEN3_TTS_FIXTURES=$PWD/fixtures
tar xzf $D/kcache.tgz -C $D
export QWEN3_TTS_KERNEL_CACHE=$PWD/$D/kcache
P=$OUT
nvidia-smi --query-gpu=name,driver_version --format=csv > $P/gpu.txt
timeout 60 $D/gpu_parity --test-threads=1 merged_prefill > $P/parity-merged.txt 2>&1; rc=$?; echo "merged parity rc $rc"; grep -E "test result|panicked|assert" $P/parity-merged.txt | head
if [ $rc -eq 0 ]; then
  OUT=/tmp/o PACK=$P/e2e-merge.tgz LABEL=merge SERVE_ARGS="--prefill-with-step true" RATES="${RATES:-100 110 120}" BENCH_ARGS=--raw bash bench/e2e-sweep.sh
fi
timeout ${PT:-230} $D/gpu_parity --test-threads=1 --skip merged_prefill > $P/parity.txt 2>&1; echo "parity rc $?"; grep -E "test result|FAILED|panicked" $P/parity.txt | head
