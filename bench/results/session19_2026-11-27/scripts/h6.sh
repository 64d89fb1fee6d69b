#!/bin/bash
# Session nineteen, call h6 (d98d8fe): ncu with stall samples of the head size 128 backward at
# 16K (where it trails cuDNN; 8K was h2's) and of the head size 64 forward at 16K.
set -u
S=$OUT/s; mkdir -p $S
trap 'tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $S/gpu.txt
t0=$(date +%s)
cmake -S . -B out/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > $S/cfg.log 2>&1
cmake --build out/build -j 16 --target gpt2-attention-bench > $S/build.log 2>&1 || { grep -E "error" $S/build.log | head; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
BENCH=out/build/gpt2-attention-bench
for cfg in "128 16384 hopper_backward_kernel bwd" "128 8192 hopper_backward_kernel bwd" "64 16384 hopper_forward_kernel fwd"; do
  set -- $cfg
  t0=$(date +%s)
  timeout 100 ncu --set full --import-source no --kernel-name regex:$3 --launch-count 1 -f \
    -o out/prof_$4_$1_$2 $BENCH --seq-lens $2 --head-sizes $1 --kernels flash-hopper --warmup 0 \
    --repeats 1 --burst 1 --csv out/ncu_bench.csv > $S/ncu_$4_$1_$2.log 2>&1
  echo "ncu $4 $1 $2 rc $? $(( $(date +%s) - t0 )) s"
  ncu -i out/prof_$4_$1_$2.ncu-rep --page details > $S/details_$4_$1_$2.txt 2>&1
  ncu -i out/prof_$4_$1_$2.ncu-rep --page source --print-source sass --csv 2>/dev/null | gzip > $S/source_$4_$1_$2.csv.gz
  grep -E "Duration|DRAM Throughput|L2 Hit Rate|L2 Cache Throughput|Compute \(SM\)|Issue Slots Busy" $S/details_$4_$1_$2.txt | head -8
  python3 tools/ncu_stalls.py $S/source_$4_$1_$2.csv.gz 2>&1 | head -16
done
