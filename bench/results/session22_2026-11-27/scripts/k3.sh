#!/bin/bash
# k3: attention_check on main + early scores (final form: the non-early kernels' PTX is main's)
# in two passes with the alternating order, 512-16K, PyTorch timed both ways; the 100 attention
# tests first.
set -u
S=$OUT/s; mkdir -p $S
O=out/attention-check
trap 'cp $O/*.csv $O/*.md $O/*.txt $O/*.log $S/ 2>/dev/null; tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
t0=$(date +%s)
PASSES=2 BUILD_DIR=out/build TEST_FILTER='*Attention*:*Hopper*' KERNELS=flash-hopper,flash-hopper-det \
  TORCH_LAYOUTS=separate TORCH_TIMINGS=kernels,graph SEQ_LENS=512,1024,2048,4096,8192,16384 \
  timeout 560 tools/attention_check.sh > $S/check.log 2>&1
echo "check rc $? $(( $(date +%s) - t0 )) s"
grep -E "failed|PASSED|FAILED|tests passed|build" $S/check.log | head -8
sed -n '/the medians of/,$p' $S/check.log | grep -vE "^$" | head -90
