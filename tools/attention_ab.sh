#!/usr/bin/env bash
# A/B of the attention kernels on a GPU machine, in one command: builds gpt2-attention-bench from
# a base source tree and from this working tree side by side, runs the benchmark in interleaved
# passes (base and new taking turns, the order alternating from pass to pass, so that a drift
# of the machine falls on both), and prints per point the TFLOP/s of every pass, new / base of
# the medians, and whether the two builds' results agree bit for bit
# (tools/attention_ab_summary.py).
#
#   tools/attention_ab.sh BASE [gpt2-attention-bench options]
#   tools/attention_ab.sh before --seq-lens 1024,16384 --kernels flash-hopper,flash-hopper-det
#   PASSES=3 tools/attention_ab.sh 1becf86 --head-sizes 128
#   VARIANTS="v1=p1.diff v2=p2.diff" tools/attention_ab.sh before --seq-lens 8192,16384
#   NEW_ENV=GPT2_HOPPER_FORWARD_PERSISTENT_MAX_T=32768 tools/attention_ab.sh . --measure fwd
#
# BASE: a directory holding the base sources (e.g. made here with `git archive REV | tar -x -C
# before`, and carried to the GPU machine), or a revision of this repository (git archive of it;
# on a machine whose copy of .git may lag the working tree, a directory is the sure way), or
# `.`: this tree, whose one build then runs as both sides (an A/B of BASE_ENV against NEW_ENV,
# or with neither, of the build against itself: the spread).
# Environment: PASSES (2), OUT_DIR (out/attention-ab), CUDA_ARCH (90a), RUN_TIMEOUT (seconds a
# benchmark run may take, 600: a pass over 512-16K at both head sizes takes 30-70 s a kernel;
# a run cut short keeps the points it measured, as the benchmark rewrites its CSV after each T),
# VARIANTS ("NAME=PATCH ...": more trees, each this tree with a patch applied (git apply), built
# beside the two and run in the same passes, each summarized against base as well: several
# versions of an idea A/B'd in one call), BASE_ENV and NEW_ENV ("NAME=VALUE ...": environment
# variables for the base side's runs, and for the new side's and the variants', e.g. the Hopper
# kernels' tuning knobs: an A/B of two settings on one build).
# The options go to every build's benchmark (--csv is the tool's own).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
if [ $# -lt 1 ]; then usage >&2; exit 2; fi
if [ "$1" = "-h" ] || [ "$1" = "--help" ]; then usage; exit 0; fi
BASE=$1
shift
for arg in "$@"; do
  case "$arg" in
    --csv|--csv=*) echo "attention_ab: --csv is set by the tool (OUT_DIR)" >&2; exit 2 ;;
  esac
done
PASSES=${PASSES:-2}
OUT_DIR=${OUT_DIR:-out/attention-ab}
CUDA_ARCH=${CUDA_ARCH:-90a}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
case "$PASSES" in
  ''|*[!0-9]*|0) echo "attention_ab: PASSES must be a whole number >= 1" >&2; exit 2 ;;
esac
for entry in ${BASE_ENV:-} ${NEW_ENV:-}; do
  case "$entry" in
    [A-Za-z_]*=*) name=${entry%%=*}
      case "$name" in *[!A-Za-z0-9_]*) ;; *) continue ;; esac ;;
  esac
  echo "attention_ab: BASE_ENV and NEW_ENV take NAME=VALUE entries (got '$entry')" >&2
  exit 2
done
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)

if [ -d "$BASE" ]; then
  base_src=$(cd "$BASE" && pwd)
else
  git rev-parse --verify --quiet "$BASE^{commit}" >/dev/null ||
    { echo "attention_ab: '$BASE' is neither a directory nor a revision of this repository" >&2
      exit 2; }
  base_src=$OUT_DIR/base-src
  rm -rf "$base_src" && mkdir -p "$base_src"
  git archive "$BASE" | tar -x -C "$base_src"
fi
[ -f "$base_src/CMakeLists.txt" ] ||
  { echo "attention_ab: $base_src holds no CMakeLists.txt" >&2; exit 2; }

# The variants: each this tree's files (git's tracked and untracked-not-ignored ones, or where
# this copy has no .git every file but out/ and build*/) with its patch applied.
variants=()
for entry in ${VARIANTS:-}; do
  name=${entry%%=*}
  patch=${entry#*=}
  case "$name" in
    ''|base|new|*[!A-Za-z0-9_-]*)
      echo "attention_ab: VARIANTS takes NAME=PATCH, NAME of letters, digits, _ and - but not" \
        "base or new (got '$entry')" >&2; exit 2 ;;
  esac
  [ "$name" != "$entry" ] && [ -f "$patch" ] ||
    { echo "attention_ab: VARIANTS: '$entry': no patch file '$patch'" >&2; exit 2; }
  src=$OUT_DIR/src-$name
  rm -rf "$src" && mkdir -p "$src"
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -x -C "$src"
  else
    tar --exclude=./out --exclude='./build*' --exclude=./.git -cf - . | tar -x -C "$src"
  fi
  (cd "$src" && git apply "$(cd "$(dirname "$patch")" && pwd)/$(basename "$patch")") ||
    { echo "attention_ab: VARIANTS: $patch does not apply to this tree" >&2; exit 1; }
  variants+=("$name")
done

# BASE `.`: base runs the new side's build.
shared_build=0
[ "$base_src" = "$(pwd)" ] && shared_build=1
jobs=$(nproc)
trees=(new base "${variants[@]}")
built=(new "${variants[@]}")
[ "$shared_build" -eq 1 ] || built+=(base)
tree_jobs=$(( jobs / ${#built[@]} > 0 ? jobs / ${#built[@]} : 1 ))
build() {  # source dir, build dir, jobs, log
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" \
    >"$4" 2>&1 && cmake --build "$2" -j "$3" --target gpt2-attention-bench >>"$4" 2>&1
}
source_of() {
  case "$1" in base) echo "$base_src" ;; new) echo . ;; *) echo "$OUT_DIR/src-$1" ;; esac
}
binary_of() {
  local side=$1
  [ "$side" = base ] && [ "$shared_build" -eq 1 ] && side=new
  echo "$OUT_DIR/build-$side/gpt2-attention-bench"
}
env_of() { if [ "$1" = base ]; then echo "${BASE_ENV:-}"; else echo "${NEW_ENV:-}"; fi; }
echo "==== building ${built[*]} side by side (base: $base_src; new: this tree)"
[ -n "${BASE_ENV:-}${NEW_ENV:-}" ] &&
  echo "==== base runs with '${BASE_ENV:-}', new and variants with '${NEW_ENV:-}'"
pids=()
for side in "${built[@]}"; do
  build "$(source_of "$side")" "$OUT_DIR/build-$side" "$tree_jobs" "$OUT_DIR/build-$side.log" &
  pids+=($!)
done
for i in "${!built[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "attention_ab: the ${built[$i]} build failed ($OUT_DIR/build-${built[$i]}.log):" >&2
    grep -E "error" "$OUT_DIR/build-${built[$i]}.log" | head -20 >&2
    exit 1
  fi
done

failed=0
for pass in $(seq 1 "$PASSES"); do
  order="${trees[*]}"  # odd passes in this order, even ones reversed
  [ $((pass % 2)) -eq 0 ] && order=$(printf '%s\n' "${trees[@]}" | tac | tr '\n' ' ')
  for side in $order; do
    echo "==== pass $pass: $side"
    status=0
    # shellcheck disable=SC2046  # NAME=VALUE words, checked above
    env $(env_of "$side") timeout "$RUN_TIMEOUT" "$(binary_of "$side")" "$@" \
      --csv "$OUT_DIR/${side}_$pass.csv" >"$OUT_DIR/${side}_$pass.log" 2>&1 || status=$?
    if [ "$status" -ne 0 ]; then
      echo "attention_ab: $side pass $pass exited $status ($OUT_DIR/${side}_$pass.log)" >&2
      failed=1
    fi
  done
done

csvs() { for pass in $(seq 1 "$PASSES"); do
  [ -s "$OUT_DIR/${1}_$pass.csv" ] && echo "$OUT_DIR/${1}_$pass.csv"; done; }
mapfile -t base_csvs < <(csvs base)
for side in new "${variants[@]}"; do
  mapfile -t side_csvs < <(csvs "$side")
  if [ ${#base_csvs[@]} -eq 0 ] || [ ${#side_csvs[@]} -eq 0 ]; then
    echo "attention_ab: no complete pass of base or $side; nothing to compare" >&2
    failed=1
    continue
  fi
  summary=$OUT_DIR/summary.md
  if [ "$side" != new ]; then
    summary=$OUT_DIR/summary_$side.md
    echo "==== variant $side against base"
  fi
  python3 tools/attention_ab_summary.py --base "${base_csvs[@]}" --new "${side_csvs[@]}" \
    --markdown "$summary" || failed=1
done
exit "$failed"
