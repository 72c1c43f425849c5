// Retrieval: the sample sets at collision thresholds around the counters' limits (against
// pig::ref, through the whole step), and the tail scan.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "lsh_test_util.h"
#include "pig/reference/random.h"

namespace pig::test {
namespace {

TEST(SampledAttention, ThresholdOneAndOddShapes) {
  // t = 1, a head dim that is not a multiple of any vector width, a tiny configuration.
  check_magicpig(make_problem(700, 50, 2, 5), {6, 12, 50}, 2, 1, {4, 64}, 2e-4);
  check_magicpig(make_problem(300, 16, 1, 6), {3, 5, 16}, 1, 2, {1, 7}, 2e-4);
}

TEST(SampledAttention, ThresholdsAroundTheByteCounters) {
  // The epoch-stamped u8 counters serve t <= kMaxEpochT (a count saturates at t + 1 within a
  // byte's epoch); larger t counts in 16 bits per head. Both sides of the boundary, one and two
  // heads, against the reference's sample sets.
  static_assert(lsh::kMaxEpochT == 254);
  // Every third key lies near the query's direction at a spread of angles (so its count of
  // 300 collisions falls on both sides of these t); the others point away. Their mean is ~0,
  // so centering keeps the directions.
  const std::size_t n = 600, d = 16;
  ref::Rng rng(23);
  std::vector<float> q(2 * d);
  for (std::size_t j = 0; j < d; ++j) {
    q[j] = float(rng.gaussian());
    q[d + j] = q[j] + float(0.1 * rng.gaussian());
  }
  ref::OwnedMatrix K(n, d);
  for (std::size_t i = 0; i < n; ++i) {
    const bool near = i % 3 == 0;
    const double c = near ? 1.0 : -0.5, noise = near ? 0.02 + 0.6 * double(i % 21) / 20 : 1.0;
    for (std::size_t j = 0; j < d; ++j)
      K.row(i)[j] = float(c * q[j] + noise * rng.gaussian());
  }
  const Problem pr{Rows(std::move(K)), Rows(gaussian(n, d, 24)), q, n, d};
  for (int t : {253, 254, 255, 270})
    for (int G : {1, 2})
      check_magicpig(pr, {1, 300, int(d)}, G, t, {2, 8}, 2e-4);
}

// retrieve_tail against a count of the collisions written out here: the tokens of >= t
// collisions with any head, appended after the n entries already there in ascending order, the
// heads' mask of each, and per_head added to (not overwritten).
TEST(RetrieveTail, AppendsTheTailsMatchesWithTheirMasks) {
  const int L = 6, t = 2;
  const std::size_t count = 300, first = 1000, n0 = 2;
  ref::Rng rng(41);
  std::vector<std::uint16_t> codes(count * L), qcodes(3 * L);
  for (auto &c : qcodes)
    c = std::uint16_t(rng.below(4));
  for (std::size_t i = 0; i < count; ++i) // mostly a copy of one head's codes, then noise
    for (int l = 0; l < L; ++l)
      codes[i * L + std::size_t(l)] =
          rng.below(3) ? std::uint16_t(rng.below(4)) : qcodes[(i % 3) * L + std::size_t(l)];
  for (int G : {1, 3}) {
    std::vector<std::uint32_t> tokens(n0 + count, 7);
    std::vector<std::uint8_t> masks(n0 + count, 0xEE);
    std::size_t per_head[lsh::kMaxGroup] = {5, 6, 7};
    lsh::RetrieveTailArgs a;
    a.codes = codes.data();
    a.count = count;
    a.first = first;
    a.L = L;
    a.query_codes = qcodes.data();
    a.G = G;
    a.t = t;
    a.tokens = tokens.data();
    a.masks = G > 1 ? masks.data() : nullptr;
    a.n = n0;
    a.per_head = per_head;
    const std::size_t n = lsh::retrieve_tail(a);
    std::vector<std::uint32_t> want_tokens;
    std::vector<std::uint8_t> want_masks;
    std::size_t want_per_head[3] = {5, 6, 7};
    for (std::size_t i = 0; i < count; ++i) {
      unsigned mask = 0;
      for (int h = 0; h < G; ++h) {
        int hits = 0;
        for (int l = 0; l < L; ++l)
          hits += codes[i * L + std::size_t(l)] == qcodes[std::size_t(h) * L + std::size_t(l)];
        if (hits >= t) {
          mask |= 1u << h;
          ++want_per_head[h];
        }
      }
      if (mask) {
        want_tokens.push_back(std::uint32_t(first + i));
        want_masks.push_back(std::uint8_t(mask));
      }
    }
    ASSERT_GT(want_tokens.size(), 10u) << "G " << G; // neither empty nor everything
    ASSERT_LT(want_tokens.size(), count) << "G " << G;
    ASSERT_EQ(n, n0 + want_tokens.size()) << "G " << G;
    EXPECT_EQ(tokens[0], 7u); // the entries before n are left alone
    EXPECT_EQ(tokens[1], 7u);
    EXPECT_TRUE(std::equal(want_tokens.begin(), want_tokens.end(), tokens.begin() + n0));
    if (G > 1) {
      EXPECT_EQ(masks[0], 0xEE);
      EXPECT_TRUE(std::equal(want_masks.begin(), want_masks.end(), masks.begin() + n0));
    } else {
      EXPECT_TRUE(
          std::all_of(masks.begin(), masks.end(), [](std::uint8_t m) { return m == 0xEE; }));
    }
    for (int h = 0; h < 3; ++h)
      EXPECT_EQ(per_head[h], h < G ? want_per_head[h] : std::size_t(5 + h)) << "head " << h;
  }
}

} // namespace
} // namespace pig::test
