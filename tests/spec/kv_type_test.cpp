#include "pig/spec/hash.h"
#include "pig/spec/kv_type.h"

#include <gtest/gtest.h>

namespace {

using pig::spec::DType;

TEST(DType, NameTableRoundTripsAndRefusesOtherNames) {
  for (const auto &i : pig::spec::kDTypes) {
    EXPECT_EQ(pig::spec::parse_dtype(i.name), i.type);
    EXPECT_STREQ(pig::spec::name(i.type), i.name);
  }
  EXPECT_STREQ(pig::spec::name(DType::q8), "q8");
  for (const char *bad : {"Q8", "f16", "q4", "", "bf16 ", "f32x"})
    EXPECT_FALSE(pig::spec::parse_dtype(bad)) << bad;
  EXPECT_EQ(pig::spec::dtype_names(), "f32, bf16, q8");
  EXPECT_EQ(pig::spec::dtype_names(", ", " or "), "f32, bf16 or q8");
  EXPECT_EQ(pig::spec::dtype_names("|"), "f32|bf16|q8");
}

TEST(DType, RowBytesIncludingQ8Blocks) {
  using pig::spec::row_bytes;
  EXPECT_EQ(row_bytes(DType::f32, 64), 256u);
  EXPECT_EQ(row_bytes(DType::bf16, 64), 128u);
  // q8: d / 32 blocks of a bf16 scale and 32 int8.
  EXPECT_EQ(pig::spec::kQ8Block, 32u);
  EXPECT_EQ(pig::spec::kQ8BlockBytes, 34u);
  EXPECT_EQ(row_bytes(DType::q8, 32), 34u);
  EXPECT_EQ(row_bytes(DType::q8, 64), 68u);
  EXPECT_EQ(row_bytes(DType::q8, 128), 136u);
  static_assert(pig::spec::q8_row_bytes(256) == 8 * 34);
}

TEST(DType, SupportedHeadDims) {
  using pig::spec::supports_head_dim;
  for (DType t : {DType::f32, DType::bf16, DType::q8}) {
    EXPECT_FALSE(supports_head_dim(t, 0));
    EXPECT_FALSE(supports_head_dim(t, 1));
    EXPECT_FALSE(supports_head_dim(t, -2));
    EXPECT_FALSE(supports_head_dim(t, 63));
    EXPECT_TRUE(supports_head_dim(t, 64));
    EXPECT_TRUE(supports_head_dim(t, 128));
  }
  EXPECT_TRUE(supports_head_dim(DType::bf16, 80));
  EXPECT_TRUE(supports_head_dim(DType::f32, 2));
  EXPECT_FALSE(supports_head_dim(DType::q8, 80));
  EXPECT_FALSE(supports_head_dim(DType::q8, 16));
  EXPECT_EQ(pig::spec::dtype_unsupported(DType::q8, 64), "");
  EXPECT_EQ(pig::spec::dtype_unsupported(DType::bf16, 80), "");
  EXPECT_EQ(pig::spec::dtype_unsupported(DType::q8, 80),
            "q8 rows need a head dim that is a multiple of 32 (blocks of 32), not 80");
  EXPECT_EQ(pig::spec::dtype_unsupported(DType::f32, 7), "head dim 7 is not even");
  EXPECT_EQ(pig::spec::dtype_unsupported(DType::f32, 0), "head dim 0 is not even");
}

TEST(Hash, Splitmix64MatchesVignasReferenceAndItsFinaliser) {
  std::uint64_t s = 0;
  EXPECT_EQ(pig::spec::splitmix64(s), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(s, pig::spec::kGoldenGamma);
  EXPECT_EQ(pig::spec::splitmix64(s), 0x6e789e6aa1b965f4ULL);
  // The step is the finaliser of the advanced state.
  std::uint64_t t = 12345;
  const std::uint64_t out = pig::spec::splitmix64(t);
  EXPECT_EQ(out, pig::spec::mix64(12345 + pig::spec::kGoldenGamma));
  EXPECT_EQ(pig::spec::mix64(0), 0u);
}

} // namespace
