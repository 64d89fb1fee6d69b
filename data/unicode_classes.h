/**
 * @file unicode_classes.h
 * @brief The Unicode character classes of GPT-2's pre-tokenization pattern.
 *
 * char_class() tells whether a code point is a letter (\p{L}), a number (\p{N}), white space
 * (\s) or anything else, exactly as JavaScript's /\p{L}/u, /\p{N}/u and /\s/u decide — the
 * regexes gpt-3-encoder's Encoder.js uses — so pre-tokenization matches that reference. The
 * tables in generated/unicode_classes.cpp are written by tools/gen_unicode_tables.js (which
 * records the node and Unicode versions); regenerate them rather than editing. The three
 * classes are disjoint. Code points above U+10FFFF and surrogates are kOther.
 */
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpt2 {

enum class CharClass : uint8_t { kOther, kLetter, kNumber, kSpace };

/// An inclusive range [first, last] of code points sharing one class (never kOther).
struct CodePointRange {
  uint32_t first;
  uint32_t last;
  CharClass char_class;
};

/// Sorted, non-overlapping; code points in no range are kOther.
extern const CodePointRange kCodePointRanges[];
extern const size_t kNumCodePointRanges;

CharClass char_class(uint32_t code_point);

}  // namespace gpt2
