#!/bin/bash
# l2: head size 128's forward persistent up to 16K (hopper_forward_persistent_max_t), main +
# the dispatch change (kernels' machine code identical). attention_check in two passes with the
# alternating order, 512-16K, PyTorch timed both ways, the attention tests first; then the
# persistent range A/B at head size 128, 8K-32K: GPT2_HOPPER_FORWARD_PERSISTENT_MAX_T=4096 (the
# old default) against unset (the new), three alternating passes.
set -u
S=$OUT/s; mkdir -p $S
O=out/attention-check
trap 'cp $O/*.csv $O/*.md $O/*.txt $O/*.log $S/ 2>/dev/null; tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
t0=$(date +%s)
PASSES=2 BUILD_DIR=out/build TEST_FILTER='*Attention*:*Hopper*' KERNELS=flash-hopper,flash-hopper-det \
  TORCH_LAYOUTS=separate TORCH_TIMINGS=kernels,graph SEQ_LENS=512,1024,2048,4096,8192,16384 \
  timeout 470 tools/attention_check.sh > $S/check.log 2>&1
echo "check rc $? $(( $(date +%s) - t0 )) s"
grep -E "failed|PASSED|FAILED|tests passed|build" $S/check.log | head -8
sed -n '/the medians of/,$p' $S/check.log | grep -vE "^$" | head -90
AB=out/build/gpt2-attention-bench
run_bench() {  # side pass [env...]
  local side=$1 pass=$2
  shift 2
  env "$@" timeout 40 $AB --seq-lens 8192,16384,32768 --head-sizes 128 \
    --kernels flash-hopper --measure fwd --csv $S/ab_${side}_$pass.csv > $S/ab_${side}_$pass.log 2>&1
  echo "bench $side pass $pass rc $?"
}
for pass in 1 2 3; do
  if [ $((pass % 2)) -eq 1 ]; then
    run_bench base $pass GPT2_HOPPER_FORWARD_PERSISTENT_MAX_T=4096; run_bench new $pass
  else
    run_bench new $pass; run_bench base $pass GPT2_HOPPER_FORWARD_PERSISTENT_MAX_T=4096
  fi
done
python3 tools/attention_ab_summary.py --base $S/ab_base_*.csv --new $S/ab_new_*.csv \
  --markdown $S/ab_summary.md | grep -E "^\|"
echo "total $(( $(date +%s) - t0 )) s"
