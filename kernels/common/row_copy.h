/**
 * @file row_copy.h
 * @brief Rows moved between position layouts: a rank's rows of a sequence into the whole
 *        sequence and back, or rows picked by position (context parallelism, model/).
 *
 * A RowCopy moves, for every sequence r < outer, row i < rows and element w < width:
 *   dst[(r * dst.seq + dst.row(i)) * dst.stride + dst.col + w]  (=, or += with add)
 *   src[(r * src.seq + src.row(i)) * src.stride + src.col + w]
 * where a side's row(i) is its positions[i], or i when positions is null. Rows of dst must be
 * distinct (no two i write one row). Sizes are elements; offsets 64-bit. gpu::copy_rows
 * (kernels/gpu/row_copy.cuh) runs it on the device; copy_rows_reference below is its CPU twin.
 */
#pragma once

#include <cstdint>

namespace gpt2 {

/// One side of a RowCopy: (outer, seq, stride) elements with rows picked by `positions`.
struct RowSide {
  int64_t seq = 0;     // rows per sequence of this tensor
  int64_t stride = 0;  // elements per row
  int64_t col = 0;     // first element of the copied columns within a row
  const int* positions = nullptr;  // (rows) row indices within a sequence; null: 0, 1, ...
};

struct RowCopy {
  int64_t outer = 1;  // sequences
  int64_t rows = 0;   // rows moved per sequence
  int64_t width = 0;  // elements per row moved
  RowSide dst, src;
  bool add = false;   // dst += src (else dst = src)
};

/// The host twin of gpu::copy_rows; positions point to host memory here.
template <typename T_>
void copy_rows_reference(T_* dst, const T_* src, const RowCopy& c) {
  for (int64_t r = 0; r < c.outer; ++r) {
    for (int64_t i = 0; i < c.rows; ++i) {
      const int64_t d_row = c.dst.positions ? c.dst.positions[i] : i;
      const int64_t s_row = c.src.positions ? c.src.positions[i] : i;
      T_* d = dst + (r * c.dst.seq + d_row) * c.dst.stride + c.dst.col;
      const T_* s = src + (r * c.src.seq + s_row) * c.src.stride + c.src.col;
      for (int64_t w = 0; w < c.width; ++w) d[w] = c.add ? T_(d[w] + s[w]) : s[w];
    }
  }
}

}  // namespace gpt2
