/**
 * @file attention_common.h
 * @brief What the CPU attentions (naive, flash, at positions) share: the score of a query and a
 *        key, the shape check, and when a call is worth a parallel region. Internal to
 *        kernels/cpu.
 */
#pragma once

#include <cstdint>

#include "base/error.h"

namespace gpt2::cpu::detail {

// Below this much work (B*NH*T*T*HS) a parallel region costs more than it saves (much more
// when the cores are shared), so small calls run on the calling thread.
constexpr int64_t kMinParallelWork = int64_t{1} << 18;

// scale * (q . k) over HS channels, in Real, in channel order: every CPU attention scores the
// same way, so their scores are the same bits.
template <typename Real>
inline Real attention_score(const Real* q, const Real* k, int HS, Real scale) {
  Real dot = 0;
  for (int i = 0; i < HS; ++i) dot += q[i] * k[i];
  return dot * scale;
}

/// Head bh of the B*NH heads, numbered b * NH + h (sequence b, head h), and where it finds
/// position t in GPT-2's layouts (64-bit offsets): in qkv and dqkv (B,T,3C) its query at
/// qkv(t), key at qkv(t) + C and value at qkv(t) + 2C; in out and dout (B,T,C) its row at row(t).
struct HeadRows {
  HeadRows(int64_t bh, int NH, int T, int C)
      : b(bh / NH), h(static_cast<int>(bh % NH)), T_(T), C_(C), HS_(C / NH) {}
  int64_t qkv(int t) const { return (b * T_ + t) * 3 * int64_t{C_} + int64_t{h} * HS_; }
  int64_t row(int t) const { return (b * T_ + t) * int64_t{C_} + int64_t{h} * HS_; }
  int64_t b;
  int h;

 private:
  int T_, C_, HS_;
};

inline void check_attention_shape(int B, int T, int C, int NH) {
  GPT2_CHECK(B > 0 && T > 0 && NH > 0 && C > 0 && C % NH == 0, "B=", B, " T=", T, " C=", C,
             " NH=", NH);
}

}  // namespace gpt2::cpu::detail
