#!/usr/bin/env bash
# Regenerates the embedded default dataset, data/default/kjv_{train,val}.bin: the King James
# Bible (public domain) from Debian's bible-kjv package, one document per chapter, tokenized
# with GPT-2's tokenizer by gpt2-tokenize; 5% of the chapters (every 20th) are validation.
#
# Each chapter document is a title line ("Genesis 1", "Psalm 23"), an empty line, then one
# verse per line without the "Ge1:1" reference prefix (runs of spaces in two verses and a
# trailing space in one are reduced to single spaces). The whole Bible is kept.
#
# Usage (from anywhere; needs `apt-get install bible-kjv` and a built gpt2-tokenize):
#   data/make_default_data.sh [PATH/TO/gpt2-tokenize]     (default: build/gpt2-tokenize)
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(dirname "$script_dir")"
tokenize="${1:-$repo_root/build/gpt2-tokenize}"
out_dir="$script_dir/default"

fail() { echo "make_default_data.sh: $*" >&2; exit 1; }
[[ -x "$tokenize" ]] || fail "gpt2-tokenize not found at '$tokenize' (build it, or pass its path)"
command -v bible > /dev/null || fail "'bible' not found: install Debian's bible-kjv package"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/chapters" "$out_dir"

# -f turns pretty-printing off: one verse per line, "Ge1:1 In the beginning ...".
env -u COLUMNS bible -f "Genesis 1:1-Revelation 22:21" > "$work/kjv.txt"

# The 66 books in the order bible prints them (its abbreviations change at each new book).
books="Genesis|Exodus|Leviticus|Numbers|Deuteronomy|Joshua|Judges|Ruth|1 Samuel|2 Samuel|\
1 Kings|2 Kings|1 Chronicles|2 Chronicles|Ezra|Nehemiah|Esther|Job|Psalms|Proverbs|\
Ecclesiastes|Song of Solomon|Isaiah|Jeremiah|Lamentations|Ezekiel|Daniel|Hosea|Joel|Amos|\
Obadiah|Jonah|Micah|Nahum|Habakkuk|Zephaniah|Haggai|Zechariah|Malachi|Matthew|Mark|Luke|\
John|Acts|Romans|1 Corinthians|2 Corinthians|Galatians|Ephesians|Philippians|Colossians|\
1 Thessalonians|2 Thessalonians|1 Timothy|2 Timothy|Titus|Philemon|Hebrews|James|1 Peter|\
2 Peter|1 John|2 John|3 John|Jude|Revelation"

awk -v dir="$work/chapters" -v books="$books" '
  BEGIN { num_books = split(books, name, "|") }
  {
    if (!match($0, /^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ /)) {
      print "unexpected line " NR ": " $0 > "/dev/stderr"; exit 1
    }
    ref = substr($0, 1, RLENGTH - 1)
    text = substr($0, RLENGTH + 1)
    match(ref, /^[0-9]?[A-Za-z]+/)
    abbrev = substr(ref, 1, RLENGTH)
    chapter = substr(ref, RLENGTH + 1)
    sub(/:.*/, "", chapter)
    gsub(/  +/, " ", text)
    sub(/ +$/, "", text)
    if (abbrev != last_abbrev) { ++book; last_abbrev = abbrev; last_chapter = "" }
    if (chapter != last_chapter) {
      if (file != "") close(file)
      file = sprintf("%s/%04d.txt", dir, ++chapters)
      title = (name[book] == "Psalms" ? "Psalm" : name[book]) " " chapter
      printf "%s\n\n", title > file
      last_chapter = chapter
    }
    print text > file
    ++verses
  }
  END {
    if (book != num_books || chapters != 1189 || verses != 31102) {
      printf "expected 66 books, 1189 chapters, 31102 verses; got %d, %d, %d\n",
             book, chapters, verses > "/dev/stderr"
      exit 1
    }
  }' "$work/kjv.txt"

# The tokenizer files of this checkout, whatever GPT2_DATA_DIR says.
GPT2_DATA_DIR="$script_dir" "$tokenize" --input "$work"/chapters/*.txt \
  --output "$out_dir/kjv_train.bin" --val-output "$out_dir/kjv_val.bin" --val-fraction 0.05
