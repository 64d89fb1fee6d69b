#!/bin/bash
# m6: session twenty-one's pairs (head size 64's forward, 64-row blocks a block an item above 4K,
# in 2-block clusters sharing each K and V copy by TMA multicast: half the L2 reads; v4, level in
# the short timing, its clock higher at the cap) timed at the power cap, which m2 found rewards
# joules. The patch (pairs_v4.diff on today's main, one conflict resolved) applied here; one
# build, GPT2_HOPPER_FORWARD_PAIRS=0 against 1: the forward at 8K-32K with --warmup-ms 1000,
# three passes; then d12 16K, 20 + 20 steps, two passes each way. Predicted: +3-6% sustained at
# 8K-32K (the 128-row shape, also half the reads, gained clock 1635-1872 against 1500-1718 MHz
# but lost as much a clock; pairs keep the 64-row loop), the same bits; d12 +1%.
set -u
source tools/device_call.sh
call_begin
git apply sx/pairs_v5.diff || { echo "patch failed"; exit 1; }
call_build gpt2-attention-bench gpt2-sweep || exit 1
t0=$(date +%s)
BASE_ENV=GPT2_HOPPER_FORWARD_PAIRS=0 NEW_ENV=GPT2_HOPPER_FORWARD_PAIRS=1 PASSES=3 OUT_DIR=out/ab \
  RUN_TIMEOUT=60 timeout 230 tools/attention_ab.sh . --head-sizes 64 \
  --seq-lens 8192,16384,32768 --kernels flash-hopper --measure fwd --warmup-ms 1000 \
  > $S/ab_pairs.log 2>&1
echo "pairs A/B rc $? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $S/ab_pairs.log | head -8
mkdir -p $S/ab_pairs && cp out/ab/*.csv out/ab/*.md $S/ab_pairs/ 2>/dev/null
sweep() {  # name pass pairs
  GPT2_HOPPER_FORWARD_PAIRS=$3 timeout 60 out/build/gpt2-sweep --seq-lens 16384 --attn flash \
    --tokens-per-step 1 --steps 40 --warmup-steps 20 --out out/sw_$1_$2 > $S/sweep_$1_$2.log 2>&1
  echo "d12 16K $1 pass $2 rc $?: $(grep -o '[0-9]* tokens/s' $S/sweep_$1_$2.log | head -1)"
}
sweep single 1 0; sweep pairs 1 1; sweep pairs 2 1; sweep single 2 0
echo "total $(( $(date +%s) - t0 )) s"
