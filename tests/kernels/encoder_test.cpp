// Tests of kernels/cpu/encoder: forward by definition, gradients of wte and wpe against finite
// differences (double) with repeated tokens, the += contract, and thread-count independence.
#include "kernels/cpu/encoder.h"

#include <gtest/gtest.h>

#include <ostream>
#include <vector>

#include "tests/kernels/kernel_test_utils.h"

namespace gpt2::cpu {
namespace {

using test::all_close;
using test::numeric_gradient;
using test::random_normal;

struct EncoderShape {
  int B, T, C;
};

void PrintTo(const EncoderShape& s, std::ostream* os) {
  *os << "B=" << s.B << " T=" << s.T << " C=" << s.C;
}

class EncoderTest : public ::testing::TestWithParam<EncoderShape> {};

TEST_P(EncoderTest, ForwardAndGradients) {
  const EncoderShape shape = GetParam();
  const int B = shape.B, T = shape.T, C = shape.C, BT = B * T;
  constexpr int V = 5, Vp = 8, kMaxT = 20;  // few tokens, so ids repeat within the batch
  const auto inp = test::random_tokens(BT, 1, V);
  std::vector<double> wte = random_normal<double>(Vp * C, 2);
  std::vector<double> wpe = random_normal<double>(kMaxT * C, 3);
  const auto dout = random_normal<double>(BT * C, 4);
  std::vector<double> out = test::poisoned<double>(BT * C);
  auto objective = [&] {
    encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    return test::weighted_sum(out, dout);
  };
  objective();
  std::vector<double> expected(BT * C);
  for (int bt = 0; bt < BT; ++bt)
    for (int c = 0; c < C; ++c)
      expected[bt * C + c] = wte[inp[bt] * C + c] + wpe[(bt % T) * C + c];
  EXPECT_TRUE(all_close(out, expected, 0.0, 0.0, "out"));

  const auto dwte0 = random_normal<double>(Vp * C, 5);
  const auto dwpe0 = random_normal<double>(kMaxT * C, 6);
  auto dwte = dwte0, dwpe = dwpe0;
  encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
  EXPECT_TRUE(all_close(test::difference(dwte, dwte0), numeric_gradient(wte, objective), 1e-6,
                        1e-7, "dwte - dwte0 (+=)"));
  EXPECT_TRUE(all_close(test::difference(dwpe, dwpe0), numeric_gradient(wpe, objective), 1e-6,
                        1e-7, "dwpe - dwpe0 (+=)"));
}

INSTANTIATE_TEST_SUITE_P(OddShapes, EncoderTest,
                         ::testing::Values(EncoderShape{1, 1, 3}, EncoderShape{2, 3, 5},
                                           EncoderShape{1, 17, 67}, EncoderShape{2, 3, 130}));

TEST(Encoder, BitIdenticalForAnyThreadCount) {
  constexpr int B = 2, T = 97, C = 400, V = 50, kMaxT = 128;  // 7 channel strips
  const int BT = B * T;
  const auto inp = test::random_tokens(BT, 11, V);
  const auto wte = random_normal<float>(V * C, 12);
  const auto wpe = random_normal<float>(kMaxT * C, 13);
  const auto dout = random_normal<float>(BT * C, 14);
  std::vector<std::vector<float>> results[2];
  for (int run = 0; run < 2; ++run) {
    test::ScopedThreadCount threads(test::kThreadCountsToCompare[run]);
    std::vector<float> out(BT * C), dwte(V * C, 0.f), dwpe(kMaxT * C, 0.f);
    encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
    results[run] = {out, dwte, dwpe};
  }
  const char* names[] = {"out", "dwte", "dwpe"};
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(test::bit_identical(results[0][i], results[1][i], names[i]));
}

}  // namespace
}  // namespace gpt2::cpu
