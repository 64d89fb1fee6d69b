// Encoder (token + position embedding) on the GPU against the CPU reference: odd C, repeated
// tokens (tiny vocabularies), wpe with more rows than T; the backward's += contract, untouched
// rows left bit-identical, bitwise determinism, the documented summation order bit for bit,
// and the GPU-sorted backward under stress: one long run, all ids distinct, ids near Vp-1
// (16 and 18 key bits: an even and an odd number of radix passes), C > 1024, B*T odd and
// past CUB's single-tile size, and a CUDA-graph capture replayed on new ids.
//
// Tolerances. Forward: one add, exact in fp32 on both sides; bf16 rounds it once (u_bf16).
// Backward: each gradient element is a sum of at most k = (occurrences + 1) terms (the prior
// value included); fp32 summation in any order errs by at most k u32 sum|terms| (the CPU sums
// sequentially, the GPU sums the occurrences first), so the two differ by <= 2 k u32 sum|terms|,
// where sum|terms| is the same op run on absolute values. bf16 adds one rounding of the result.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/cpu/encoder.h"
#include "kernels/gpu/encoder.cuh"

namespace gpt2::gpu::test {
namespace {

struct EncoderShape {
  int B, T, C, V, max_T;
};
const EncoderShape kShapes[] = {
    {1, 1, 5, 3, 1}, {2, 7, 33, 4, 9}, {3, 65, 64, 50, 70}, {2, 64, 768, 11, 64}};

template <typename T_>
class GpuEncoder : public ::testing::Test {};
TYPED_TEST_SUITE(GpuEncoder, StorageTypes, StorageName);

std::string shape_tag(const char* what, const char* dtype, const EncoderShape& s) {
  return str_cat(what, " ", dtype, " B=", s.B, " T=", s.T, " C=", s.C, " V=", s.V);
}

TYPED_TEST(GpuEncoder, ForwardMatchesCpu) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  for (const EncoderShape& s : kShapes) {
    const int Vp = s.V + 3;  // padded rows exist but are never indexed
    const int64_t BT = int64_t(s.B) * s.T, BTC = BT * s.C;
    const std::vector<float> wte = round_through<T_>(random_normal(int64_t(Vp) * s.C, 101));
    const std::vector<float> wpe = round_through<T_>(random_normal(int64_t(s.max_T) * s.C, 102));
    const std::vector<int> inp = random_ints(BT, s.V, 103);
    DeviceBuffer<T_> d_wte(wte.size()), d_wpe(wpe.size()), d_out(BTC);
    DeviceBuffer<int> d_inp(BT);
    upload_floats(d_wte, wte);
    upload_floats(d_wpe, wpe);
    d_inp.upload(inp);
    d_out.poison();
    encoder_forward(d_out.get(), d_inp.get(), d_wte.get(), d_wpe.get(), s.B, s.T, s.C, nullptr);

    std::vector<float> expected(BTC);
    cpu::encoder_forward<float>(expected.data(), inp.data(), wte.data(), wpe.data(), s.B, s.T,
                                s.C);
    EXPECT_TRUE(expect_close(shape_tag("encoder_forward", Storage<T_>::kName, s),
                             download_floats(d_out), expected,
                             allowed_error(expected, 0.0, Storage<T_>::kUnitRoundoff)));
  }
}

// ---------------------------------------------------------------------------------------------
// Backward

/// How a backward case draws its B*T token ids.
enum class TokenIds {
  kRandom,    // uniform in [0, Vp - 3): the padded rows are never indexed
  kOneToken,  // the same id everywhere: one run of B*T positions
  kDistinct,  // B*T different ids (needs B*T <= Vp): runs of one position
  kNearTop,   // half in the top 8 ids [Vp - 8, Vp), half uniform in [0, Vp)
};

struct BackwardCase {
  const char* name;
  int B, T, C, Vp, max_T;
  TokenIds ids;
};
// CUB's sort of int32 pairs (CUB 3.0, sm_90) runs as one tile up to 4864 items (the "random"
// and "C > 1024" cases) and otherwise in onesweep passes of 8 key bits over tiles of 8832 items:
// 16 key bits take 2 passes (the sorted data ends in the first buffer of each double buffer),
// 18 bits take 3 (it ends in the second); "all distinct" spans two tiles.
const BackwardCase kBackwardCases[] = {
    {"random", 1, 1, 5, 6, 1, TokenIds::kRandom},
    {"random", 2, 7, 33, 7, 9, TokenIds::kRandom},
    {"random", 3, 65, 64, 53, 70, TokenIds::kRandom},
    {"random", 2, 64, 768, 14, 64, TokenIds::kRandom},
    {"one long run", 5, 1111, 97, 50, 1111, TokenIds::kOneToken},
    {"all distinct", 3, 3333, 40, 10007, 3333, TokenIds::kDistinct},
    {"near Vp-1, 16 bits", 7, 777, 33, 50304, 800, TokenIds::kNearTop},
    {"near Vp-1, 18 bits", 3, 2049, 31, (1 << 17) + 3, 2049, TokenIds::kNearTop},
    {"C > 1024", 2, 301, 1100, 20, 301, TokenIds::kRandom},
};

std::string case_tag(const char* what, const char* dtype, const BackwardCase& s) {
  return str_cat(what, " ", dtype, " [", s.name, "] B=", s.B, " T=", s.T, " C=", s.C,
                 " Vp=", s.Vp);
}

std::vector<int> draw_token_ids(const BackwardCase& s, uint64_t seed) {
  const int64_t BT = int64_t(s.B) * s.T;
  switch (s.ids) {
    case TokenIds::kRandom:
      return random_ints(BT, s.Vp - 3, seed);
    case TokenIds::kOneToken:
      return std::vector<int>(static_cast<size_t>(BT), s.Vp / 2 + 1);
    case TokenIds::kDistinct: {
      GPT2_CHECK(BT <= s.Vp);
      std::vector<int> ids(static_cast<size_t>(s.Vp));
      std::iota(ids.begin(), ids.end(), 0);
      Rng rng(seed);
      shuffle(ids, rng);
      ids.resize(static_cast<size_t>(BT));
      return ids;
    }
    case TokenIds::kNearTop: {
      std::vector<int> ids = random_ints(BT, s.Vp, seed);
      const std::vector<int> top = random_ints(BT, 8, seed + 1);
      for (int64_t i = 0; i < BT; i += 2) ids[i] = s.Vp - 8 + top[i];
      return ids;
    }
  }
  GPT2_FAIL("unknown TokenIds");
}

/// The backward's documented arithmetic, bit for bit: per token, dout summed over its
/// positions in ascending order in fp32 from 0, then added to the stored value and rounded
/// once to T_; per (t, c), dout summed over b = 0..B-1 in fp32, added and rounded once.
template <typename T_>
void backward_in_documented_order(std::vector<float>& dwte, std::vector<float>& dwpe,
                                  const std::vector<float>& dout, const std::vector<int>& inp,
                                  int B, int T, int C) {
  const int64_t BT = int64_t(B) * T;
  std::vector<int64_t> by_token(static_cast<size_t>(BT));
  std::iota(by_token.begin(), by_token.end(), 0);
  std::stable_sort(by_token.begin(), by_token.end(),
                   [&](int64_t a, int64_t b) { return inp[a] < inp[b]; });
  for (int64_t begin = 0, end = 0; begin < BT; begin = end) {
    const int token = inp[by_token[begin]];
    while (end < BT && inp[by_token[end]] == token) ++end;
    for (int c = 0; c < C; ++c) {
      float sum = 0.0f;
      for (int64_t k = begin; k < end; ++k) sum += dout[by_token[k] * C + c];
      float& element = dwte[int64_t(token) * C + c];
      element = Storage<T_>::to_float(Storage<T_>::from_float(element + sum));
    }
  }
  for (int64_t i = 0; i < int64_t(T) * C; ++i) {
    float sum = 0.0f;
    for (int b = 0; b < B; ++b) sum += dout[b * int64_t(T) * C + i];
    dwpe[i] = Storage<T_>::to_float(Storage<T_>::from_float(dwpe[i] + sum));
  }
}

std::vector<unsigned char> float_bytes(const std::vector<float>& values) {
  std::vector<unsigned char> bytes(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

TYPED_TEST(GpuEncoder, BackwardAccumulatesLikeCpuAndIsDeterministic) {
  GPT2_REQUIRE_GPU();
  using T_ = TypeParam;
  constexpr double u = Storage<T_>::kUnitRoundoff;
  for (const BackwardCase& s : kBackwardCases) {
    const int Vp = s.Vp;
    const int64_t BT = int64_t(s.B) * s.T, BTC = BT * s.C;
    const std::vector<int> inp = draw_token_ids(s, 201);
    const std::vector<float> dout = round_through<T_>(random_normal(BTC, 202));
    const std::vector<float> dwte_before = round_through<T_>(random_normal(int64_t(Vp) * s.C, 203));
    const std::vector<float> dwpe_before =
        round_through<T_>(random_normal(int64_t(s.max_T) * s.C, 204));
    DeviceBuffer<T_> d_dout(BTC), d_dwte(dwte_before.size()), d_dwpe(dwpe_before.size());
    DeviceBuffer<int> d_inp(BT);
    DeviceBuffer<unsigned char> d_scratch(
        static_cast<int64_t>(encoder_backward_scratch_bytes(s.B, s.T, Vp)));
    upload_floats(d_dout, dout);
    d_inp.upload(inp);

    std::vector<unsigned char> dwte_bytes[2], dwpe_bytes[2];
    for (int run = 0; run < 2; ++run) {
      upload_floats(d_dwte, dwte_before);
      upload_floats(d_dwpe, dwpe_before);
      d_scratch.poison();
      encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_inp.get(), s.B, s.T, s.C, Vp,
                       d_scratch.get(), nullptr);
      dwte_bytes[run] = d_dwte.download_bytes();
      dwpe_bytes[run] = d_dwpe.download_bytes();
    }
    const std::string dtype = Storage<T_>::kName;
    EXPECT_TRUE(bitwise_equal(case_tag("encoder_backward dwte run-to-run", dtype.c_str(), s),
                              dwte_bytes[0], dwte_bytes[1]));
    EXPECT_TRUE(bitwise_equal(case_tag("encoder_backward dwpe run-to-run", dtype.c_str(), s),
                              dwpe_bytes[0], dwpe_bytes[1]));
    const std::vector<float> got_dwte = download_floats(d_dwte);
    const std::vector<float> got_dwpe = download_floats(d_dwpe);

    // The CPU twin (another summation order), within the tolerance above.
    std::vector<float> dwte = dwte_before, dwpe = dwpe_before;
    cpu::encoder_backward<float>(dwte.data(), dwpe.data(), dout.data(), inp.data(), s.B, s.T,
                                 s.C);
    std::vector<float> dwte_mag = abs_values(dwte_before), dwpe_mag = abs_values(dwpe_before);
    const std::vector<float> dout_abs = abs_values(dout);
    cpu::encoder_backward<float>(dwte_mag.data(), dwpe_mag.data(), dout_abs.data(), inp.data(),
                                 s.B, s.T, s.C);
    std::vector<double> dwte_allowed = allowed_error(dwte, 0.0, u);
    add_allowed(dwte_allowed, dwte_mag, 2.0 * double(BT + 1) * kFp32Roundoff);
    std::vector<double> dwpe_allowed = allowed_error(dwpe, 0.0, u);
    add_allowed(dwpe_allowed, dwpe_mag, 2.0 * double(s.B + 1) * kFp32Roundoff);
    EXPECT_TRUE(expect_close(case_tag("encoder_backward dwte", dtype.c_str(), s), got_dwte, dwte,
                             dwte_allowed));
    EXPECT_TRUE(expect_close(case_tag("encoder_backward dwpe", dtype.c_str(), s), got_dwpe, dwpe,
                             dwpe_allowed));

    // The documented order (that of the host-sorted kernel this one replaced), bit for bit.
    std::vector<float> exact_dwte = dwte_before, exact_dwpe = dwpe_before;
    backward_in_documented_order<T_>(exact_dwte, exact_dwpe, dout, inp, s.B, s.T, s.C);
    EXPECT_TRUE(bitwise_equal(case_tag("encoder_backward dwte vs documented order", dtype.c_str(),
                                       s),
                              float_bytes(got_dwte), float_bytes(exact_dwte)));
    EXPECT_TRUE(bitwise_equal(case_tag("encoder_backward dwpe vs documented order", dtype.c_str(),
                                       s),
                              float_bytes(got_dwpe), float_bytes(exact_dwpe)));

    // Rows of tokens that do not occur, and wpe rows at or past T, keep their exact bits.
    const std::set<int> used(inp.begin(), inp.end());
    for (int v = 0; v < Vp; ++v) {
      if (used.count(v)) continue;
      for (int c = 0; c < s.C; ++c)
        ASSERT_EQ(got_dwte[int64_t(v) * s.C + c], dwte_before[int64_t(v) * s.C + c])
            << "token " << v << " channel " << c;
    }
    for (int64_t i = int64_t(s.T) * s.C; i < int64_t(s.max_T) * s.C; ++i)
      ASSERT_EQ(got_dwpe[i], dwpe_before[i]) << "wpe element " << i;
  }
}

/// A stream, destroyed at scope exit.
struct OwnedStream {
  cudaStream_t stream = nullptr;
  OwnedStream() { GPT2_CUDA_CHECK(cudaStreamCreate(&stream)); }
  ~OwnedStream() { GPT2_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream)); }
};

/// A captured graph and its executable, destroyed at scope exit.
struct OwnedGraph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~OwnedGraph() {
    if (exec) GPT2_CUDA_CHECK_NOTHROW(cudaGraphExecDestroy(exec));
    if (graph) GPT2_CUDA_CHECK_NOTHROW(cudaGraphDestroy(graph));
  }
};

// The backward enqueues everything on its stream with no host synchronization and a grid that
// does not depend on the ids: captured once, the graph must give the direct call's bits for ids
// it never saw (the second id set is uploaded after the capture).
TEST(GpuEncoderGraph, CapturedBackwardReplaysLikeDirectCallsOnNewIds) {
  GPT2_REQUIRE_GPU();
#ifdef GPT2_SYNC_LAUNCHES
  GTEST_SKIP() << "Debug build: GPT2_SYNC_LAUNCHES synchronizes after every launch, which "
                  "stream capture forbids";
#endif
  const int B = 4, T = 1500, C = 70, Vp = 1000;  // B*T = 6000: CUB's onesweep path
  const int64_t BT = int64_t(B) * T, BTC = BT * C;
  const std::vector<int> id_sets[2] = {random_ints(BT, Vp, 301), random_ints(BT, 40, 302)};
  const std::vector<float> dout = random_normal(BTC, 303);
  const std::vector<float> dwte_before = random_normal(int64_t(Vp) * C, 304);
  const std::vector<float> dwpe_before = random_normal(int64_t(T) * C, 305);
  DeviceBuffer<float> d_dout(BTC), d_dwte(dwte_before.size()), d_dwpe(dwpe_before.size());
  DeviceBuffer<int> d_inp(BT);
  DeviceBuffer<unsigned char> d_scratch(
      static_cast<int64_t>(encoder_backward_scratch_bytes(B, T, Vp)));
  d_dout.upload(dout);
  OwnedStream stream;

  auto reset = [&](const std::vector<int>& ids) {
    d_dwte.upload(dwte_before);
    d_dwpe.upload(dwpe_before);
    d_inp.upload(ids);
    d_scratch.poison();
    GPT2_CUDA_CHECK(cudaDeviceSynchronize());
  };
  auto backward = [&] {
    encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_inp.get(), B, T, C, Vp,
                     d_scratch.get(), stream.stream);
  };

  // A direct call first loads every kernel (CUDA's lazy loading), as a training step would
  // before its capture.
  reset(id_sets[0]);
  backward();
  GPT2_CUDA_CHECK(cudaStreamSynchronize(stream.stream));

  OwnedGraph graph;
  reset(id_sets[0]);
  ASSERT_EQ(cudaStreamBeginCapture(stream.stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_NO_THROW(backward());
  ASSERT_EQ(cudaStreamEndCapture(stream.stream, &graph.graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&graph.exec, graph.graph, 0), cudaSuccess);

  std::vector<unsigned char> direct_dwte[2];
  for (int set = 0; set < 2; ++set) {
    reset(id_sets[set]);
    backward();
    direct_dwte[set] = d_dwte.download_bytes();
    const std::vector<unsigned char> direct_dwpe = d_dwpe.download_bytes();

    reset(id_sets[set]);
    ASSERT_EQ(cudaGraphLaunch(graph.exec, stream.stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream.stream), cudaSuccess);
    const std::string tag = str_cat(" graph vs direct, id set ", set);
    EXPECT_TRUE(bitwise_equal("encoder_backward dwte" + tag, d_dwte.download_bytes(),
                              direct_dwte[set]));
    EXPECT_TRUE(bitwise_equal("encoder_backward dwpe" + tag, d_dwpe.download_bytes(),
                              direct_dwpe));
  }
  EXPECT_TRUE(direct_dwte[0] != direct_dwte[1]) << "the two id sets should give different dwte";
}

// The memory plan sizes this buffer on machines without a GPU: plain host arithmetic, 64-bit.
TEST(GpuEncoderScratch, BytesAreHostArithmeticCoveringTheSortBuffers) {
  struct Size {
    int B, T, Vp;
  };
  for (const Size& s : {Size{1, 1, 1}, Size{3, 3333, 50304}, Size{8, 1024, 50304},
                        Size{65536, 65536, 1 << 30}}) {
    const size_t BT = size_t(s.B) * size_t(s.T);
    const size_t bytes = encoder_backward_scratch_bytes(s.B, s.T, s.Vp);
    EXPECT_EQ(bytes % 256, 0u) << "B=" << s.B << " T=" << s.T;
    // Four B*T int32 buffers, then CUB's storage: 64 KiB + B*T bytes.
    EXPECT_GE(bytes, 4 * BT * sizeof(int) + 64 * 1024 + BT) << "B=" << s.B << " T=" << s.T;
    EXPECT_LE(bytes, 4 * (BT * sizeof(int) + 255) + 64 * 1024 + BT + 255)
        << "B=" << s.B << " T=" << s.T;
  }
  EXPECT_LT(encoder_backward_scratch_bytes(7, 1024, 50304),
            encoder_backward_scratch_bytes(8, 1024, 50304));
  EXPECT_THROW(encoder_backward_scratch_bytes(0, 1, 1), Error);
  EXPECT_THROW(encoder_backward_scratch_bytes(1, 1, 0), Error);
}

TEST(GpuEncoderPreconditions, RejectsBadVocabularyAndScratch) {
  GPT2_REQUIRE_GPU();
  const int B = 1, T = 3, C = 4, Vp = 8;
  DeviceBuffer<float> d_dout(B * T * C), d_dwte(Vp * C), d_dwpe(T * C);
  DeviceBuffer<int> d_inp(B * T);
  const int64_t scratch_bytes = static_cast<int64_t>(encoder_backward_scratch_bytes(B, T, Vp));
  DeviceBuffer<unsigned char> d_scratch(scratch_bytes), d_misaligned(scratch_bytes, 16);
  EXPECT_THROW(encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_inp.get(), B, T, C,
                                0, d_scratch.get(), nullptr),
               Error);
  EXPECT_THROW(encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_inp.get(), B, T, C,
                                Vp, static_cast<void*>(nullptr), nullptr),
               Error);
  EXPECT_THROW(encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_inp.get(), B, T, C,
                                Vp, d_misaligned.get(), nullptr),
               Error);
}

}  // namespace
}  // namespace gpt2::gpu::test
