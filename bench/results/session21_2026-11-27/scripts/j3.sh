#!/bin/bash
# j3: pairs with a relaxed start barrier and a producer tail (no cluster barrier at the exit):
# tests, sanitizers, forward A/B 8K-32K in three passes; racing group items 2 against 3
# (backward, 2K-16K, both head sizes, three passes); d12 16K (pairs 0 + items 3 against
# pairs 1 + items 2, twice).
set -u
S=$OUT/s; mkdir -p $S
trap 'tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $S/gpu.txt
t0=$(date +%s)
cmake -S . -B out/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > $S/cfg.log 2>&1
cmake --build out/build -j 16 --target test_gpu gpt2-attention-bench gpt2-sweep gpt2-train > $S/build.log 2>&1 || { grep -E "error" $S/build.log | head; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
T=out/build/tests/test_gpu
timeout 120 $T --gtest_filter='*Pairs*:*ForwardBlockShapes*' > $S/pairs_test.log 2>&1; echo "pairs tests rc $?"; grep -E "PASSED|FAILED" $S/pairs_test.log
for tool in memcheck synccheck racecheck; do
  t0=$(date +%s)
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 1 $T --gtest_filter='*ForwardPairs*' > $S/$tool.log 2>&1
  echo "$tool rc $? $(( $(date +%s) - t0 )) s"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $S/$tool.log | head -2
done
AB=out/build/gpt2-attention-bench
for pass in 1 2 3; do
  for pairs in $([ $pass = 2 ] && echo "1 0" || echo "0 1"); do
    GPT2_HOPPER_FORWARD_PAIRS=$pairs timeout 90 $AB --seq-lens 8192,16384,32768 --head-sizes 64 \
      --kernels flash-hopper --measure fwd --repeats 10 --csv $S/ab_p${pairs}_$pass.csv > $S/ab_p${pairs}_$pass.log 2>&1
  done
done
for pass in 1 2 3; do
  for g in $([ $pass = 2 ] && echo "2 3" || echo "3 2"); do
    GPT2_HOPPER_BACKWARD_RACING_GROUP_ITEMS=$g timeout 120 $AB --seq-lens 2048,4096,8192,16384 --head-sizes 64,128 \
      --kernels flash-hopper --measure bwd --repeats 10 --csv $S/g${g}_$pass.csv > $S/g${g}_$pass.log 2>&1
  done
done
python3 - $S <<'PY'
import csv, sys, statistics, glob, re
S = sys.argv[1]
def table(prefix, keys, col, mhz):
    rows = {}
    for f in glob.glob(f"{S}/{prefix}*_*.csv"):
        k = re.search(prefix + r"(\d)_", f).group(1)
        for r in csv.DictReader(open(f)):
            rows.setdefault((int(r["head_size"]), int(r["seq_len"])), {}).setdefault(k, []).append(r)
    for (hs, t), d in sorted(rows.items()):
        a, b = (d[k] for k in keys)
        med = lambda rs: statistics.median(float(r[col]) for r in rs)
        vals = lambda rs: "/".join(f"{float(r[col]):.0f}" for r in rs)
        clk = lambda rs: "/".join(r[mhz][:4] for r in rs)
        same = {r.get("out_digest") for r in a} == {r.get("out_digest") for r in b}
        print(f"{prefix} HS {hs} T {t}: {keys[0]} {vals(a)} ({clk(a)} MHz) {keys[1]} {vals(b)} "
              f"({clk(b)} MHz) ratio {med(b)/med(a):.3f} same out bits {same}")
table("ab_p", ["0", "1"], "fwd_tflops", "fwd_mhz")
table("g", ["3", "2"], "bwd_tflops", "bwd_mhz")
PY
BIN=$(dirname $(find out/build -name gpt2-sweep -type f | head -1))
for r in 1 2; do
  for cfg in $([ $r = 1 ] && echo "0_3 1_2" || echo "1_2 0_3"); do
    GPT2_HOPPER_FORWARD_PAIRS=${cfg%_*} GPT2_HOPPER_BACKWARD_RACING_GROUP_ITEMS=${cfg#*_} timeout 100 \
      $BIN/gpt2-sweep --seq-lens 16384 --attn flash --out out/sw_${cfg}_$r > $S/sweep_${cfg}_$r.log 2>&1
    echo "d12 16K pairs_items=$cfg run $r: $(grep -E '^\| 16384' out/sw_${cfg}_$r/sweep.md | head -1)"
  done
done
cuobjdump -sass $AB 2>/dev/null | python3 -c "
import re,sys
for f in re.split(r'\n\s+Function : ', sys.stdin.read())[1:]:
    if 'ILi64ELi1ELb1ELb0ELb1E' in f.split('\n')[0]: print('pairs kernel MEMBAR:', len(re.findall(r'MEMBAR', f)), 'UCGABAR:', len(re.findall('UCGABAR', f)))
"
