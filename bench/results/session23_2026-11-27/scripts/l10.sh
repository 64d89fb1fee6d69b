#!/bin/bash
# l10: where the racing backward's spread comes from (head size 128, 8K: 537-581 TFLOP/s between
# passes in l5/l6, 12% in work per clock). Four processes, each timing the same kernel three
# times in a row (each timing allocates its own inputs): spread within a process against spread
# between processes. Predicted: within a process under 1%, between processes the 5-7%.
set -u
source tools/device_call.sh
call_begin
call_build gpt2-attention-bench || exit 1
for p in 1 2 3 4; do
  timeout 60 out/build/gpt2-attention-bench --seq-lens 8192 --head-sizes 128 \
    --kernels flash-hopper,flash-hopper,flash-hopper --measure bwd --csv $S/p$p.csv > $S/p$p.log 2>&1
  echo "process $p rc $?: $(python3 -c "
import csv,sys
print('  '.join('%.1f@%.0f' % (float(r['bwd_tflops']), float(r['bwd_mhz'])) for r in csv.DictReader(open('$S/p$p.csv'))))")"
done
