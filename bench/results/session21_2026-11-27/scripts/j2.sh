#!/bin/bash
# j2: pairs with a CTA-scope remote release (j1's cluster-scope one ran 0.55x); SASS fences;
# ncu warp states of the pairs kernel; then group_items_check (backward, unchanged by pairs).
set -u
S=$OUT/s; mkdir -p $S
trap 'tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $S/gpu.txt
t0=$(date +%s)
cmake -S . -B out/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > $S/cfg.log 2>&1
cmake --build out/build -j 16 --target test_gpu gpt2-attention-bench > $S/build.log 2>&1 || { grep -E "error" $S/build.log | head; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
T=out/build/tests/test_gpu
timeout 120 $T --gtest_filter='*Pairs*' > $S/pairs_test.log 2>&1; echo "pairs test rc $?"
AB=out/build/gpt2-attention-bench
for pass in 1 2; do
  for pairs in $([ $pass = 1 ] && echo "0 1" || echo "1 0"); do
    GPT2_HOPPER_FORWARD_PAIRS=$pairs timeout 90 $AB --seq-lens 8192,16384,32768 --head-sizes 64 \
      --kernels flash-hopper --measure fwd --repeats 10 --csv $S/ab_p${pairs}_$pass.csv > $S/ab_p${pairs}_$pass.log 2>&1
    echo "pairs=$pairs pass $pass:"; grep -E "^ +64 " $S/ab_p${pairs}_$pass.log | awk -F'|' '{print $1, $3, $5}'
  done
done
cuobjdump -sass $AB > $S/bench.sass 2>&1; echo "cuobjdump rc $?"
python3 - $S/bench.sass <<'PY'
import re, sys
txt = open(sys.argv[1]).read()
for f in re.split(r'\n\s+Function : ', txt)[1:]:
    name = f.split('\n')[0]
    if 'hopper_forward_kernel' not in name: continue
    t = re.search(r'HopperForwardTraits\w*', name)
    counts = {k: len(re.findall(r'\b' + k + r'\b', f)) for k in ['MEMBAR', 'FENCE', 'ERRBAR', 'CCTL']}
    print(name[:20], t.group(0) if t else '', counts)
    for line in f.split('\n'):
        if 'MEMBAR' in line or ('SYNCS' in line and 'ARRIVE' in line and 'RED' in line): print('   ', line.strip()[:110])
PY
timeout 90 ncu --clock-control none -k regex:hopper_forward_kernel -c 1 --section WarpStateStats --section Occupancy \
  --section LaunchStats --section SchedulerStats $AB --seq-lens 16384 --head-sizes 64 --kernels flash-hopper --measure fwd \
  --warmup 0 --repeats 1 --burst 1 --sets 1 > $S/ncu_pairs_states.txt 2>&1; echo "ncu states rc $?"
grep -E "Stall|Cluster|Active|Occupancy|Duration|Eligible|Issued" $S/ncu_pairs_states.txt | head -40
P=bench/results/session20_2026-11-27/prepared
mkdir -p $OUT/gi; OUT=$OUT/gi bash $P/group_items_check.sh 2>&1 | sed 's/^/gi: /'
