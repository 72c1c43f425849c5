// Quest (Tang et al., 2024): query-aware page selection by an upper bound on the page's scores.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "pig/reference/attention.h"
#include "pig/reference/matrix.h"

namespace pig::ref {

/// Per page of `page_size` consecutive tokens (the last page may be short): element-wise minimum
/// and maximum of its keys. Row p of min/max describes page p.
struct PageBounds {
  std::size_t page_size = 0;
  OwnedMatrix min;
  OwnedMatrix max;
  std::size_t pages() const { return min.rows; }
};

/// Throws for page_size == 0.
PageBounds page_bounds(Matrix K, std::size_t page_size);

/// Per page, sum_j max(q_j min_j, q_j max_j) in double (unscaled): an upper bound on q.k for every
/// key k of the page, because each term bounds q_j k_j for k_j in [min_j, max_j]. The bound also
/// holds for the computed values, since rounding is monotone.
std::vector<double> quest_page_scores(std::span<const float> q, const PageBounds &bounds);

/// Attend exactly to the tokens of the `pages_kept` pages with the highest bound (ties: lower
/// page first). pages_kept in [0, number of pages]. cost = attended tokens / n.
SparseEstimate quest_attention(std::span<const float> q, Matrix K, Matrix V, std::size_t page_size,
                               std::size_t pages_kept, std::optional<double> scale = {});

} // namespace pig::ref
