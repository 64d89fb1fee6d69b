/**
 * @file attention_naive.cpp
 * @brief Causal self-attention that materializes P (B,NH,T,T) (CPU reference).
 *
 * Forward, per (b, h, query t): s[t2] = scale * (q_t . k_t2) for t2 <= t (dot over HS in Real,
 * scale = 1/sqrt(HS)), P = softmax(s) with max, exponentials and sum in double, stored as Real
 * with the masked entries t2 > t written as 0; out_t = sum_t2 P[t2] v_t2 summed in double.
 * Parallel over the B*NH*T query rows.
 * Backward, per (b, h) (one thread each, in query order): dP = dO V^T and D = rowsum(P * dP)
 * in double, dS = P * (dP - D); dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO summed in
 * double; dqkv is overwritten (=) in full. Offsets into (B,NH,T,T) are 64-bit.
 * The flash version (attention_flash.cpp) computes the scores with the same expression, so the
 * two agree to rounding of the softmax and the sums.
 * Decode (one query per sequence over a key/value cache) runs the same row function as the
 * forward, with the keys and values read from the cache's (capacity, HS) rows instead of the
 * qkv rows: a decoded row is the naive forward's row bit for bit. Parallel over B*NH.
 */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_common.h"

namespace gpt2::cpu {
namespace {

using namespace detail;  // attention_common.h: what the CPU attentions share

// One query row: o = sum_j p_j v_j with p = softmax_j(scale q.k_j) over the n keys
// k_j = k + j*kv_stride, v_j = v + j*kv_stride; max, exponentials and sums in double. Writes
// p_j to prob_row[j] unless prob_row is nullptr. weights (n) and acc (HS) are scratch.
template <typename Real>
inline void attention_row_forward(Real* o, Real* prob_row, const Real* q, const Real* k,
                                  const Real* v, int64_t kv_stride, int n, int HS, Real scale,
                                  double* weights, double* acc) {
  double max_score = -INFINITY;
  for (int j = 0; j < n; ++j) {
    weights[j] = attention_score(q, k + j * kv_stride, HS, scale);
    max_score = std::max(max_score, weights[j]);
  }
  double sum = 0.0;
  for (int j = 0; j < n; ++j) {
    weights[j] = std::exp(weights[j] - max_score);
    sum += weights[j];
  }
  const double inv_sum = 1.0 / sum;
  std::fill(acc, acc + HS, 0.0);
  for (int j = 0; j < n; ++j) {
    const double p = weights[j] * inv_sum;
    if (prob_row != nullptr) prob_row[j] = static_cast<Real>(p);
    const Real* v_j = v + j * kv_stride;
    for (int i = 0; i < HS; ++i) acc[i] += p * v_j[i];
  }
  for (int i = 0; i < HS; ++i) o[i] = static_cast<Real>(acc[i]);
}

}  // namespace

template <typename Real>
void attention_naive_forward(Real* out, Real* probs, const Real* qkv, int B, int T, int C,
                             int NH) {
  detail::check_attention_shape(B, T, C, NH);
  const int HS = C / NH;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const Real scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(HS)));
  const int64_t num_rows = static_cast<int64_t>(B) * NH * T;
#pragma omp parallel if (B * NH * int64_t{T} * T * HS >= kMinParallelWork)
  {
    std::vector<double> weights(T);
    std::vector<double> acc(HS);
#pragma omp for schedule(dynamic, 16)
    for (int64_t row = 0; row < num_rows; ++row) {
      const int t = static_cast<int>(row % T);  // row = (b*NH + h)*T + t
      const HeadRows at(row / T, NH, T, C);
      Real* prob_row = probs + row * T;
      attention_row_forward(out + at.row(t), prob_row, qkv + at.qkv(t), qkv + at.qkv(0) + C,
                            qkv + at.qkv(0) + 2 * C, C3, t + 1, HS, scale, weights.data(),
                            acc.data());
      for (int t2 = t + 1; t2 < T; ++t2) prob_row[t2] = Real(0);
    }
  }
}

template <typename Real>
void attention_naive_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* probs,
                              int B, int T, int C, int NH) {
  detail::check_attention_shape(B, T, C, NH);
  const int HS = C / NH;
  const double scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(HS)));
  const int64_t num_heads = static_cast<int64_t>(B) * NH;
#pragma omp parallel if (B * NH * int64_t{T} * T * HS >= kMinParallelWork)
  {
    std::vector<double> dprob(T);
    std::vector<double> dq(HS);
    std::vector<double> dk(static_cast<size_t>(T) * HS);  // (T, HS) of this head
    std::vector<double> dv(static_cast<size_t>(T) * HS);
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < num_heads; ++bh) {
      const HeadRows at(bh, NH, T, C);
      std::fill(dk.begin(), dk.end(), 0.0);
      std::fill(dv.begin(), dv.end(), 0.0);
      for (int t = 0; t < T; ++t) {
        const Real* prob_row = probs + (bh * T + t) * T;
        const Real* dO = dout + at.row(t);
        const Real* q = qkv + at.qkv(t);
        double row_dot = 0.0;  // D = sum_t2 P * dP
        for (int t2 = 0; t2 <= t; ++t2) {
          const Real* v = qkv + at.qkv(t2) + 2 * C;
          double dp = 0.0;
          for (int i = 0; i < HS; ++i) dp += static_cast<double>(dO[i]) * v[i];
          dprob[t2] = dp;
          row_dot += prob_row[t2] * dp;
        }
        std::fill(dq.begin(), dq.end(), 0.0);
        for (int t2 = 0; t2 <= t; ++t2) {
          const double p = prob_row[t2];
          const double ds = p * (dprob[t2] - row_dot);
          const Real* k = qkv + at.qkv(t2) + C;
          double* dk_row = dk.data() + static_cast<int64_t>(t2) * HS;
          double* dv_row = dv.data() + static_cast<int64_t>(t2) * HS;
          for (int i = 0; i < HS; ++i) {
            dq[i] += ds * k[i];
            dk_row[i] += ds * q[i];
            dv_row[i] += p * dO[i];
          }
        }
        Real* dq_out = dqkv + at.qkv(t);
        for (int i = 0; i < HS; ++i) dq_out[i] = static_cast<Real>(scale * dq[i]);
      }
      for (int t2 = 0; t2 < T; ++t2) {
        Real* dk_out = dqkv + at.qkv(t2) + C;
        Real* dv_out = dk_out + C;
        for (int i = 0; i < HS; ++i) {
          dk_out[i] = static_cast<Real>(scale * dk[static_cast<int64_t>(t2) * HS + i]);
          dv_out[i] = static_cast<Real>(dv[static_cast<int64_t>(t2) * HS + i]);
        }
      }
    }
  }
}

template <typename Real>
void attention_kv_cache_write(Real* k_cache, Real* v_cache, const Real* qkv, int B, int T, int C,
                              int NH, int pos, int capacity) {
  detail::check_attention_shape(B, T, C, NH);
  GPT2_CHECK(pos >= 0 && pos + T <= capacity, "positions [", pos, ", ", pos + T,
             ") in a cache of ", capacity);
  const int HS = C / NH;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  for (int64_t b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const int64_t row0 = (b * NH + h) * capacity + pos;  // cache row of position pos
      for (int t = 0; t < T; ++t) {
        const Real* k = qkv + (b * T + t) * C3 + C + h * HS;
        const Real* v = k + C;
        std::copy(k, k + HS, k_cache + (row0 + t) * HS);
        std::copy(v, v + HS, v_cache + (row0 + t) * HS);
      }
    }
  }
}

template <typename Real>
void attention_decode_forward(Real* out, const Real* qkv, const Real* k_cache,
                              const Real* v_cache, int B, int C, int NH, int length,
                              int capacity) {
  GPT2_CHECK(B > 0 && NH > 0 && C > 0 && C % NH == 0, "B=", B, " C=", C, " NH=", NH);
  GPT2_CHECK(length >= 1 && length <= capacity, "length ", length, " in a cache of ", capacity);
  const int HS = C / NH;
  const Real scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(HS)));
  const int64_t num_heads = static_cast<int64_t>(B) * NH;
#pragma omp parallel if (num_heads * length * HS >= kMinParallelWork)
  {
    std::vector<double> weights(length);
    std::vector<double> acc(HS);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < num_heads; ++bh) {
      const HeadRows at(bh, NH, /*T=*/1, C);  // one query per sequence
      const int64_t row0 = bh * capacity;      // cache row of position 0
      attention_row_forward(out + at.row(0), static_cast<Real*>(nullptr), qkv + at.qkv(0),
                            k_cache + row0 * HS, v_cache + row0 * HS,
                            int64_t{HS}, length, HS, scale, weights.data(), acc.data());
    }
  }
}

template void attention_naive_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_naive_forward<double>(double*, double*, const double*, int, int, int,
                                              int);
template void attention_naive_backward<float>(float*, const float*, const float*, const float*,
                                              int, int, int, int);
template void attention_naive_backward<double>(double*, const double*, const double*,
                                               const double*, int, int, int, int);

template void attention_kv_cache_write<float>(float*, float*, const float*, int, int, int, int,
                                              int, int);
template void attention_kv_cache_write<double>(double*, double*, const double*, int, int, int,
                                               int, int, int);
template void attention_decode_forward<float>(float*, const float*, const float*, const float*,
                                              int, int, int, int, int);
template void attention_decode_forward<double>(double*, const double*, const double*,
                                               const double*, int, int, int, int, int);

}  // namespace gpt2::cpu
