// Decode attention over a key/value cache on the GPU (kernels/gpu/attention_decode.cuh) against
// its CPU twins (cpu::attention_kv_cache_write, cpu::attention_decode_forward in fp64 on the
// same T_-rounded inputs).
//
// Shapes: lengths around the 128-position chunk (1, 127, 128, 129) and long (1000), B and NH
// not powers of two, head sizes 64 and 128 (16-byte loads), 20 and 18 (element loads in bf16 /
// in both), 1024 (several passes over the value packs); capacity past the length, so cache
// positions that must stay untouched exist. The caches are filled by two writes (positions
// [0, length-1), then length-1 alone, as prefill and a decode step do), and must equal the CPU
// caches exactly (a copy), with every other position still holding the NaN poison. The
// output is poisoned before the call.
//
// Tolerance of out against the fp64 reference, per element i: one rounding to T_ (u_T |ref|)
// plus the fp32 error of the kernel's sums. A score s_j = scale q.k_j summed in fp32 errs by at
// most HS u32 S_j (S_j = scale sum |q k_j|); a perturbation of every score by at most d moves
// out_i by at most 2 d sum_j p_j |v_ji|; the P V sums (and the combine) of at most length + 8
// terms err by at most (length + 8) u32 sum_j p_j |v_ji|. Allowed:
//   u_T |ref_i| + ((length + 8) + 4 HS max_j S_j) u32 sum_j p_j |v_ji| + 1e-7.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/gpu/attention_decode.cuh"

namespace gpt2::gpu::test {
namespace {

struct DecodeShape {
  int B, NH, HS, length;
  double input_scale;  // std of q, k, v (larger = peakier softmax)
};

std::string describe(const char* dtype, const DecodeShape& s) {
  return str_cat("decode ", dtype, " B=", s.B, " NH=", s.NH, " HS=", s.HS, " len=", s.length,
                 " scale=", s.input_scale);
}

const DecodeShape kShapes[] = {
    {3, 5, 64, 1, 1.0},   {3, 5, 64, 127, 1.0},   {3, 5, 64, 128, 1.0}, {3, 5, 64, 129, 1.0},
    {3, 5, 64, 1000, 1.0}, {2, 3, 128, 1, 1.0},   {2, 3, 128, 129, 1.0}, {2, 3, 128, 1000, 2.0},
    {5, 3, 64, 300, 3.0}, {3, 3, 20, 129, 1.0},   {2, 3, 18, 257, 1.0}, {1, 1, 1024, 300, 0.5},
    {1, 12, 64, 1024, 1.0}};

template <typename T_>
class GpuAttentionDecode : public ::testing::Test {};
TYPED_TEST_SUITE(GpuAttentionDecode, StorageTypes, StorageName);

// The (B, T, 3C) rows [t0, t0+T) of a (B, total, 3C) qkv.
std::vector<float> rows_of(const std::vector<float>& qkv, int B, int total, int C, int t0, int T) {
  std::vector<float> rows(static_cast<size_t>(B) * T * 3 * C);
  for (int b = 0; b < B; ++b)
    std::copy(qkv.begin() + (static_cast<size_t>(b) * total + t0) * 3 * C,
              qkv.begin() + (static_cast<size_t>(b) * total + t0 + T) * 3 * C,
              rows.begin() + static_cast<size_t>(b) * T * 3 * C);
  return rows;
}

TYPED_TEST(GpuAttentionDecode, CacheWriteAndDecodeMatchCpu) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  cudaStream_t stream = nullptr;
  for (const DecodeShape& s : kShapes) {
    SCOPED_TRACE(describe(Storage<T_>::kName, s));
    const int C = s.NH * s.HS, L = s.length, capacity = L + 3;
    const int64_t cache_elems = static_cast<int64_t>(s.B) * s.NH * capacity * s.HS;
    const std::vector<float> qkv = round_through<T_>(
        random_normal(static_cast<int64_t>(s.B) * L * 3 * C, 500 + L + s.HS, s.input_scale));
    const std::vector<float> prompt = rows_of(qkv, s.B, L, C, 0, L - 1);
    const std::vector<float> last = rows_of(qkv, s.B, L, C, L - 1, 1);  // (B, 3C): the query

    // GPU: two writes, then the decode.
    DeviceBuffer<T_> d_k(cache_elems), d_v(cache_elems), d_last(last.size()), d_out(s.B * C);
    DeviceBuffer<float> d_scratch(attention_decode_scratch_floats(s.B, C, s.NH, capacity));
    d_k.poison();
    d_v.poison();
    d_out.poison();
    d_scratch.poison();
    upload_floats(d_last, last);
    if (L > 1) {
      DeviceBuffer<T_> d_prompt(prompt.size());
      upload_floats(d_prompt, prompt);
      attention_kv_cache_write(d_k.get(), d_v.get(), d_prompt.get(), s.B, L - 1, C, s.NH, 0,
                               capacity, stream);
      GPT2_CUDA_CHECK(cudaDeviceSynchronize());  // before d_prompt goes
    }
    attention_kv_cache_write(d_k.get(), d_v.get(), d_last.get(), s.B, 1, C, s.NH, L - 1,
                             capacity, stream);
    attention_decode_forward(d_out.get(), d_last.get(), d_k.get(), d_v.get(), s.B, C, s.NH, L,
                             capacity, d_scratch.get(), stream);
    const std::vector<float> got = download_floats(d_out);

    // CPU twins in fp64.
    std::vector<double> k_cache(cache_elems, NAN), v_cache(cache_elems, NAN);
    const std::vector<double> qkv_d(qkv.begin(), qkv.end());
    cpu::attention_kv_cache_write(k_cache.data(), v_cache.data(), qkv_d.data(), s.B, L, C, s.NH,
                                  0, capacity);
    const std::vector<double> last_d(last.begin(), last.end());
    std::vector<double> ref_d(static_cast<size_t>(s.B) * C);
    cpu::attention_decode_forward(ref_d.data(), last_d.data(), k_cache.data(), v_cache.data(),
                                  s.B, C, s.NH, L, capacity);

    // The caches: the CPU's values at [0, L), the poison elsewhere.
    auto check_cache = [&](const char* name, const std::vector<float>& got_cache,
                           const std::vector<double>& want) {
      int64_t mismatches = 0;
      for (int64_t i = 0; i < cache_elems; ++i) {
        const int64_t position = (i / s.HS) % capacity;
        const bool written = position < L;
        const float g = got_cache[i];
        if (written ? g == static_cast<float>(want[i]) : std::isnan(g)) continue;
        if (mismatches++ < 4)
          ADD_FAILURE() << name << " element " << i << " (position " << position << "): got "
                        << g << ", expected "
                        << (written ? static_cast<float>(want[i]) : NAN);
      }
      EXPECT_EQ(mismatches, 0) << name;
    };
    check_cache("key cache", download_floats(d_k), k_cache);
    check_cache("value cache", download_floats(d_v), v_cache);

    // Per-element allowance (header comment).
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.HS));
    std::vector<float> ref(ref_d.begin(), ref_d.end()), magnitude(ref.size());
    std::vector<double> allowed(ref.size());
    for (int b = 0; b < s.B; ++b) {
      for (int h = 0; h < s.NH; ++h) {
        const double* q = last_d.data() + static_cast<size_t>(b) * 3 * C + h * s.HS;
        const int64_t row0 = (static_cast<int64_t>(b) * s.NH + h) * capacity;
        std::vector<double> score(L);
        double max_score = -INFINITY, max_abs_score = 0.0;
        for (int j = 0; j < L; ++j) {
          const double* k = k_cache.data() + (row0 + j) * s.HS;
          double dot = 0.0, abs_dot = 0.0;
          for (int i = 0; i < s.HS; ++i) {
            dot += q[i] * k[i];
            abs_dot += std::fabs(q[i] * k[i]);
          }
          score[j] = scale * dot;
          max_score = std::max(max_score, score[j]);
          max_abs_score = std::max(max_abs_score, scale * abs_dot);
        }
        double sum = 0.0;
        for (int j = 0; j < L; ++j) sum += std::exp(score[j] - max_score);
        const double coefficient = ((L + 8) + 4.0 * s.HS * max_abs_score) * kFp32Roundoff;
        for (int i = 0; i < s.HS; ++i) {
          double weighted_abs = 0.0;
          for (int j = 0; j < L; ++j)
            weighted_abs += std::exp(score[j] - max_score) / sum *
                            std::fabs(v_cache[(row0 + j) * s.HS + i]);
          const size_t o = static_cast<size_t>(b) * C + h * s.HS + i;
          allowed[o] = Storage<T_>::kUnitRoundoff * std::fabs(ref_d[o]) +
                       coefficient * weighted_abs + 1e-7;
        }
      }
    }
    EXPECT_TRUE(expect_close(describe(Storage<T_>::kName, s), got, ref, allowed));

    // Deterministic: a second call gives the same bits.
    const std::vector<unsigned char> first = d_out.download_bytes();
    d_out.poison();
    attention_decode_forward(d_out.get(), d_last.get(), d_k.get(), d_v.get(), s.B, C, s.NH, L,
                             capacity, d_scratch.get(), stream);
    EXPECT_TRUE(bitwise_equal("decode run twice", d_out.download_bytes(), first));
  }
}

TEST(GpuAttentionDecodePreconditions, RejectBadLengthsAndPositions) {
  GPT2_REQUIRE_GPU();
  constexpr int B = 2, NH = 3, HS = 64, C = NH * HS, kCapacity = 10;
  DeviceBuffer<float> k(B * NH * kCapacity * HS), v(B * NH * kCapacity * HS), qkv(B * 3 * C),
      out(B * C), scratch(attention_decode_scratch_floats(B, C, NH, kCapacity));
  EXPECT_THROW(attention_decode_forward(out.get(), qkv.get(), k.get(), v.get(), B, C, NH, 0,
                                        kCapacity, scratch.get(), nullptr),
               Error);
  EXPECT_THROW(attention_decode_forward(out.get(), qkv.get(), k.get(), v.get(), B, C, NH,
                                        kCapacity + 1, kCapacity, scratch.get(), nullptr),
               Error);
  EXPECT_THROW(attention_kv_cache_write(k.get(), v.get(), qkv.get(), B, 1, C, NH, kCapacity,
                                        kCapacity, nullptr),
               Error);
  EXPECT_THROW(attention_kv_cache_write(k.get(), v.get(), qkv.get(), B, 1, C, NH, -1, kCapacity,
                                        nullptr),
               Error);
}

TEST(GpuAttentionDecodeScratch, CoversEveryChunkOfTheCapacity) {
  EXPECT_EQ(attention_decode_num_chunks(1), 1);
  EXPECT_EQ(attention_decode_num_chunks(kAttentionDecodeChunk), 1);
  EXPECT_EQ(attention_decode_num_chunks(kAttentionDecodeChunk + 1), 2);
  // (B*NH) heads x chunks x (HS outputs + max + sum).
  EXPECT_EQ(attention_decode_scratch_floats(3, 5 * 64, 5, 1000), 3 * 5 * 8 * (64 + 2));
}

}  // namespace
}  // namespace gpt2::gpu::test
