// The SIMD numerics the kernels rely on: exp accuracy and underflow clamp, bf16 rounding, and the
// log u table, on every compiled target.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "pig/reference/lsh.h"
#include "test_util.h"

namespace pig::test {
namespace {

TEST(Exp, RelativeErrorBelowOneInAMillionAndClamped) {
  std::vector<float> x;
  for (double v = -87.33; v <= 88.72; v += 0.000731)
    x.push_back(float(v));
  for (float v : {0.0f, -0.0f, 1e-8f, -1e-8f, 0.34657359f, -0.34657359f, 88.7f, -87.3f})
    x.push_back(v);
  std::vector<float> y(x.size());
  for_each_target([&](const char *) {
    lsh::exp_clamped(x.data(), y.data(), x.size());
    double worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double want = std::exp(double(x[i]));
      worst = std::max(worst, std::fabs(double(y[i]) - want) / want);
    }
    EXPECT_LE(worst, 1e-6);
    const std::vector<float> edge = {-87.34f,
                                     -100.0f,
                                     -1e30f,
                                     -HUGE_VALF,
                                     89.0f,
                                     HUGE_VALF,
                                     std::numeric_limits<float>::quiet_NaN()};
    std::vector<float> e(edge.size());
    lsh::exp_clamped(edge.data(), e.data(), edge.size());
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(std::bit_cast<std::uint32_t>(e[std::size_t(i)]), 0u) << edge[std::size_t(i)];
    EXPECT_EQ(e[4], HUGE_VALF);
    EXPECT_EQ(e[5], HUGE_VALF);
    EXPECT_TRUE(std::isnan(e[6]));
  });
}

// Nearest bf16 by exhaustive comparison of the two neighbours (the definition, not the trick).
std::uint16_t nearest_even_bf16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;
  const double dl = std::fabs(double(std::bit_cast<float>(lo)) - double(f));
  const double dh = std::fabs(double(std::bit_cast<float>(hi)) - double(f));
  if ((u & 0x7FFFFFFFu) >= 0x7F7F8000u) // at or past the midpoint above the largest bf16: inf
    return std::uint16_t((u >> 16 & 0x8000u) | 0x7F80u);
  if (dl < dh || (dl == dh && ((lo >> 16) & 1u) == 0))
    return std::uint16_t(lo >> 16);
  return std::uint16_t(hi >> 16);
}

TEST(Bf16, RoundsToNearestEvenAndKeepsNaN) {
  std::vector<float> x;
  ref::Rng rng(5);
  for (int i = 0; i < 20000; ++i) {
    const std::uint32_t u = std::uint32_t(rng.next_u64());
    if ((u & 0x7F800000u) != 0x7F800000u)
      x.push_back(std::bit_cast<float>(u));
  }
  // Exact ties in both directions, and values that round up into the next binade / infinity.
  for (std::uint32_t u : {0x3F808000u, 0x3F818000u, 0xBF808000u, 0xBF818000u, 0x3F7FFFFFu,
                          0x7F7FFFFFu, 0x7F7F8000u, 0x7F7F7FFFu, 0x00008000u, 0x00018000u})
    x.push_back(std::bit_cast<float>(u));
  const std::vector<float> special = {HUGE_VALF, -HUGE_VALF, std::bit_cast<float>(0x7F800001u),
                                      std::bit_cast<float>(0xFFC00000u),
                                      std::bit_cast<float>(0x7FFFFFFFu)};
  std::vector<std::uint16_t> got(x.size()), got_special(special.size());
  for_each_target([&](const char *) {
    lsh::convert_to_bf16(x.data(), got.data(), x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(got[i], nearest_even_bf16(x[i])) << std::hex << std::bit_cast<std::uint32_t>(x[i]);
    lsh::convert_to_bf16(special.data(), got_special.data(), special.size());
    EXPECT_EQ(got_special[0], 0x7F80);
    EXPECT_EQ(got_special[1], 0xFF80);
    for (std::size_t i = 2; i < special.size(); ++i) {
      EXPECT_EQ(got_special[i] & 0x7F80, 0x7F80);
      EXPECT_NE(got_special[i] & 0x007F, 0) << "NaN must stay NaN, not become infinity";
      EXPECT_EQ(got_special[i] & 0x8000, std::bit_cast<std::uint32_t>(special[i]) >> 16 & 0x8000);
    }
    std::vector<float> back(x.size());
    lsh::convert_from_bf16(got.data(), back.data(), x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(back[i]), std::uint32_t(got[i]) << 16);
  });
}

TEST(LogU, TableInterpolationMatchesReference) {
  // The table the fused kernel interpolates, evaluated the same way in double, against the
  // reference formula at points between the nodes.
  for (auto [K, L, t, r] :
       {std::tuple{10, 150, 2, 0}, std::tuple{8, 75, 2, 0}, std::tuple{10, 150, 1, 0},
        std::tuple{11, 75, 2, 1}, std::tuple{10, 64, 2, 2}, std::tuple{12, 32, 1, 3}}) {
    const lsh::LogUTableData data(K, L, t, r);
    const lsh::LogUTable tab = data.view();
    double worst = 0;
    for (double p = 0.05; p < 1.0; p += 0.000377) {
      const double x = p * tab.size;
      const int i = std::min(int(x), tab.size - 1);
      const double h = tab.h[i] + (x - i) * (tab.h[i + 1] - tab.h[i]);
      const double got = h + tab.tk * std::log(p);
      const double want =
          ref::log_collision_probability(std::cos(3.14159265358979323846 * (1 - p)), K, L, t, r);
      worst = std::max(worst, std::fabs(got - want));
    }
    EXPECT_LT(worst, 2e-5) << K << " " << L << " " << t << " r=" << r;
  }
}

} // namespace
} // namespace pig::test
