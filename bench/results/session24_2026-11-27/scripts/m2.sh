#!/bin/bash
# m2: the timings in the power cap's transient against the sustained load. m1 found the racing
# backward's spread is not placement: a timing taken right after the bench's set-up pause reads
# 3-10% faster than the same one repeated at once on the same buffers. attention_check (ours:
# racing and deterministic; PyTorch SDPA FA2 and cuDNN, graph timing, separate layout) at
# 1K/4K/8K/16K, both head sizes, two alternating passes: first as l2 timed (WARMUP_MS=0, 3 calls),
# then with WARMUP_MS=1000 (a second of untimed calls before every timing, both programs).
set -u
S=$OUT/s; mkdir -p $S
trap 'tar -czf $OUT/s.tgz -C $OUT s; rm -rf $S' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $S/gpu.txt
t0=$(date +%s)
check() {  # name warmup_ms limit_s
  local O=out/ac_$1
  PASSES=2 BUILD_DIR=out/build OUT_DIR=$O SKIP_TESTS=1 WARMUP_MS=$2 \
    KERNELS=flash-hopper,flash-hopper-det TORCH_LAYOUTS=separate TORCH_TIMINGS=graph \
    SEQ_LENS=1024,4096,8192,16384 timeout $3 tools/attention_check.sh > $S/check_$1.log 2>&1
  echo "check $1 (WARMUP_MS=$2) rc $? at $(( $(date +%s) - t0 )) s"
  mkdir -p $S/$1 && cp $O/*.csv $O/*.md $O/*.txt $O/*.log $S/$1/ 2>/dev/null
  sed -n '/the medians of/,$p' $S/check_$1.log | grep -E "^\||^#|MHz|W " | head -60
}
check short 0 200
check sustained 1000 380
echo "total $(( $(date +%s) - t0 )) s"
