#!/bin/bash
# Session twenty, call i1: gpu::sm_clock_mhz and the bench's clock columns (tests, memcheck,
# bench 4K-16K both head sizes and modes, two passes); d12 at 16K twice (gpt2-sweep); where the
# d12 16K step's time goes (ncu, the GPU's own clocks).
set -u
S=$OUT/s; mkdir -p $S
trap 'tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,power.max_limit --format=csv | tee $S/gpu.txt
t0=$(date +%s)
cmake -S . -B out/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > $S/cfg.log 2>&1
cmake --build out/build -j 16 --target test_gpu gpt2-attention-bench gpt2-train gpt2-sweep > $S/build.log 2>&1 || { grep -E "error" $S/build.log | head; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"; grep -E "warning" $S/build.log | head -5
T=out/build/tests/test_gpu
$T --gtest_filter='GpuSmClock*' > $S/tests.log 2>&1; echo "tests rc $?"; grep -E "OK|FAILED|PASSED|Failure|peak" $S/tests.log | head
compute-sanitizer --tool memcheck --error-exitcode 1 $T --gtest_filter='GpuSmClock*' > $S/memcheck.log 2>&1
echo "memcheck rc $?"; grep -E "PASSED|ERROR SUMMARY" $S/memcheck.log
for pass in 1 2; do
  timeout 120 out/build/gpt2-attention-bench --seq-lens 4096,8192,16384 --head-sizes 64,128 \
    --kernels flash-hopper,flash-hopper-det --repeats 8 --csv $S/bench_$pass.csv > $S/bench_$pass.log 2>&1
  echo "bench $pass rc $?"; grep -E "^ +(64|128) " $S/bench_$pass.log
done
BIN=$(dirname $(find out/build -name gpt2-sweep -type f | head -1))
for r in 1 2; do
  timeout 120 $BIN/gpt2-sweep --seq-lens 16384 --attn flash --out out/sw$r > $S/sweep_$r.log 2>&1
  echo "sweep $r rc $?"; grep -E "16384" out/sw$r/sweep.md | head -2; cp out/sw$r/sweep.csv $S/sweep_$r.csv
done
t0=$(date +%s)
timeout 240 python3 bench/kernel_breakdown.py --train $BIN/gpt2-train --clock-control none \
  --markdown $S/breakdown_16k.md --title "d12, B = 1, T = 16384, flash, own clocks" -- \
  --model d12 --max-seq-len 16384 --seq-len 16384 --batch-size 1 --total-batch-size 16384 \
  --attn flash --precision bf16 > $S/breakdown.log 2>&1
echo "breakdown rc $? $(( $(date +%s) - t0 )) s"; head -40 $S/breakdown_16k.md
