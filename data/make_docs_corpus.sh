#!/usr/bin/env bash
# Builds a ~20M-token English corpus from two Debian packages, for convergence runs too long
# for the embedded King James data (1M tokens: 2000 steps of B=16, T=1024 see it 33 times and
# overfit after ~1000). Not shipped: the shards are ~40 MB; this script rebuilds them.
#
#   - linux-doc-6.1: the Linux kernel's Documentation/ (GPL-2.0), one document per file,
#     without translations/ and the devicetree bindings (YAML);
#   - dict-gcide: the GNU Collaborative International Dictionary of English (GPL-3.0+; mostly
#     Webster's 1913), one document per 400 lines, cut at blank lines.
#
# 1% of the tokens (whole documents) go to validation.
#
# Usage (needs `apt-get install linux-doc-6.1 dict-gcide` and a built gpt2-tokenize):
#   data/make_docs_corpus.sh OUT_DIR [PATH/TO/gpt2-tokenize]
#     writes OUT_DIR/docs_train.bin and OUT_DIR/docs_val.bin
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(dirname "$script_dir")"
fail() { echo "make_docs_corpus.sh: $*" >&2; exit 1; }
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: make_docs_corpus.sh OUT_DIR [PATH/TO/gpt2-tokenize]" >&2
  exit 2
fi
out_dir="$1"
tokenize="${2:-$repo_root/build/gpt2-tokenize}"
kernel_docs=/usr/share/doc/linux-doc-6.1/Documentation
gcide=/usr/share/dictd/gcide.dict.dz

[[ -x "$tokenize" ]] || fail "gpt2-tokenize not found at '$tokenize' (build it, or pass its path)"
[[ -d "$kernel_docs" ]] || fail "'$kernel_docs' not found: install Debian's linux-doc-6.1"
[[ -f "$gcide" ]] || fail "'$gcide' not found: install Debian's dict-gcide"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/kernel" "$work/gcide" "$out_dir"

# Kernel documents keep their paths (slashes become '__') so the order is the sorted file list.
(cd "$kernel_docs" && find . -name '*.gz' -not -path './translations/*' \
    -not -path './devicetree/*' | LC_ALL=C sort) |
  while read -r path; do
    name="${path#./}"; name="${name%.gz}"; name="${name//\//__}"
    zcat "$kernel_docs/$path" > "$work/kernel/$name.txt"
  done

# The dictionary's first lines are its own header (00-database-*): dropped.
zcat "$gcide" | awk -v dir="$work/gcide" '
  /^00-database/ { skipping = 1 }
  skipping && /^$/ { skipping = 0; next }
  skipping { next }
  { if (!file || (lines >= 400 && $0 == "")) {
      if (file) close(file)
      file = sprintf("%s/gcide_%05d.txt", dir, ++count); lines = 0
      if ($0 == "") next
    }
    print > file; ++lines }'

"$tokenize" --input "$work/kernel" "$work/gcide" --output "$out_dir/docs_train.bin" \
  --val-output "$out_dir/docs_val.bin" --val-tokens-fraction 0.01 --threads "$(nproc)"
