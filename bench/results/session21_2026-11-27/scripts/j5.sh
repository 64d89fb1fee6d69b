#!/bin/bash
# j5: attention_check on main in two passes, 512-16K, PyTorch timed both ways in the same call
# (kernels: summed kernel time; graph: CUDA-graph replays, back to back as ours).
set -u
S=$OUT/s; mkdir -p $S
O=out/attention-check
trap 'cp $O/*.csv $O/*.md $O/*.txt $O/*.log $S/ 2>/dev/null; tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
t0=$(date +%s)
PASSES=2 BUILD_DIR=out/build SKIP_TESTS=1 KERNELS=flash-hopper,flash-hopper-det TORCH_LAYOUTS=separate \
  TORCH_TIMINGS=kernels,graph SEQ_LENS=512,1024,2048,4096,8192,16384 timeout 520 tools/attention_check.sh > $S/check.log 2>&1
echo "check rc $? $(( $(date +%s) - t0 )) s"
grep -E "failed" $S/check.log | head -3
sed -n '/the medians of/,$p' $S/check.log | grep -vE "^$" | head -80
