// The 8-bit KV element format q8 (pig/reference/kv_quant.h): block layout, the scale (bf16, the
// smallest one >= amax / 127), the round-trip error bound |x - deq(q(x))| <= s / 2, and the
// special blocks (zeros, outliers, huge, tiny and subnormal scales, NaN and infinities).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "pig/reference/kv_quant.h"
#include "pig/reference/random.h"
#include "test_util.h"

namespace pig::ref {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<std::uint8_t> Quantize(const std::vector<float> &x) {
  std::vector<std::uint8_t> q(q8_row_bytes(x.size()), 0xAB);
  quantize_q8(x.data(), x.size(), q.data());
  return q;
}

std::vector<float> Dequantize(const std::vector<std::uint8_t> &q, std::size_t d) {
  std::vector<float> x(d, -1.0f);
  dequantize_q8(q.data(), d, x.data());
  return x;
}

std::int8_t QAt(const std::vector<std::uint8_t> &q, std::size_t i) {
  std::int8_t v;
  std::memcpy(&v, q.data() + i / kQ8Block * kQ8BlockBytes + 2 + i % kQ8Block, 1);
  return v;
}

float ScaleOf(const std::vector<std::uint8_t> &q, std::size_t block) {
  return q8_block_scale(q.data() + block * kQ8BlockBytes);
}

// The next bf16 value below a positive bf16 value s (as f32).
float Bf16Below(float s) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(s);
  return std::bit_cast<float>(u - 0x10000u);
}

// Every invariant of a finite block: the scale is a bf16 value, the smallest one >= amax / 127
// (amax / 127 in double: the f32 division's rounding is absorbed by the rounding up, see
// kv_quant.cpp), every element reads back as q * s with |q| <= 127, within s / 2 of x (plus the
// f32 division x / s's rounding: at most 127 * 2^-24 s), and the largest element lands on
// |q| 126 or 127 (the scale is not larger than it needs to be).
void ExpectFiniteBlock(const float *x, const std::uint8_t *blk, const float *y,
                       const std::string &what) {
  float amax = 0;
  for (std::size_t i = 0; i < kQ8Block; ++i)
    amax = std::max(amax, std::fabs(x[i]));
  const float s = q8_block_scale(blk);
  ASSERT_TRUE(std::isfinite(s)) << what;
  EXPECT_EQ(std::bit_cast<std::uint32_t>(s) & 0xFFFFu, 0u) << what << ": scale not bf16";
  if (amax < 127.0f * std::numeric_limits<float>::denorm_min()) {
    EXPECT_EQ(s, 0.0f) << what << " (amax " << amax << ")";
  } else {
    EXPECT_GE(double(s) * 127.0, double(amax)) << what;
    EXPECT_LT(double(Bf16Below(s)) * 127.0, double(amax)) << what << ": scale not rounded up";
  }
  int qmax = 0;
  for (std::size_t i = 0; i < kQ8Block; ++i) {
    std::int8_t q;
    std::memcpy(&q, blk + 2 + i, 1);
    ASSERT_GE(q, -127) << what;
    ASSERT_EQ(y[i], float(q) * s) << what << " element " << i;
    qmax = std::max(qmax, std::abs(int(q)));
    const double err = std::fabs(double(x[i]) - double(y[i]));
    EXPECT_LE(err, double(s) * (0.5 + 127.0 * 0x1p-24))
        << what << " element " << i << ": " << x[i] << " -> " << y[i] << " (s " << s << ")";
    if (x[i] == 0.0f) {
      EXPECT_EQ(y[i], 0.0f) << what << " element " << i;
    }
  }
  if (s > 0 && std::isnormal(s)) {
    EXPECT_GE(qmax, 126) << what;
  }
}

void ExpectRow(const std::vector<float> &x, const std::string &what) {
  const std::size_t d = x.size();
  const std::vector<std::uint8_t> q = Quantize(x);
  const std::vector<float> y = Dequantize(q, d);
  for (std::size_t b = 0; b < d / kQ8Block; ++b)
    ExpectFiniteBlock(x.data() + b * kQ8Block, q.data() + b * kQ8BlockBytes,
                      y.data() + b * kQ8Block, what + " block " + std::to_string(b));
}

TEST(KvQuant, RowBytes) {
  EXPECT_EQ(q8_row_bytes(32), 34u);
  EXPECT_EQ(q8_row_bytes(64), 68u);
  EXPECT_EQ(q8_row_bytes(128), 136u);
}

TEST(KvQuant, GaussianRowsWithinHalfAScale) {
  Rng rng(21);
  for (std::size_t d : {32, 64, 128})
    for (double sd : {1.0, 1e-3, 37.0})
      for (int r = 0; r < 50; ++r)
        ExpectRow(testing::gaussian_vector(rng, d, sd),
                  "d=" + std::to_string(d) + " sd=" + std::to_string(sd));
}

// The layout: block b's bf16 scale in bytes [34b, 34b + 2) little-endian, then its 32 int8.
TEST(KvQuant, LayoutAndExactIntegers) {
  std::vector<float> x(64);
  for (std::size_t i = 0; i < 32; ++i)
    x[i] = float(int(i) * 8 - 127); // -127 ... 121: amax 127, s = 1, every value exact
  for (std::size_t i = 32; i < 64; ++i)
    x[i] = 0.5f * float(int(i) - 48); // amax 8: s = bf16 up of 8 / 127
  const std::vector<std::uint8_t> q = Quantize(x);
  EXPECT_EQ(q[0], 0x80); // 1.0 = 0x3F80
  EXPECT_EQ(q[1], 0x3F);
  for (std::size_t i = 0; i < 32; ++i)
    EXPECT_EQ(QAt(q, i), std::int8_t(x[i])) << i;
  const std::vector<float> y = Dequantize(q, 64);
  for (std::size_t i = 0; i < 32; ++i)
    EXPECT_EQ(y[i], x[i]) << i;
  const float s1 = ScaleOf(q, 1);
  EXPECT_EQ(std::uint16_t(q[34] | q[35] << 8), std::bit_cast<std::uint32_t>(s1) >> 16);
  ExpectRow(x, "layout");
}

TEST(KvQuant, RoundsHalfToEven) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f; // s = 1
  const float halves[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f, -126.5f};
  const int want[] = {0, 2, 2, 0, -2, -2, 126, -126};
  for (std::size_t i = 0; i < std::size(halves); ++i)
    x[1 + i] = halves[i];
  const std::vector<std::uint8_t> q = Quantize(x);
  ASSERT_EQ(ScaleOf(q, 0), 1.0f);
  for (std::size_t i = 0; i < std::size(halves); ++i)
    EXPECT_EQ(QAt(q, 1 + i), want[i]) << halves[i];
}

TEST(KvQuant, ZerosAndEqualRows) {
  for (std::size_t d : {32, 64, 128}) {
    // A row of zeros (and of negative zeros): scale 0, every element reads back +0.
    for (float z : {0.0f, -0.0f}) {
      const std::vector<float> x(d, z);
      const std::vector<std::uint8_t> q = Quantize(x);
      for (std::size_t b = 0; b < d / kQ8Block; ++b)
        EXPECT_EQ(ScaleOf(q, b), 0.0f);
      for (float y : Dequantize(q, d))
        EXPECT_EQ(std::bit_cast<std::uint32_t>(y), 0u);
    }
    // All elements equal: one q for all, |q| 126 or 127.
    for (float c : {1.0f, -3.7f, 1e-3f, 6.02e23f}) {
      const std::vector<float> x(d, c);
      const std::vector<float> y = Dequantize(Quantize(x), d);
      for (float e : y)
        EXPECT_EQ(e, y[0]);
      ExpectRow(x, "equal " + std::to_string(c));
    }
    // Exact zeros among nonzero values stay exactly zero.
    Rng rng(22 + d);
    std::vector<float> x = testing::gaussian_vector(rng, d);
    for (std::size_t i = 0; i < d; i += 3)
      x[i] = 0.0f;
    ExpectRow(x, "zeros among values");
  }
}

// One huge element: its block's other elements mostly round to 0 (the cost of a per-block scale),
// but stay within s / 2; the other blocks keep their own small scales.
TEST(KvQuant, OutlierOnlyCostsItsBlock) {
  Rng rng(23);
  for (std::size_t d : {64, 128}) {
    std::vector<float> x = testing::gaussian_vector(rng, d);
    x[37] = 1e4f;
    const std::vector<std::uint8_t> q = Quantize(x);
    ExpectRow(x, "outlier d=" + std::to_string(d));
    EXPECT_GE(ScaleOf(q, 1), 1e4f / 127.0f);
    EXPECT_LT(ScaleOf(q, 0), 10.0f / 127.0f); // N(0, 1): |x| < 10
    const std::vector<float> y = Dequantize(q, d);
    EXPECT_EQ(y[37], 127.0f * ScaleOf(q, 1));
  }
}

TEST(KvQuant, HugeTinyAndSubnormalScales) {
  Rng rng(24);
  for (double sd : {1e30, 1e-30, 1e-38, 1e-40}) // 1e-40: subnormal elements and scale
    for (std::size_t d : {32, 64, 128})
      for (int r = 0; r < 10; ++r)
        ExpectRow(testing::gaussian_vector(rng, d, sd), "sd=" + std::to_string(sd));
  // The largest finite floats read back finite (the scale is rounded up, but no q * s overflows).
  std::vector<float> x(64, -std::numeric_limits<float>::max());
  x[5] = std::numeric_limits<float>::max();
  x[40] = 3.4e38f;
  x[41] = 1.0f;
  ExpectRow(x, "max float");
  for (float y : Dequantize(Quantize(x), 64))
    EXPECT_TRUE(std::isfinite(y));
  // Below 127 * 2^-149 the scale underflows to 0: the block reads back as zeros.
  std::vector<float> t(32, 1e-44f);
  t[3] = -1e-44f;
  const std::vector<std::uint8_t> qt = Quantize(t);
  EXPECT_EQ(ScaleOf(qt, 0), 0.0f);
  for (float y : Dequantize(qt, 32))
    EXPECT_EQ(y, 0.0f);
}

// A NaN or an infinity poisons its block only: scale NaN, q = 0, every element of the block NaN;
// the other blocks are quantised as usual.
// The scale rule, on its own: the smallest bf16 >= amax / 127; exact when amax / 127 is a bf16;
// 0 for 0; NaN for NaN and infinities; and quantize_q8 stores exactly this scale.
TEST(KvQuant, ScaleForIsTheSmallestBf16AtLeastAmaxOver127) {
  auto bf16 = [](float x) { // is x a bf16 value?
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    return (u & 0xFFFFu) == 0;
  };
  EXPECT_EQ(q8_scale_for(0.0f), 0.0f);
  EXPECT_EQ(q8_scale_for(127.0f), 1.0f);
  EXPECT_EQ(q8_scale_for(127.0f * 0.5f), 0.5f);
  EXPECT_EQ(q8_scale_for(-127.0f), 1.0f); // a magnitude
  EXPECT_TRUE(std::isnan(q8_scale_for(kNaN)));
  EXPECT_TRUE(std::isnan(q8_scale_for(kInf)));
  EXPECT_TRUE(std::isnan(q8_scale_for(-kInf)));
  EXPECT_TRUE(std::isfinite(q8_scale_for(std::numeric_limits<float>::max())));
  Rng rng(31);
  for (int i = 0; i < 2000; ++i) {
    const float amax = float(std::exp(40.0 * rng.gaussian())) * 1e-3f;
    if (!std::isfinite(amax) || amax == 0)
      continue;
    const float s = q8_scale_for(amax), want = amax / 127.0f;
    ASSERT_TRUE(bf16(s)) << amax;
    ASSERT_GE(s, want) << amax;
    // The next bf16 down is below amax / 127: s is the smallest.
    std::uint32_t u;
    std::memcpy(&u, &s, 4);
    const std::uint32_t down = u - 0x10000u;
    float below;
    std::memcpy(&below, &down, 4);
    if (s > 0) {
      ASSERT_LT(below, want) << amax;
    }
    // quantize_q8 stores this scale for a block whose largest |x| is amax.
    std::vector<float> x(kQ8Block, 0.0f);
    x[5] = amax;
    x[9] = -0.5f * amax;
    const std::vector<std::uint8_t> q = Quantize(x);
    ASSERT_EQ(ScaleOf(q, 0), s) << amax;
  }
}

TEST(KvQuant, NonFiniteBlocksReadBackNaN) {
  Rng rng(25);
  for (std::size_t d : {32, 64, 128})
    for (float bad : {kNaN, -kNaN, kInf, -kInf})
      for (std::size_t at : {std::size_t(0), d / 2 + 7, d - 1}) {
        std::vector<float> x = testing::gaussian_vector(rng, d);
        x[at] = bad;
        const std::string what =
            "d=" + std::to_string(d) + " " + std::to_string(bad) + " at " + std::to_string(at);
        const std::vector<std::uint8_t> q = Quantize(x);
        const std::vector<float> y = Dequantize(q, d);
        const std::size_t poisoned = at / kQ8Block;
        for (std::size_t b = 0; b < d / kQ8Block; ++b) {
          if (b != poisoned) {
            ExpectFiniteBlock(x.data() + b * kQ8Block, q.data() + b * kQ8BlockBytes,
                              y.data() + b * kQ8Block, what + " block " + std::to_string(b));
            continue;
          }
          EXPECT_TRUE(std::isnan(ScaleOf(q, b))) << what;
          for (std::size_t i = b * kQ8Block; i < (b + 1) * kQ8Block; ++i) {
            EXPECT_EQ(QAt(q, i), 0) << what << " element " << i;
            EXPECT_TRUE(std::isnan(y[i])) << what << " element " << i;
          }
        }
      }
}

} // namespace
} // namespace pig::ref
