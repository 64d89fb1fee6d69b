#!/bin/bash
# j6: where the head size 64 forward's time goes at 1K and 4K (the persistent range, 1.00-1.04x
# cuDNN): ncu at the GPU's own clocks, ours against cuDNN's kernels: time, clock, active cycles
# against elapsed (idle SMs), tensor-pipe share, MUFU instructions, instructions, warps, launch.
set -u
S=$OUT/s; mkdir -p $S
trap 'tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $S/gpu.txt
t0=$(date +%s)
cmake -S . -B out/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > $S/cfg.log 2>&1
cmake --build out/build -j 16 --target gpt2-attention-bench > $S/build.log 2>&1 || { grep -E "error" $S/build.log | head; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
AB=out/build/gpt2-attention-bench
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_active.avg,sm__cycles_elapsed.avg,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_xu.sum,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size,launch__registers_per_thread,lts__t_sectors_op_read.sum
for T in 1024 4096; do
  timeout 60 ncu --clock-control none -k regex:"hopper_forward_kernel" -c 1 --metrics $M \
    $AB --seq-lens $T --head-sizes 64 --kernels flash-hopper --measure fwd --warmup 0 --repeats 1 --burst 1 --sets 1 \
    > $S/ncu_ours_64_$T.txt 2>&1; echo "ncu ours $T rc $?"
  timeout 60 ncu --clock-control none --profile-from-start off -k regex:"cudnn|sm90|flash|fmha" -c 1 --metrics $M \
    python3 bench/pytorch_attention_once.py $T 64 cudnn > $S/ncu_cudnn_64_$T.txt 2>&1; echo "ncu cudnn $T rc $?"
done
python3 - $S <<'PY'
import sys, re, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/ncu_*.txt")):
    print("==", os.path.basename(f))
    for line in open(f):
        if re.match(r"^  \S", line) and "__" not in line and "Section" not in line and "(" in line: print(" ", line.strip()[:100])
        m = re.match(r"^\s+(\S+__\S+)\s+(\S+)\s+([\d,.]+)", line)
        if m: print("    %-66s %s %s" % (m.group(1), m.group(2), m.group(3)))
PY
