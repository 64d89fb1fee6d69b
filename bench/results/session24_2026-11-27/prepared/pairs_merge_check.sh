#!/bin/bash
# Prepared in session twenty-four, not run: what merging the pairs needs (head size 64's forward,
# a block an item above its persistent range, 64-row blocks in 2-block clusters sharing each K and
# V copy by TMA multicast; ../pairs_v5.diff is session twenty-one's pairs_v4.diff on session
# twenty-four's main, two conflicts resolved, host side and README). m6 measured it at the power
# cap only: +5.2% / +3.5% / +2.6% at 8K / 16K / 32K, the same output bits, d12 16K +0.5%. Here, in
# one call (about 450-570 s):
#  1. the attention tests with the patch (ForwardPairsShareCopiesAndGiveIdenticalBits among
#     them: fp64 and the same bits as single blocks at T = 1030, 1100, 1500);
#  2. compute-sanitizer memcheck, racecheck and synccheck on the pairs test (as session
#     twenty-one's j4 ran them on v4; the kernel is v4's, the merge host-side);
#  3. d12 at 16K and 64K, 20 + 20 steps, GPT2_HOPPER_FORWARD_PAIRS 0 against 1, two passes each.
# Merge if 1 and 2 are clean and d12 is not slower; the patch already documents the knob.
# Machine code (tools/same_machine_code.py, no GPU): the pairs kernel is byte-identical to v4's
# (session twenty-one's tree 81706df + pairs_v4.diff), on which the three sanitizers were clean;
# main's four persistent forward kernels are identical with the patch, but its six a-block-an-item
# ones are not (code of the same size; the trait's added parameter, --map 'ELb0EEEEEv14=EEEEEv14',
# not looked into further), so the full attention tests are what shows the merge.
set -u
source tools/device_call.sh
call_begin
git apply bench/results/session24_2026-11-27/pairs_v5.diff || { echo "patch failed"; exit 1; }
call_build test_gpu gpt2-sweep || exit 1
t0=$(date +%s)
timeout 240 out/build/tests/test_gpu --gtest_filter='*Attention*:*Hopper*' > $S/tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s"; grep -E "PASSED|FAILED|Failure" $S/tests.log | head
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 1 --print-limit 20 \
    out/build/tests/test_gpu --gtest_filter='*ForwardPairs*' > $S/san_$tool.log 2>&1
  echo "$tool rc $? at $(( $(date +%s) - t0 )) s"; tail -n 3 $S/san_$tool.log
done
sweep() {  # pairs pass
  GPT2_HOPPER_FORWARD_PAIRS=$1 timeout 90 out/build/gpt2-sweep --seq-lens 16384,65536 \
    --attn flash --tokens-per-step 1 --steps 40 --warmup-steps 20 --out out/sw_$1_$2 \
    > $S/sweep_pairs$1_$2.log 2>&1
  echo "d12 pairs=$1 pass $2 rc $?: $(grep -o '[0-9]* tokens/s' $S/sweep_pairs$1_$2.log |
    tr '\n' ' ')"
}
sweep 0 1; sweep 1 1; sweep 1 2; sweep 0 2
echo "total $(( $(date +%s) - t0 )) s"
