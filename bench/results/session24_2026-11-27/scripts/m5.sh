#!/bin/bash
# m5: where gpt2-attention-bench's time goes on the host (m2: a pass of 16 kernel-points spent
# ~50 s outside its timings, the GPU idle), each output line stamped; and the
# GPT2_HOPPER_FORWARD_ROWS knob's bad value (an error naming it, non-zero exit).
set -u
source tools/device_call.sh
call_begin
call_build gpt2-attention-bench || exit 1
AB=out/build/gpt2-attention-bench
stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N | cut -c1-14)" "$line"; done; }
t0=$(date +%s%N)
timeout 120 $AB --seq-lens 1024,4096,8192,16384 --head-sizes 64 \
  --kernels flash-hopper,flash-hopper-det --csv $S/stamped.csv 2>&1 | stamp > $S/stamped.log
echo "bench rc ${PIPESTATUS[0]}, $(( ($(date +%s%N) - t0) / 1000000 )) ms"; cat $S/stamped.log
t0=$(date +%s%N)
timeout 60 $AB --seq-lens 16384 --head-sizes 64 --kernels flash-hopper --measure fwd \
  --csv $S/one.csv > $S/one.log 2>&1
echo "one point, forward only: rc $?, $(( ($(date +%s%N) - t0) / 1000000 )) ms"
GPT2_HOPPER_FORWARD_ROWS=96 timeout 60 $AB --seq-lens 1024 --head-sizes 64 \
  --kernels flash-hopper --csv $S/bad.csv > $S/bad.log 2>&1
echo "GPT2_HOPPER_FORWARD_ROWS=96: rc $?"; tail -2 $S/bad.log
