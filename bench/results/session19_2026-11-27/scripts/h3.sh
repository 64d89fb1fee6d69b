#!/bin/bash
# Session nineteen, call h3: the forward's conditional rescale of O (forward-only A/B):
# base = main (before/, d98d8fe), new = this tree (rescale skipped where no row maximum of the
# warp grew: the same bits if exp2(0) = 1), rs8 = new with FlashAttention-4's threshold
# (rescale only where a maximum grew by more than 2^8). Then the attention tests on rs8, and
# where the f+b column's spread comes from (clocks logged, f+b alone against fwd,bwd alone).
set -u
S=$OUT/s; mkdir -p $S
trap 'cp out/attention-ab/*.csv out/attention-ab/*.md $S/ 2>/dev/null; tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $S/gpu.txt
t0=$(date +%s)
VARIANTS="rs8=sx/rs8.diff" PASSES=2 RUN_TIMEOUT=60 timeout 330 tools/attention_ab.sh before \
  --seq-lens 512,1024,2048,4096,8192,16384 --head-sizes 64,128 --kernels flash-hopper \
  --repeats 8 --measure fwd > $S/ab.log 2>&1
echo "ab rc $? $(( $(date +%s) - t0 )) s"; grep -E "attention_ab" $S/ab.log | head -20
cat out/attention-ab/summary.md out/attention-ab/summary_rs8.md 2>/dev/null | grep -v "^$"
python3 - <<'PY'
import csv
def digests(path):
    return {(r["head_size"], r["seq_len"]): r["out_digest"] for r in csv.DictReader(open(path))}
for side in ["new", "rs8"]:
    for p in (1, 2):
        base, other = digests(f"out/attention-ab/base_{p}.csv"), digests(f"out/attention-ab/{side}_{p}.csv")
        same = sorted(k for k in base if other.get(k) == base[k])
        print(f"{side} pass {p}: out digests equal to base at {len(same)} of {len(base)} points: {same}")
PY
BENCH=out/attention-ab/build-base/gpt2-attention-bench
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 25 > $S/clocks.csv 2>&1 &
SMI=$!
t0=$(date +%s)
for pass in 1 2; do
  for m in fwd,bwd fwdbwd fwd,bwd,fwdbwd; do
    echo "$(date +%s.%N) start $m $pass" >> $S/clock_marks.txt
    timeout 40 $BENCH --seq-lens 4096,8192 --head-sizes 128 --kernels flash-hopper,flash-hopper-det \
      --repeats 8 --measure $m --csv $S/fb_${m//,/_}_$pass.csv > $S/fb_${m//,/_}_$pass.log 2>&1 || echo "fb $m rc $?"
    echo "$(date +%s.%N) end $m $pass" >> $S/clock_marks.txt
  done
done
kill $SMI; echo "fb runs: $(( $(date +%s) - t0 )) s"
python3 - <<'PY'
import csv, glob
for f in sorted(glob.glob("/dev/null")): pass
import os
S = os.environ["OUT"] + "/s"
for f in sorted(glob.glob(S + "/fb_*.csv")):
    for r in csv.DictReader(open(f)):
        print(os.path.basename(f), r["seq_len"], r["kernel"], "fwd", r["fwd_ms"], "bwd", r["bwd_ms"], "fb", r["fwdbwd_ms"])
PY
t0=$(date +%s)
cmake --build out/attention-ab/build-rs8 -j 16 --target test_gpu > $S/build_tests.log 2>&1 || { grep error $S/build_tests.log | head; exit 1; }
echo "test build: $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout 120 out/attention-ab/build-rs8/tests/test_gpu --gtest_filter='*Attention*:*Hopper*' > $S/tests_rs8.log 2>&1
echo "rs8 tests rc $? $(( $(date +%s) - t0 )) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $S/tests_rs8.log | head -20
