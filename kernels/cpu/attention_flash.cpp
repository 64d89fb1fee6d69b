/**
 * @file attention_flash.cpp
 * @brief Causal self-attention by the FlashAttention-2 algorithm (CPU reference).
 *
 * Forward, per (b, h, query block Qi of block_q rows): for each key block Kj of block_k rows
 * that is not wholly above the causal diagonal: S = scale Qi Kj^T (masked where key > query),
 * m_new = max(m, rowmax S), P = exp(S - m_new), l = exp(m - m_new) l + rowsum P,
 * acc = exp(m - m_new) acc + P Vj. At the end O = acc / l, lse = m + log(l) (B,NH,T).
 * Backward, per (b, h): D = rowsum(dO * O); for each key block Kj, for each query block Qi on
 * or below the diagonal: P = exp(S - lse) recomputed, dVj += P^T dOi, dP = dOi Vj^T,
 * dS = P * (dP - D), dQi += scale dS Kj, dKj += scale dS^T Qi.
 * Scores are dot products over HS in Real with the same expression as attention_naive.cpp;
 * m, l, acc, D, dP and the dQ/dK/dV accumulators are double. Block sizes need not divide T.
 * Parallel over (b, h, query block) forward and (b, h) backward, each owned by one thread, so
 * results do not depend on the thread count. dqkv is overwritten (=); nothing T x T is stored.
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

void check_shapes(int B, int T, int C, int NH, FlashBlocks blocks) {
  detail::check_attention_shape(B, T, C, NH);
  GPT2_CHECK(blocks.block_q > 0 && blocks.block_k > 0, "block_q=", blocks.block_q,
             " block_k=", blocks.block_k);
}

}  // namespace

template <typename Real>
void attention_flash_forward(Real* out, Real* lse, const Real* qkv, int B, int T, int C, int NH,
                             FlashBlocks blocks) {
  check_shapes(B, T, C, NH, blocks);
  const int HS = C / NH;
  const Real scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(HS)));
  const int block_q = blocks.block_q;
  const int block_k = blocks.block_k;
  const int num_q_blocks = (T + block_q - 1) / block_q;
  const int64_t num_tasks = static_cast<int64_t>(B) * NH * num_q_blocks;
#pragma omp parallel if (B * NH * int64_t{T} * T * HS >= kMinParallelWork)
  {
    std::vector<double> row_max(block_q), row_sum(block_q);
    std::vector<double> acc(static_cast<size_t>(block_q) * HS);          // (block_q, HS)
    std::vector<double> tile(static_cast<size_t>(block_q) * block_k);    // S, then P
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < num_tasks; ++task) {
      const int qb = static_cast<int>(task % num_q_blocks);
      const int64_t bh = task / num_q_blocks;
      const HeadRows at(bh, NH, T, C);
      const int q0 = qb * block_q;
      const int q_rows = std::min(block_q, T - q0);
      std::fill(row_max.begin(), row_max.end(), -INFINITY);
      std::fill(row_sum.begin(), row_sum.end(), 0.0);
      std::fill(acc.begin(), acc.end(), 0.0);
      // Key blocks starting after the last query of this block are wholly masked: skipped.
      for (int k0 = 0; k0 <= q0 + q_rows - 1; k0 += block_k) {
        const int k_rows = std::min(block_k, T - k0);
        for (int r = 0; r < q_rows; ++r) {
          const int t = q0 + r;
          const int visible = std::min(k_rows, t - k0 + 1);  // keys k0 .. t of this block
          if (visible <= 0) continue;  // row wholly masked in this (diagonal) block
          const Real* q = qkv + at.qkv(t);
          double* s = tile.data() + static_cast<int64_t>(r) * block_k;
          double block_max = -INFINITY;
          for (int c = 0; c < visible; ++c) {
            s[c] = attention_score(q, qkv + at.qkv(k0 + c) + C, HS, scale);
            block_max = std::max(block_max, s[c]);
          }
          const double new_max = std::max(row_max[r], block_max);
          const double correction = std::exp(row_max[r] - new_max);  // 0 on the first block
          double p_sum = 0.0;
          for (int c = 0; c < visible; ++c) {
            s[c] = std::exp(s[c] - new_max);
            p_sum += s[c];
          }
          row_sum[r] = correction * row_sum[r] + p_sum;
          row_max[r] = new_max;
          double* acc_row = acc.data() + static_cast<int64_t>(r) * HS;
          for (int i = 0; i < HS; ++i) acc_row[i] *= correction;
          for (int c = 0; c < visible; ++c) {
            const Real* v = qkv + at.qkv(k0 + c) + 2 * C;
            for (int i = 0; i < HS; ++i) acc_row[i] += s[c] * v[i];
          }
        }
      }
      for (int r = 0; r < q_rows; ++r) {
        const int t = q0 + r;
        Real* o = out + at.row(t);
        const double inv_sum = 1.0 / row_sum[r];
        for (int i = 0; i < HS; ++i)
          o[i] = static_cast<Real>(acc[static_cast<int64_t>(r) * HS + i] * inv_sum);
        lse[bh * T + t] = static_cast<Real>(row_max[r] + std::log(row_sum[r]));
      }
    }
  }
}

template <typename Real>
void attention_flash_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* out,
                              const Real* lse, int B, int T, int C, int NH, FlashBlocks blocks) {
  check_shapes(B, T, C, NH, blocks);
  const int HS = C / NH;
  const Real scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(HS)));
  const int block_q = blocks.block_q;
  const int block_k = blocks.block_k;
  const int64_t num_heads = static_cast<int64_t>(B) * NH;
#pragma omp parallel if (B * NH * int64_t{T} * T * HS >= kMinParallelWork)
  {
    std::vector<double> row_dot(T);                                      // D, (T)
    std::vector<double> dq(static_cast<size_t>(T) * HS);                 // (T, HS)
    std::vector<double> dk(static_cast<size_t>(block_k) * HS);           // (block_k, HS)
    std::vector<double> dv(static_cast<size_t>(block_k) * HS);
    std::vector<double> p(static_cast<size_t>(block_q) * block_k);       // P tile
    std::vector<double> ds(static_cast<size_t>(block_q) * block_k);      // dS tile
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < num_heads; ++bh) {
      const HeadRows at(bh, NH, T, C);
      auto q_of = [&](int t) { return qkv + at.qkv(t); };
      auto k_of = [&](int t) { return qkv + at.qkv(t) + C; };
      auto v_of = [&](int t) { return qkv + at.qkv(t) + 2 * C; };
      auto do_of = [&](int t) { return dout + at.row(t); };
      for (int t = 0; t < T; ++t) {
        const Real* o = out + at.row(t);
        const Real* d_o = do_of(t);
        double dot = 0.0;
        for (int i = 0; i < HS; ++i) dot += static_cast<double>(d_o[i]) * o[i];
        row_dot[t] = dot;
      }
      std::fill(dq.begin(), dq.end(), 0.0);
      for (int k0 = 0; k0 < T; k0 += block_k) {
        const int k_rows = std::min(block_k, T - k0);
        std::fill(dk.begin(), dk.end(), 0.0);
        std::fill(dv.begin(), dv.end(), 0.0);
        // Query blocks ending before k0 see none of these keys: start at the one holding k0.
        for (int q0 = k0 / block_q * block_q; q0 < T; q0 += block_q) {
          const int q_rows = std::min(block_q, T - q0);
          // P and dS for the tile; masked entries (key > query) are neither formed nor used.
          for (int r = 0; r < q_rows; ++r) {
            const int t = q0 + r;
            const int visible = std::clamp(t - k0 + 1, 0, k_rows);
            const double row_lse = lse[bh * T + t];
            const Real* d_o = do_of(t);
            double* p_row = p.data() + static_cast<int64_t>(r) * block_k;
            double* ds_row = ds.data() + static_cast<int64_t>(r) * block_k;
            for (int c = 0; c < visible; ++c) {
              p_row[c] = std::exp(attention_score(q_of(t), k_of(k0 + c), HS, scale) - row_lse);
              const Real* v = v_of(k0 + c);
              double dp = 0.0;
              for (int i = 0; i < HS; ++i) dp += static_cast<double>(d_o[i]) * v[i];
              ds_row[c] = p_row[c] * (dp - row_dot[t]);
            }
          }
          // dV += P^T dO, dK += scale dS^T Q, dQ += scale dS K.
          for (int r = 0; r < q_rows; ++r) {
            const int t = q0 + r;
            const Real* d_o = do_of(t);
            const Real* q = q_of(t);
            double* dq_row = dq.data() + static_cast<int64_t>(t) * HS;
            const int visible = std::clamp(t - k0 + 1, 0, k_rows);
            for (int c = 0; c < visible; ++c) {
              const double p_rc = p[static_cast<int64_t>(r) * block_k + c];
              const double ds_rc = ds[static_cast<int64_t>(r) * block_k + c];
              const Real* k = k_of(k0 + c);
              double* dk_row = dk.data() + static_cast<int64_t>(c) * HS;
              double* dv_row = dv.data() + static_cast<int64_t>(c) * HS;
              for (int i = 0; i < HS; ++i) {
                dv_row[i] += p_rc * d_o[i];
                dk_row[i] += ds_rc * q[i];
                dq_row[i] += ds_rc * k[i];
              }
            }
          }
        }
        for (int c = 0; c < k_rows; ++c) {
          Real* dk_out = dqkv + at.qkv(k0 + c) + C;
          Real* dv_out = dk_out + C;
          for (int i = 0; i < HS; ++i) {
            dk_out[i] = static_cast<Real>(scale * dk[static_cast<int64_t>(c) * HS + i]);
            dv_out[i] = static_cast<Real>(dv[static_cast<int64_t>(c) * HS + i]);
          }
        }
      }
      for (int t = 0; t < T; ++t) {
        Real* dq_out = dqkv + at.qkv(t);
        for (int i = 0; i < HS; ++i)
          dq_out[i] = static_cast<Real>(scale * dq[static_cast<int64_t>(t) * HS + i]);
      }
    }
  }
}

template void attention_flash_forward<float>(float*, float*, const float*, int, int, int, int,
                                             FlashBlocks);
template void attention_flash_forward<double>(double*, double*, const double*, int, int, int,
                                              int, FlashBlocks);
template void attention_flash_backward<float>(float*, const float*, const float*, const float*,
                                              const float*, int, int, int, int, FlashBlocks);
template void attention_flash_backward<double>(double*, const double*, const double*,
                                               const double*, const double*, int, int, int, int,
                                               FlashBlocks);

}  // namespace gpt2::cpu
