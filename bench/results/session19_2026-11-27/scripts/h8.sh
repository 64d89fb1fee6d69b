#!/bin/bash
# Session nineteen, call h8 (main): is the head size 64 forward bound by L2 at full clocks?
# ncu at the GPU's own clocks (--clock-control none) and at ncu's base clocks, /fwd64 (the
# default, 64-row blocks) and /fwd128 (128 rows: half the K/V reads from L2), head size 64, 16K;
# the head size 128 forward at 8K and backward at 16K for comparison.
set -u
S=$OUT/s; mkdir -p $S
trap 'tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $S/gpu.txt
t0=$(date +%s)
cmake -S . -B out/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > $S/cfg.log 2>&1
cmake --build out/build -j 16 --target gpt2-attention-bench > $S/build.log 2>&1 || { grep -E "error" $S/build.log | head; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
BENCH=out/build/gpt2-attention-bench
M=lts__cycles_elapsed.avg.per_second,sm__cycles_elapsed.avg.per_second,lts__t_bytes.sum.per_second,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
for clock in none base; do
  for cfg in "64 16384 forward flash-hopper/fwd64" "64 16384 forward flash-hopper/fwd128" "128 8192 forward flash-hopper" "128 16384 backward flash-hopper"; do
    set -- $cfg
    name=${3}_$1_$2_${4#flash-hopper}_$clock; name=${name//\//}
    timeout 60 ncu --clock-control $clock --metrics $M --kernel-name regex:hopper_$3_kernel \
      --launch-skip 2 --launch-count 1 $BENCH --seq-lens $2 --head-sizes $1 --kernels $4 \
      --warmup 2 --repeats 1 --burst 1 --csv out/ncu_bench.csv > $S/$name.txt 2>&1
    echo "== $name rc $?"
    grep -E "lts__|sm__|gpu__" $S/$name.txt | sed 's/  */ /g'
  done
done
