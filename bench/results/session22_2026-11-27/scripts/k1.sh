#!/bin/bash
# Prepared in session twenty-one, not run (no device time left): the persistent one-consumer
# forward (head size 64's default up to T = 4096) issues the next item's first S right after
# this item's last P V, so that GEMM runs under the P V and the epilogue and the wait for the
# next Q overlaps the P V (HopperForwardTraits::kEarlyScores). Predicted: head size 64 forward
# +3-7% at 512-1K, +1-3% at 2K-4K, the same bits (bench/NOTES.md, session twenty-one).
# Before the call, in the repository:
#   mkdir -p before && git archive HEAD | tar -x -C before     # main, the A/B's base
#   git apply bench/results/session21_2026-11-27/prepared/early_scores.diff
# and carry ["before"]. Then: the attention tests, the three sanitizers on the persistent
# forward tests, and the A/B (three passes, forward only, 512-8K, both head sizes: 128 runs
# two consumers up to 4K and must read level; 8K is a block an item at both, also level).
# About 550 s; the profiling build's phases (README) would need a second call.
set -u
source tools/device_call.sh
call_begin
call_build test_gpu || exit 1
T=out/build/tests/test_gpu
t0=$(date +%s)
timeout 300 $T --gtest_filter='*Attention*:*Hopper*' > $S/tests.log 2>&1; echo "tests rc $? $(( $(date +%s) - t0 )) s"
grep -E "PASSED|FAILED" $S/tests.log | head
F='*ForwardPersistentBlocks*:*ForwardBlockShapes*'
for tool in memcheck synccheck racecheck; do
  t0=$(date +%s)
  timeout 240 compute-sanitizer --tool $tool --error-exitcode 1 $T --gtest_filter="$F" > $S/$tool.log 2>&1
  echo "$tool rc $? $(( $(date +%s) - t0 )) s"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $S/$tool.log | head -2
done
t0=$(date +%s)
PASSES=3 timeout 400 tools/attention_ab.sh before --seq-lens 512,1024,2048,4096,8192 --head-sizes 64,128 \
  --kernels flash-hopper --measure fwd > $S/ab.log 2>&1; echo "ab rc $? $(( $(date +%s) - t0 )) s"
grep -E "^\|" $S/ab.log | head -20
cp out/attention-ab/*.csv out/attention-ab/*.md $S/ 2>/dev/null
