# NT experiment: kernel table tc rows per NT, stages static vs autotune NT 1/4, parity
# (.device-carry/qwen3-tts-nt: qwen3-tts built from 329a4d1 + next-mma-nt.patch; gpu_parity likewise; kcache.tgz their NVRTC cache)
BATCHES=1,16,32,64
source bench/device-ab-lib.sh
B=$D/qwen3-tts-nt
for nt in 1 2 4; do
  QWEN3_TTS_KERNEL_CACHE=$PWD/$D/kcache QWEN3_TTS_X_MMA_NT=$nt timeout 120 $B bench-stages --batches 1 --iters 3 --kernels > $OUT/kern_nt$nt.txt 2>&1
  echo "nt $nt rc $?"; grep -E "^tc " $OUT/kern_nt$nt.txt | grep -E "m=(16|32)"
done
run static qwen3-tts-nt kcache
run at1 qwen3-tts-nt kcache QWEN3_TTS_AUTOTUNE=1 QWEN3_TTS_X_MMA_NT=1
run at4 qwen3-tts-nt kcache QWEN3_TTS_AUTOTUNE=1 QWEN3_TTS_X_MMA_NT=4
for nt in 2 4; do
  QWEN3_TTS_KERNEL_CACHE=$PWD/$D/kcache QWEN3_TTS_X_MMA_NT=$nt timeout 120 $D/gpu_parity --test-threads=1 tensor_core > $OUT/parity_nt$nt.txt 2>&1
  echo "parity nt $nt rc $?"; tail -3 $OUT/parity_nt$nt.txt
done
cd $OUT && tar czf r.tgz *.txt *.json
