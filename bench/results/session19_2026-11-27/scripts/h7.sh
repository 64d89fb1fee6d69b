#!/bin/bash
# Session nineteen, call h7 (d98d8fe): ours beside SDPA again, two passes in turn, the tables
# from the medians (attention_check.sh PASSES=2, both modes, 512-16K).
set -u
S=$OUT/s; mkdir -p $S/check
trap 'cp out/attention-check/*.csv out/attention-check/*.md out/attention-check/*.log out/attention-check/*.txt $S/check/ 2>/dev/null; rm -f $S/check/build.log; tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $S/gpu.txt
t0=$(date +%s)
cmake -S . -B out/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > $S/cfg.log 2>&1
cmake --build out/build -j 16 --target gpt2-attention-bench > $S/build.log 2>&1 || { grep -E "error" $S/build.log | head; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
PASSES=2 BUILD_DIR=out/build SKIP_TESTS=1 KERNELS=flash-hopper,flash-hopper-det \
  TORCH_LAYOUTS=separate SEQ_LENS=512,1024,2048,4096,8192,16384 timeout 420 tools/attention_check.sh > $S/check.log 2>&1
echo "check rc $? $(( $(date +%s) - t0 )) s"
cat out/attention-check/attention_vs_pytorch_separate.md 2>/dev/null | tail -16
