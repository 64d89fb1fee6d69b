#!/usr/bin/env bash
# One command for a GPU machine: configure and build, run the GPU tests, run them again under
# compute-sanitizer (memcheck and racecheck), then train d12 at T=1024 for a few dozen steps with
# each --attn and print tokens/s and peak memory. Exits non-zero at the first failure.
#
#   tools/gpu_check.sh                 # everything
#   STEPS=30 BATCH=16 tools/gpu_check.sh
#   SKIP_SANITIZER=1 tools/gpu_check.sh
#
# Environment: BUILD_DIR (default build-gpu), OUT_DIR (default out/gpu-check), STEPS (30),
# BATCH (16), SEQ (1024), CUDA_ARCH (90a), SKIP_SANITIZER, SKIP_TRAIN.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build-gpu}
OUT_DIR=${OUT_DIR:-out/gpu-check}
STEPS=${STEPS:-30}
BATCH=${BATCH:-16}
SEQ=${SEQ:-1024}
CUDA_ARCH=${CUDA_ARCH:-90a}
JOBS=$(nproc)

section() { printf '\n==== %s ====\n' "$*"; }

section "GPU"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU visible (nvidia-smi -L failed); this script needs one." >&2
  exit 1
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

section "configure and build ($BUILD_DIR, sm_$CUDA_ARCH)"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" \
  >"$BUILD_DIR.configure.log" 2>&1 || { cat "$BUILD_DIR.configure.log"; exit 1; }
grep -q "gpt2: CUDA backend ON" "$BUILD_DIR.configure.log" || {
  echo "gpu_check: CMake found no CUDA compiler; the CUDA backend is not built." >&2; exit 1; }
cmake --build "$BUILD_DIR" -j "$JOBS" 2>&1 | tee "$BUILD_DIR.build.log" | grep -E "warning|error" || true
test -x "$BUILD_DIR/tests/test_gpu" || { echo "gpu_check: test_gpu was not built" >&2; exit 1; }

section "GPU tests"
"$BUILD_DIR/tests/test_gpu"

if [ -z "${SKIP_SANITIZER:-}" ]; then
  # The sanitizers slow kernels 10-100x: every op and attention test at small and odd shapes,
  # the model step tests; not the 2^31-element, 4096-long or 20-step runs (the 4200-long
  # walk-down test among them: at that size its naive reference runs cuBLAS GEMMs in which
  # racecheck reports hazards of cuBLAS's own, nvjet_sm90_tst_*).
  large='*T4096*:*T1000*:GpuAttentionLarge.*:*WalkDown*:CudaModel.TwentySteps*'
  large+=':CudaModel.PlanThatDoesNotFit*'
  section "compute-sanitizer memcheck"
  compute-sanitizer --tool memcheck --error-exitcode 1 --print-limit 20 \
    "$BUILD_DIR/tests/test_gpu" --gtest_filter="*:-$large" --gtest_brief=1
  # racecheck tracks every shared-memory access: the op and attention kernels, not the models.
  section "compute-sanitizer racecheck"
  compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 1 --print-limit 20 \
    "$BUILD_DIR/tests/test_gpu" --gtest_filter="*:-$large:*Model*" --gtest_brief=1
fi

if [ -z "${SKIP_TRAIN:-}" ]; then
  section "train d12, T=$SEQ, B=$BATCH, $STEPS steps, each --attn"
  mkdir -p "$OUT_DIR"
  for attn in naive flash; do
    "$BUILD_DIR/gpt2-train" --device cuda --model d12 --attn "$attn" --batch-size "$BATCH" \
      --seq-len "$SEQ" --max-seq-len "$SEQ" --steps "$STEPS" --val-every 0 --sample-every 0 \
      --checkpoint-every 0 --out "$OUT_DIR/$attn" | tee "$OUT_DIR/$attn.log" | tail -n 12
  done
  section "summary (d12, T=$SEQ, B=$BATCH)"
  printf '%-6s %14s %16s %10s %12s\n' attn "tokens/s" "peak memory" "MFU" "final loss"
  for attn in naive flash; do
    summary="$OUT_DIR/$attn/summary.json"
    field() { grep -o "\"$1\":[^,}]*" "$summary" | head -n 1 | cut -d: -f2; }
    printf '%-6s %14.0f %13.2f GiB %9.1f%% %12.4f\n' "$attn" "$(field tokens_per_s)" \
      "$(awk -v b="$(field peak_mem_bytes)" 'BEGIN{print b/1073741824}')" \
      "$(awk -v m="$(field mfu)" 'BEGIN{print 100*m}')" "$(field final_train_loss)"
  done
fi
section "gpu_check: all passed"
