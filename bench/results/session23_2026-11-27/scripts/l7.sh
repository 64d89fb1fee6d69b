#!/bin/bash
# l7: the other forward block shape at each head size, again now that the kernels changed since
# session seventeen measured it (as the persistent range turned out to have): head size 64,
# flash-hopper (64-row blocks, one consumer) against /fwd128 (128 rows, two consumers taking
# turns, O stored by TMA); head size 128, flash-hopper (128 rows) against /fwd64 (64 rows, one
# consumer, early scores up to 4K). Forward only, 512-16K, two passes, the order alternating.
# Predicted: both alternatives slower beyond 1K as before (64: -7 to -10% from 2K), /fwd64 at
# head size 128 level or ahead at 512. Then gpt2-sweep, built as its target alone (it now
# depends on gpt2-train), d12 flash at 16K.
set -u
source tools/device_call.sh
call_begin
call_build gpt2-attention-bench gpt2-sweep || exit 1
ls -la out/build/gpt2-train > /dev/null 2>&1 && echo "gpt2-train built with gpt2-sweep" || echo "gpt2-train missing"
AB=out/build/gpt2-attention-bench
run() {  # name pass hs kernel
  timeout 90 $AB --seq-lens 512,1024,2048,4096,8192,16384 --head-sizes $3 --kernels $4 \
    --measure fwd --csv $S/$1_$2.csv > $S/$1_$2.log 2>&1
  echo "$1 pass $2 rc $?"
}
for pass in 1 2; do
  if [ $pass = 1 ]; then
    run hs64_rows64 1 64 flash-hopper; run hs64_rows128 1 64 flash-hopper/fwd128
    run hs128_rows128 1 128 flash-hopper; run hs128_rows64 1 128 flash-hopper/fwd64
  else
    run hs128_rows64 2 128 flash-hopper/fwd64; run hs128_rows128 2 128 flash-hopper
    run hs64_rows128 2 64 flash-hopper/fwd128; run hs64_rows64 2 64 flash-hopper
  fi
done
python3 - $S <<'PY'
import csv, glob, statistics, sys
S = sys.argv[1]
def med(name):
    runs = {}
    for f in sorted(glob.glob(f"{S}/{name}_*.csv")):
        for r in csv.DictReader(open(f)):
            runs.setdefault(int(r["seq_len"]), []).append(float(r["fwd_tflops"]))
    return runs
for hs, base, alt in ((64, "hs64_rows64", "hs64_rows128"), (128, "hs128_rows128", "hs128_rows64")):
    b, a = med(base), med(alt)
    for t in sorted(b):
        print(f"| {hs} | {t} | {'/'.join('%.1f' % x for x in b[t])} | "
              f"{'/'.join('%.1f' % x for x in a.get(t, []))} | "
              f"{statistics.median(a[t]) / statistics.median(b[t]):.3f} |" if t in a else t)
PY
BIN=out/build
timeout 100 $BIN/gpt2-sweep --seq-lens 16384 --attn flash --out out/sw16k > $S/sweep16k.log 2>&1
echo "sweep rc $?"; grep -E "^\| 16384" out/sw16k/sweep.md | head -2
