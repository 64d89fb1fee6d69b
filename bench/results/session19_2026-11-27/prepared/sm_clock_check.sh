#!/bin/bash
# Session nineteen, call h9: gpu::sm_clock_mhz and the bench's clock columns: the tests,
# memcheck of them, and the bench at head sizes 64 and 128,
# 4K and 8K (both modes, all three timings).
set -u
# Prepared in session nineteen (not run: the device time was spent). Apply the patch first:
# git apply bench/results/session19_2026-11-27/prepared/sm_clock.diff
S=$OUT/s; mkdir -p $S
trap 'tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,power.max_limit --format=csv | tee $S/gpu.txt
t0=$(date +%s)
cmake -S . -B out/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > $S/cfg.log 2>&1
cmake --build out/build -j 16 --target test_gpu gpt2-attention-bench > $S/build.log 2>&1 || { grep -E "error" $S/build.log | head; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"; grep -E "warning" $S/build.log | head -5
T=out/build/tests/test_gpu
$T --gtest_filter='GpuSmClock*' > $S/tests.log 2>&1; echo "tests rc $?"; grep -E "OK|FAILED|PASSED|Failure|peak" $S/tests.log | head
compute-sanitizer --tool memcheck --error-exitcode 1 $T --gtest_filter='GpuSmClock*' > $S/memcheck.log 2>&1
echo "memcheck rc $?"; grep -E "PASSED|ERROR SUMMARY" $S/memcheck.log
for pass in 1 2; do
  timeout 60 out/build/gpt2-attention-bench --seq-lens 4096,8192 --head-sizes 64,128 \
    --kernels flash-hopper,flash-hopper-det --repeats 8 --csv $S/bench_$pass.csv > $S/bench_$pass.log 2>&1
  echo "bench $pass rc $?"; cat $S/bench_$pass.log | grep -E "^ +(64|128) "
done
