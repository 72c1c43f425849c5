// Quest: page bounds and page selection.
#include <gtest/gtest.h>

#include <vector>

#include "pig/reference/attention.h"
#include "pig/reference/quest.h"
#include "pig/reference/random.h"
#include "test_util.h"

namespace pig::ref {
namespace {

using testing::gaussian_matrix;
using testing::gaussian_vector;

TEST(Quest, KeepingEveryPageIsDense) {
  Rng rng(80);
  const std::size_t n = 100, d = 16;
  const auto q = gaussian_vector(rng, d);
  const auto K = gaussian_matrix(rng, n, d);
  const auto V = gaussian_matrix(rng, n, d);
  const Attention dense = dense_attention(q, K, V);
  for (std::size_t page : {1, 7, 16, 100, 128}) { // 7 and 16: a short last page
    const std::size_t pages = (n + page - 1) / page;
    const SparseEstimate r = quest_attention(q, K, V, page, pages);
    EXPECT_EQ(r.attention.out, dense.out) << "page " << page;
    EXPECT_EQ(r.attended, n);
    EXPECT_DOUBLE_EQ(r.cost(), 1.0);
  }
}

// With one token per page the bound is the score itself, so Quest is exactly TopK.
TEST(Quest, PageSizeOneIsTopK) {
  Rng rng(81);
  const std::size_t n = 80, d = 16;
  const auto q = gaussian_vector(rng, d);
  const auto K = gaussian_matrix(rng, n, d);
  const auto V = gaussian_matrix(rng, n, d);
  for (std::size_t m : {1, 10, 40}) {
    const SparseEstimate a = quest_attention(q, K, V, 1, m);
    const SparseEstimate b = topk_attention(q, K, V, m);
    EXPECT_EQ(a.attention.out, b.attention.out) << "m=" << m;
    EXPECT_EQ(a.attended, m);
  }
}

// The bound holds exactly for the double-precision values, not just approximately.
TEST(Quest, UpperBoundBoundsEveryScoreInItsPage) {
  Rng rng(82);
  const std::size_t n = 500, d = 32, page = 16;
  for (int trial = 0; trial < 10; ++trial) {
    const auto q = gaussian_vector(rng, d);
    const auto K = gaussian_matrix(rng, n, d);
    const PageBounds b = page_bounds(K, page);
    const std::vector<double> bound = quest_page_scores(q, b);
    ASSERT_EQ(bound.size(), 32u);
    const auto z = logits(q, K, 1.0); // unscaled q.k, summed in the same order
    for (std::size_t i = 0; i < n; ++i)
      EXPECT_LE(z[i], bound[i / page]) << "token " << i;
  }
}

TEST(Quest, SelectsPagesByBoundAndCountsCost) {
  Rng rng(83);
  const std::size_t n = 100, d = 8, page = 16; // 7 pages, the last has 4 tokens
  const auto q = gaussian_vector(rng, d);
  const auto K = gaussian_matrix(rng, n, d);
  const auto V = gaussian_matrix(rng, n, d);
  const auto bound = quest_page_scores(q, page_bounds(K, page));
  std::size_t best = 0;
  for (std::size_t p = 1; p < bound.size(); ++p)
    if (bound[p] > bound[best])
      best = p;
  const SparseEstimate r = quest_attention(q, K, V, page, 1);
  std::vector<std::size_t> ids;
  for (std::size_t i = best * page; i < std::min(n, (best + 1) * page); ++i)
    ids.push_back(i);
  EXPECT_EQ(r.attention.out, attention_over(q, K, V, ids).out);
  EXPECT_EQ(r.attended, ids.size());
  EXPECT_DOUBLE_EQ(r.cost(), double(ids.size()) / n);
  EXPECT_TRUE(quest_attention(q, K, V, page, 0).attention.is_empty());
  EXPECT_THROW(quest_attention(q, K, V, 0, 1), std::invalid_argument);
  EXPECT_THROW(quest_attention(q, K, V, page, 8), std::invalid_argument);
}

} // namespace
} // namespace pig::ref
