#!/bin/bash
# Prepared in session twenty, not run: the racing backward's head groups against its DRAM
# traffic. At head size 128, 16K, three items a block make groups of 4 heads, whose dQ
# accumulator (32 MB) and Q and dO (32 MB) exceed the 50 MB L2: ncu read 827 MB of DRAM a
# backward against cuDNN's 486 (session twenty, i3). GPT2_HOPPER_BACKWARD_RACING_GROUP_ITEMS 1,
# 2, 3 (2, 3, 4 heads at 16K), backward only, two interleaved passes, both head sizes at 8K and
# 16K; then ncu's DRAM bytes, L2 hit rate and SM clock of each at head size 128, 16K. Main, no
# patch.
set -u
S=$OUT/s; mkdir -p $S
trap 'tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $S/gpu.txt
cmake -S . -B out/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > $S/cfg.log 2>&1
cmake --build out/build -j 16 --target gpt2-attention-bench > $S/build.log 2>&1 || { grep error $S/build.log | head; exit 1; }
AB=out/build/gpt2-attention-bench
for pass in 1 2; do
  for g in $([ $pass = 1 ] && echo "1 2 3" || echo "3 2 1"); do
    GPT2_HOPPER_BACKWARD_RACING_GROUP_ITEMS=$g timeout 90 $AB --seq-lens 8192,16384 --head-sizes 64,128 \
      --kernels flash-hopper --measure bwd --repeats 10 --csv $S/g${g}_$pass.csv > $S/g${g}_$pass.log 2>&1
    echo "group items $g, pass $pass:"; grep -E "^ +(64|128) " $S/g${g}_$pass.log | awk -F'|' '{print $1, $3, $5, $7}'
  done
done
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,dram__bytes.sum,lts__t_sector_hit_rate.pct
for g in 1 2 3; do
  GPT2_HOPPER_BACKWARD_RACING_GROUP_ITEMS=$g timeout 60 ncu --clock-control none -k regex:hopper_backward_kernel -c 1 \
    --metrics $M $AB --seq-lens 16384 --head-sizes 128 --kernels flash-hopper --measure bwd --warmup 0 --repeats 1 \
    --burst 1 --sets 1 > $S/ncu_g$g.txt 2>&1; echo "ncu group items $g rc $?"; grep -E "__" $S/ncu_g$g.txt | tail -4
done
