#!/bin/bash
# Session twenty, call i2: A/B of K as register A fragments in the head size 64 racing backward
# (base = before/ = a4ddab3), backward only, 1K-16K, two interleaved passes; then the attention
# tests on the new tree.
set -u
S=$OUT/s; mkdir -p $S
trap 'cp out/attention-ab/*.csv out/attention-ab/*.md $S/ 2>/dev/null; tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $S/gpu.txt
t0=$(date +%s)
PASSES=2 RUN_TIMEOUT=120 timeout 420 tools/attention_ab.sh before \
  --seq-lens 1024,2048,4096,8192,16384 --head-sizes 64 --kernels flash-hopper --measure bwd --repeats 10 \
  > $S/ab.log 2>&1
echo "ab rc $? $(( $(date +%s) - t0 )) s"; grep -E "^====|attention_ab" $S/ab.log | head -10
cat out/attention-ab/summary.md 2>/dev/null
B=out/attention-ab/build-new
ls $B | head -3
cmake --build $B -j 16 --target test_gpu > $S/build_tests.log 2>&1 || { grep error $S/build_tests.log | head; exit 1; }
t0=$(date +%s)
$B/tests/test_gpu --gtest_filter='*Attention*:*Hopper*' > $S/tests.log 2>&1; echo "tests rc $? $(( $(date +%s) - t0 )) s"
grep -E "PASSED|FAILED|tests ran" $S/tests.log | head
