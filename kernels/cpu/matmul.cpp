/**
 * @file matmul.cpp
 * @brief Dense layer out = inp @ weight^T + bias, forward and backward (CPU reference).
 *
 * All three products (out, dinp, dweight) run through one cache-blocked GEMM, C = A B: the
 * output is cut into task tiles (task_rows x kTaskCols) that OpenMP hands to threads; a task
 * walks K in chunks of kBlockK and runs a register-tiled micro-kernel whose inner loop is
 * contiguous over output columns, so it auto-vectorizes on plain SSE2. Operands are read in
 * place where their layout allows and packed per chunk where it does not (weight^T in the
 * forward) or where they must be converted (to double for dweight).
 * Every output element is owned by one task and summed k = 0, 1, ..., K-1 in order, so the
 * result does not depend on the thread count.
 * Accumulation: out and dinp in Real (dot products over C and OC); dweight and dbias in double
 * (sums over B*T), then added (+=) to the Real gradients. Sizes and offsets are 64-bit.
 */
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "base/error.h"

namespace gpt2::cpu {
namespace {

// Register tile of the micro-kernel (kRows x kCols accumulators). Chosen by measurement with
// GCC 12 at -O3 on SSE2: some shapes (e.g. float 6x8, 3x16) vectorize into shuffle-heavy code
// at a sixth of the speed or less, so change these only with a benchmark at hand.
template <typename Acc>
struct MicroTile;
template <>
struct MicroTile<float> {
  static constexpr int kRows = 2;
  static constexpr int kCols = 32;
};
template <>
struct MicroTile<double> {
  static constexpr int kRows = 2;
  static constexpr int kCols = 8;
};

// Task tile and K chunk: a task owns kTaskCols output columns of task_rows rows (a per-product
// choice, see the callers). One B micro-panel (kBlockK x kCols) stays in L1 while the
// micro-kernel sweeps the A rows.
constexpr int64_t kTaskCols = 64;  // multiple of every MicroTile::kCols
constexpr int64_t kBlockK = 256;

// Below this many multiply-adds a parallel region costs more than it saves (much more when
// the cores are shared), so small products run on the calling thread.
constexpr int64_t kMinParallelMacs = int64_t{1} << 18;

// A(m, k) = data[m * row_stride + k * col_stride].
template <typename In>
struct MatrixView {
  const In* data;
  int64_t row_stride;
  int64_t col_stride;
};

// tile[r][j] += sum_k A[r][k] * B[k][j] over k = 0..kc-1 in order, A[r][k] = a[r * a_rs + k *
// a_ks], B[k][j] = b[k * b_ks + j]. The fixed-size r and j loops unroll fully, so acc lives in
// registers and the contiguous j loop becomes SIMD.
template <typename Acc, typename AIn>
inline void micro_kernel(Acc* __restrict tile, int64_t ldt, const AIn* __restrict a, int64_t a_rs,
                         int64_t a_ks, const Acc* __restrict b, int64_t b_ks, int64_t kc) {
  constexpr int kR = MicroTile<Acc>::kRows;
  constexpr int kC = MicroTile<Acc>::kCols;
  Acc acc[kR][kC];
  for (int r = 0; r < kR; ++r)
    for (int j = 0; j < kC; ++j) acc[r][j] = tile[r * ldt + j];
  for (int64_t k = 0; k < kc; ++k) {
    const Acc* b_k = b + k * b_ks;
    for (int r = 0; r < kR; ++r) {
      const Acc a_rk = static_cast<Acc>(a[r * a_rs + k * a_ks]);
      for (int j = 0; j < kC; ++j) acc[r][j] += a_rk * b_k[j];
    }
  }
  for (int r = 0; r < kR; ++r)
    for (int j = 0; j < kC; ++j) tile[r * ldt + j] = acc[r][j];
}

// The same sum for a partial tile (rows <= kRows, cols <= kCols) at the matrix edges; each
// element sees the same operations in the same order as in micro_kernel. Row by row with k
// outside and the contiguous j loop inside, so it vectorizes too: a single-row product (a
// decode step's B rows of one position) runs entirely here.
template <typename Acc, typename AIn>
void edge_kernel(Acc* tile, int64_t ldt, const AIn* a, int64_t a_rs, int64_t a_ks, const Acc* b,
                 int64_t b_ks, int64_t kc, int64_t rows, int64_t cols) {
  constexpr int kC = MicroTile<Acc>::kCols;
  Acc acc[kC];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) acc[j] = tile[r * ldt + j];
    for (int64_t k = 0; k < kc; ++k) {
      const Acc a_rk = static_cast<Acc>(a[r * a_rs + k * a_ks]);
      const Acc* b_k = b + k * b_ks;
      for (int64_t j = 0; j < cols; ++j) acc[j] += a_rk * b_k[j];
    }
    for (int64_t j = 0; j < cols; ++j) tile[r * ldt + j] = acc[j];
  }
}

// dst[i * dst_is + j * dst_js] = X(i0 + i, j0 + j) for i < ni, j < nj, converted to Acc. The
// loop order follows whichever side of X is contiguous, so the reads stream.
template <typename Acc, typename In>
void pack_chunk(Acc* dst, int64_t dst_is, int64_t dst_js, MatrixView<In> x, int64_t i0,
                int64_t j0, int64_t ni, int64_t nj) {
  const In* src = x.data + i0 * x.row_stride + j0 * x.col_stride;
  if (x.col_stride == 1) {
    for (int64_t i = 0; i < ni; ++i)
      for (int64_t j = 0; j < nj; ++j)
        dst[i * dst_is + j * dst_js] = static_cast<Acc>(src[i * x.row_stride + j]);
  } else {
    for (int64_t j = 0; j < nj; ++j)
      for (int64_t i = 0; i < ni; ++i)
        dst[i * dst_is + j * dst_js] = static_cast<Acc>(src[i * x.row_stride + j * x.col_stride]);
  }
}

// C (M x N) = A (M x K) B (K x N), accumulated in Acc from zero. Each task tile is handed to
// store(m0, n0, rows, cols, tile, ldt), which writes or accumulates it into the real output.
// A is read in place unless pack_a (then it is converted into a contiguous [m][k] chunk);
// B is read in place when it is already Acc with contiguous rows, else packed per K chunk.
template <typename Acc, typename In, typename Store>
void blocked_gemm(int64_t M, int64_t N, int64_t K, MatrixView<In> a, MatrixView<In> b,
                  int64_t task_rows, bool pack_a, const Store& store) {
  constexpr int kR = MicroTile<Acc>::kRows;
  constexpr int kC = MicroTile<Acc>::kCols;
  constexpr bool kSameType = std::is_same_v<Acc, In>;
  const bool pack_b = !kSameType || b.col_stride != 1;
  GPT2_CHECK(kSameType || pack_a, "A must be packed to convert it");
  const int64_t tiles_m = (M + task_rows - 1) / task_rows;
  const int64_t tiles_n = (N + kTaskCols - 1) / kTaskCols;
  const int64_t num_tasks = tiles_m * tiles_n;
#pragma omp parallel if (M * N * K >= kMinParallelMacs)
  {
    std::vector<Acc> tile(task_rows * kTaskCols);
    std::vector<Acc> a_pack(pack_a ? task_rows * kBlockK : 0);
    std::vector<Acc> b_pack(pack_b ? kBlockK * kTaskCols : 0);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < num_tasks; ++task) {
      const int64_t m0 = (task % tiles_m) * task_rows;
      const int64_t n0 = (task / tiles_m) * kTaskCols;
      const int64_t rows = std::min(task_rows, M - m0);
      const int64_t cols = std::min(kTaskCols, N - n0);
      std::fill(tile.begin(), tile.end(), Acc(0));
      for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
        const int64_t kc = std::min(kBlockK, K - k0);
        const Acc* b_chunk = b_pack.data();
        int64_t b_ks = kTaskCols;
        if (pack_b) {
          pack_chunk(b_pack.data(), kTaskCols, int64_t{1}, b, k0, n0, kc, cols);
        } else if constexpr (kSameType) {
          b_chunk = b.data + k0 * b.row_stride + n0;
          b_ks = b.row_stride;
        }
        auto run_panels = [&](const auto* a_chunk, int64_t a_rs, int64_t a_ks) {
          for (int64_t j0 = 0; j0 < cols; j0 += kC) {
            const int64_t panel_cols = std::min<int64_t>(kC, cols - j0);
            for (int64_t r0 = 0; r0 < rows; r0 += kR) {
              const int64_t panel_rows = std::min<int64_t>(kR, rows - r0);
              Acc* tile_panel = tile.data() + r0 * kTaskCols + j0;
              const auto* a_panel = a_chunk + r0 * a_rs;
              if (panel_rows == kR && panel_cols == kC)
                micro_kernel(tile_panel, kTaskCols, a_panel, a_rs, a_ks, b_chunk + j0, b_ks, kc);
              else
                edge_kernel(tile_panel, kTaskCols, a_panel, a_rs, a_ks, b_chunk + j0, b_ks, kc,
                            panel_rows, panel_cols);
            }
          }
        };
        if (pack_a) {
          pack_chunk(a_pack.data(), kc, int64_t{1}, a, m0, k0, rows, kc);
          run_panels(a_pack.data(), kc, int64_t{1});
        } else {
          run_panels(a.data + m0 * a.row_stride + k0 * a.col_stride, a.row_stride, a.col_stride);
        }
      }
      store(m0, n0, rows, cols, tile.data(), kTaskCols);
    }
  }
}

}  // namespace

template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias,
                    int B, int T, int C, int OC) {
  GPT2_CHECK(B > 0 && T > 0 && C > 0 && OC > 0, "B=", B, " T=", T, " C=", C, " OC=", OC);
  const int64_t BT = static_cast<int64_t>(B) * T;
  // out (BT x OC) = inp (BT x C) . weight^T (C x OC). inp is read in place; weight^T is
  // packed per task, so tall tasks (256 rows) amortize the packing.
  blocked_gemm<Real>(BT, OC, C, MatrixView<Real>{inp, C, 1}, MatrixView<Real>{weight, 1, C},
                     /*task_rows=*/256, /*pack_a=*/false,
                     [&](int64_t m0, int64_t n0, int64_t rows, int64_t cols, const Real* tile,
                         int64_t ldt) {
                       for (int64_t r = 0; r < rows; ++r) {
                         Real* out_row = out + (m0 + r) * OC + n0;
                         const Real* tile_row = tile + r * ldt;
                         if (bias != nullptr) {
                           for (int64_t j = 0; j < cols; ++j)
                             out_row[j] = tile_row[j] + bias[n0 + j];
                         } else {
                           for (int64_t j = 0; j < cols; ++j) out_row[j] = tile_row[j];
                         }
                       }
                     });
}

template <typename Real>
void matmul_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                     const Real* weight, int B, int T, int C, int OC) {
  GPT2_CHECK(B > 0 && T > 0 && C > 0 && OC > 0, "B=", B, " T=", T, " C=", C, " OC=", OC);
  const int64_t BT = static_cast<int64_t>(B) * T;
  if (dinp != nullptr) {
    // dinp (BT x C) = dout (BT x OC) . weight (OC x C), both read in place; 128-row tasks
    // stream weight half as often as 64-row ones (bench/NOTES.md: CPU matmul task rows).
    blocked_gemm<Real>(BT, C, OC, MatrixView<Real>{dout, OC, 1}, MatrixView<Real>{weight, C, 1},
                       /*task_rows=*/128, /*pack_a=*/false,
                       [&](int64_t m0, int64_t n0, int64_t rows, int64_t cols, const Real* tile,
                           int64_t ldt) {
                         for (int64_t r = 0; r < rows; ++r)
                           std::copy(tile + r * ldt, tile + r * ldt + cols,
                                     dinp + (m0 + r) * C + n0);
                       });
  }
  // dweight (OC x C) += dout^T (OC x BT) . inp (BT x C), summed in double: both operands are
  // packed (converted), and tall tasks (256 rows) amortize the packing of inp.
  blocked_gemm<double>(OC, C, BT, MatrixView<Real>{dout, 1, OC}, MatrixView<Real>{inp, C, 1},
                       /*task_rows=*/256, /*pack_a=*/true,
                       [&](int64_t m0, int64_t n0, int64_t rows, int64_t cols,
                           const double* tile, int64_t ldt) {
                         for (int64_t r = 0; r < rows; ++r) {
                           Real* dweight_row = dweight + (m0 + r) * C + n0;
                           for (int64_t j = 0; j < cols; ++j)
                             dweight_row[j] += static_cast<Real>(tile[r * ldt + j]);
                         }
                       });
  if (dbias != nullptr) {
    // Column sums of dout: each thread owns a strip of columns and walks the rows in order.
    constexpr int64_t kStrip = 256;
    const int64_t num_strips = (OC + kStrip - 1) / kStrip;
#pragma omp parallel for schedule(static) if (BT * OC >= kMinParallelMacs)  // adds here
    for (int64_t s = 0; s < num_strips; ++s) {
      const int64_t o0 = s * kStrip;
      const int64_t width = std::min(kStrip, OC - o0);
      double sums[kStrip] = {};
      for (int64_t bt = 0; bt < BT; ++bt) {
        const Real* dout_row = dout + bt * OC + o0;
        for (int64_t j = 0; j < width; ++j) sums[j] += static_cast<double>(dout_row[j]);
      }
      for (int64_t j = 0; j < width; ++j) dbias[o0 + j] += static_cast<Real>(sums[j]);
    }
  }
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int, int,
                                    int, int);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int,
                                     int, int, int);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int, int, int, int);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int, int, int, int);

}  // namespace gpt2::cpu
