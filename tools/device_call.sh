#!/usr/bin/env bash
# What a device call's script (bench/results/*/scripts/, prepared/) does first, sourced from the
# repository's root on the GPU machine, where the device tool sets OUT (the folder that comes
# back):
#
#   source tools/device_call.sh
#   call_begin                                   # S=$OUT/s; archived as $OUT/s.tgz at exit
#   call_build test_gpu gpt2-attention-bench || exit 1
#
# call_begin: the call's files go to S=$OUT/s, which an exit trap packs into $OUT/s.tgz (one
# file comes back, whatever the script leaves there), and the GPU's name, maximum SM clock and
# power limit go to the output and $S/gpu.txt. call_build TARGET...: a Release build for sm_90a
# in BUILD_DIR (out/build) of the targets; prints its time and any warning or ptxas C75xx
# remark; on failure the first errors and status 1. Its logs: $S/cfg.log, $S/build.log.
call_begin() {
  if [ -z "${OUT:-}" ]; then
    echo "device_call: OUT is not set (the device tool sets it)" >&2
    return 2
  fi
  S=$OUT/s
  mkdir -p "$S"
  trap 'tar -czf "$OUT/s.tgz" -C "$OUT" s; rm -rf "$S"' EXIT
  nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$S/gpu.txt"
}

call_build() {
  local build_dir=${BUILD_DIR:-out/build} t0
  t0=$(date +%s)
  if ! cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
      >"$S/cfg.log" 2>&1 ||
    ! cmake --build "$build_dir" -j "$(nproc)" --target "$@" >"$S/build.log" 2>&1; then
    grep -h -E "error|Error" "$S/cfg.log" "$S/build.log" 2>/dev/null | head -20
    echo "device_call: the build of $* failed (logs: cfg.log, build.log)"
    return 1
  fi
  echo "build of $*: $(($(date +%s) - t0)) s"
  grep -E "warning|C75[0-9][0-9]" "$S/build.log" | head -10 || true
}
