// The per-element maths of the CUDA kernels (lsh_math.h), compiled with the host compiler and
// checked against pig::ref: runs everywhere, GPU or not. The kernels only arrange threads
// around these functions, so what passes here is the arithmetic the GPU does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <vector>

#include "cuda_test_util.h"
#include "pig/cuda/lsh_math.h"
#include "pig/reference/reference.h"

namespace pig::cuda {
namespace {

using testing::Shape;

TEST(CudaMath, Bf16RoundTripsAndRoundsToNearestEven) {
  EXPECT_EQ(to_float(to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(to_float(to_bf16(-2.5f)), -2.5f);
  EXPECT_EQ(to_bf16(1.0f + 0x1p-8f).bits, to_bf16(1.0f).bits); // tie, to even
  EXPECT_EQ(to_bf16(1.0f + 0x1p-8f + 0x1p-9f).bits, 0x3f81);   // above the tie
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::nanf("")))));
  EXPECT_EQ(to_float(to_bf16(INFINITY)), INFINITY);
}

TEST(CudaMath, MeanEqualsReferenceBitForBit) {
  const testing::Problem p = testing::make_problem(1, 1, 1000, 64, 3);
  const ref::Matrix K = testing::head_matrix(p.k, 0, p.n, p.d);
  const std::vector<float> expected = ref::mean_of_rows(K, 4, p.n - 64);
  for (int c = 0; c < p.d; ++c) {
    double sum = 0.0;
    for (std::size_t r = 4; r < p.n - 64; ++r)
      sum += double(K.row(r)[c]);
    EXPECT_EQ(mean_from_sum(sum, std::int64_t(p.n - 68)), expected[std::size_t(c)]) << c;
  }
}

class CudaEncode : public ::testing::TestWithParam<Shape> {};

/// encode_table (projection, code_bit, the packing) on centered keys and raw queries gives
/// exactly pig::ref's codes: the double accumulation cannot flip a sign the reference keeps.
TEST_P(CudaEncode, CodesEqualReference) {
  const Shape s = GetParam();
  testing::Problem p = testing::make_problem(2, 1, 700, s.d, 11);
  testing::round_to_bf16(p.k); // bf16 inputs, as the kernels see them
  const ref::LshConfig cfg{s.K, s.L, 2, 0};
  const ref::OwnedMatrix W = ref::simhash_matrix(0, std::size_t(s.d), s.K, s.L);
  const ref::Matrix K = testing::head_matrix(p.k, 0, p.n, s.d);
  const ref::LshIndex index = ref::build_index(K, W, cfg, {4, 64});

  std::vector<float> row(std::size_t(s.d));
  for (std::size_t i = 0; i < index.split.indexed(); ++i) {
    for (int c = 0; c < s.d; ++c)
      row[std::size_t(c)] =
          centered(to_bf16(K.row(index.split.indexed_begin + i)[c]), index.mean[std::size_t(c)]);
    for (int l = 0; l < s.L; ++l)
      ASSERT_EQ(encode_table(row.data(), W.data.data(), std::int64_t(W.cols), l, s.K, s.d),
                index.codes[i * std::size_t(s.L) + std::size_t(l)])
          << "token " << i << " table " << l;
  }
  const std::vector<std::uint16_t> qcodes =
      ref::encode(std::span<const float>(p.q.data(), std::size_t(s.d)), W, cfg);
  for (int l = 0; l < s.L; ++l)
    EXPECT_EQ(encode_table(p.q.data(), W.data.data(), std::int64_t(W.cols), l, s.K, s.d),
              qcodes[std::size_t(l)]);
}

/// The compile-time specialisations compute the same codes as the run-time ones, and staging
/// the signs as bytes then packing (the kernel's two phases) equals encode_table.
TEST_P(CudaEncode, StaticAndStagedPathsAgree) {
  const Shape s = GetParam();
  const testing::Problem p = testing::make_problem(1, 1, 50, s.d, 5);
  const ref::OwnedMatrix W = ref::simhash_matrix(0, std::size_t(s.d), s.K, s.L);
  const std::int64_t ld = std::int64_t(W.cols);
  std::vector<std::uint8_t> bits(std::size_t(s.K) * std::size_t(s.L));
  for (std::size_t i = 0; i < p.n; ++i) {
    const float *x = p.k.data() + i * std::size_t(s.d);
    for (int col = 0; col < s.K * s.L; ++col)
      bits[std::size_t(col)] = code_bit(projection(x, W.data.data(), ld, col, s.d), 0) != 0;
    for (int l = 0; l < s.L; ++l) {
      const std::uint16_t code = encode_table(x, W.data.data(), ld, l, s.K, s.d);
      ASSERT_EQ(pack_code(bits.data(), l, s.K), code);
      if (s.K == 10 && s.d == 128) {
        ASSERT_EQ((encode_table<10, 128>(x, W.data.data(), ld, l)), code);
        ASSERT_EQ(pack_code<10>(bits.data(), l), code);
      } else if (s.K == 8 && s.d == 64) {
        ASSERT_EQ((encode_table<8, 64>(x, W.data.data(), ld, l)), code);
        ASSERT_EQ(pack_code<8>(bits.data(), l), code);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaEncode,
                         ::testing::Values(Shape{10, 150, 128}, Shape{8, 75, 64},
                                           Shape{10, 150, 64}, Shape{8, 75, 128}, Shape{16, 3, 64},
                                           Shape{1, 5, 128}),
                         [](const auto &info) {
                           // ostringstream: GCC 12 -O3 warns falsely (-Wrestrict) on
                           // "K" + std::to_string(...).
                           std::ostringstream name;
                           name << "K" << info.param.K << "L" << info.param.L << "d"
                                << info.param.d;
                           return name.str();
                         });

TEST(CudaMath, ZeroAndNegativeProjectionsGiveZeroBits) {
  EXPECT_EQ(code_bit(0.0, 3), 0u);
  EXPECT_EQ(code_bit(-0.0, 3), 0u);
  EXPECT_EQ(code_bit(-1e-300, 0), 0u);
  EXPECT_EQ(code_bit(1e-300, 2), 4u);
  EXPECT_EQ(code_bit(std::nan(""), 1), 0u);
}

/// Sorting chunk by chunk with chunk_rank (the index kernel's scatter) is the stable counting
/// sort: every bucket lists its tokens ascending, whatever the chunk size.
TEST(CudaMath, ChunkRankGivesTheStableCountingSort) {
  ref::Rng rng(7);
  const int K = 4, L = 3;
  const std::size_t count = 1000;
  std::vector<std::uint16_t> codes(count * L);
  for (auto &c : codes)
    c = std::uint16_t(rng.below(1u << K));
  const testing::HostIndex expected = testing::host_index(codes, count, K, L, 4);
  for (int chunk_size : {1, 7, 256}) {
    std::vector<std::int32_t> ids(count * L);
    for (int l = 0; l < L; ++l) {
      const std::int32_t *off = expected.offsets.data() + std::size_t(l) * (bucket_count(K) + 1);
      std::vector<std::int32_t> cursor(off, off + bucket_count(K));
      std::vector<std::uint16_t> chunk(static_cast<std::size_t>(chunk_size));
      for (std::size_t base = 0; base < count; base += std::size_t(chunk_size)) {
        const int size = int(std::min<std::size_t>(std::size_t(chunk_size), count - base));
        for (int t = 0; t < size; ++t)
          chunk[std::size_t(t)] = codes[(base + std::size_t(t)) * L + std::size_t(l)];
        std::vector<ChunkRank> ranks;
        for (int t = 0; t < size; ++t) {
          ranks.push_back(chunk_rank(chunk.data(), size, t));
          ids[std::size_t(l) * count + std::size_t(cursor[chunk[std::size_t(t)]] +
                                                   ranks.back().rank)] = 4 + std::int32_t(base) + t;
        }
        for (int t = 0; t < size; ++t)
          if (ranks[std::size_t(t)].last)
            cursor[chunk[std::size_t(t)]] += ranks[std::size_t(t)].rank + 1;
      }
    }
    EXPECT_EQ(ids, expected.ids) << "chunk " << chunk_size;
  }
}

TEST(CudaMath, StaticTokensMatchTheReferenceSplit) {
  for (std::size_t n : {0u, 5u, 68u, 69u, 1000u}) {
    const ref::TokenSplit split = ref::split_tokens(n, {4, 64});
    const std::vector<std::size_t> expected = split.static_ids();
    const std::int64_t count = static_token_count(std::int64_t(n), 4, 64);
    ASSERT_EQ(std::size_t(count), expected.size()) << n;
    for (std::int64_t i = 0; i < count; ++i)
      EXPECT_EQ(std::size_t(static_token(i, std::int64_t(n), 4, 64)), expected[std::size_t(i)]);
  }
}

/// The online softmax of the attention kernel (scores in float, streaming rescale) against
/// pig::ref::static_attention (double): output and natural-log LSE.
TEST(CudaMath, OnlineSoftmaxMatchesReferenceStaticAttention) {
  for (int d : {64, 128}) {
    const testing::Problem p = testing::make_problem(1, 1, 2000, d, 21);
    const ref::Matrix K = testing::head_matrix(p.k, 0, p.n, d);
    const ref::Matrix V = testing::head_matrix(p.v, 0, p.n, d);
    const ref::TokenSplit split = ref::split_tokens(p.n, {4, 64});
    const ref::Attention expected =
        ref::static_attention(std::span<const float>(p.q.data(), std::size_t(d)), K, V, split);

    const float scale = 1.0f / std::sqrt(float(d));
    SoftmaxState st = softmax_init();
    std::vector<float> acc(std::size_t(d), 0.0f);
    const std::int64_t count = static_token_count(std::int64_t(p.n), 4, 64);
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t token = static_token(i, std::int64_t(p.n), 4, 64);
      float rescale;
      const float w =
          softmax_push(st, scaled_logit(p.q.data(), K.row(std::size_t(token)), scale, d), rescale);
      for (int c = 0; c < d; ++c)
        acc[std::size_t(c)] = acc[std::size_t(c)] * rescale + w * V.row(std::size_t(token))[c];
    }
    EXPECT_NEAR(softmax_lse(st), expected.lse, 1e-5 * std::max(1.0, std::abs(expected.lse)));
    for (int c = 0; c < d; ++c)
      EXPECT_NEAR(acc[std::size_t(c)] / st.s, expected.out[std::size_t(c)], 1e-5) << c;
  }
}

TEST(CudaMath, EmptySoftmaxHasMinusInfinityLse) {
  EXPECT_EQ(softmax_lse(softmax_init()), -INFINITY);
}

TEST(CudaMath, MergeWeightMatchesReferenceMerge) {
  ref::Attention a{{1.0f, 2.0f}, 0.5}, b{{3.0f, -1.0f}, 2.0};
  const ref::Attention m = ref::merge(a, b);
  const float wa = merge_weight_a(float(a.lse), float(b.lse));
  for (std::size_t c = 0; c < 2; ++c)
    EXPECT_NEAR(wa * a.out[c] + (1 - wa) * b.out[c], m.out[c], 1e-6);
  EXPECT_NEAR(merge_lse(float(a.lse), float(b.lse)), m.lse, 1e-6);
  EXPECT_EQ(merge_lse(-INFINITY, 1.5f), 1.5f);
  EXPECT_EQ(merge_lse(-INFINITY, -INFINITY), -INFINITY);
  EXPECT_EQ(merge_weight_a(-INFINITY, 1.0f), 0.0f);
  EXPECT_EQ(merge_weight_a(1.0f, -INFINITY), 1.0f);
}

} // namespace
} // namespace pig::cuda
