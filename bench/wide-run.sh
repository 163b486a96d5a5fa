#!/usr/bin/env bash
# wide.cu on the H200: its parity cases first, the kernel table, stage A/B (wide on / off),
# then the whole parity suite with the time left. Binaries and kcache.tgz in .device-carry/.
set -u
source bench/device-env.sh
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
t0=$(date +%s)
timeout 120 $D/gpu_parity --test-threads=1 tensor_core_linear > "$OUT/parity_linear.txt" 2>&1
echo "linear parity rc $? ($(( $(date +%s) - t0 )) s)"; grep -E "^test |test result|panicked|rel err" "$OUT/parity_linear.txt" | head -20
if [ "${KERNELS:-1}" = 1 ]; then
  timeout 150 $D/qwen3-tts bench-stages --batches 1 --iters 3 --kernels > "$OUT/kernels.txt" 2>&1
  echo "kernels rc $? ($(( $(date +%s) - t0 )) s)"; grep -E "^(tc|cublas|tile|wide|cluster)" "$OUT/kernels.txt" | grep -E "m=(16|32|64)" 
fi
for v in ${VARIANTS:-wide:QWEN3_TTS_WIDE_LINEAR=1 off:QWEN3_TTS_WIDE_LINEAR=0}; do
  name=${v%%:*}; knobs=${v#*:}
  env ${knobs//+/ } timeout 150 $D/qwen3-tts bench-stages --batches "${BATCHES:-16,32,64}" --iters 20 \
     --out "$OUT/stages_$name.json" > "$OUT/stages_$name.txt" 2>&1
  echo "variant $name rc $? ($(( $(date +%s) - t0 )) s)"
  grep -E "^(prefill|code_predictor|talker_step|codec_decode) " "$OUT/stages_$name.txt"
done
if [ "${PARITY:-1}" = 1 ]; then
  left=$(( ${BUDGET:-580} - ($(date +%s) - t0) ))
  timeout $left $D/gpu_parity --test-threads=1 > "$OUT/parity.txt" 2>&1; echo "parity rc $?"
  grep -E "^test |test result" "$OUT/parity.txt"
fi
