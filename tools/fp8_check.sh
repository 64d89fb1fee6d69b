#!/usr/bin/env bash
# --precision fp8 on a GPU machine, in one command (issue 22): build, the FP8 tests (each under
# a time limit), compute-sanitizer memcheck and racecheck of the FP8 kernels and one fp8 step,
# gpt2-gemm-bench (a block's layers in bf16 and FP8), then each model trained in bf16 and in
# fp8, interleaved PASSES times, with a table of tokens/s, the ratio and peak memory; with
# CONVERGE set, also CONVERGE steps of each of CONVERGE_MODELS in both precisions from the same
# --seed and their curves (gpt2-compare-runs). Needs a GPU with FP8 tensor cores (sm_89 or newer).
#
#   tools/fp8_check.sh                               # everything but the convergence runs
#   MODELS="d12 gpt2-large" PASSES=1 tools/fp8_check.sh
#   SKIP_TESTS=1 SKIP_SANITIZER=1 tools/fp8_check.sh  # speed only
#   CONVERGE=2000 tools/fp8_check.sh                 # and 2000 steps of d12, bf16 against fp8
#   CONVERGE=2000 CONVERGE_MODELS="d12 gpt2-medium" MODELS= SKIP_BENCH=1 tools/fp8_check.sh
#   CONVERGE_CONCURRENT=1 ...                        # the convergence runs all at once
#   FP8_ARGS="--fp8-classifier off" tools/fp8_check.sh  # the fp8 runs with these options
#   TRAIN_ARGS="--train-data D/docs_train.bin --val-data D/docs_val.bin" CONVERGE=2000 ...
#     # every run on other data (data/make_docs_corpus.sh D: 25M tokens, no overfitting)
#   BEFORE=before MODELS=gpt2-medium PASSES=3 SKIP_TESTS=1 SKIP_SANITIZER=1 SKIP_BENCH=1 \
#     tools/fp8_check.sh    # and fp8 from the source tree in before/ (git archive of a commit)
#
# Environment: BUILD_DIR (build-gpu), OUT_DIR (out/fp8-check), CUDA_ARCH (90a), MODELS
# ("d12 gpt2-medium gpt2-large" when unset; set and empty: no throughput table), STEPS (30; 12
# for models wider than d12), PASSES (2), WIDTHS (gpt2-gemm-bench --widths, "768,1024,1280"),
# SKIP_TESTS, SKIP_SANITIZER, SKIP_BENCH, CONVERGE (steps; unset: none), CONVERGE_MODELS
# ("d12"), CONVERGE_CONCURRENT (set: the convergence runs at once), TRAIN_ARGS (more gpt2-train
# options for every run), FP8_ARGS (more gpt2-train options for the fp8 runs), BEFORE (a source
# tree: its gpt2-train built in BEFORE/build-gpu, and its fp8 run beside each pair: an A/B of a
# change in one call), RUN_TIMEOUT (900: seconds for one gpt2-train run; set it so that the
# whole command ends inside a device call's limit).
# Every gpt2-train run writes OUT_DIR/<name>/ and <name>.log, its line of the table as soon as
# it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build-gpu}
OUT_DIR=${OUT_DIR:-out/fp8-check}
CUDA_ARCH=${CUDA_ARCH:-90a}
MODELS=${MODELS-d12 gpt2-medium gpt2-large}  # set but empty: no throughput table
PASSES=${PASSES:-2}
WIDTHS=${WIDTHS:-768,1024,1280}
mkdir -p "$OUT_DIR"
failed=0

section() { printf '\n==== %s ====\n' "$*"; }

section "GPU"
nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader

section "configure and build ($BUILD_DIR, sm_$CUDA_ARCH)"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" \
  >"$OUT_DIR/configure.log" 2>&1 || { cat "$OUT_DIR/configure.log"; exit 1; }
cmake --build "$BUILD_DIR" -j "$(nproc)" \
  --target test_gpu gpt2-train gpt2-gemm-bench gpt2-compare-runs \
  >"$OUT_DIR/build.log" 2>&1 || { grep -E "error" -A3 "$OUT_DIR/build.log" | head -40; exit 1; }
if [ -n "${BEFORE:-}" ]; then
  section "configure and build $BEFORE/build-gpu (gpt2-train)"
  (cd "$BEFORE" && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release \
     -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" && cmake --build build-gpu -j "$(nproc)" \
     --target gpt2-train) >"$OUT_DIR/build-before.log" 2>&1 ||
    { grep -E "error" -A3 "$OUT_DIR/build-before.log" | head -40; exit 1; }
fi
grep -E "warning" "$OUT_DIR/build.log" || true

FP8_TESTS='*Fp8*'
if [ -z "${SKIP_TESTS:-}" ]; then
  section "FP8 tests ($FP8_TESTS)"
  status=0
  timeout 600 "$BUILD_DIR/tests/test_gpu" --gtest_filter="$FP8_TESTS" >"$OUT_DIR/tests.log" 2>&1 ||
    status=$?
  grep -E "^\[ (fp8|plan)|FAILED|PASSED|SKIPPED \]|Failure" "$OUT_DIR/tests.log" || true
  [ "$status" -eq 0 ] || { echo "fp8_check: FP8 tests failed (status $status)"; failed=1; }
fi

if [ -z "${SKIP_SANITIZER:-}" ]; then
  # The GEMM tests stay out of racecheck: it reports hazards inside cuBLASLt's own kernels.
  for tool in memcheck racecheck; do
    filter='GpuFp8Cast.*:GpuFp8Scale.*:CudaFp8.OneStep*:CudaFp8.Recomputed*'
    [ "$tool" = memcheck ] && filter="$filter:GpuMatmulFp8.*"
    section "compute-sanitizer $tool ($filter)"
    status=0
    timeout 600 compute-sanitizer --tool "$tool" --error-exitcode 1 --print-limit 20 \
      "$BUILD_DIR/tests/test_gpu" --gtest_filter="$filter" --gtest_brief=1 \
      >"$OUT_DIR/sanitizer-$tool.log" 2>&1 || status=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT_DIR/sanitizer-$tool.log" || true
    [ "$status" -eq 0 ] || { echo "fp8_check: $tool failed (status $status)"; failed=1; }
  done
fi

if [ -z "${SKIP_BENCH:-}" ]; then
  section "gpt2-gemm-bench --widths $WIDTHS"
  timeout 600 "$BUILD_DIR/gpt2-gemm-bench" --widths "$WIDTHS" --csv "$OUT_DIR/gemm_bench.csv" ||
    failed=1
fi

# [TRAIN=binary] train NAME MODEL PRECISION STEPS [gpt2-train options...]: one run into
# OUT_DIR/NAME.
train() {
  local name=$1 model=$2 precision=$3 steps=$4
  shift 4
  # shellcheck disable=SC2086  # TRAIN_ARGS: words for gpt2-train
  if timeout "${RUN_TIMEOUT:-900}" "${TRAIN:-$BUILD_DIR/gpt2-train}" --model "$model" \
      --precision "$precision" --steps "$steps" --save-final 0 --overwrite \
      --out "$OUT_DIR/$name" ${TRAIN_ARGS:-} "$@" \
      >"$OUT_DIR/$name.log" 2>&1; then
    return 0
  fi
  echo "fp8_check: $name failed (log $OUT_DIR/$name.log)"
  tail -n 5 "$OUT_DIR/$name.log"
  failed=1
  return 1
}
throughput() { grep -E "^  throughput " "$1" | awk '{print $2}' | head -n 1; }
peak() { grep -E "^  peak memory" "$1" | awk '{print $3, $4}'; }

if [ -n "$MODELS" ]; then
  section "bf16 against fp8, B=16, T=1024, interleaved $PASSES times"
  printf '| %-12s | %-4s | %14s | %14s | %6s | %12s | %12s |\n' model pass "bf16 tokens/s" \
    "fp8 tokens/s" "ratio" "bf16 peak" "fp8 peak"
fi
for model in $MODELS; do
  steps=${STEPS:-$([ "$model" = d12 ] && echo 30 || echo 12)}
  for ((pass = 1; pass <= PASSES; ++pass)); do
    train "$model-bf16-$pass" "$model" bf16 "$steps" --val-every 0 || continue
    # shellcheck disable=SC2086  # FP8_ARGS: words for gpt2-train
    train "$model-fp8-$pass" "$model" fp8 "$steps" --val-every 0 ${FP8_ARGS:-} || continue
    bf16=$(throughput "$OUT_DIR/$model-bf16-$pass.log")
    fp8=$(throughput "$OUT_DIR/$model-fp8-$pass.log")
    printf '| %-12s | %-4s | %14s | %14s | %6s | %12s | %12s |\n' "$model" "$pass" "$bf16" "$fp8" \
      "$(awk -v a="$fp8" -v b="$bf16" 'BEGIN { printf "%.3f", a / b }')" \
      "$(peak "$OUT_DIR/$model-bf16-$pass.log")" "$(peak "$OUT_DIR/$model-fp8-$pass.log")"
    if [ -n "${BEFORE:-}" ]; then
      # shellcheck disable=SC2086
      TRAIN="$BEFORE/build-gpu/gpt2-train" train "$model-fp8before-$pass" "$model" fp8 \
        "$steps" --val-every 0 ${FP8_ARGS:-} || continue
      before=$(throughput "$OUT_DIR/$model-fp8before-$pass.log")
      printf '| %-12s | %-4s | %14s | %14s | %6s | (fp8 of %s) |\n' "$model" "$pass" "$bf16" \
        "$before" "$(awk -v a="$before" -v b="$bf16" 'BEGIN { printf "%.3f", a / b }')" "$BEFORE"
    fi
  done
done

if [ -n "${CONVERGE:-}" ]; then
  # converge MODEL PRECISION: one run of the pair, from --seed 1337.
  converge() {
    local extra=""
    [ "$2" = fp8 ] && extra=${FP8_ARGS:-}
    # shellcheck disable=SC2086
    train "converge-$1-$2" "$1" "$2" "$CONVERGE" --val-every 100 --seed 1337 $extra || true
  }
  section "convergence: ${CONVERGE_MODELS:-d12}, $CONVERGE steps, bf16 and fp8 from --seed 1337"
  if [ -n "${CONVERGE_CONCURRENT:-}" ]; then
    # Every run at once on the one GPU: the same losses, in about the time of the longest
    # (their tokens/s and peak memory are then not the models' own).
    for model in ${CONVERGE_MODELS:-d12}; do
      for precision in bf16 fp8; do converge "$model" "$precision" & done
    done
    wait
  else
    for model in ${CONVERGE_MODELS:-d12}; do
      for precision in bf16 fp8; do converge "$model" "$precision"; done
    done
  fi
  for model in ${CONVERGE_MODELS:-d12}; do
    "$BUILD_DIR/gpt2-compare-runs" --run "bf16=$OUT_DIR/converge-$model-bf16" \
      --run "fp8=$OUT_DIR/converge-$model-fp8" --out "$OUT_DIR/converge-$model" \
      --title "$model, $CONVERGE steps, bf16 against fp8" || failed=1
    # At equal training time (meaningful when the runs did not share the GPU).
    "$BUILD_DIR/gpt2-compare-runs" --run "bf16=$OUT_DIR/converge-$model-bf16" \
      --run "fp8=$OUT_DIR/converge-$model-fp8" --out "$OUT_DIR/converge-$model-time" \
      --axis time --title "$model, $CONVERGE steps, bf16 against fp8, at equal training time" ||
      failed=1
  done
fi

if [ "$failed" -ne 0 ]; then section "fp8_check: FAILED (see above)"; exit 1; fi
section "fp8_check: done"
