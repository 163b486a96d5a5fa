# HEAD + sample_cp_row fix: full parity, stage times, then the default profile end to end at 100 req/s
D=.device-carry
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64 QWEN3_TTS_FIXTURES=$PWD/fixtures
tar xzf $D/kcache.tgz -C $D
export QWEN3_TTS_KERNEL_CACHE=$PWD/$D/kcache
P=$OUT
nvidia-smi --query-gpu=name,driver_version --format=csv > $P/gpu.txt
timeout 230 $D/gpu_parity --test-threads=1 > $P/parity.txt 2>&1; echo "parity rc $?"; grep "test result" $P/parity.txt
timeout 60 $D/qwen3-tts bench-stages --batches 1,16 --iters 20 --context 8 --codec-frames 2 > $P/stages.txt 2>&1; echo "stages rc $?"; grep -A12 "^stage" $P/stages.txt | head -14
OUT=/tmp/o PACK=$P/e2e.tgz LABEL=default RATES="100" BENCH_ARGS=--raw bash bench/e2e-sweep.sh
