#!/usr/bin/env bash
# Data-parallel training through NCCL on this machine's GPUs, in one command (issues 8, 9, 20):
#   1. build (unless SKIP_BUILD=1);
#   2. world size 1: the plain single-GPU run against --comm nccl with ZeRO 0 and 1, sums in
#      bf16 and fp32, communication overlapped or not (d12, T=1024, B=16): the losses must be the
#      same bits, and the tokens/s are compared;
#   3. with 2 or more GPUs and mpirun (N below: the largest of WORLDS, by default every power of
#      two from 2 up to the GPUs there are: 2, 4, 8):
#      tune   (only when ONLY names it): T=1024 on 2 GPUs over NCCL's thread blocks
#             (NCCL_MAX_CTAS) and each --overlap-comm, and bucket sizes, against 1 GPU before
#             and after, and GPU 1 alone (the GPUs may differ);
#      agree  N ranks against 1 GPU on the same global batch of 32 sequences: fp32 over 10
#             steps (N x B=32/N against 1 x B=32), bf16 over 50 with the default bf16 sums,
#             plus two more 1-GPU bf16 runs for the run-to-run noise;
#      scale  d12 and gpt2-medium at T=1024, B=16 per GPU: 1 GPU and each of WORLDS with the
#             defaults (ZeRO-1, bf16 sums, no overlap, graphs) twice, interleaved, and N with
#             overlap; with SCALE_VARIANTS=1 also N with fp32 sums and with ZeRO-0;
#      long   d12 at T=65536, B=1 per GPU, 1 GPU and N;
#      context  (only when ONLY names it) context parallelism: d12 at CONTEXT_T (131072), B=1,
#             one GPU against a group of CONTEXT_N (N) sharing each sequence
#             (--context-parallel CONTEXT_N), interleaved twice; then the group alone at
#             CONTEXT_LONG_T (524288; 0: skip) with --recompute fc;
#      memcheck  compute-sanitizer memcheck of the 2-GPU tests, and of a deliberate error (the
#             disabled SanitizerCanary test), which the same command must report;
#   4. bench/data_parallel_report.py checks the agreement and writes the tables.
# Every run is gpt2-train writing OUT_DIR/<name>/{metrics.jsonl,summary.json}; OUT_DIR/runs.tsv
# lists them. NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
#
#   tools/data_parallel_check.sh
#   SKIP_BUILD=1 STEPS=40 ONLY=multi OUT_DIR=/tmp/dp tools/data_parallel_check.sh
#
# Environment: BUILD_DIR (build-gpu), OUT_DIR (out/data-parallel), STEPS (40, the timed runs),
# RESULTS (bench/results: the report's .md and .csv), ONLY (the parts to run, of world1 tune
# agree scale long memcheck, or multi for the last four; default: all but tune); the tune
# part's grid: TUNE_MODELS ("d12"), TUNE_CTAS ("8 32", each with every --overlap-comm) and
# TUNE_BUCKETS ("4194304 1048576"); the context part's CONTEXT_T, CONTEXT_LONG_T,
# CONTEXT_STEPS (10), CONTEXT_LONG_STEPS (6) and CONTEXT_N; WORLDS (the multi-GPU world sizes,
# "2 4 8" on eight GPUs); REPORT (data_parallel: the results' file name,
# RESULTS/REPORT.md and .csv); RUN_TIMEOUT (600): seconds before a run (a hung
# collective, say) is killed and reported FAILED; GPT2_COMMIT: the commit the report names, when
# the tree's git metadata is not its own (a copy of a working tree).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build-gpu}
OUT_DIR=${OUT_DIR:-out/data-parallel}
STEPS=${STEPS:-40}
RESULTS=${RESULTS:-bench/results}
ONLY=${ONLY:-world1 multi}
TUNE_CTAS=${TUNE_CTAS:-8 32}
TUNE_BUCKETS=${TUNE_BUCKETS:-4194304 1048576}
TUNE_MODELS=${TUNE_MODELS:-d12}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
CONTEXT_T=${CONTEXT_T:-131072}
CONTEXT_LONG_T=${CONTEXT_LONG_T:-524288}
CONTEXT_STEPS=${CONTEXT_STEPS:-10}
CONTEXT_LONG_STEPS=${CONTEXT_LONG_STEPS:-6}
REPORT=${REPORT:-data_parallel}
export NCCL_NVLS_ENABLE=0

section() { printf '\n==== %s ====\n' "$*"; }
wants() {
  local part
  for part in $ONLY; do
    if [ "$part" = "$1" ]; then return 0; fi
    if [ "$part" = multi ] && [[ " agree scale long memcheck " == *" $1 "* ]]; then return 0; fi
  done
  return 1
}

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
printf 'name\tgroup\tmodel\tseq_len\tbatch_per_gpu\tworld\tcomm\tzero\toverlap\tprecision\t'\
'grad_reduce\tbucket\tctas\tgraph\tgpu\tcontext\n' >"$MANIFEST"

# [CTAS=n] [GPU=i] run NAME GROUP WORLD MODEL T B PRECISION STEPS [gpt2-train options...]
# CTAS sets NCCL_MAX_CTAS for the run (else the communicator's default); GPU makes only that
# GPU visible to a 1-GPU run.
run() {
  local name=$1 group=$2 world=$3 model=$4 T=$5 B=$6 precision=$7 steps=$8
  shift 8
  local comm=plain zero=- overlap=- reduce=- bucket=default graph=on context=1
  local args=("$@")
  for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[$i]}" in
      --comm) comm=${args[$((i + 1))]} ;;
      --zero) zero=${args[$((i + 1))]} ;;
      --overlap-comm) overlap=${args[$((i + 1))]} ;;
      --grad-reduce) reduce=${args[$((i + 1))]} ;;
      --grad-bucket) bucket=${args[$((i + 1))]} ;;
      --cuda-graph) graph=${args[$((i + 1))]} ;;
      --context-parallel) context=${args[$((i + 1))]} ;;
    esac
  done
  if [ "$world" -gt 1 ]; then comm=nccl; fi
  if [ "$comm" = nccl ]; then
    [ "$zero" = - ] && zero=$([ "$world" -gt 1 ] && echo 1 || echo 0)
    [ "$overlap" = - ] && overlap=0
    [ "$reduce" = - ] && reduce=$precision
  fi
  local environment=(timeout -k 10 "$RUN_TIMEOUT" env)
  [ -n "${CTAS:-}" ] && environment+=("NCCL_MAX_CTAS=$CTAS")
  [ -n "${GPU:-}" ] && environment+=("CUDA_VISIBLE_DEVICES=$GPU")
  local launch=()
  if [ "$world" -gt 1 ]; then
    launch=(mpirun --allow-run-as-root -np "$world" --bind-to none -x NCCL_NVLS_ENABLE
            -x PATH -x LD_LIBRARY_PATH)
    [ -n "${CTAS:-}" ] && launch+=(-x NCCL_MAX_CTAS)
  fi
  printf '%-34s ' "$name"
  if "${environment[@]}" "${launch[@]}" "$TRAIN" --device cuda --model "$model" --seq-len "$T" \
      --max-seq-len "$T" --batch-size "$B" --precision "$precision" --steps "$steps" \
      --val-every 0 --sample-every 0 --checkpoint-every 0 --save-final 0 --seed 1337 \
      --overwrite --out "$OUT_DIR/$name" \
      "$@" >"$OUT_DIR/$name.log" 2>&1; then
    grep -E "^  throughput" "$OUT_DIR/$name.log" | sed 's/^  throughput *//' || echo
  else
    echo "FAILED (log $OUT_DIR/$name.log)"
    tail -n 5 "$OUT_DIR/$name.log"
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" \
    "$group" "$model" "$T" "$B" "$world" "$comm" "$zero" "$overlap" "$precision" "$reduce" \
    "$bucket" "${CTAS:-default}" "$graph" "${GPU:-all}" "$context" >>"$MANIFEST"
}

if wants world1; then
  section "world size 1: plain against NCCL (d12, T=1024, B=16, bf16, $STEPS steps)"
  # Interleaved, twice, so that a drift of the clock over the runs does not favour one of them.
  for pass in 1 2; do
    run "w1-plain-$pass" world1 1 d12 1024 16 bf16 "$STEPS"
    run "w1-nccl-z1-$pass" world1 1 d12 1024 16 bf16 "$STEPS" --comm nccl --zero 1
    run "w1-nccl-z1-fp32sum-$pass" world1 1 d12 1024 16 bf16 "$STEPS" --comm nccl --zero 1 \
      --grad-reduce fp32
    run "w1-nccl-z0-$pass" world1 1 d12 1024 16 bf16 "$STEPS" --comm nccl --zero 0
    run "w1-nccl-z1-noovl-$pass" world1 1 d12 1024 16 bf16 "$STEPS" --comm nccl --zero 1 \
      --overlap-comm 0
  done
  run w1-plain-fp32 world1 1 d12 1024 8 fp32 10
  run w1-nccl-z1-fp32 world1 1 d12 1024 8 fp32 10 --comm nccl --zero 1
fi

if [ -z "${WORLDS:-}" ]; then
  WORLDS=""
  for ((w = 2; w <= GPUS; w *= 2)); do WORLDS="$WORLDS $w"; done
fi
N=1
for w in $WORLDS; do
  if [ "$w" -gt "$GPUS" ]; then
    echo "data_parallel_check: WORLDS has $w, $GPUS GPUs here" >&2
    exit 2
  fi
  [ "$w" -gt "$N" ] && N=$w
done
CONTEXT_N=${CONTEXT_N:-$N}

multi_gpu_ready() {
  [ "$GPUS" -ge 2 ] && [ "$N" -ge 2 ] || return 1
  if ! command -v mpirun >/dev/null 2>&1; then
    echo "data_parallel_check: $GPUS GPUs but no mpirun: the multi-GPU part needs OpenMPI" >&2
    exit 1
  fi
}

if wants tune && multi_gpu_ready; then
  for model in $TUNE_MODELS; do
    section "tune: $model, T=1024, B=16 per GPU, $STEPS steps"
    run "tune-$model-1gpu-a" tune 1 "$model" 1024 16 bf16 "$STEPS"
    GPU=1 run "tune-$model-gpu1" tune 1 "$model" 1024 16 bf16 "$STEPS"
    for ctas in $TUNE_CTAS; do
      for overlap in 1 0 reduce gather; do
        CTAS=$ctas run "tune-$model-2gpu-ctas$ctas-ovl$overlap" tune 2 "$model" 1024 16 bf16 \
          "$STEPS" --overlap-comm "$overlap"
      done
    done
    for bucket in $TUNE_BUCKETS; do
      run "tune-$model-2gpu-bucket$bucket" tune 2 "$model" 1024 16 bf16 "$STEPS" \
        --grad-bucket "$bucket"
    done
    run "tune-$model-1gpu-b" tune 1 "$model" 1024 16 bf16 "$STEPS"
  done
fi

if wants agree && multi_gpu_ready; then
  section "$N GPUs against 1 on the same global batch (d12, T=1024)"
  run agree-1gpu-fp32 agree 1 d12 1024 32 fp32 10
  run "agree-${N}gpu-fp32" agree "$N" d12 1024 $((32 / N)) fp32 10
  run agree-1gpu-bf16 agree 1 d12 1024 32 bf16 50
  run agree-1gpu-bf16-again agree 1 d12 1024 32 bf16 50
  run agree-1gpu-bf16-third agree 1 d12 1024 32 bf16 50
  run "agree-${N}gpu-bf16" agree "$N" d12 1024 $((32 / N)) bf16 50
fi

if wants scale && multi_gpu_ready; then
  for model in d12 gpt2-medium; do
    section "scaling: $model, T=1024, B=16 per GPU, $STEPS steps"
    # 1 GPU and every world size with the defaults twice, interleaved; the variants once.
    for again in "" "-again"; do
      run "scale-$model-1gpu$again" scale 1 "$model" 1024 16 bf16 "$STEPS"
      for w in $WORLDS; do
        run "scale-$model-${w}gpu$again" scale "$w" "$model" 1024 16 bf16 "$STEPS"
      done
      if [ -z "$again" ]; then
        run "scale-$model-${N}gpu-overlap" scale "$N" "$model" 1024 16 bf16 "$STEPS" \
          --overlap-comm 1
      fi
    done
    if [ -n "${SCALE_VARIANTS:-}" ]; then
      run "scale-$model-${N}gpu-fp32sum" scale "$N" "$model" 1024 16 bf16 "$STEPS" \
        --grad-reduce fp32
      run "scale-$model-${N}gpu-z0" scale "$N" "$model" 1024 16 bf16 "$STEPS" --zero 0
    fi
  done
fi

if wants long && multi_gpu_ready; then
  section "long context: d12, T=65536, B=1 per GPU"
  run long-1gpu long 1 d12 65536 1 bf16 10
  run "long-${N}gpu" long "$N" d12 65536 1 bf16 10
fi

if wants context && multi_gpu_ready; then
  section "context parallel: d12, T=$CONTEXT_T, B=1, one GPU and a group of $CONTEXT_N"
  for pass in 1 2; do
    run "context-1gpu-$pass" context 1 d12 "$CONTEXT_T" 1 bf16 "$CONTEXT_STEPS"
    run "context-cp$CONTEXT_N-$pass" context "$CONTEXT_N" d12 "$CONTEXT_T" 1 bf16 \
      "$CONTEXT_STEPS" --context-parallel "$CONTEXT_N"
  done
  if [ "$CONTEXT_LONG_T" -gt 0 ]; then
    section "context parallel: d12, T=$CONTEXT_LONG_T, B=1, a group of $CONTEXT_N, --recompute fc"
    run "context-long-cp$CONTEXT_N" context-long "$CONTEXT_N" d12 "$CONTEXT_LONG_T" 1 bf16 \
      "$CONTEXT_LONG_STEPS" --context-parallel "$CONTEXT_N" --recompute fc
  fi
fi

if wants memcheck && multi_gpu_ready; then
  section "compute-sanitizer memcheck: the 2-GPU tests, then a deliberate error"
  # --report-api-errors no: NCCL probes its kernels with cudaFuncGetAttributes, and the probes
  # of kernels not built for this GPU return cudaErrorNoKernelImageForDevice, which NCCL expects
  # and handles; reported, they are 200 "errors" in a clean run. Memory errors, races of the
  # memcheck tool and leaks are still reported, and the canary below proves it.
  memcheck=(compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1
            --print-limit 20)
  set +e
  "${memcheck[@]}" "$BUILD_DIR/tests/test_gpu" \
    --gtest_filter='CudaDataParallel.TwoGpusGive*:NcclCommunicator.TwoGpus*:CudaContextParallel.*Fp32' \
    --gtest_brief=1 \
    >"$OUT_DIR/memcheck.log" 2>&1
  echo $? >"$OUT_DIR/memcheck.rc"
  "${memcheck[@]}" "$BUILD_DIR/tests/test_gpu" --gtest_also_run_disabled_tests \
    --gtest_filter='SanitizerCanary.*' --gtest_brief=1 >"$OUT_DIR/memcheck_canary.log" 2>&1
  echo $? >"$OUT_DIR/memcheck_canary.rc"
  set -e
  echo "memcheck of the 2-GPU tests: exit $(cat "$OUT_DIR/memcheck.rc") (0: clean)"
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT_DIR/memcheck.log" | tail -n 3
  echo "memcheck of the deliberate error: exit $(cat "$OUT_DIR/memcheck_canary.rc") (must fail)"
  grep -E "ERROR SUMMARY|Invalid" "$OUT_DIR/memcheck_canary.log" | head -n 2
fi

section "report"
python3 bench/data_parallel_report.py --runs "$OUT_DIR" --markdown "$RESULTS/$REPORT.md" \
  --csv "$RESULTS/$REPORT.csv"
