#!/usr/bin/env bash
# Attention on a GPU machine, in one command: build, check the SASS of the Hopper kernels, run the
# attention tests (each under a time limit, so a hung kernel fails instead of stalling), then time
# every kernel with gpt2-attention-bench and PyTorch SDPA (FlashAttention-2, cuDNN) in the same
# run, and print the comparison table.
#
#   tools/attention_check.sh                      # everything
#   SEQ_LENS=1024,4096,16384 HEAD_SIZES=64 tools/attention_check.sh
#   SKIP_BENCH=1 tools/attention_check.sh         # build and tests only
#   SKIP_TESTS=1 tools/attention_check.sh         # build and benchmarks only
#   KERNELS=flash-hopper,flash-hopper-det tools/attention_check.sh   # fewer kernels, faster
#
# Environment: BUILD_DIR (build-gpu), OUT_DIR (out/attention-check), CUDA_ARCH (90a), SEQ_LENS,
# HEAD_SIZES (64,128), REPEATS (10), WARMUP_MS (0: both benchmarks' --warmup-ms, untimed calls for
# that long before each timing, so that it times the sustained load at the power cap's clock
# rather than the boost after a pause; bench/gpu_timing.h), KERNELS (gpt2-attention-bench
# --kernels; unset: every kernel that runs, which takes minutes at 32K-64K), TORCH_LAYOUTS
# (gpt2,separate: PyTorch's q/k/v as views of GPT-2's qkv, as our kernels read it, and as
# contiguous tensors, its kernels' best case), TORCH_TIMINGS (kernels:
# bench/pytorch_attention.py's --timing, a comma list; each timing but kernels adds _TIMING to the
# file names: graph times PyTorch's bursts as CUDA graph replays, back to back as ours),
# TEST_FILTER (attention and Hopper tests), SANITIZE (unset: none; 1: memcheck, racecheck and
# synccheck on the small attention tests), PASSES (1: ours then PyTorch once; N: N such passes in
# turn, each pass's files named _pN, and the tables made from the medians of the passes,
# tools/bench_csv_median.py; the even passes run PyTorch first, its backends and our KERNELS in
# reverse order, since under the power cap whatever runs later meets a GPU that has drawn the cap
# for longer, and the medians then hold each order once). The benchmarks log SM clock and power
# (OUT_DIR/clocks.csv, summarized per program and pass by tools/clock_summary.py).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build-gpu}
OUT_DIR=${OUT_DIR:-out/attention-check}
CUDA_ARCH=${CUDA_ARCH:-90a}
SEQ_LENS=${SEQ_LENS:-512,1024,2048,4096,8192,16384,32768,65536}
HEAD_SIZES=${HEAD_SIZES:-64,128}
REPEATS=${REPEATS:-10}
WARMUP_MS=${WARMUP_MS:-0}
case "$WARMUP_MS" in
  ''|*[!0-9]*) echo "attention_check: WARMUP_MS must be a whole number of ms" >&2; exit 2 ;;
esac
TORCH_LAYOUTS=${TORCH_LAYOUTS:-gpt2,separate}
TORCH_TIMINGS=${TORCH_TIMINGS:-kernels}
TEST_FILTER=${TEST_FILTER:-*Attention*:*Hopper*:*CudaModelStep*}
PASSES=${PASSES:-1}
case "$PASSES" in
  ''|*[!0-9]*|0) echo "attention_check: PASSES must be a whole number >= 1" >&2; exit 2 ;;
esac
mkdir -p "$OUT_DIR"
failed=0

section() { printf '\n==== %s ====\n' "$*"; }
# The file-name suffix of PyTorch's results: the layout's (none for gpt2), then the timing's
# (none for kernels).
torch_suffix() {
  echo "$([ "$1" = gpt2 ] || echo "_$1")$([ "$2" = kernels ] || echo "_$2")"
}

section "GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm \
  --format=csv,noheader

section "configure and build ($BUILD_DIR, sm_$CUDA_ARCH)"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" \
  >"$OUT_DIR/configure.log" 2>&1 || { cat "$OUT_DIR/configure.log"; exit 1; }
# The tests' targets only when the tests run (SKIP_TESTS: the benchmark alone, a minute sooner).
targets="gpt2-attention-bench"
[ -n "${SKIP_TESTS:-}" ] || targets="test_gpu gpt2-attention-bench gpt2-train"
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" -j "$(nproc)" --target $targets \
  >"$OUT_DIR/build.log" 2>&1 || { grep -E "error|Error" "$OUT_DIR/build.log" | head -40; exit 1; }
grep -E "warning|C75[0-9][0-9]" "$OUT_DIR/build.log" || true

section "SASS of the Hopper kernels (HGMMA = wgmma, UTMALDG = TMA loads, spills)"
if command -v cuobjdump >/dev/null 2>&1; then
  for obj in "$BUILD_DIR"/kernels/CMakeFiles/gpt2_kernels_gpu.dir/gpu/attention_hopper_*.o; do
    [ -e "$obj" ] || continue  # no Hopper objects (a build without sm_90a)
    cuobjdump -sass "$obj" >"$OUT_DIR/$(basename "$obj").sass" 2>&1 || true
    printf '%-40s HGMMA %5d  UTMALDG %3d  UBLKRED %3d  LDL/STL %3d\n' "$(basename "$obj")" \
      "$(grep -c HGMMA "$OUT_DIR/$(basename "$obj").sass")" \
      "$(grep -c UTMALDG "$OUT_DIR/$(basename "$obj").sass")" \
      "$(grep -c -E 'UBLKRED|UBLKCP' "$OUT_DIR/$(basename "$obj").sass")" \
      "$(grep -c -E '\bLDL|\bSTL' "$OUT_DIR/$(basename "$obj").sass")"
  done
fi

if [ -z "${SKIP_TESTS:-}" ]; then
  section "attention tests ($TEST_FILTER)"
  status=0
  timeout 600 "$BUILD_DIR/tests/test_gpu" --gtest_filter="$TEST_FILTER" \
    >"$OUT_DIR/tests.log" 2>&1 ||
    status=$?
  grep -E "^\[ attention\]|^\[ model|FAILED|PASSED|Failure|failed|error" "$OUT_DIR/tests.log" |
    grep -v "^\[  SKIPPED" | tail -n 150 || true
  if [ "$status" -ne 0 ]; then
    echo "attention_check: tests failed or timed out (status $status)"
    failed=1
  fi
fi

if [ -n "${SANITIZE:-}" ]; then
  # Parameterized tests are named Shapes/GpuAttentionTest.<test>/B<B>_T<T>_...: the B3 shapes
  # are T = 1 to 129 (both head sizes), plus the racing-order Hopper test (T = 777), and the
  # deterministic bits test, whose T = 4100 runs the deterministic walk down (Hopper kernels
  # only: the walk-down rows test's naive reference draws racecheck reports inside cuBLAS).
  default_small='*GpuAttentionTest.*/B3_T*:GpuAttentionHopper.*:*HopperDeterministicMode*'
  small=${SANITIZE_FILTER:-$default_small}
  for tool in memcheck racecheck synccheck; do
    section "compute-sanitizer $tool (small attention shapes)"
    status=0
    timeout 600 compute-sanitizer --tool "$tool" --error-exitcode 1 --print-limit 20 \
      "$BUILD_DIR/tests/test_gpu" --gtest_filter="$small" --gtest_brief=1 \
      >"$OUT_DIR/sanitizer-$tool.log" 2>&1 || status=$?
    tail -n 8 "$OUT_DIR/sanitizer-$tool.log"
    [ "$status" -eq 0 ] || { echo "attention_check: $tool failed (status $status)"; failed=1; }
  done
fi

if [ -z "${SKIP_BENCH:-}" ]; then
  section "gpt2-attention-bench and PyTorch SDPA, same run"
  # SM clock and board power every 100 ms while each program runs (tools/clock_summary.py):
  # programs compared at free clocks are compared fairly only if they ran at the same clocks.
  : >"$OUT_DIR/phases.txt"
  mark() { echo "$(date '+%Y/%m/%d %H:%M:%S.%N') $1 $2" >>"$OUT_DIR/phases.txt"; }
  clock_logger=""
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader,nounits \
      -lms 100 >"$OUT_DIR/clocks.csv" 2>/dev/null &
    clock_logger=$!
  fi
  # Our runs in pass file suffix $1, with the kernels $2.
  run_ours() {
    mark "ours$1" start
    timeout 900 "$BUILD_DIR/gpt2-attention-bench" --seq-lens "$SEQ_LENS" \
      --head-sizes "$HEAD_SIZES" --repeats "$REPEATS" --warmup-ms "$WARMUP_MS" \
      ${2:+--kernels "$2"} \
      --csv "$OUT_DIR/attention_bench$1.csv" >"$OUT_DIR/attention_bench$1.log" 2>&1 || failed=1
    mark "ours$1" end
    cat "$OUT_DIR/attention_bench$1.log"
  }
  # PyTorch's runs in pass file suffix $1 (with $2: its backends in reverse order).
  run_pytorch() {
    for layout in ${TORCH_LAYOUTS//,/ }; do
      for timing in ${TORCH_TIMINGS//,/ }; do
        suffix=$(torch_suffix "$layout" "$timing")
        mark "pytorch$suffix$1" start
        PYTHONUNBUFFERED=1 timeout 900 python3 bench/pytorch_attention.py --seq-lens "$SEQ_LENS" \
          --head-sizes "$HEAD_SIZES" --repeats "$REPEATS" --warmup-ms "$WARMUP_MS" \
          --layout "$layout" --timing "$timing" \
          ${2:+--reverse-backends} --csv "$OUT_DIR/pytorch_attention$suffix$1.csv" \
          >"$OUT_DIR/pytorch_attention$suffix$1.log" 2>&1 || failed=1
        mark "pytorch$suffix$1" end
        cat "$OUT_DIR/pytorch_attention$suffix$1.log"
      done
    done
  }
  # The comparison tables of the pass (or, with $2, of the medians of that many passes).
  compare_pass() {
    for layout in ${TORCH_LAYOUTS//,/ }; do
      for timing in ${TORCH_TIMINGS//,/ }; do
        suffix=$(torch_suffix "$layout" "$timing")
        python3 bench/pytorch_attention.py --compare "$OUT_DIR/pytorch_attention$suffix$1.csv" \
          --ours "$OUT_DIR/attention_bench$1.csv" ${2:+--passes "$2"} --warmup-ms "$WARMUP_MS" \
          --markdown "$OUT_DIR/attention_vs_pytorch$suffix$1.md" || failed=1
      done
    done
  }
  # "a,b,c" -> "c,b,a"
  reversed_list() { tr ',' '\n' <<<"$1" | tac | paste -sd, -; }
  for pass in $(seq 1 "$PASSES"); do
    p=$([ "$PASSES" -eq 1 ] && echo "" || echo "_p$pass")
    if [ $((pass % 2)) -eq 1 ]; then
      [ "$PASSES" -gt 1 ] && section "pass $pass of $PASSES: ours, then PyTorch"
      run_ours "$p" "${KERNELS:-}"
      run_pytorch "$p"
    else
      section "pass $pass of $PASSES: PyTorch, then ours (its backends and KERNELS reversed)"
      run_pytorch "$p" reverse
      run_ours "$p" "$(reversed_list "${KERNELS:-}")"
    fi
    compare_pass "$p"
  done
  if [ "$PASSES" -gt 1 ]; then
    section "the medians of $PASSES passes"
    passes_of() { for pass in $(seq 1 "$PASSES"); do echo "$OUT_DIR/$1_p$pass.csv"; done; }
    # shellcheck disable=SC2046
    python3 tools/bench_csv_median.py --out "$OUT_DIR/attention_bench.csv" \
      $(passes_of attention_bench) || failed=1
    for layout in ${TORCH_LAYOUTS//,/ }; do
      for timing in ${TORCH_TIMINGS//,/ }; do
        suffix=$(torch_suffix "$layout" "$timing")
        # shellcheck disable=SC2046
        python3 tools/bench_csv_median.py --out "$OUT_DIR/pytorch_attention$suffix.csv" \
          $(passes_of "pytorch_attention$suffix") || failed=1
      done
    done
    compare_pass "" "$PASSES"
  fi
  if [ -n "$clock_logger" ]; then
    kill "$clock_logger" 2>/dev/null || true
    section "SM clock and power while each ran ($OUT_DIR/clocks.csv)"
    python3 tools/clock_summary.py "$OUT_DIR/clocks.csv" "$OUT_DIR/phases.txt" || true
  fi
fi
if [ "$failed" -ne 0 ]; then section "attention_check: FAILED (see above)"; exit 1; fi
section "attention_check: done"
