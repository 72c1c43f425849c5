// Each weight format's Highway dequantisation, on every compiled target this CPU supports,
// against the scalar reference on random blocks; plus the f32 kernels against plain loops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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

TEST(Kernels, QuantizeI16MatchesScalar) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g;
  const size_t n = 32 * 7;
  std::vector<float> x(n);
  for (auto &v : x)
    v = g(rng);
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f); // an all-zero block: scale 0, codes 0
  for (const Kernels &k : AllKernels()) {
    std::vector<int16_t> xq(n);
    std::vector<float> scale(n / 32), sum(n / 32);
    k.quantize_i16(x.data(), n, xq.data(), scale.data(), sum.data());
    for (size_t b = 0; b < n / 32; ++b) {
      float amax = 0;
      double s = 0;
      for (size_t j = 0; j < 32; ++j)
        amax = std::max(amax, std::abs(x[32 * b + j])), s += x[32 * b + j];
      ASSERT_EQ(scale[b], amax / 32767.0f) << k.target;
      ASSERT_NEAR(sum[b], s, 1e-5 * (1 + std::abs(s))) << k.target;
      const float inv = amax > 0 ? 1.0f / scale[b] : 0.0f;
      for (size_t j = 0; j < 32; ++j)
        ASSERT_EQ(xq[32 * b + j], int16_t(std::lrintf(x[32 * b + j] * inv))) << k.target;
    }
  }
}

TEST(Kernels, MatMulMatchesScalar) {
  std::mt19937 rng(11);
  ThreadPool pool(3);
  // 70 tokens: the prefill micro-kernels; 1 token: the decode path (integer dots for Q4/Q8).
  // 1 token x 288 columns: an odd number of blocks (the decode kernel's two-block loop tail).
  for (auto [tokens, cols] : {std::pair<size_t, size_t>{70, 256}, {1, 256}, {1, 288}})
    for (GgmlType t : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ6_K,
                       GgmlType::kQ4_K, GgmlType::kF32}) {
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
        MatMul(pool, k, w, x.data(), tokens, y.data());
        for (size_t tk = 0; tk < tokens; ++tk) {
          for (size_t r = 0; r < rows; ++r) {
            double want = 0;
            for (size_t c = 0; c < cols; ++c)
              want += double(wf[r * cols + c]) * x[tk * cols + c];
            ASSERT_NEAR(y[tk * rows + r], want, 1e-3 * (1 + std::abs(want)))
                << k.target << " " << GgmlTypeName(t) << " tokens " << tokens;
          }
        }
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

TEST(ThreadPoolTest, RunsEveryItemOnce) {
  ThreadPool pool(4);
  for (int rep = 0; rep < 200; ++rep) {
    std::vector<std::atomic<int>> hits(97);
    pool.ParallelFor(hits.size(), [&](size_t i, size_t t) {
      ASSERT_LT(t, pool.size());
      hits[i].fetch_add(1);
    });
    for (auto &h : hits)
      ASSERT_EQ(h.load(), 1);
  }
}

// Calls that follow each other at once, each with more items than the last: a worker that is
// still leaving the previous call while the next one is being set up must not take an item of
// it (this once ran an item twice, and the extra completion count left the caller waiting
// forever). Every item must run exactly once in every call.
TEST(ThreadPoolTest, BackToBackCallsOfGrowingSize) {
  for (size_t threads : {2, 3}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> hits(64);
    for (int rep = 0; rep < 20000; ++rep) {
      const size_t n = 2 + size_t(rep) % 31;
      for (size_t i = 0; i < n; ++i)
        hits[i].store(0, std::memory_order_relaxed);
      pool.ParallelFor(n, [&](size_t i, size_t) { hits[i].fetch_add(1); });
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[i].load(), 1) << "call " << rep << " item " << i << " of " << n;
    }
  }
}

} // namespace
} // namespace pig::runtime
