/**
 * @file attention_positions.cpp
 * @brief Attention of query rows at given positions over a whole sequence's keys and values
 *        (CPU reference of context parallelism; contract in attention.h).
 *
 * Per (b, h, query row i at position p): s_j = scale q.k_j for keys j <= p, lse = log sum_j
 * exp(s_j), o = sum_j exp(s_j - lse) v_j. Backward recomputes P_j = exp(s_j - lse):
 * D = dO.o, dV_j += P_j dO, dP_j = dO.v_j, dS_j = P_j (dP_j - D), dQ = scale sum_j dS_j k_j,
 * dK_j += scale dS_j q. Scores are dot products in Real, in channel order (as the other CPU
 * attentions); the exponent sums, o, D and the gradients accumulate in double.
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

using detail::attention_score;

// The head size, the score scale and a key/value row's stride, after checking the shapes and
// that every query position is inside the sequence.
template <typename Real>
struct PositionsShape {
  PositionsShape(const int* q_pos, int B, int Tq, int Tk, int C, int NH)
      : HS(C / NH), scale(static_cast<Real>(1.0 / std::sqrt(static_cast<double>(C / NH)))),
        kv_stride(2 * static_cast<int64_t>(C)) {
    detail::check_attention_shape(B, Tq, C, NH);
    GPT2_CHECK(Tk > 0, "Tk=", Tk);
    for (int i = 0; i < Tq; ++i)
      GPT2_CHECK(q_pos[i] >= 0 && q_pos[i] < Tk, "query position ", q_pos[i], " of ", Tk);
  }
  int HS;
  Real scale;
  int64_t kv_stride;
};

}  // namespace

template <typename Real>
void attention_positions_forward(Real* out, Real* lse, const Real* q, int q_stride,
                                 const Real* kv, const int* q_pos, int B, int Tq, int Tk, int C,
                                 int NH) {
  const PositionsShape<Real> shape(q_pos, B, Tq, Tk, C, NH);
  const int HS = shape.HS;
  const int64_t C2 = shape.kv_stride;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      std::vector<double> s(static_cast<size_t>(Tk)), acc(static_cast<size_t>(HS));
      for (int i = 0; i < Tq; ++i) {
        const Real* qi = q + (static_cast<int64_t>(b) * Tq + i) * q_stride + h * HS;
        const Real* kv_b = kv + static_cast<int64_t>(b) * Tk * C2;
        const int last = q_pos[i];
        double max_s = -INFINITY;
        for (int j = 0; j <= last; ++j) {
          s[j] = static_cast<double>(attention_score(qi, kv_b + j * C2 + h * HS, HS, shape.scale));
          max_s = std::max(max_s, s[j]);
        }
        double sum = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = 0; j <= last; ++j) {
          const double p = std::exp(s[j] - max_s);
          sum += p;
          const Real* vj = kv_b + j * C2 + C + h * HS;
          for (int c = 0; c < HS; ++c) acc[c] += p * static_cast<double>(vj[c]);
        }
        Real* oi = out + (static_cast<int64_t>(b) * Tq + i) * C + h * HS;
        for (int c = 0; c < HS; ++c) oi[c] = static_cast<Real>(acc[c] / sum);
        lse[(static_cast<int64_t>(b) * NH + h) * Tq + i] = static_cast<Real>(max_s + std::log(sum));
      }
    }
  }
}

template <typename Real>
void attention_positions_backward(Real* dq, int dq_stride, Real* dkv, const Real* dout,
                                  const Real* q, int q_stride, const Real* kv, const Real* out,
                                  const Real* lse, const int* q_pos, int B, int Tq, int Tk,
                                  int C, int NH) {
  const PositionsShape<Real> shape(q_pos, B, Tq, Tk, C, NH);
  const int HS = shape.HS;
  const int64_t C2 = shape.kv_stride;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      // This head's key and value gradients of the sequence, added into dkv at the end.
      std::vector<double> dk(static_cast<size_t>(Tk) * HS, 0.0), dv(dk.size(), 0.0);
      std::vector<double> dqi(static_cast<size_t>(HS));
      const Real* kv_b = kv + static_cast<int64_t>(b) * Tk * C2;
      for (int i = 0; i < Tq; ++i) {
        const int64_t row = static_cast<int64_t>(b) * Tq + i;
        const Real* qi = q + row * q_stride + h * HS;
        const Real* oi = out + row * C + h * HS;
        const Real* doi = dout + row * C + h * HS;
        const double lse_i = static_cast<double>(lse[(static_cast<int64_t>(b) * NH + h) * Tq + i]);
        double D = 0.0;
        for (int c = 0; c < HS; ++c) D += static_cast<double>(doi[c]) * oi[c];
        std::fill(dqi.begin(), dqi.end(), 0.0);
        for (int j = 0; j <= q_pos[i]; ++j) {
          const Real* kj = kv_b + j * C2 + h * HS;
          const Real* vj = kv_b + j * C2 + C + h * HS;
          const double p =
              std::exp(static_cast<double>(attention_score(qi, kj, HS, shape.scale)) - lse_i);
          double dp = 0.0;
          for (int c = 0; c < HS; ++c) {
            dv[static_cast<size_t>(j) * HS + c] += p * doi[c];
            dp += static_cast<double>(doi[c]) * vj[c];
          }
          const double ds = p * (dp - D) * static_cast<double>(shape.scale);
          for (int c = 0; c < HS; ++c) {
            dqi[c] += ds * kj[c];
            dk[static_cast<size_t>(j) * HS + c] += ds * qi[c];
          }
        }
        Real* dq_row = dq + row * dq_stride + h * HS;
        for (int c = 0; c < HS; ++c) dq_row[c] = static_cast<Real>(dqi[c]);
      }
      Real* dkv_b = dkv + static_cast<int64_t>(b) * Tk * C2;
      for (int j = 0; j < Tk; ++j) {
        for (int c = 0; c < HS; ++c) {
          dkv_b[j * C2 + h * HS + c] += static_cast<Real>(dk[static_cast<size_t>(j) * HS + c]);
          dkv_b[j * C2 + C + h * HS + c] += static_cast<Real>(dv[static_cast<size_t>(j) * HS + c]);
        }
      }
    }
  }
}

template void attention_positions_forward<float>(float*, float*, const float*, int, const float*,
                                                 const int*, int, int, int, int, int);
template void attention_positions_forward<double>(double*, double*, const double*, int,
                                                  const double*, const int*, int, int, int, int,
                                                  int);
template void attention_positions_backward<float>(float*, int, float*, const float*,
                                                  const float*, int, const float*, const float*,
                                                  const float*, const int*, int, int, int, int,
                                                  int);
template void attention_positions_backward<double>(double*, int, double*, const double*,
                                                   const double*, int, const double*,
                                                   const double*, const double*, const int*, int,
                                                   int, int, int, int);

}  // namespace gpt2::cpu
