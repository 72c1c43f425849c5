// Each weight format's Highway dequantisation, on every compiled target this CPU supports,
// against the scalar reference on random blocks; plus the f32 kernels against plain loops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "pig/runtime/ops.h"

namespace pig::runtime {
namespace {

std::vector<uint8_t> RandomBlocks(GgmlType t, size_t n, std::mt19937 &rng) {
  const auto info = GgmlInfo(t);
  std::vector<uint8_t> b(n / info.block_elems * info.block_bytes);
  for (auto &x : b)
    x = uint8_t(rng());
  // Keep the f16/bf16 scales and plain f16/bf16 values finite: random bits may be NaN or huge.
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  auto put16 = [&](size_t off, uint16_t v) { std::memcpy(&b[off], &v, 2); };
  const size_t nb = n / info.block_elems;
  for (size_t i = 0; i < nb; ++i) {
    uint8_t *blk = &b[i * info.block_bytes];
    const size_t o = size_t(blk - b.data());
    switch (t) {
    case GgmlType::kF16:
      put16(o, F32ToF16(u(rng)));
      break;
    case GgmlType::kBF16:
      put16(o, F32ToBF16(u(rng)));
      break;
    case GgmlType::kF32: {
      const float f = u(rng);
      std::memcpy(blk, &f, 4);
      break;
    }
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0:
      put16(o, F32ToF16(u(rng) * 0.1f));
      break;
    case GgmlType::kQ4_1:
    case GgmlType::kQ4_K:
      put16(o, F32ToF16(u(rng) * 0.1f));
      put16(o + 2, F32ToF16(u(rng) * 0.1f));
      break;
    case GgmlType::kQ6_K:
      put16(o + 208, F32ToF16(u(rng) * 0.01f));
      break;
    default:
      break;
    }
  }
  return b;
}

TEST(Kernels, DequantMatchesScalarOnEveryTarget) {
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,
                            GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ4_K, GgmlType::kQ6_K};
  std::mt19937 rng(7);
  for (const Kernels &k : AllKernels()) {
    for (GgmlType t : types) {
      const size_t n = 512;
      const auto bytes = RandomBlocks(t, n, rng);
      std::vector<float> want(n), got(n, -1.0f);
      DequantizeRowScalar(t, bytes.data(), want.data(), n);
      k.dequant_row(t, bytes.data(), got.data(), n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(want[i], got[i]) << k.target << " " << GgmlTypeName(t) << " element " << i;
      }
    }
  }
}

TEST(Kernels, Q4_1Reference) {
  BlockQ4_1 b{};
  b.d = F32ToF16(0.5f);
  b.m = F32ToF16(-1.0f);
  b.qs[0] = 0x3A; // element 0 = 10, element 16 = 3
  float y[32];
  DequantizeRowScalar(GgmlType::kQ4_1, &b, y, 32);
  EXPECT_EQ(y[0], 0.5f * 10 - 1.0f);
  EXPECT_EQ(y[16], 0.5f * 3 - 1.0f);
  EXPECT_EQ(y[1], -1.0f);
}

// Hand-built blocks of every quantised weight type, expected values written from the GGUF/ggml
// block layouts (ggml-common.h, dequantize_row_* of ggml-quants.c) per element, independently of
// DequantizeRowScalar: the scales are literal f16 bit patterns, the Q4_K 6-bit scales and mins
// are packed here from the values the expectation reads directly. Every value is exact in f32.
// Checked on the scalar decoder and on every compiled Highway target.
void ExpectDequantizesTo(GgmlType t, const std::vector<uint8_t> &bytes,
                         const std::vector<float> &want) {
  const size_t n = want.size();
  ASSERT_EQ(bytes.size(), n / GgmlInfo(t).block_elems * GgmlInfo(t).block_bytes);
  std::vector<float> got(n, -1.0f);
  DequantizeRowScalar(t, bytes.data(), got.data(), n);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(got[i], want[i]) << "scalar " << GgmlTypeName(t) << " element " << i;
  for (const Kernels &k : AllKernels()) {
    std::fill(got.begin(), got.end(), -1.0f);
    k.dequant_row(t, bytes.data(), got.data(), n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], want[i]) << k.target << " " << GgmlTypeName(t) << " element " << i;
  }
}

template <typename Block> std::vector<uint8_t> Bytes(const std::vector<Block> &blocks) {
  std::vector<uint8_t> b(blocks.size() * sizeof(Block));
  std::memcpy(b.data(), blocks.data(), b.size());
  return b;
}

// f16 bit patterns: sign | exponent (bias 15) << 10 | mantissa.
constexpr uint16_t kF16Quarter = 0x3400, kF16Half = 0x3800, kF16MinusTwo = 0xC000,
                   kF16Eighth = 0x3000;

TEST(Kernels, Q4_0FromTheSpecification) {
  // Block: f16 d, 16 bytes; element j (j < 16) = d * ((qs[j] & 15) - 8), element j + 16 =
  // d * ((qs[j] >> 4) - 8).
  std::vector<BlockQ4_0> blocks(2);
  blocks[0].d = kF16Quarter;
  blocks[1].d = kF16MinusTwo;
  for (int j = 0; j < 16; ++j) {
    blocks[0].qs[j] = uint8_t(j | ((15 - j) << 4));
    blocks[1].qs[j] = uint8_t(((j * 5 + 3) % 16) | (((j * 11 + 7) % 16) << 4));
  }
  std::vector<float> want(64);
  for (int j = 0; j < 16; ++j) {
    want[j] = 0.25f * float(j - 8);
    want[j + 16] = 0.25f * float(15 - j - 8);
    want[32 + j] = -2.0f * float((j * 5 + 3) % 16 - 8);
    want[48 + j] = -2.0f * float((j * 11 + 7) % 16 - 8);
  }
  EXPECT_EQ(want[0], -2.0f);  // nibble 0
  EXPECT_EQ(want[15], 1.75f); // nibble 15
  EXPECT_EQ(want[16], 1.75f); // high nibble of byte 0 = 15
  EXPECT_EQ(want[32], 10.0f); // -2 * (3 - 8)
  EXPECT_EQ(want[48], 2.0f);  // high nibble of block 1 byte 0 = 7: -2 * (7 - 8)
  ExpectDequantizesTo(GgmlType::kQ4_0, Bytes(blocks), want);
}

TEST(Kernels, Q8_0FromTheSpecification) {
  // Block: f16 d, 32 int8; element j = d * qs[j].
  std::vector<BlockQ8_0> blocks(2);
  blocks[0].d = kF16Half;
  blocks[1].d = kF16Eighth;
  for (int j = 0; j < 32; ++j) {
    blocks[0].qs[j] = int8_t(j * 8 - 128); // -128 .. 120
    blocks[1].qs[j] = int8_t(127 - j * 3); // 127 .. 34
  }
  std::vector<float> want(64);
  for (int j = 0; j < 32; ++j) {
    want[j] = 0.5f * float(j * 8 - 128);
    want[32 + j] = 0.125f * float(127 - j * 3);
  }
  EXPECT_EQ(want[0], -64.0f);
  EXPECT_EQ(want[32], 15.875f);
  ExpectDequantizesTo(GgmlType::kQ8_0, Bytes(blocks), want);
}

TEST(Kernels, Q4_KFromTheSpecification) {
  // Super-block of 256: f16 d, f16 dmin, 12 bytes holding 8 six-bit scales sc[s] and mins m[s],
  // 128 bytes of nibbles. Element 64c + l (l < 32) = d * sc[2c] * (qs[32c + l] & 15) -
  // dmin * m[2c]; element 64c + 32 + l = d * sc[2c + 1] * (qs[32c + l] >> 4) - dmin * m[2c + 1].
  // Packing (ggml's quantize_row_q4_K): for s < 4, scales[s] = sc[s] and scales[s + 4] = m[s] in
  // the low 6 bits; for s >= 4, scales[s + 4] = (sc[s] & 15) | (m[s] & 15) << 4, and the top two
  // bits of sc[s] and m[s] go to bits 6-7 of scales[s - 4] and scales[s].
  const uint8_t sc[8] = {1, 2, 17, 63, 5, 33, 48, 63};
  const uint8_t m[8] = {0, 9, 62, 7, 40, 21, 63, 16};
  BlockQ4_K blk{};
  blk.d = kF16Half;
  blk.dmin = kF16Quarter;
  for (int s = 0; s < 4; ++s) {
    blk.scales[s] = uint8_t(sc[s] | ((sc[s + 4] >> 4) << 6));
    blk.scales[s + 4] = uint8_t(m[s] | ((m[s + 4] >> 4) << 6));
    blk.scales[s + 8] = uint8_t((sc[s + 4] & 15) | ((m[s + 4] & 15) << 4));
  }
  for (int i = 0; i < 128; ++i)
    blk.qs[i] = uint8_t(i * 37 + 11);
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, high = (e % 64) / 32, l = e % 32, s = 2 * c + high;
    const uint8_t byte = blk.qs[32 * c + l];
    const int q = high ? byte >> 4 : byte & 15;
    want[e] = 0.5f * float(sc[s]) * float(q) - 0.25f * float(m[s]);
  }
  EXPECT_EQ(want[0], 5.5f);     // qs[0] = 11, low nibble 11; sub-block 0: 0.5 * 1 * 11 - 0.25 * 0
  EXPECT_EQ(want[32], -2.25f);  // high nibble of 11 = 0; sub-block 1: 0.5 * 2 * 0 - 0.25 * 9
  EXPECT_EQ(want[255], 185.0f); // qs[127] = 0x66, high nibble 6; sub-block 7: 0.5*63*6 - 0.25*16
  ExpectDequantizesTo(GgmlType::kQ4_K, Bytes(std::vector<BlockQ4_K>{blk}), want);
}

TEST(Kernels, Q6_KFromTheSpecification) {
  // Super-block of 256: 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), 16 int8 scales,
  // f16 d. In half h (elements 128h..128h+127) with l < 32 and quarter r (element 128h + 32r +
  // l): the low bits are the low (r < 2) or high (r >= 2) nibble of ql[64h + l + 32 (r & 1)],
  // the high bits are bits 2r, 2r+1 of qh[32h + l], q = that 6-bit value - 32, and the element
  // is d * scales[8h + l / 16 + 2r] * q.
  const int8_t scales[16] = {1, -2, 3, -4, 5, -6, 7, -8, 16, -16, 32, -32, 64, -64, 127, -128};
  BlockQ6_K blk{};
  for (int i = 0; i < 128; ++i)
    blk.ql[i] = uint8_t(i * 37 + 11);
  for (int i = 0; i < 64; ++i)
    blk.qh[i] = uint8_t(i * 53 + 5);
  std::memcpy(blk.scales, scales, 16);
  blk.d = kF16Half;
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, r = (e % 128) / 32, l = e % 32;
    const uint8_t low_byte = blk.ql[64 * h + l + 32 * (r & 1)];
    const int low = r < 2 ? low_byte & 15 : low_byte >> 4;
    const int high = (blk.qh[32 * h + l] >> (2 * r)) & 3;
    want[e] = 0.5f * float(scales[8 * h + l / 16 + 2 * r]) * float((low | (high << 4)) - 32);
  }
  EXPECT_EQ(want[0], -2.5f); // ql[0] = 11, qh[0] = 5 -> q = (11 | 1 << 4) - 32 = -5; 0.5 * 1 * -5
  EXPECT_EQ(want[255],
            1664.0f); // ql[127] = 0x66 -> 6, qh[63] = 0x10 -> 0: q = -26; 0.5 * -128 * -26
  ExpectDequantizesTo(GgmlType::kQ6_K, Bytes(std::vector<BlockQ6_K>{blk}), want);
}

TEST(Kernels, HalfConversions) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(F16ToF32(F32ToF16(f)), f);
  }
  EXPECT_EQ(BF16ToF32(F32ToBF16(1.00390625f)), 1.0f); // ties to even
  EXPECT_EQ(BF16ToF32(F32ToBF16(3.0f)), 3.0f);
}

TEST(Kernels, F32OpsOnEveryTarget) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g;
  for (const Kernels &k : AllKernels()) {
    for (size_t n : {1u, 7u, 64u, 100u, 576u}) {
      std::vector<float> a(n), b(n);
      for (size_t i = 0; i < n; ++i)
        a[i] = g(rng), b[i] = g(rng);
      double want = 0;
      for (size_t i = 0; i < n; ++i)
        want += double(a[i]) * b[i];
      EXPECT_NEAR(k.dot(a.data(), b.data(), n), want, 1e-4 * n) << k.target;

      std::vector<float> y(n);
      k.rms_norm(a.data(), b.data(), y.data(), n, 1e-5f);
      double ss = 0;
      for (float x : a)
        ss += double(x) * x;
      const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
      for (size_t i = 0; i < n; ++i)
        EXPECT_NEAR(y[i], a[i] * inv * b[i], 1e-4) << k.target;

      std::vector<float> gate = a;
      k.swiglu(gate.data(), b.data(), n);
      for (size_t i = 0; i < n; ++i) {
        EXPECT_NEAR(gate[i], a[i] / (1 + std::exp(-a[i])) * b[i], 1e-4) << k.target;
      }

      std::vector<float> s = a;
      k.softmax(s.data(), n);
      double mx = a[0], sum = 0;
      for (float x : a)
        mx = std::max<double>(mx, x);
      for (float x : a)
        sum += std::exp(x - mx);
      for (size_t i = 0; i < n; ++i)
        EXPECT_NEAR(s[i], std::exp(a[i] - mx) / sum, 1e-5);
    }
  }
}

TEST(Kernels, QuantizeI8MatchesScalar) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g;
  const size_t n = 32 * 8;
  std::vector<float> x(n);
  for (auto &v : x)
    v = g(rng);
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f); // an all-zero block: scale 0, codes 0
  for (size_t j = 0; j < 32; ++j)                  // the saturation edges: codes +-127
    x[96 + j] = j % 2 ? 3.0f : -3.0f;
  for (size_t j = 0; j < 32; ++j) // one huge value: the others round to 0, then to their residual
    x[128 + j] = j == 5 ? 1e30f : 1.0f;
  for (const Kernels &k : AllKernels()) {
    std::vector<int8_t> xq(2 * n);
    std::vector<float> scale(n / 32), sum(n / 32);
    k.quantize_i8(x.data(), n, xq.data(), scale.data(), sum.data());
    for (size_t b = 0; b < n / 32; ++b) {
      float amax = 0;
      double s = 0;
      for (size_t j = 0; j < 32; ++j)
        amax = std::max(amax, std::abs(x[32 * b + j])), s += x[32 * b + j];
      const float d = amax / 127.0f;
      ASSERT_EQ(scale[b], d / 256.0f) << k.target;
      ASSERT_NEAR(sum[b], s, 1e-5 * (1 + std::abs(s))) << k.target;
      const float inv = amax > 0 ? 1.0f / d : 0.0f;
      for (size_t j = 0; j < 32; ++j) {
        const int hi = xq[32 * b + j], lo = xq[n + 32 * b + j];
        ASSERT_EQ(hi, int(std::nearbyint(x[32 * b + j] * inv))) << k.target;
        ASSERT_LE(std::abs(lo), 127) << k.target;
        // The pair reconstructs x to half a step of d / 256 (a clamped lo: one step more).
        const double back = double(scale[b]) * (256.0 * hi + lo);
        ASSERT_LE(std::abs(back - x[32 * b + j]), 1.01 * d / 256 + 1e-6 * std::abs(x[32 * b + j]))
            << k.target << " element " << 32 * b + j;
      }
    }
    EXPECT_EQ(xq[96], -127);
    EXPECT_EQ(xq[97], 127);
    EXPECT_EQ(xq[128 + 5], 127);
    EXPECT_EQ(xq[128], 0);
  }
}

TEST(Kernels, QuantizeI8GivesNonFiniteBlocksANaNScale) {
  std::vector<float> x(96, 0.5f);
  x[40] = std::numeric_limits<float>::quiet_NaN();
  x[70] = std::numeric_limits<float>::infinity();
  for (const Kernels &k : AllKernels()) {
    std::vector<int8_t> xq(2 * 96, 1);
    std::vector<float> scale(3), sum(3);
    k.quantize_i8(x.data(), 96, xq.data(), scale.data(), sum.data());
    EXPECT_EQ(scale[0], 0.5f / 127.0f / 256.0f) << k.target;
    EXPECT_TRUE(std::isnan(scale[1]) && std::isnan(scale[2])) << k.target;
    for (size_t i = 32; i < 96; ++i)
      ASSERT_TRUE(xq[i] == 0 && xq[96 + i] == 0) << k.target;
  }
}

// Random blocks with adversarial rows: row 0 every code at its top (Q8_0: -128, the one code
// whose magnitude is 128; Q6_K: 63), row 1 every code at its bottom, row 2 a NaN scale in its
// first block, row 3 all zero (scales too).
std::vector<uint8_t> AdversarialBlocks(GgmlType t, size_t rows, size_t cols, std::mt19937 &rng) {
  auto b = RandomBlocks(t, rows * cols, rng);
  const auto info = GgmlInfo(t);
  const size_t row_bytes = GgmlRowBytes(t, cols), nb = cols / info.block_elems;
  const uint16_t nan16 = 0x7E00;
  for (size_t i = 0; i < nb; ++i) {
    uint8_t *top = &b[0 * row_bytes + i * info.block_bytes];
    uint8_t *bottom = &b[1 * row_bytes + i * info.block_bytes];
    switch (t) {
    case GgmlType::kQ4_0:
      std::memset(top + 2, 0xFF, 16), std::memset(bottom + 2, 0, 16);
      break;
    case GgmlType::kQ4_1:
      std::memset(top + 4, 0xFF, 16), std::memset(bottom + 4, 0, 16);
      break;
    case GgmlType::kQ8_0:
      std::memset(top + 2, 0x80, 32), std::memset(bottom + 2, 0x7F, 32);
      break;
    case GgmlType::kQ4_K:
      std::memset(top + 4, 0xFF, 12 + 128), std::memset(bottom + 16, 0, 128);
      break;
    case GgmlType::kQ6_K:
      std::memset(top, 0xFF, 192), std::memset(bottom, 0, 192);
      std::memset(top + 192, 0x80, 16), std::memset(bottom + 192, 0x7F, 16); // scales -128, 127
      break;
    default:
      break;
    }
  }
  const size_t d_off = t == GgmlType::kQ6_K ? 208 : 0;
  std::memcpy(&b[2 * row_bytes + d_off], &nan16, 2);
  std::memset(&b[3 * row_bytes], 0, row_bytes);
  return b;
}

// The value of code 0 of each 32-element block (Q4_0: -8 d, Q4_1: m, Q4_K: -dmin m_j; 0 for the
// signed formats), which the integer path multiplies by the block's exact float sum.
std::vector<double> BlockOffsets(GgmlType t, const uint8_t *row, size_t cols) {
  std::vector<double> off(cols / 32, 0.0);
  for (size_t b = 0; b < cols / 32; ++b) {
    if (t == GgmlType::kQ4_0) {
      off[b] = -8.0 * F16ToF32(reinterpret_cast<const BlockQ4_0 *>(row)[b].d);
    } else if (t == GgmlType::kQ4_1) {
      off[b] = F16ToF32(reinterpret_cast<const BlockQ4_1 *>(row)[b].m);
    } else if (t == GgmlType::kQ4_K) {
      const auto &blk = reinterpret_cast<const BlockQ4_K *>(row)[b / 8];
      uint8_t sc, m;
      Q4KScaleMin(int(b % 8), blk.scales, &sc, &m);
      off[b] = -double(F16ToF32(blk.dmin)) * m;
    }
  }
  return off;
}

// y (n_x x rows, from matmul_i8) against the exact value of what the integer path computes: the
// dequantised weights (less their block offset) times the dequantised activations (scale x
// (256 hi + lo)), plus each
// block's offset times the activations' exact sum, in double. Only float rounding may differ
// (relative 1e-5 of the terms' magnitude), so a wrong code, a saturated or overflowed integer, a
// swapped half or a misplaced scale fails.
void ExpectExactDot(const char *target, GgmlType t, const std::vector<uint8_t> &bytes,
                    size_t rows, size_t cols, size_t n_x, const std::vector<int8_t> &xq,
                    const std::vector<float> &scale, const std::vector<float> &sum,
                    const std::vector<float> &y) {
  const size_t nb = cols / 32, row_bytes = GgmlRowBytes(t, cols);
  std::vector<float> wf(rows * cols);
  DequantizeRowScalar(t, bytes.data(), wf.data(), rows * cols);
  for (size_t r = 0; r < rows; ++r) {
    const auto off = BlockOffsets(t, bytes.data() + r * row_bytes, cols);
    for (size_t i = 0; i < n_x; ++i) {
      double want = 0, magnitude = 0;
      for (size_t c = 0; c < cols; ++c) {
        const double code = 256.0 * xq[2 * i * cols + c] + xq[2 * i * cols + cols + c];
        const double term = (double(wf[r * cols + c]) - off[c / 32]) * scale[i * nb + c / 32] * code;
        want += term;
        magnitude += std::abs(term);
      }
      for (size_t b = 0; b < nb; ++b) {
        want += off[b] * sum[i * nb + b];
        magnitude += std::abs(off[b] * sum[i * nb + b]);
      }
      const float got = y[i * rows + r];
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got))
            << target << " " << GgmlTypeName(t) << " row " << r << " x " << i << ": " << got;
        continue;
      }
      ASSERT_NEAR(got, want, 1e-5 * magnitude + 1e-30)
          << target << " " << GgmlTypeName(t) << " cols " << cols << " weight row " << r
          << " x row " << i;
    }
  }
}

// Activation rows for the integer kernels: random, with adversarial rows 1-5 (all zero, huge, one
// huge value among small ones, the +-127 edges, a NaN).
std::vector<float> AdversarialActivations(size_t n_x, size_t cols, std::mt19937 &rng) {
  std::normal_distribution<float> g;
  std::vector<float> x(n_x * cols);
  for (auto &v : x)
    v = g(rng);
  std::fill(x.begin() + 1 * cols, x.begin() + 2 * cols, 0.0f);
  for (size_t c = 0; c < cols; ++c)
    x[2 * cols + c] *= 1e30f;
  x[3 * cols + 7] = 1e4f;
  for (size_t c = 0; c < cols; ++c)
    x[4 * cols + c] = c % 3 ? 2.5f : -2.5f;
  x[5 * cols + cols - 1] = std::numeric_limits<float>::quiet_NaN();
  return x;
}

// Every target's integer kernel (file layout) against the exact dot, adversarial weight and
// activation rows, odd and even block counts.
TEST(Kernels, MatMulI8MatchesTheExactDotOnEveryTarget) {
  std::mt19937 rng(23);
  for (GgmlType t :
       {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K})
    for (size_t cols : {32u, 96u, 256u, 288u, 512u}) {
      if (cols % GgmlInfo(t).block_elems)
        continue;
      const size_t rows = 19, nb = cols / 32, n_x = 11;
      const auto bytes = AdversarialBlocks(t, rows, cols, rng);
      const WeightMatrix w{t, bytes.data(), rows, cols, GgmlRowBytes(t, cols)};
      const std::vector<float> x = AdversarialActivations(n_x, cols, rng);
      for (const Kernels &k : AllKernels()) {
        std::vector<int8_t> xq(2 * n_x * cols);
        std::vector<float> scale(n_x * nb), sum(n_x * nb);
        for (size_t i = 0; i < n_x; ++i)
          k.quantize_i8(&x[i * cols], cols, &xq[2 * i * cols], &scale[i * nb], &sum[i * nb]);
        std::vector<float> y(n_x * rows);
        k.matmul_i8(w, xq.data(), scale.data(), sum.data(), n_x, y.data(), rows, 0, rows);
        ExpectExactDot(k.target, t, bytes, rows, cols, n_x, xq, scale, sum, y);
      }
    }
}

// The packed layout (16-row panels, AVX-512 VNNI): the exact dot on adversarial blocks; every
// activation row's bits the same as alone, for any row count; a row range that cuts panels writes
// exactly its rows.
TEST(Kernels, MatMulI8PackedMatchesTheExactDotAndIsBatchIndependent) {
  std::mt19937 rng(29);
  size_t checked = 0;
  for (GgmlType t : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0})
    for (size_t cols : {32u, 96u, 576u}) {
      const size_t rows = 48, nb = cols / 32, n_x = 23;
      const auto bytes = AdversarialBlocks(t, rows, cols, rng);
      WeightMatrix w{t, bytes.data(), rows, cols, GgmlRowBytes(t, cols)};
      const std::vector<uint8_t> packed = PackRows16(w);
      ASSERT_EQ(packed.size(), rows / 16 * nb * PackedBlockBytes(t));
      ASSERT_EQ(packed.size(), rows * GgmlRowBytes(t, cols)); // the file's size
      w.packed = packed.data();
      const std::vector<float> x = AdversarialActivations(n_x, cols, rng);
      for (const Kernels &k : AllKernels()) {
        std::vector<int8_t> xq(2 * n_x * cols);
        std::vector<float> scale(n_x * nb), sum(n_x * nb);
        for (size_t i = 0; i < n_x; ++i)
          k.quantize_i8(&x[i * cols], cols, &xq[2 * i * cols], &scale[i * nb], &sum[i * nb]);
        std::vector<float> y(n_x * rows);
        k.matmul_i8(w, xq.data(), scale.data(), sum.data(), n_x, y.data(), rows, 0, rows);
        ExpectExactDot(k.target, t, bytes, rows, cols, n_x, xq, scale, sum, y);
        for (size_t n : {1u, 2u, 3u, 5u, 8u, 13u}) {
          for (auto [r0, r1] : {std::pair<size_t, size_t>{0, rows}, {5, 37}}) {
            std::vector<float> part(n * rows, -7.0f);
            k.matmul_i8(w, xq.data(), scale.data(), sum.data(), n, part.data(), rows, r0, r1);
            for (size_t i = 0; i < n; ++i)
              for (size_t r = 0; r < rows; ++r) {
                const float want = r >= r0 && r < r1 ? y[i * rows + r] : -7.0f;
                const float got = part[i * rows + r];
                ASSERT_TRUE(std::memcmp(&want, &got, sizeof got) == 0 ||
                            (std::isnan(want) && std::isnan(got)))
                    << k.target << " " << GgmlTypeName(t) << " n " << n << " row " << i
                    << " weight row " << r << ": " << got << " vs " << want;
              }
          }
        }
        checked += k.packed_path;
      }
    }
  // Q6_K has no packed layout; nor do row counts that are not a multiple of 16.
  const std::vector<uint8_t> q6 = RandomBlocks(GgmlType::kQ6_K, 16 * 256, rng);
  EXPECT_TRUE(PackRows16(WeightMatrix{GgmlType::kQ6_K, q6.data(), 16, 256, 210}).empty());
  const std::vector<uint8_t> q4 = RandomBlocks(GgmlType::kQ4_0, 17 * 32, rng);
  EXPECT_TRUE(PackRows16(WeightMatrix{GgmlType::kQ4_0, q4.data(), 17, 32, 18}).empty());
  if (checked == 0)
    GTEST_LOG_(INFO) << "no target with the packed path on this CPU: layout checked only";
}

TEST(Kernels, MatMulMatchesScalar) {
  std::mt19937 rng(11);
  ThreadPool pool(3);
  // 70 tokens: the multi-row kernels; 1 token: the decode path; 1 token x 288 columns: an odd
  // number of blocks (the pair loop's lone last block).
  for (auto [tokens, cols] : {std::pair<size_t, size_t>{70, 256}, {1, 256}, {1, 288}})
    for (GgmlType t : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ6_K,
                       GgmlType::kQ4_K, GgmlType::kF32})
      for (MatMulPath path : {MatMulPath::kInteger, MatMulPath::kFloat}) {
        if (cols % GgmlInfo(t).block_elems)
          continue;
        const size_t rows = 37;
        const auto bytes = RandomBlocks(t, rows * cols, rng);
        WeightMatrix w{t, bytes.data(), rows, cols, GgmlRowBytes(t, cols)};
        std::vector<float> x(tokens * cols);
        std::normal_distribution<float> g;
        for (auto &v : x)
          v = g(rng);
        std::vector<float> wf(rows * cols);
        DequantizeRowScalar(t, bytes.data(), wf.data(), rows * cols);
        for (const Kernels &k : AllKernels()) {
          std::vector<float> y(tokens * rows);
          MatMul(pool, k, w, x.data(), tokens, y.data(), nullptr, path);
          for (size_t tk = 0; tk < tokens; ++tk) {
            for (size_t r = 0; r < rows; ++r) {
              double want = 0, magnitude = 0, rounding = 0;
              for (size_t c = 0; c < cols; ++c) {
                want += double(wf[r * cols + c]) * x[tk * cols + c];
                magnitude += std::abs(double(wf[r * cols + c]) * x[tk * cols + c]);
              }
              // The integer path rounds each activation to half a 1/(127 x 256) of its block's
              // largest one (one such step where lo clamps): the error is bounded by sum |w| times
              // that.
              for (size_t b = 0; b < cols / 32; ++b) {
                float amax = 0;
                for (size_t c = 32 * b; c < 32 * b + 32; ++c)
                  amax = std::max(amax, std::abs(x[tk * cols + c]));
                for (size_t c = 32 * b; c < 32 * b + 32; ++c)
                  rounding += std::abs(wf[r * cols + c]) * amax / (127.0 * 256.0);
              }
              const bool integer = path == MatMulPath::kInteger && HasIntegerPath(t);
              ASSERT_NEAR(y[tk * rows + r], want, (integer ? rounding : 0.0) + 1e-5 * magnitude)
                  << k.target << " " << GgmlTypeName(t) << " tokens " << tokens;
            }
          }
        }
      }
}

// The property batched decode rests on: matmul_i8 gives every activation row exactly the bits it
// gives that row alone, for every row count 1..64 (the row groups, their tails, the 16-row tiles),
// every weight row range and every target; adversarial rows included (all zero, huge, one hot,
// NaN).
TEST(Kernels, MatMulI8RowsAreBitIdenticalToOneRow) {
  std::mt19937 rng(17);
  std::normal_distribution<float> g;
  for (GgmlType t :
       {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K})
    for (size_t cols : {32u, 64u, 96u, 256u, 288u, 512u}) { // odd and even block counts
      if (cols % GgmlInfo(t).block_elems)
        continue;
      const size_t rows = 41, nb = cols / 32, max_x = 64;
      const auto bytes = AdversarialBlocks(t, rows, cols, rng);
      const WeightMatrix w{t, bytes.data(), rows, cols, GgmlRowBytes(t, cols)};
      std::vector<float> x(max_x * cols);
      for (auto &v : x)
        v = g(rng);
      std::fill(x.begin() + 3 * cols, x.begin() + 4 * cols, 0.0f); // row 3 all zero
      for (size_t c = 0; c < cols; ++c)                            // row 5 huge
        x[5 * cols + c] *= 1e30f;
      std::fill(x.begin() + 7 * cols, x.begin() + 8 * cols, 0.0f); // row 7 one hot
      x[7 * cols + cols / 2] = 3.0f;
      x[9 * cols + 1] = std::numeric_limits<float>::quiet_NaN(); // row 9 has a NaN
      for (const Kernels &k : AllKernels()) {
        std::vector<int8_t> xq(2 * max_x * cols);
        std::vector<float> scale(max_x * nb), sum(max_x * nb);
        for (size_t r = 0; r < max_x; ++r)
          k.quantize_i8(&x[r * cols], cols, &xq[2 * r * cols], &scale[r * nb], &sum[r * nb]);
        std::vector<float> alone(max_x * rows);
        for (size_t r = 0; r < max_x; ++r)
          k.matmul_i8(w, &xq[2 * r * cols], &scale[r * nb], &sum[r * nb], 1, &alone[r * rows], 0,
                      0, rows);
        for (size_t n_x : {2u, 3u, 4u, 5u, 7u, 8u, 9u, 15u, 16u, 17u, 33u, 64u}) {
          for (auto [r0, r1] : {std::pair<size_t, size_t>{0, rows}, {5, 22}}) {
            std::vector<float> y(n_x * rows, -7.0f);
            k.matmul_i8(w, xq.data(), scale.data(), sum.data(), n_x, y.data(), rows, r0, r1);
            for (size_t i = 0; i < n_x; ++i)
              for (size_t r = 0; r < rows; ++r) {
                const float want = r >= r0 && r < r1 ? alone[i * rows + r] : -7.0f;
                const float got = y[i * rows + r];
                ASSERT_TRUE(std::memcmp(&want, &got, sizeof got) == 0 ||
                            (std::isnan(want) && std::isnan(got)))
                    << k.target << " " << GgmlTypeName(t) << " cols " << cols << " n_x " << n_x
                    << " row " << i << " weight row " << r << ": " << got << " vs " << want;
              }
          }
        }
        // Row 9 carries a NaN into every output; the all-zero row gives zeros (weight rows 4 on
        // are finite).
        ASSERT_TRUE(std::isnan(alone[9 * rows + 4]));
        ASSERT_TRUE(alone[3 * rows + 4] == 0.0f) << k.target;
      }
    }
}

TEST(Kernels, MatMulSharedMatchesMatMul) {
  std::mt19937 rng(13);
  ThreadPool pool(2);
  const size_t cols = 96;
  for (size_t tokens : {1u, 5u})
    for (GgmlType third : {GgmlType::kQ8_0, GgmlType::kF32}) { // all-integer, then mixed
      const GgmlType types[3] = {GgmlType::kQ4_1, GgmlType::kQ4_0, third};
      const size_t rows[3] = {70, 33, 129};
      std::vector<uint8_t> bytes[3];
      WeightMatrix w[3];
      std::vector<float> want[3], got[3];
      std::vector<float> x(tokens * cols);
      std::normal_distribution<float> g;
      for (auto &v : x)
        v = g(rng);
      for (int j = 0; j < 3; ++j) {
        bytes[j] = RandomBlocks(types[j], rows[j] * cols, rng);
        w[j] = WeightMatrix{types[j], bytes[j].data(), rows[j], cols, GgmlRowBytes(types[j], cols)};
        want[j].resize(tokens * rows[j]);
        got[j].resize(tokens * rows[j]);
        MatMul(pool, BestKernels(), w[j], x.data(), tokens, want[j].data());
      }
      const MatMulJob jobs[3] = {
          {&w[0], got[0].data()}, {&w[1], got[1].data()}, {&w[2], got[2].data()}};
      MatMulShared(pool, BestKernels(), jobs, 3, x.data(), tokens);
      for (int j = 0; j < 3; ++j)
        ASSERT_EQ(got[j], want[j]) << "matrix " << j << " tokens " << tokens;
    }
}

} // namespace
} // namespace pig::runtime
