#!/bin/bash
# l4: early scores in the two-consumer forward, the S issued after passing the turn (the tree,
# l3: level to -3%) and inside the turn (variant inturn, sx/inturn.diff), against main
# (87b9855, before/), head size 128, 512-16K, three passes. Predicted for inturn: level to +2%.
set -u
source tools/device_call.sh
call_begin
t0=$(date +%s)
PASSES=3 VARIANTS="inturn=sx/inturn.diff" timeout 500 tools/attention_ab.sh before \
  --seq-lens 512,1024,2048,4096,8192,16384 --head-sizes 128 --kernels flash-hopper \
  --measure fwd > $S/ab.log 2>&1; echo "ab rc $? $(( $(date +%s) - t0 )) s"
grep -E "^\||^==|summar" $S/ab.log | head -40
cp out/attention-ab/*.csv out/attention-ab/*.md $S/ 2>/dev/null
