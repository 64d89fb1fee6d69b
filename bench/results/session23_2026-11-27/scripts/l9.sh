#!/bin/bash
# l9: tools/attention_ab.sh's BASE_ENV on the device (358cfd8): BASE '.', one build, head size
# 128's forward at 8K-16K a block an item (BASE_ENV=...MAX_T=4096) against the committed
# default (persistent to 16K), three passes: the third reading of 87b9855's gain.
set -u
source tools/device_call.sh
call_begin
t0=$(date +%s)
PASSES=3 BASE_ENV=GPT2_HOPPER_FORWARD_PERSISTENT_MAX_T=4096 timeout 400 tools/attention_ab.sh . \
  --seq-lens 8192,16384 --head-sizes 128 --kernels flash-hopper --measure fwd > $S/ab.log 2>&1
echo "ab rc $? $(( $(date +%s) - t0 )) s"
grep -E "^\||^====" $S/ab.log | head -20
ls out/attention-ab/
cp out/attention-ab/*.csv out/attention-ab/*.md $S/ 2>/dev/null
