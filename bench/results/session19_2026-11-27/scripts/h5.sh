#!/bin/bash
# Session nineteen, call h5 (d98d8fe): the README's sweep, gpt2-sweep (d12, naive and flash,
# T = 1K-64K) then PyTorch eager and torch.compile on the same points in the same call.
set -u
S=$OUT/s; mkdir -p $S
trap 'mkdir -p $S/sweep; cp out/sweep/sweep.* $S/sweep/ 2>/dev/null; tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $S/gpu.txt
t0=$(date +%s)
cmake -S . -B out/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > $S/cfg.log 2>&1
cmake --build out/build -j 16 --target gpt2-train gpt2-sweep > $S/build.log 2>&1 || { grep -E "error" $S/build.log | head; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
BIN=$(dirname $(find out/build -name gpt2-sweep -type f | head -1))
t0=$(date +%s)
timeout 260 $BIN/gpt2-sweep --out out/sweep > $S/sweep.log 2>&1
echo "sweep rc $? $(( $(date +%s) - t0 )) s"; cat out/sweep/sweep.md 2>/dev/null | head -14
t0=$(date +%s)
timeout 250 python3 bench/pytorch_train.py --compile --compile-seq-lens 1024,16384 \
  --csv $S/pytorch_train.csv --sweep-csv out/sweep/sweep.csv --markdown $S/sweep_vs_pytorch.md \
  > $S/pytorch.log 2>&1
echo "pytorch rc $? $(( $(date +%s) - t0 )) s"
cat $S/sweep_vs_pytorch.md 2>/dev/null
tail -3 $S/pytorch.log
