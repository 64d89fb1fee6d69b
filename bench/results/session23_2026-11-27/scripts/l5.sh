#!/bin/bash
# l5: head size 128's backward, dK and dV through shared memory above 4K? The default
# (kHopperStagesGradsMaxT = 4096) rests on session eighteen's loop (mixed at 8K, level at 16K);
# the backward changed since, as the forward's persistent range turned out to have (l1).
# GPT2_HOPPER_BACKWARD_STAGES_GRADS_MAX_T unset against 32768, 8K-32K, racing and
# deterministic, three alternating passes. Predicted: level (within 1%).
set -u
source tools/device_call.sh
call_begin
call_build gpt2-attention-bench || exit 1
AB=out/build/gpt2-attention-bench
run_bench() {  # side pass [env...]
  local side=$1 pass=$2
  shift 2
  env "$@" timeout 100 $AB --seq-lens 8192,16384,32768 --head-sizes 128 \
    --kernels flash-hopper,flash-hopper-det --measure bwd --csv $S/${side}_$pass.csv > $S/${side}_$pass.log 2>&1
  echo "bench $side pass $pass rc $?"
}
for pass in 1 2 3; do
  if [ $((pass % 2)) -eq 1 ]; then
    run_bench base $pass; run_bench new $pass GPT2_HOPPER_BACKWARD_STAGES_GRADS_MAX_T=32768
  else
    run_bench new $pass GPT2_HOPPER_BACKWARD_STAGES_GRADS_MAX_T=32768; run_bench base $pass
  fi
done
python3 tools/attention_ab_summary.py --base $S/base_*.csv --new $S/new_*.csv \
  --markdown $S/summary.md | grep -E "^\|"
