// The deterministic generator behind W: pinned values and distribution checks.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "pig/reference/random.h"

namespace pig::ref {
namespace {

TEST(Random, SplitMix64MatchesPublishedSequence) {
  // First outputs of splitmix64 from state 0 (Vigna's reference implementation).
  std::uint64_t s = 0;
  EXPECT_EQ(splitmix64(s), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(splitmix64(s), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(splitmix64(s), 0x06c45d188009454fULL);
}

TEST(Random, Xoshiro256StarStarMatchesReference) {
  // Outputs of Blackman and Vigna's xoshiro256starstar.c from the state {1, 2, 3, 4}.
  Rng rng(std::array<std::uint64_t, 4>{1, 2, 3, 4});
  EXPECT_EQ(rng.next_u64(), 11520u);
  EXPECT_EQ(rng.next_u64(), 0u);
  EXPECT_EQ(rng.next_u64(), 1509978240u);
  EXPECT_EQ(rng.next_u64(), 1215971899390074240u);
  EXPECT_THROW(Rng(std::array<std::uint64_t, 4>{0, 0, 0, 0}), std::invalid_argument);
}

// Golden values: W is the single source of truth that CPU/GPU kernels must reproduce bit for bit.
// If this test fails, the generator changed and every stored index and kernel test is invalid.
TEST(Random, SimHashMatrixIsPinned) {
  const OwnedMatrix W = simhash_matrix(42, 4, 2, 3);
  ASSERT_EQ(W.rows, 4u);
  ASSERT_EQ(W.cols, 6u);
  std::uint64_t hash = 1469598103934665603ULL; // FNV-1a over the float bit patterns
  for (float x : W.data) {
    hash ^= std::bit_cast<std::uint32_t>(x);
    hash *= 1099511628211ULL;
  }
  EXPECT_EQ(std::bit_cast<std::uint32_t>(W.at(0, 0)), 0xbfce7e1eu);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(W.at(1, 0)), 0x3fc46a15u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(W.at(0, 1)), 0x3c820484u);
  EXPECT_EQ(hash, 0xb64c6a8ca7ffbf49ull);
}

TEST(Random, SameSeedSameStreamDifferentSeedDifferent) {
  Rng a(5), b(5), c(6);
  for (int i = 0; i < 100; ++i) {
    const std::uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    EXPECT_NE(x, c.next_u64());
  }
}

// Moments of N = 200000 draws. Standard errors: mean 1/sqrt(N), variance sqrt(2/N), fourth
// moment sqrt(96/N) (Var(z^4) = 105 - 9). Bounds at z = 5.
TEST(Random, GaussianMoments) {
  Rng rng(7);
  const int N = 200000;
  double m1 = 0, m2 = 0, m4 = 0;
  int tail = 0;
  for (int i = 0; i < N; ++i) {
    const double z = rng.gaussian();
    m1 += z;
    m2 += z * z;
    m4 += z * z * z * z;
    tail += z > 1.959963984540054;
  }
  m1 /= N;
  m2 /= N;
  m4 /= N;
  EXPECT_NEAR(m1, 0.0, 5.0 / std::sqrt(N));
  EXPECT_NEAR(m2, 1.0, 5.0 * std::sqrt(2.0 / N));
  EXPECT_NEAR(m4, 3.0, 5.0 * std::sqrt(96.0 / N));
  EXPECT_NEAR(double(tail) / N, 0.025, 5.0 * std::sqrt(0.025 * 0.975 / N));
}

// Uniform and bounded integers: every bucket count within z = 5 of its binomial expectation.
TEST(Random, UniformAndBelow) {
  Rng rng(8);
  const int N = 100000, buckets = 10;
  std::vector<int> u(buckets, 0), b(buckets, 0);
  for (int i = 0; i < N; ++i) {
    const double x = rng.uniform();
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
    ++u[int(x * buckets)];
    ++b[rng.below(buckets)];
  }
  const double sd = std::sqrt(N * 0.1 * 0.9);
  for (int k = 0; k < buckets; ++k) {
    EXPECT_NEAR(u[k], N / buckets, 5 * sd);
    EXPECT_NEAR(b[k], N / buckets, 5 * sd);
  }
  EXPECT_THROW(rng.below(0), std::invalid_argument);
}

TEST(Random, SimHashMatrixShapeAndValidation) {
  const OwnedMatrix W = simhash_matrix(1, 64, 10, 150);
  EXPECT_EQ(W.rows, 64u);
  EXPECT_EQ(W.cols, 1500u);
  EXPECT_THROW(simhash_matrix(1, 0, 10, 150), std::invalid_argument);
  EXPECT_THROW(simhash_matrix(1, 64, 17, 150), std::invalid_argument);
  EXPECT_THROW(simhash_matrix(1, 64, 10, 1025), std::invalid_argument);
  // Columns differ (no accidental reuse of the stream).
  EXPECT_NE(W.at(0, 0), W.at(0, 1));
}

} // namespace
} // namespace pig::ref
