#!/bin/bash
# Prepared in session twenty, not run (the device time was spent): the head size 64 forward's
# pairs (2-block clusters sharing each K/V copy by TMA multicast). Apply the patch first:
#   git apply bench/results/session20_2026-11-27/prepared/pairs.diff
# Then: the attention tests (the new ForwardPairsShareCopiesAndGiveIdenticalBits among them),
# memcheck, racecheck and synccheck of the pairs test, a forward-only A/B on one build
# (GPT2_HOPPER_FORWARD_PAIRS=0/1, two interleaved passes, 8K-32K), d12 at 16K both ways twice,
# and ncu's L2 reads and SM clock of the 16K forward both ways.
set -u
S=$OUT/s; mkdir -p $S
trap 'tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $S/gpu.txt
t0=$(date +%s)
cmake -S . -B out/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > $S/cfg.log 2>&1
cmake --build out/build -j 16 --target test_gpu gpt2-attention-bench gpt2-train gpt2-sweep > $S/build.log 2>&1 || { grep -E "error" $S/build.log | head; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"; grep -E "warning|C75" $S/build.log | head -5
T=out/build/tests/test_gpu
t0=$(date +%s)
timeout 120 $T --gtest_filter='*Pairs*' > $S/pairs_test.log 2>&1; echo "pairs test rc $?"
grep -E "OK|FAILED|Failure" $S/pairs_test.log | head
timeout 300 $T --gtest_filter='*Attention*:*Hopper*' > $S/tests.log 2>&1; echo "tests rc $? $(( $(date +%s) - t0 )) s"
grep -E "PASSED|FAILED" $S/tests.log | head
for tool in memcheck synccheck racecheck; do
  t0=$(date +%s)
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 1 $T --gtest_filter='*ForwardPairs*' > $S/$tool.log 2>&1
  echo "$tool rc $? $(( $(date +%s) - t0 )) s"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $S/$tool.log | head -2
done
AB=out/build/gpt2-attention-bench
for pass in 1 2; do
  for pairs in $([ $pass = 1 ] && echo "0 1" || echo "1 0"); do
    GPT2_HOPPER_FORWARD_PAIRS=$pairs timeout 90 $AB --seq-lens 8192,16384,32768 --head-sizes 64 \
      --kernels flash-hopper --measure fwd --repeats 10 --csv $S/ab_p${pairs}_$pass.csv > $S/ab_p${pairs}_$pass.log 2>&1
    echo "pairs=$pairs pass $pass:"; grep -E "^ +64 " $S/ab_p${pairs}_$pass.log | awk -F'|' '{print $1, $3, $5}'
  done
done
python3 - $S <<'PY'
import csv, sys, statistics
S = sys.argv[1]
rows = {}
for pairs in "01":
    for p in "12":
        for r in csv.DictReader(open(f"{S}/ab_p{pairs}_{p}.csv")):
            rows.setdefault((r["seq_len"], pairs), []).append(r)
for T in sorted({k[0] for k in rows}, key=int):
    off, on = rows[(T, "0")], rows[(T, "1")]
    f = lambda rs: statistics.median(float(r["fwd_tflops"]) for r in rs)
    same = {r["out_digest"] for r in off} == {r["out_digest"] for r in on}
    print(f"T {T}: fwd off {f(off):.1f} on {f(on):.1f} ratio {f(on)/f(off):.3f}; clocks off "
          f"{[r['fwd_mhz'] for r in off]} on {[r['fwd_mhz'] for r in on]}; same bits {same}")
PY
BIN=$(dirname $(find out/build -name gpt2-sweep -type f | head -1))
for r in 1 2; do
  for pairs in $([ $r = 1 ] && echo "0 1" || echo "1 0"); do
    GPT2_HOPPER_FORWARD_PAIRS=$pairs timeout 100 $BIN/gpt2-sweep --seq-lens 16384 --attn flash --out out/sw_${pairs}_$r > $S/sweep_${pairs}_$r.log 2>&1
    echo "d12 16K pairs=$pairs run $r: $(grep -E '^\| 16384' out/sw_${pairs}_$r/sweep.md | head -1)"
  done
done
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,lts__t_sectors_op_read.sum,dram__bytes.sum
for pairs in 0 1; do
  GPT2_HOPPER_FORWARD_PAIRS=$pairs timeout 60 ncu --clock-control none -k regex:hopper_forward_kernel -c 2 --metrics $M \
    $AB --seq-lens 16384 --head-sizes 64 --kernels flash-hopper --measure fwd --warmup 0 --repeats 1 --burst 1 --sets 1 \
    > $S/ncu_p$pairs.txt 2>&1; echo "ncu pairs=$pairs rc $?"; grep -E "__" $S/ncu_p$pairs.txt | tail -4
done
