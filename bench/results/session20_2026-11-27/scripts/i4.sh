#!/bin/bash
# Session twenty, call i4: cold against sustained backward, ours and cuDNN's, head size 128 at
# 16K and 8K and head size 64 at 16K; nvidia-smi every 20 ms (clock, power, temperature).
set -u
S=$OUT/s; mkdir -p $S
trap 'kill $SMI 2>/dev/null; tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $S/gpu.txt
cmake -S . -B out/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > $S/cfg.log 2>&1
cmake --build out/build -j 16 --target gpt2-attention-bench > $S/build.log 2>&1 || { grep -E "error" $S/build.log | head; exit 1; }
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 20 > $S/smi.csv &
SMI=$!
AB=out/build/gpt2-attention-bench
mark() { echo "$(date +%H:%M:%S.%N) $*" >> $S/marks.txt; }
for cfg in "128 16384" "128 8192" "64 16384"; do
  set -- $cfg
  for W in cold 20 1000; do
    sleep 3
    case $W in cold) o="--warmup 1 --repeats 1 --burst 1";; *) o="--warmup $W --repeats 10 --burst 4";; esac
    mark "ours $1 $2 $W start"
    $AB --seq-lens $2 --head-sizes $1 --kernels flash-hopper --measure bwd $o --csv $S/ours_$1_$2_$W.csv > $S/ours_$1_$2_$W.log 2>&1
    mark "ours $1 $2 $W end"
    echo "ours HS $1 T $2 $W: $(grep -E "^ +$1 " $S/ours_$1_$2_$W.log | awk -F'|' '{print $2, $3, $5}')"
  done
  mark "cudnn $1 $2 start"
  python3 sx/sdpa_heat.py $2 $1 20 1000 2>&1 | tee $S/cudnn_$1_$2.log
  mark "cudnn $1 $2 end"
done
