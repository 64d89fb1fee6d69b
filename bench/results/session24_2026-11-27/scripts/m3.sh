#!/bin/bash
# m3 (the same out/ab build serves c and d): what the sustained load (a second of untimed calls before each timing, m2) favours.
#  a. head size 64's forward shapes: 64-row blocks (default) against 128-row (half the L2 reads
#     a score: the energy lever, level to -11% in the boost transient), 1K-16K, three passes;
#  b. d12 at 16K, 40 steps of which 20 untimed (the sustained step), GPT2_HOPPER_FORWARD_ROWS
#     unset against 128, two passes each way;
#  c. the racing backward's head groups, GPT2_HOPPER_BACKWARD_RACING_GROUP_ITEMS 2 (a third
#     fewer DRAM bytes) against 3, 4K-16K, both head sizes, sustained, two passes;
#  d. head size 64's forward persistent at 8K-16K (GPT2_HOPPER_FORWARD_PERSISTENT_MAX_T=16384),
#     sustained, two passes.
set -u
source tools/device_call.sh
call_begin
call_build gpt2-attention-bench gpt2-sweep || exit 1
t0=$(date +%s)
AB=out/build/gpt2-attention-bench
W="--warmup-ms 1000"
for pass in 1 2 3; do
  k=flash-hopper,flash-hopper/fwd128
  [ $((pass % 2)) -eq 0 ] && k=flash-hopper/fwd128,flash-hopper
  timeout 100 $AB --head-sizes 64 --seq-lens 1024,2048,4096,8192,16384 --measure fwd $W \
    --kernels $k --csv $S/shape_p$pass.csv > $S/shape_p$pass.log 2>&1
  echo "a. shapes pass $pass rc $? at $(( $(date +%s) - t0 )) s"
done
python3 - "$S" <<'PY'
import csv, glob, statistics, sys
rows = [r for f in sorted(glob.glob(sys.argv[1] + "/shape_p*.csv")) for r in csv.DictReader(open(f))]
for T in sorted({int(r["seq_len"]) for r in rows}):
    get = lambda k: [float(r["fwd_tflops"]) for r in rows if int(r["seq_len"]) == T and r["kernel"] == k]
    mhz = lambda k: [float(r["fwd_mhz"]) for r in rows if int(r["seq_len"]) == T and r["kernel"] == k]
    a, b = get("flash-hopper"), get("flash-hopper/fwd128")
    print(f"HS64 T={T}: 64 rows {[round(x) for x in a]} ({statistics.median(mhz('flash-hopper')):.0f} MHz)"
          f"  128 rows {[round(x) for x in b]} ({statistics.median(mhz('flash-hopper/fwd128')):.0f} MHz)"
          f"  128/64 {statistics.median(b) / statistics.median(a):.3f}")
PY
sweep() {  # name pass [env]
  local name=$1 pass=$2; shift 2
  env "$@" timeout 90 out/build/gpt2-sweep --seq-lens 16384 --attn flash --tokens-per-step 1 \
    --steps 40 --warmup-steps 20 --out out/sw_${name}_$pass > $S/sweep_${name}_$pass.log 2>&1
  echo "b. d12 16K $name pass $pass rc $?: $(grep -o '[0-9]* tokens/s' $S/sweep_${name}_$pass.log)"
}
sweep rows64 1; sweep rows128 1 GPT2_HOPPER_FORWARD_ROWS=128
sweep rows128 2 GPT2_HOPPER_FORWARD_ROWS=128; sweep rows64 2
echo "at $(( $(date +%s) - t0 )) s"
BASE_ENV= NEW_ENV=GPT2_HOPPER_BACKWARD_RACING_GROUP_ITEMS=2 OUT_DIR=out/ab RUN_TIMEOUT=100 \
  timeout 200 tools/attention_ab.sh . --seq-lens 4096,8192,16384 --kernels flash-hopper \
  --measure bwd $W > $S/ab_groups.log 2>&1
echo "c. groups rc $? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $S/ab_groups.log | head -12
mkdir -p $S/ab_groups && cp out/ab/*.csv out/ab/*.md $S/ab_groups/ 2>/dev/null; rm -f out/ab/*.csv
NEW_ENV=GPT2_HOPPER_FORWARD_PERSISTENT_MAX_T=16384 OUT_DIR=out/ab RUN_TIMEOUT=60 \
  timeout 150 tools/attention_ab.sh . --head-sizes 64 --seq-lens 8192,16384 --kernels flash-hopper \
  --measure fwd $W > $S/ab_pers.log 2>&1
echo "d. persistent rc $? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $S/ab_pers.log | head -8
mkdir -p $S/ab_pers && cp out/ab/*.csv out/ab/*.md $S/ab_pers/ 2>/dev/null
echo "total $(( $(date +%s) - t0 )) s"
