#include "pig/reference/quest.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

namespace pig::ref {

PageBounds page_bounds(Matrix K, std::size_t page_size) {
  if (page_size == 0)
    throw std::invalid_argument("Quest page size must be >= 1, got 0");
  const std::size_t pages = (K.rows + page_size - 1) / page_size;
  PageBounds b{page_size, OwnedMatrix(pages, K.cols), OwnedMatrix(pages, K.cols)};
  for (std::size_t p = 0; p < pages; ++p) {
    const std::size_t first = p * page_size;
    const std::size_t last = std::min(K.rows, first + page_size);
    for (std::size_t j = 0; j < K.cols; ++j) {
      float lo = K.row(first)[j], hi = lo;
      for (std::size_t i = first + 1; i < last; ++i) {
        lo = std::min(lo, K.row(i)[j]);
        hi = std::max(hi, K.row(i)[j]);
      }
      b.min.at(p, j) = lo;
      b.max.at(p, j) = hi;
    }
  }
  return b;
}

std::vector<double> quest_page_scores(std::span<const float> q, const PageBounds &bounds) {
  if (q.size() != bounds.min.cols)
    throw std::invalid_argument("quest_page_scores: query has " + std::to_string(q.size()) +
                                " entries, pages have " + std::to_string(bounds.min.cols));
  std::vector<double> score(bounds.pages(), 0.0);
  for (std::size_t p = 0; p < bounds.pages(); ++p)
    for (std::size_t j = 0; j < q.size(); ++j)
      score[p] += std::max(double(q[j]) * double(bounds.min.at(p, j)),
                           double(q[j]) * double(bounds.max.at(p, j)));
  return score;
}

SparseEstimate quest_attention(std::span<const float> q, Matrix K, Matrix V, std::size_t page_size,
                               std::size_t pages_kept, std::optional<double> scale) {
  if (K.rows != V.rows)
    throw std::invalid_argument("quest_attention: " + std::to_string(K.rows) + " keys but " +
                                std::to_string(V.rows) + " values");
  const PageBounds bounds = page_bounds(K, page_size);
  if (pages_kept > bounds.pages())
    throw std::invalid_argument("Quest pages_kept must be in [0, " +
                                std::to_string(bounds.pages()) + "], got " +
                                std::to_string(pages_kept));
  const std::vector<double> score = quest_page_scores(q, bounds);
  std::vector<std::size_t> order(bounds.pages());
  std::iota(order.begin(), order.end(), std::size_t{0});
  // A NaN bound ranks first (its page is kept and the NaN propagates); a strict weak order.
  auto rank = [&](std::size_t p) {
    return std::isnan(score[p]) ? std::numeric_limits<double>::infinity() : score[p];
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return rank(a) > rank(b); });
  order.resize(pages_kept);
  std::sort(order.begin(), order.end());
  std::vector<std::size_t> tokens;
  for (std::size_t p : order)
    for (std::size_t i = p * page_size; i < std::min(K.rows, (p + 1) * page_size); ++i)
      tokens.push_back(i);
  SparseEstimate r{attention_over(q, K, V, tokens, {}, scale), tokens.size(), K.rows};
  return r;
}

} // namespace pig::ref
