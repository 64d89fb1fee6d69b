#!/bin/bash
# Session nineteen, call h4 (main, 81706df's forward + db11952's backward): the attention tests;
# memcheck, synccheck and racecheck (with time) of the changed kernels; ours beside SDPA
# (attention_check.sh, both modes, 512-16K).
set -u
S=$OUT/s; mkdir -p $S/check
trap 'cp out/attention-check/*.csv out/attention-check/*.md out/attention-check/*.log out/attention-check/*.txt $S/check/ 2>/dev/null; rm -f $S/check/build.log; tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $S/gpu.txt
git log --oneline -1 2>/dev/null | tee $S/commit.txt
t0=$(date +%s)
cmake -S . -B out/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > $S/cfg.log 2>&1
cmake --build out/build -j 16 --target test_gpu gpt2-attention-bench > $S/build.log 2>&1 || { grep -E "error" $S/build.log | head; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"; grep -E "warning" $S/build.log | head -5
T=out/build/tests/test_gpu
t0=$(date +%s)
timeout 120 $T --gtest_filter='*Attention*:*Hopper*' > $S/tests.log 2>&1; echo "tests rc $? $(( $(date +%s) - t0 )) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $S/tests.log | head -20
F='*GpuAttentionTest.Bf16HopperFlash*/B3_T*:*HopperDeterministicMode*:*RacingModeTakes*:*InKernelDqConversion*:*ForwardBlockShapes*:*StagedGradients*'
for tool in memcheck synccheck racecheck; do
  t0=$(date +%s)
  limit=60; [ $tool = racecheck ] && limit=280
  timeout $limit compute-sanitizer --tool $tool --error-exitcode 1 --print-limit 20 $T \
    --gtest_filter="$F" > $S/$tool.log 2>&1
  echo "$tool rc $? $(( $(date +%s) - t0 )) s"
  grep -E "^\[  PASSED|^\[  FAILED|ERROR SUMMARY|RACECHECK SUMMARY|hazard" $S/$tool.log | head -4
  grep -c "^\[       OK" $S/$tool.log | sed 's/^/  tests OK: /'
done
t0=$(date +%s)
BUILD_DIR=out/build SKIP_TESTS=1 KERNELS=flash-hopper,flash-hopper-det \
  TORCH_LAYOUTS=separate SEQ_LENS=512,1024,2048,4096,8192,16384 timeout 200 tools/attention_check.sh > $S/check.log 2>&1
echo "check rc $? $(( $(date +%s) - t0 )) s"
cat out/attention-check/attention_vs_pytorch_separate.md 2>/dev/null | tail -16
