#!/bin/bash
# l8: issue 23's end-to-end lines on the session's tree (ad893c2): d12, B = 1, flash, T = 16K
# and 64K by gpt2-sweep, then PyTorch eager (SDPA) at both and torch.compile at 16K, in the
# same call (bench/pytorch_train.py). Last readings: 271,139 and 102,466 (session nineteen).
set -u
source tools/device_call.sh
call_begin
call_build gpt2-sweep || exit 1
t0=$(date +%s)
timeout 200 out/build/gpt2-sweep --seq-lens 16384,65536 --attn flash --tokens-per-step 1 \
  --out out/sweep > $S/sweep.log 2>&1
echo "sweep rc $? $(( $(date +%s) - t0 )) s"; cat out/sweep/sweep.md 2>/dev/null | head -6
cp out/sweep/sweep.csv out/sweep/sweep.md $S/ 2>/dev/null
t0=$(date +%s)
timeout 280 python3 bench/pytorch_train.py --seq-lens 16384,65536 --tokens-per-step 1 --compile \
  --compile-seq-lens 16384 --csv $S/pytorch_train.csv --sweep-csv out/sweep/sweep.csv \
  --markdown $S/d12_vs_pytorch.md > $S/pytorch.log 2>&1
echo "pytorch rc $? $(( $(date +%s) - t0 )) s"
cat $S/d12_vs_pytorch.md 2>/dev/null
tail -3 $S/pytorch.log
