// Rng::jump (base/rng.h): known answers from an independent transcription of xoshiro256**'s
// reference jump (Python, the published JUMP constants), so a slip in the constants or the
// loop is caught; jumping is deterministic and leaves a stream that differs from the start.
#include "base/rng.h"

#include <gtest/gtest.h>

namespace gpt2 {
namespace {

TEST(Rng, JumpMatchesTheReferenceJumpFunction) {
  Rng once(99);
  once.jump();
  EXPECT_EQ(once.next_u64(), 0xb193d099972f6eaaull);
  EXPECT_EQ(once.next_u64(), 0xb85a11383ff56dd2ull);
  Rng twice(99);
  twice.jump();
  twice.jump();
  EXPECT_EQ(twice.next_u64(), 0x99365d3ea6c334bbull);
  Rng start(99), jumped(99);
  jumped.jump();
  EXPECT_NE(start.state(), jumped.state());
}

}  // namespace
}  // namespace gpt2
