#!/bin/bash
# Prepared in session twenty-two, not run (no device time left): does the persistent forward,
# now with early scores at head size 64 (+1-3% at 512-4K), pay above its 4K default?
# Session seventeen measured persistent against a block an item (before early scores):
# head size 64 -0.5% at 8K and -2% at 16K; head size 128 -0.6% and -2.5%. Predicted now:
# head size 64 +1-2% at 8K, level at 16K; head size 128 as before (its two-consumer
# persistent kernel has no early scores). One build, GPT2_HOPPER_FORWARD_PERSISTENT_MAX_T
# unset (4096) against 32768, three passes in alternating order, summarized by
# tools/attention_ab_summary.py (base: the default); then d12 at 16K both ways, twice each.
# About 350-400 s. No tree change needed: run from main.
set -u
source tools/device_call.sh
call_begin
call_build gpt2-attention-bench gpt2-sweep || exit 1
AB=out/build/gpt2-attention-bench
run_bench() {  # side pass [env...]
  local side=$1 pass=$2
  shift 2
  env "$@" timeout 150 $AB --seq-lens 4096,8192,16384,32768 --head-sizes 64,128 \
    --kernels flash-hopper --measure fwd --csv $S/${side}_$pass.csv > $S/${side}_$pass.log 2>&1
  echo "bench $side pass $pass rc $?"
}
for pass in 1 2 3; do
  if [ $((pass % 2)) -eq 1 ]; then
    run_bench base $pass; run_bench new $pass GPT2_HOPPER_FORWARD_PERSISTENT_MAX_T=32768
  else
    run_bench new $pass GPT2_HOPPER_FORWARD_PERSISTENT_MAX_T=32768; run_bench base $pass
  fi
done
python3 tools/attention_ab_summary.py --base $S/base_*.csv --new $S/new_*.csv \
  --markdown $S/summary.md | grep -E "^\|"
BIN=$(dirname "$(find out/build -name gpt2-sweep -type f | head -1)")
for r in 1 2; do
  for max_t in $([ $r = 1 ] && echo "4096 32768" || echo "32768 4096"); do
    GPT2_HOPPER_FORWARD_PERSISTENT_MAX_T=$max_t timeout 110 \
      $BIN/gpt2-sweep --seq-lens 16384 --attn flash --out out/sw_${max_t}_$r > $S/sweep_${max_t}_$r.log 2>&1
    echo "d12 16K persistent_max_t=$max_t run $r: $(grep -E '^\| 16384' out/sw_${max_t}_$r/sweep.md | head -1)"
  done
done
