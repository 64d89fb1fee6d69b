#!/bin/bash
# l3: early scores in the two-consumer persistent forward (head size 128's default shape; the
# persistent range now reaches 16K there). The attention tests, then a three-pass forward A/B
# against main (87b9855, before/) at head size 128, 512-16K. Predicted: +2-5% at 512-2K,
# +1-2% at 4K-16K.
set -u
source tools/device_call.sh
call_begin
call_build test_gpu || exit 1
T=out/build/tests/test_gpu
t0=$(date +%s)
timeout 200 $T --gtest_filter='*Attention*:*Hopper*' > $S/tests.log 2>&1; echo "tests rc $? $(( $(date +%s) - t0 )) s"
grep -E "PASSED|FAILED" $S/tests.log | head
t0=$(date +%s)
PASSES=3 timeout 360 tools/attention_ab.sh before --seq-lens 512,1024,2048,4096,8192,16384 \
  --head-sizes 128 --kernels flash-hopper --measure fwd > $S/ab.log 2>&1; echo "ab rc $? $(( $(date +%s) - t0 )) s"
grep -E "^\|" $S/ab.log | head -20
cp out/attention-ab/*.csv out/attention-ab/*.md $S/ 2>/dev/null
