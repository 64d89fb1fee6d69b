#!/usr/bin/env bash
# Data-parallel training through NCCL on this machine's GPUs, in one command (issues 8 and 9):
#   1. build (unless SKIP_BUILD=1);
#   2. world size 1: the plain single-GPU run against --comm nccl with ZeRO 0 and 1, reductions
#      overlapped or not (d12, T=1024, B=16): the losses must be the same bits, and the
#      tokens/s are compared;
#   3. with 2 or more GPUs and mpirun: 2 ranks against 1 GPU on the same global batch (fp32 over
#      10 steps, bf16 over 50, d12 T=1024, 2 x B=16 against 1 x B=32, plus a second 1-GPU bf16
#      run as the run-to-run noise), scaling (d12 and gpt2-medium at T=1024; 1 GPU, then 2 with
#      ZeRO 1 and 0, overlapped and not), long context (d12, T=65536, B=1 per GPU) and a
#      compute-sanitizer memcheck of the 2-GPU model test;
#   4. bench/data_parallel_report.py checks the agreement and writes the tables.
# Every run is gpt2-train writing OUT_DIR/<name>/{metrics.jsonl,summary.json}; OUT_DIR/runs.tsv
# lists them. NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
#
#   tools/data_parallel_check.sh
#   SKIP_BUILD=1 STEPS=20 OUT_DIR=/tmp/dp tools/data_parallel_check.sh
#
# Environment: BUILD_DIR (build-gpu), OUT_DIR (out/data-parallel), STEPS (30, the timed runs),
# RESULTS (bench/results: the report's .md and .csv), ONLY (world1 | multi: one part).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build-gpu}
OUT_DIR=${OUT_DIR:-out/data-parallel}
STEPS=${STEPS:-30}
RESULTS=${RESULTS:-bench/results}
ONLY=${ONLY:-}
export NCCL_NVLS_ENABLE=0

section() { printf '\n==== %s ====\n' "$*"; }

if [ -z "${SKIP_BUILD:-}" ]; then
  section "build ($BUILD_DIR)"
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    >"$BUILD_DIR.configure.log" 2>&1 || { cat "$BUILD_DIR.configure.log"; exit 1; }
  cmake --build "$BUILD_DIR" -j "$(nproc)" 2>&1 | grep -E "warning|error" || true
fi
TRAIN="$BUILD_DIR/gpt2-train"
test -x "$TRAIN" || { echo "data_parallel_check: $TRAIN was not built" >&2; exit 1; }
GPUS=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
mkdir -p "$OUT_DIR"
MANIFEST="$OUT_DIR/runs.tsv"
printf 'name\tgroup\tmodel\tseq_len\tbatch_per_gpu\tworld\tcomm\tzero\toverlap\tprecision\n' >"$MANIFEST"

# run NAME GROUP WORLD MODEL T B PRECISION STEPS [gpt2-train options...]
run() {
  local name=$1 group=$2 world=$3 model=$4 T=$5 B=$6 precision=$7 steps=$8
  shift 8
  local comm=plain zero=- overlap=-
  local args=("$@")
  for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[$i]}" in
      --comm) comm=${args[$((i + 1))]} ;;
      --zero) zero=${args[$((i + 1))]} ;;
      --overlap-comm) overlap=${args[$((i + 1))]} ;;
    esac
  done
  if [ "$world" -gt 1 ]; then comm=nccl; fi
  if [ "$comm" = nccl ] && [ "$zero" = - ]; then zero=$([ "$world" -gt 1 ] && echo 1 || echo 0); fi
  if [ "$comm" = nccl ] && [ "$overlap" = - ]; then overlap=1; fi
  local launch=()
  if [ "$world" -gt 1 ]; then
    launch=(mpirun --allow-run-as-root -np "$world" --bind-to none -x NCCL_NVLS_ENABLE
            -x PATH -x LD_LIBRARY_PATH)
  fi
  printf '%-34s ' "$name"
  if "${launch[@]}" "$TRAIN" --device cuda --model "$model" --seq-len "$T" --max-seq-len "$T" \
      --batch-size "$B" --precision "$precision" --steps "$steps" --val-every 0 \
      --sample-every 0 --checkpoint-every 0 --seed 1337 --out "$OUT_DIR/$name" "$@" \
      >"$OUT_DIR/$name.log" 2>&1; then
    grep -E "^  throughput" "$OUT_DIR/$name.log" | sed 's/^  throughput *//' || echo
  else
    echo "FAILED (log $OUT_DIR/$name.log)"
    tail -n 5 "$OUT_DIR/$name.log"
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$group" "$model" "$T" "$B" \
    "$world" "$comm" "$zero" "$overlap" "$precision" >>"$MANIFEST"
}

if [ "$ONLY" != multi ]; then
  section "world size 1: plain against NCCL (d12, T=1024, B=16, bf16, $STEPS steps)"
  # Interleaved, twice, so that a drift of the clock over the runs does not favour one of them.
  for pass in 1 2; do
    run "w1-plain-$pass" world1 1 d12 1024 16 bf16 "$STEPS"
    run "w1-nccl-z1-$pass" world1 1 d12 1024 16 bf16 "$STEPS" --comm nccl --zero 1
    run "w1-nccl-z0-$pass" world1 1 d12 1024 16 bf16 "$STEPS" --comm nccl --zero 0
    run "w1-nccl-z1-noovl-$pass" world1 1 d12 1024 16 bf16 "$STEPS" --comm nccl --zero 1 \
      --overlap-comm 0
  done
  run w1-plain-fp32 world1 1 d12 1024 8 fp32 10
  run w1-nccl-z1-fp32 world1 1 d12 1024 8 fp32 10 --comm nccl --zero 1
fi

if [ "$ONLY" != world1 ] && [ "$GPUS" -ge 2 ]; then
  if ! command -v mpirun >/dev/null 2>&1; then
    echo "data_parallel_check: $GPUS GPUs but no mpirun: the multi-GPU part needs OpenMPI" >&2
    exit 1
  fi
  section "2 GPUs against 1 on the same global batch (d12, T=1024)"
  run agree-1gpu-fp32 agree 1 d12 1024 32 fp32 10
  run agree-2gpu-fp32 agree 2 d12 1024 16 fp32 10
  run agree-1gpu-bf16 agree 1 d12 1024 32 bf16 50
  run agree-1gpu-bf16-again agree 1 d12 1024 32 bf16 50
  run agree-2gpu-bf16 agree 2 d12 1024 16 bf16 50

  for model in d12 gpt2-medium; do
    section "scaling: $model, T=1024, B=16 per GPU, $STEPS steps"
    run "scale-$model-1gpu" scale 1 "$model" 1024 16 bf16 "$STEPS"
    run "scale-$model-2gpu-z1" scale 2 "$model" 1024 16 bf16 "$STEPS" --zero 1
    run "scale-$model-2gpu-z1-noovl" scale 2 "$model" 1024 16 bf16 "$STEPS" --zero 1 \
      --overlap-comm 0
    run "scale-$model-2gpu-z0" scale 2 "$model" 1024 16 bf16 "$STEPS" --zero 0
    run "scale-$model-2gpu-z0-noovl" scale 2 "$model" 1024 16 bf16 "$STEPS" --zero 0 \
      --overlap-comm 0
  done

  section "long context: d12, T=65536, B=1 per GPU"
  run long-1gpu long 1 d12 65536 1 bf16 8
  run long-2gpu long 2 d12 65536 1 bf16 8

  section "compute-sanitizer memcheck: the 2-GPU model test"
  compute-sanitizer --tool memcheck --error-exitcode 1 --print-limit 20 \
    "$BUILD_DIR/tests/test_gpu" --gtest_filter='CudaDataParallel.TwoGpus*' --gtest_brief=1 \
    >"$OUT_DIR/memcheck.log" 2>&1 && echo "memcheck: passed" || echo "memcheck: FAILED"
  tail -n 4 "$OUT_DIR/memcheck.log"
fi

section "report"
python3 bench/data_parallel_report.py --runs "$OUT_DIR" --markdown "$RESULTS/data_parallel.md" \
  --csv "$RESULTS/data_parallel.csv"
