#!/bin/bash
# k2: early scores with each item's own S accumulators when not early (k1 showed head size
# 128's two-consumer forward 1.7-2.4% slower at 2K-4K with s_acc carried across the loop).
# Tests, memcheck and synccheck on the persistent forward tests, and a three-pass forward A/B
# at 512-4K (8K was level in k1 and runs neither change).
set -u
source tools/device_call.sh
call_begin
call_build test_gpu || exit 1
T=out/build/tests/test_gpu
t0=$(date +%s)
timeout 300 $T --gtest_filter='*Attention*:*Hopper*' > $S/tests.log 2>&1; echo "tests rc $? $(( $(date +%s) - t0 )) s"
grep -E "PASSED|FAILED" $S/tests.log | head
F='*ForwardPersistentBlocks*:*ForwardBlockShapes*'
for tool in memcheck synccheck; do
  t0=$(date +%s)
  timeout 240 compute-sanitizer --tool $tool --error-exitcode 1 $T --gtest_filter="$F" > $S/$tool.log 2>&1
  echo "$tool rc $? $(( $(date +%s) - t0 )) s"; grep -E "ERROR SUMMARY" $S/$tool.log | head -2
done
t0=$(date +%s)
PASSES=3 timeout 330 tools/attention_ab.sh before --seq-lens 512,1024,2048,4096 --head-sizes 64,128 \
  --kernels flash-hopper --measure fwd > $S/ab.log 2>&1; echo "ab rc $? $(( $(date +%s) - t0 )) s"
grep -E "^\|" $S/ab.log | head -20
cp out/attention-ab/*.csv out/attention-ab/*.md $S/ 2>/dev/null
