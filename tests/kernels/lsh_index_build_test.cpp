// The index build kernel: tables across 16-bit id segments, and the layout's size.
#include <gtest/gtest.h>

#include "lsh_test_util.h"

namespace pig::test {
namespace {

TEST(Index, SegmentsBeyondSixteenBitIds) {
  // More indexed tokens than one u16 segment holds: ids and offsets must cross segments.
  const Config c{4, 6, 16};
  const std::size_t n = lsh::kSegmentTokens + 5000;
  const Problem pr = make_problem(n, 16, 1, 31);
  check_magicpig(pr, c, 1, 3, {}, 5e-4);
}

TEST(Index, BytesPerToken) {
  const lsh::IndexLayout lay = lsh::IndexLayout::of(131072, 10, 150);
  // 2 L bytes of ids plus 2 (2^K + 1) L / 65535 bytes of offsets per full segment.
  EXPECT_EQ(lay.segments, 3u); // 65535-token segments
  EXPECT_NEAR(lay.bytes_per_token(), 300.0 + 2.0 * 1025 * 150 * 3 / 131072.0, 1e-9);
  EXPECT_LT(lay.bytes_per_token(), 4 * 150 / 1.95); // vs the public 4 L: < 51 %
}

} // namespace
} // namespace pig::test
