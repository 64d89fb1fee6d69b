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
#
# BASE: a directory holding the base sources (e.g. made here with `git archive REV | tar -x -C
# before`, and carried to the GPU machine), or a revision of this repository (git archive of it;
# on a machine whose copy of .git may lag the working tree, a directory is the sure way).
# Environment: PASSES (2), OUT_DIR (out/attention-ab), CUDA_ARCH (90a), RUN_TIMEOUT (seconds a
# benchmark run may take, 600: a pass over 512-16K at both head sizes takes 30-70 s a kernel;
# a run cut short keeps the points it measured, as the benchmark rewrites its CSV after each T).
# The options go to both builds' benchmark (--csv is the tool's own).
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

jobs=$(nproc)
build() {  # source dir, build dir, jobs, log
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" \
    >"$4" 2>&1 && cmake --build "$2" -j "$3" --target gpt2-attention-bench >>"$4" 2>&1
}
echo "==== building base ($base_src) and new (this tree) side by side"
build "$base_src" "$OUT_DIR/build-base" $(( (jobs + 1) / 2 )) "$OUT_DIR/build-base.log" &
base_pid=$!
new_status=0
build . "$OUT_DIR/build-new" $(( jobs / 2 > 0 ? jobs / 2 : 1 )) "$OUT_DIR/build-new.log" ||
  new_status=$?
base_status=0
wait "$base_pid" || base_status=$?
for side in base new; do
  status_var=${side}_status
  if [ "${!status_var}" -ne 0 ]; then
    echo "attention_ab: the $side build failed ($OUT_DIR/build-$side.log):" >&2
    grep -E "error" "$OUT_DIR/build-$side.log" | head -20 >&2
    exit 1
  fi
done

failed=0
for pass in $(seq 1 "$PASSES"); do
  order="new base"
  [ $((pass % 2)) -eq 0 ] && order="base new"
  for side in $order; do
    echo "==== pass $pass: $side"
    status=0
    timeout "$RUN_TIMEOUT" "$OUT_DIR/build-$side/gpt2-attention-bench" "$@" \
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
mapfile -t new_csvs < <(csvs new)
if [ ${#base_csvs[@]} -eq 0 ] || [ ${#new_csvs[@]} -eq 0 ]; then
  echo "attention_ab: no complete pass on one side; nothing to compare" >&2
  exit 1
fi
python3 tools/attention_ab_summary.py --base "${base_csvs[@]}" --new "${new_csvs[@]}" \
  --markdown "$OUT_DIR/summary.md"
exit "$failed"
