#!/bin/bash
# Session twenty, call i5: attention_check beside SDPA in two passes, PyTorch timed two ways:
# summed kernel time (the standard so far) and CUDA-graph replays of each burst (back to back,
# as ours); nvidia-smi clocks and power per program.
set -u
S=$OUT/s; mkdir -p $S
O=out/attention-check
trap 'cp $O/*.csv $O/*.md $O/*.txt $O/*.log $S/ 2>/dev/null; tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
t0=$(date +%s)
PASSES=2 BUILD_DIR=out/build SKIP_TESTS=1 KERNELS=flash-hopper,flash-hopper-det TORCH_LAYOUTS=separate \
  TORCH_TIMINGS=kernels,graph SEQ_LENS=512,1024,2048,4096,8192,16384 timeout 560 tools/attention_check.sh > $S/check.log 2>&1
echo "check rc $? $(( $(date +%s) - t0 )) s"
grep -E "failed|Error|error" $S/check.log | head -5
sed -n '/the medians of/,$p' $S/check.log | head -80
