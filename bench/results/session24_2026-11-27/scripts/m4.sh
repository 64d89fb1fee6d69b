#!/bin/bash
# m4: issue 23's end-to-end lines in both regimes, in one call: d12, B = 1, flash, 16K and 64K,
# ours (gpt2-sweep) then PyTorch (bench/pytorch_train.py: eager at both, torch.compile at 16K).
# First as l8 ran (ours 8 steps of which 3 untimed; PyTorch 3 untimed + 5), then sustained
# (ours 40 steps of which 20 untimed; PyTorch 20 untimed + 20): m2 found the kernels' short
# timings ride the boost before the power cap's controller catches up.
set -u
source tools/device_call.sh
call_begin
call_build gpt2-sweep || exit 1
t0=$(date +%s)
run() {  # name ours_steps ours_warmup torch_steps torch_warmup
  timeout 200 out/build/gpt2-sweep --seq-lens 16384,65536 --attn flash --tokens-per-step 1 \
    --steps $2 --warmup-steps $3 --out out/sweep_$1 > $S/sweep_$1.log 2>&1
  echo "$1: sweep rc $? at $(( $(date +%s) - t0 )) s"
  cp out/sweep_$1/sweep.csv $S/sweep_$1.csv 2>/dev/null
  timeout 300 python3 bench/pytorch_train.py --seq-lens 16384,65536 --tokens-per-step 1 \
    --steps $4 --warmup $5 --compile --compile-seq-lens 16384 --csv $S/pytorch_train_$1.csv \
    --sweep-csv out/sweep_$1/sweep.csv --markdown $S/d12_vs_pytorch_$1.md > $S/pytorch_$1.log 2>&1
  echo "$1: pytorch rc $? at $(( $(date +%s) - t0 )) s"
  cat $S/d12_vs_pytorch_$1.md 2>/dev/null | grep -E "^\|"
}
run short 8 3 5 3
run sustained 40 20 20 20
echo "total $(( $(date +%s) - t0 )) s"
