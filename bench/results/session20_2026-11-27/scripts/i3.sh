#!/bin/bash
# Session twenty, call i3: ours against cuDNN's kernels under ncu at the GPU's own clocks
# (--clock-control none): time, SM clock and the counts that cost energy (instructions,
# shared-memory wavefronts, L2 sectors by op, DRAM bytes), head size 128 at 8K and 16K, head
# size 64 at 16K, forward and backward.
set -u
S=$OUT/s; mkdir -p $S
trap 'tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $S/gpu.txt
t0=$(date +%s)
cmake -S . -B out/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > $S/cfg.log 2>&1
cmake --build out/build -j 16 --target gpt2-attention-bench > $S/build.log 2>&1 || { grep -E "error" $S/build.log | head; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
AB=out/build/gpt2-attention-bench
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,lts__t_sectors_op_red.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_atom.sum,dram__bytes.sum,sm__inst_executed_pipe_xu.sum
for cfg in "128 16384" "128 8192" "64 16384"; do
  set -- $cfg
  t0=$(date +%s)
  timeout 120 ncu --clock-control none -k regex:"hopper_(forward|backward)_kernel" -c 3 --metrics $M \
    $AB --seq-lens $2 --head-sizes $1 --kernels flash-hopper --warmup 0 --repeats 1 --burst 1 --sets 1 \
    > $S/ncu_ours_$1_$2.txt 2>&1; echo "ncu ours $1 $2 rc $? $(( $(date +%s) - t0 )) s"
  timeout 120 ncu --clock-control none --profile-from-start off -k regex:"cudnn|sm90|flash|fmha" --metrics $M \
    python3 bench/pytorch_attention_once.py $2 $1 cudnn > $S/ncu_cudnn_$1_$2.txt 2>&1; echo "ncu cudnn $1 $2 rc $?"
done
python3 - $S <<'PY'
import sys, re, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/ncu_*.txt")):
    print("==", os.path.basename(f))
    kernel = None
    for line in open(f):
        m = re.match(r"^  (\S+?)(\(|<|\s)", line)
        if m and "__" not in line and not line.startswith("  Section"): kernel = m.group(1)[:50]; print(" ", line.strip()[:110])
        m = re.match(r"^\s+(\S+__\S+)\s+(\S+)\s+([\d,.]+)", line)
        if m: print("    %-70s %s %s" % (m.group(1), m.group(2), m.group(3)))
PY
