/**
 * @file rng.h
 * @brief A portable, seedable random number generator (xoshiro256**, seeded by splitmix64).
 *
 * The standard library's distributions and std::shuffle differ between implementations, so
 * everything that must be reproducible bit for bit (initialization, shuffling, sampling,
 * resume) draws from this generator through the helpers below. The whole state is four
 * uint64 words and can be saved and restored. jump() advances it by 2^128 draws (the
 * generator's published jump polynomial), which splits one seed into non-overlapping streams.
 */
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace gpt2 {

inline uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  using State = std::array<uint64_t, 4>;

  explicit Rng(uint64_t seed = 0) { reseed(seed); }

  void reseed(uint64_t seed) {
    uint64_t x = seed;
    for (auto& word : state_) word = splitmix64(x);
  }

  uint64_t next_u64() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  /// Uniform integer in [0, n), unbiased (rejection sampling). n must be > 0.
  uint64_t uniform_int(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do { x = next_u64(); } while (x >= limit);
    return x % n;
  }

  /// Standard normal by Box-Muller (one draw per call; no cached second value, so the
  /// state alone determines the future).
  double normal() {
    double u1;
    do { u1 = uniform(); } while (u1 <= 0.0);
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
  }

  /// Advances the state by 2^128 calls of next_u64() (xoshiro256**'s jump function), so
  /// Rng(seed) jumped 0, 1, 2, ... times gives streams that never overlap in practice.
  void jump() {
    static constexpr uint64_t kJump[4] = {0x180ec6d33cfd0abaull, 0xd5a61266f0c9392cull,
                                          0xa9582618e03fc9aaull, 0x39abdc4529b1661cull};
    State jumped{};
    for (const uint64_t word : kJump) {
      for (int bit = 0; bit < 64; ++bit) {
        if (word & (uint64_t{1} << bit))
          for (int i = 0; i < 4; ++i) jumped[i] ^= state_[i];
        next_u64();
      }
    }
    state_ = jumped;
  }

  const State& state() const { return state_; }
  void set_state(const State& s) { state_ = s; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  State state_{};
};

/// Fisher-Yates shuffle driven by Rng (identical on every platform).
template <typename T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.uniform_int(i));
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace gpt2
