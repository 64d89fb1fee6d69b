// gpu::copy_rows (kernels/gpu/row_copy.cuh) against its CPU twin copy_rows_reference: rows
// picked by positions on either side, column windows, packed (16-byte) and element paths, and
// add; fp32 and bf16; bit for bit (a copy moves bits; add rounds once, as the twin in fp32).
#include <algorithm>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "base/rng.h"
#include "gpu/gpu_test_util.h"
#include "kernels/common/row_copy.h"
#include "kernels/gpu/row_copy.cuh"

namespace gpt2::gpu::test {
namespace {

struct CopyCase {
  int64_t outer, rows, width;
  int64_t dst_seq, dst_stride, dst_col;
  int64_t src_seq, src_stride, src_col;
  bool dst_positions, src_positions, add;
};

// Distinct random positions below `seq`, `count` of them.
std::vector<int> random_positions(int64_t count, int64_t seq, uint64_t seed) {
  std::vector<int> all(static_cast<size_t>(seq));
  std::iota(all.begin(), all.end(), 0);
  Rng rng(seed);
  for (size_t i = all.size(); i > 1; --i) std::swap(all[i - 1], all[rng.next_u64() % i]);
  all.resize(static_cast<size_t>(count));
  return all;
}

template <typename T_>
void check_copy(const CopyCase& c, uint64_t seed) {
  const int64_t dst_n = c.outer * c.dst_seq * c.dst_stride;
  const int64_t src_n = c.outer * c.src_seq * c.src_stride;
  const std::vector<float> src = round_through<T_>(random_normal(src_n, seed));
  const std::vector<float> dst0 = round_through<T_>(random_normal(dst_n, seed + 1));
  const std::vector<int> dst_pos = random_positions(c.rows, c.dst_seq, seed + 2);
  const std::vector<int> src_pos = random_positions(c.rows, c.src_seq, seed + 3);
  DeviceBuffer<T_> d_src(src_n), d_dst(dst_n);
  DeviceBuffer<int> d_dst_pos(c.rows), d_src_pos(c.rows);
  upload_floats(d_src, src);
  upload_floats(d_dst, dst0);
  d_dst_pos.upload(dst_pos);
  d_src_pos.upload(src_pos);
  RowCopy copy{c.outer, c.rows, c.width,
               {c.dst_seq, c.dst_stride, c.dst_col, c.dst_positions ? d_dst_pos.get() : nullptr},
               {c.src_seq, c.src_stride, c.src_col, c.src_positions ? d_src_pos.get() : nullptr},
               c.add};
  copy_rows(d_dst.get(), d_src.get(), copy, nullptr);
  const std::vector<float> got = download_floats(d_dst);
  // The twin on the host: fp32 values, the add rounded through the storage type.
  std::vector<float> want = dst0;
  RowCopy host = copy;
  host.dst.positions = c.dst_positions ? dst_pos.data() : nullptr;
  host.src.positions = c.src_positions ? src_pos.data() : nullptr;
  copy_rows_reference(want.data(), src.data(), host);
  want = round_through<T_>(want);
  ASSERT_EQ(got.size(), want.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != want[i];
  EXPECT_EQ(mismatches, 0) << Storage<T_>::kName << " outer " << c.outer << " rows " << c.rows
                           << " width " << c.width << " add " << c.add;
}

const std::vector<CopyCase>& cases() {
  static const std::vector<CopyCase> all = {
      // Context parallelism's uses: packing keys and values (16-byte packs), scattering them
      // to positions, lse columns (width 1), wpe rows added at positions.
      {2, 37, 16, 40, 16, 0, 37, 24, 8, false, false, false},
      {2, 37, 16, 101, 24, 8, 40, 16, 0, true, false, false},
      {6, 29, 1, 29, 1, 0, 90, 1, 0, false, true, false},
      {1, 50, 24, 64, 24, 0, 50, 24, 0, true, false, true},
      // Odd widths and columns (element path), positions on both sides.
      {3, 13, 7, 17, 11, 3, 19, 9, 1, true, true, false},
      {3, 13, 7, 17, 11, 3, 19, 9, 1, true, true, true},
      {1, 0, 8, 4, 8, 0, 4, 8, 0, false, false, false}};
  return all;
}

TEST(GpuRowCopy, MatchesItsCpuTwinBitForBit) {
  GPT2_REQUIRE_GPU();
  uint64_t seed = 5;
  for (const CopyCase& c : cases()) {
    check_copy<float>(c, seed += 10);
    check_copy<bf16>(c, seed += 10);
  }
}

}  // namespace
}  // namespace gpt2::gpu::test
