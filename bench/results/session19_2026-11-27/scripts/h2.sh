#!/bin/bash
# Session nineteen, call h2: A/B of the two prepared patches in one run. base = main (before/),
# new = main + fwd_uniform (forward only), lds = new + bwd_lds64 (backward only). So the
# backward of base and new is the same code (the noise of the backward), and so is the forward
# of new and lds (the noise of the forward). Then the deterministic backward's knobs at head
# size 128, 4K, and ncu of the head size 128 backward at 8K (main).
set -u
S=$OUT/s; mkdir -p $S
trap 'cp out/attention-ab/*.csv out/attention-ab/*.md $S/ 2>/dev/null; tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $S/gpu.txt
P=bench/results/session18_2026-11-27/prepared
patch -p1 < $P/fwd_uniform.diff > /dev/null || { echo "fu patch failed"; exit 1; }
t0=$(date +%s)
VARIANTS="lds=$P/bwd_lds64.diff" PASSES=2 RUN_TIMEOUT=120 timeout 420 tools/attention_ab.sh before \
  --seq-lens 512,1024,2048,4096,8192,16384 --head-sizes 64,128 --kernels flash-hopper --repeats 8 \
  > $S/ab.log 2>&1
echo "ab rc $? $(( $(date +%s) - t0 )) s"; grep -E "^====|attention_ab" $S/ab.log | head -20
cat out/attention-ab/summary.md out/attention-ab/summary_lds.md 2>/dev/null
BENCH=out/attention-ab/build-base/gpt2-attention-bench
t0=$(date +%s)
for pass in 1 2; do
  for cfg in g2w8 g3w8 g4w8 g2w4 g2w16 g3w4; do
    g=${cfg#g}; g=${g%w*}; w=${cfg#*w}
    GPT2_HOPPER_BACKWARD_DETERMINISTIC_GROUP_ITEMS=$g GPT2_HOPPER_BACKWARD_WALK_DOWN_BLOCKS=$w \
      timeout 30 $BENCH --seq-lens 4096 --head-sizes 128 --kernels flash-hopper,flash-hopper-det \
      --repeats 8 --csv $S/bench_${cfg}_$pass.csv > $S/bench_${cfg}_$pass.log 2>&1 || echo "knob $cfg rc $?"
  done
done
echo "knobs: $(( $(date +%s) - t0 )) s"
python3 sx/ab.py $S g2w8 g3w8 g4w8 g2w4 g2w16 g3w4
t0=$(date +%s)
timeout 90 ncu --set full --import-source no --kernel-name regex:hopper_backward_kernel --launch-count 1 \
  -f -o out/prof_bwd $BENCH --seq-lens 8192 --head-sizes 128 --kernels flash-hopper --warmup 0 \
  --repeats 1 --burst 1 --csv out/ncu_bench.csv > $S/ncu.log 2>&1; echo "ncu rc $? $(( $(date +%s) - t0 )) s"
ncu -i out/prof_bwd.ncu-rep --page details > $S/details_bwd.txt 2>&1
ncu -i out/prof_bwd.ncu-rep --page source --print-source sass --csv 2>/dev/null | gzip > $S/source_bwd.csv.gz
python3 tools/ncu_stalls.py $S/source_bwd.csv.gz --per 1 2>&1 | head -30
