#!/bin/bash
# Prepared in session twenty-three, not run: does the racing backward's spread (head size 128,
# 8K: 540-578 TFLOP/s between three timings in one process, l10; each timing allocates its
# inputs and workspace) stay with one allocation? gpt2-attention-bench --remeasure 4 times each
# timing four times on the same buffers. Two processes, each timing the kernel three times (three
# allocations), head size 128 and 64 at 8K and 16K, backward only. Predicted, if placement (the
# fp32 dQ accumulator's or the inputs' L2 partitions) is the cause: within one allocation under
# 1%, between allocations the 5-7%; if not, the remeasured timings spread as much. Then, were it
# placement, the next step: time the workspace at a few offsets. About 150-200 s.
set -u
source tools/device_call.sh
call_begin
call_build gpt2-attention-bench || exit 1
for p in 1 2; do
  timeout 150 out/build/gpt2-attention-bench --seq-lens 8192,16384 --head-sizes 128,64 \
    --kernels flash-hopper,flash-hopper,flash-hopper --measure bwd --remeasure 4 \
    --csv $S/p$p.csv > $S/p$p.log 2>&1
  echo "process $p rc $?"
  grep -E "flash-hopper" $S/p$p.log | grep -vE "^ *(HS|---)" | head -40
done
